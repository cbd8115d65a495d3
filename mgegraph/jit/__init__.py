"""``mgegraph.jit``: ``trace`` (MegEngine's ``megengine.jit.trace``), in mgegraph/eager/trace.py,
with MegEngine's other names of ``megengine.jit`` (``jit.tracing`` is its module path)."""
from ..eager.symbolic_shape import SymbolicShapeError
from ..eager.trace import Traced, TraceWarning, exclude_from_trace, trace
from ..eager.trace_dump import DumpInfo, DumpWarning
from ..ir.errors import TraceError
from .options import GraphOptimizationConfig, partial_trace

__all__ = ["DumpInfo", "DumpWarning", "GraphOptimizationConfig", "SymbolicShapeError",
           "TraceError", "TraceWarning", "Traced", "exclude_from_trace", "partial_trace",
           "trace"]
