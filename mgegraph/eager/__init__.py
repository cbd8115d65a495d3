"""Eager mode: Tensors computed op by op (tensor.py, dispatch.py), GradManager's tape
(grad_manager.py), and the bridge to plans: trace (trace.py) and lazy (lazy.py)."""
# dispatch gives tensor.py the eager graph and the operators' fast path: a Tensor is usable
# once any module of this package is imported (mgegraph/__init__ loads them on first use)
from . import dispatch  # noqa: F401
