"""MegEngine's ``megengine.jit`` names for what mgegraph's ``trace`` already does or decides
itself: ``partial_trace`` and ``GraphOptimizationConfig``."""
from __future__ import annotations

from ..eager.trace import trace


class GraphOptimizationConfig:
    """MegEngine's switches of its JIT fusion (``jit_fuse_dimshuffle``, ``jit_fuse_reduce``:
    None, False or True), taken by ``trace(graph_opt_config=)``. They change nothing here:
    what fuses is the planner's ``fuse`` pass's rule at ``optimize`` 1 and 2 (which fuses
    elementwise chains, not reductions or transposes)."""

    def __init__(self):
        self.jit_fuse_dimshuffle = None
        self.jit_fuse_reduce = None

    def __repr__(self) -> str:
        words = {None: "UNSET", False: "OFF", True: "ON"}
        return (f"GraphOptimizationConfig {{ jit_fuse_dimshuffle = "
                f"{words[self.jit_fuse_dimshuffle]}, jit_fuse_reduce = "
                f"{words[self.jit_fuse_reduce]} }}")


def partial_trace(func=None, *, backend: str = "default", without_host: bool = True,
                  trace_gmcallback: bool = True, **trace_options):
    """MegEngine's trace of a part of a training step (a module's ``forward``) that a
    GradManager may record around. mgegraph's ``trace`` is that already: called while a
    GradManager records, a traced function runs its Python so its ops join the tape (and its
    gradient flows); called outside, it runs its plan. ``backend`` is "default" only (MegEngine's
    XLA backend is not part of mgegraph); ``trace_gmcallback`` changes nothing.

    >>> class Net(M.Module):
    ...     @partial_trace
    ...     def forward(self, x):
    ...         return F.exp(x * self.a)
    """
    if backend != "default":
        raise ValueError(f"partial_trace(backend={backend!r}): mgegraph traces with its own "
                         "planner only (backend='default')")
    del trace_gmcallback  # accepted: see the docstring
    return trace(func, without_host=without_host, **trace_options)
