"""``mgegraph.jit``: ``trace`` (MegEngine's ``megengine.jit.trace``), in mgegraph/eager/trace.py."""
from .eager.symbolic_shape import SymbolicShapeError
from .eager.trace import Traced, TraceWarning, trace

__all__ = ["SymbolicShapeError", "TraceWarning", "Traced", "trace"]
