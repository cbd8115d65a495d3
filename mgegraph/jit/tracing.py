"""``mgegraph.jit.tracing``: MegEngine's module path of ``trace`` and its companions, and its
``set_symbolic_shape`` switch."""
from ..eager.trace import Traced, exclude_from_trace, trace
from ..ir.errors import TraceError

__all__ = ["TraceError", "Traced", "exclude_from_trace", "set_symbolic_shape", "trace"]

_symbolic_shape = True  # MegEngine's default, what set_symbolic_shape returns first


def set_symbolic_shape(option: bool) -> bool:
    """MegEngine's switch of whether eager tensors' shapes are values of its graph; returns the
    setting it replaces. Eager shapes here are always numbers (a trace names dimensions with
    ``trace(symbolic_shape=...)``), so the setting is kept and read back but changes nothing.
    """
    global _symbolic_shape
    before, _symbolic_shape = _symbolic_shape, bool(option)
    return before
