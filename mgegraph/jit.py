"""``mgegraph.jit``: ``trace`` (MegEngine's ``megengine.jit.trace``), in mgegraph/eager/trace.py."""
from .eager.trace import Traced, TraceWarning, trace

__all__ = ["TraceWarning", "Traced", "trace"]
