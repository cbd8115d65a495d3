"""``Function``: a block of eager code with a gradient the user writes (MegEngine's
``megengine.autodiff.Function``).

>>> class STE(Function):          # straight-through rounding
...     def forward(self, x):
...         return F.round(x)
...     def backward(self, dy):
...         return dy
>>> y = STE()(x)

Design: the forward runs hidden from the GradManagers (its own ops get no gradient), then each
recording manager is shown one node standing for the whole call: its inputs the call's
arguments, its outputs new tensors over the forward's results, its op a ``FunctionOp`` whose
gradient rule calls ``backward``. The walker treats it as any op's node. A trace sees the
forward's ops as they run, and the ops ``backward`` runs when a ``gm.backward`` inside the
traced function walks the node, so a traced training step keeps the user's gradient. A
Function node never enters a graph: nothing records it but the managers' tapes.
"""
from __future__ import annotations

from ..ir.errors import GraphError, user_location
from ..ir.graph import Node
from ..ir.types import is_float
from .mode import MODE, hidden
from .tensor import Tensor


class FunctionOp:
    """The op of one ``Function`` call's node on a tape: a name and a gradient rule, which is
    all the walker reads."""

    category = "function"

    def __init__(self, function: Function):
        self.function = function
        self.name = type(function).__name__

    def grad(self, node, output_grads) -> list:
        grads = self.function.backward(*output_grads)
        grads = (grads,) if grads is None or isinstance(grads, Tensor) else tuple(grads)
        if len(grads) != len(node.inputs):
            raise GraphError(f"{self.name}.backward returned {len(grads)} gradients for "
                             f"{len(node.inputs)} inputs (node made at {node.location})")
        for i, (g, x) in enumerate(zip(grads, node.inputs)):
            if g is not None and not _fits(g, x):
                got = g.type if isinstance(g, Tensor) else type(g).__name__
                raise GraphError(f"{self.name}.backward: gradient {i} is {got}, not a float "
                                 f"Tensor of input {i}'s shape {x.shape} (or one that "
                                 f"broadcasts from it; or None; node made at {node.location})")
        return list(grads)


def _fits(g, x) -> bool:
    """Whether ``g`` can be ``x``'s gradient: a float Tensor of its shape, or of a shape it
    broadcasts to (the walker sums the broadcast axes)."""
    if not isinstance(g, Tensor) or not is_float(g.dtype) or g.ndim < x.ndim:
        return False
    tail = g.shape[g.ndim - x.ndim:]
    return all(a == b or b == 1 for a, b in zip(tail, x.shape))


class Function:
    """Subclass it with ``forward(self, *tensors)`` (a Tensor or a tuple of them) and
    ``backward(self, *output_grads)`` (one gradient per input, or a Tensor for one input;
    None where none flows). ``backward`` gets None for an output the loss does not depend on.
    An instance is called once per forward (it keeps what ``forward`` saves on ``self``).

    >>> class MulTen(Function):
    ...     def forward(self, a):
    ...         return a * 10
    ...     def backward(self, dy):
    ...         return dy * 10
    """

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define forward")

    def backward(self, *output_grads):
        raise NotImplementedError(f"{type(self).__name__} must define backward")

    def __call__(self, *args):
        for arg in args:
            if not isinstance(arg, Tensor):
                raise TypeError(f"op {type(self).__name__} expect type Tensor as inputs, got "
                                f"{type(arg).__name__} (every argument of a Function is a "
                                f"Tensor; at {user_location()})")
        tapes = {r for r in MODE.recorders if not r.replays}
        if not tapes:
            return self.forward(*args)
        with hidden(tapes):
            result = self.forward(*args)
        single = isinstance(result, Tensor)
        outputs = (result,) if single else tuple(result)
        if not all(isinstance(t, Tensor) for t in outputs):
            raise GraphError(f"{type(self).__name__}.forward must return a Tensor or a tuple "
                             f"of them, got {type(result).__name__} (at {user_location()})")
        # new tensors (a forward may return its input): the node's outputs are its own
        outputs = tuple(t.detach() for t in outputs)
        node = Node(FunctionOp(self), tuple(args), (), outputs, user_location())
        for tape in tapes:
            tape.record_node(node)
        return outputs[0] if single else outputs
