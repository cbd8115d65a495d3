"""Gradient clipping (MegEngine's ``clip_grad_norm`` and ``clip_grad_value``): each replaces
the ``.grad`` of the tensors given, as MegEngine's modify them in place."""
from __future__ import annotations

from .. import functional as F
from ..ir.errors import GraphError

__all__ = ["clip_grad_norm", "clip_grad_value"]


def _with_grad(tensors) -> list:
    tensors = [tensors] if hasattr(tensors, "grad") else list(tensors)
    return [t for t in tensors if t.grad is not None]


def _norm(x, ord: float):
    x = F.abs(F.flatten(x))
    if ord == float("inf"):
        return F.max(x)
    if ord == 2:
        return F.sqrt(F.sum(x * x))
    return F.sum(x ** ord) ** (1.0 / ord)


def clip_grad_norm(tensors, max_norm: float, ord: float = 2.0):
    """Scale every gradient by ``min(1, max_norm / (total + 1e-6))``, where ``total`` is the
    ``ord``-norm of all the gradients as one vector (``float("inf")``: the largest absolute
    value); returns ``total`` (a Tensor; 0.0 when no tensor has a gradient).

    >>> total = optim.clip_grad_norm(net.parameters(), max_norm=1.0)
    """
    ord = float("inf") if ord in ("inf", float("inf")) else float(ord)
    if not ord > 0:
        raise GraphError(f"clip_grad_norm: ord must be > 0 or 'inf', got {ord!r}")
    tensors = _with_grad(tensors)
    if not tensors:
        return F.full((), 0.0)
    norms = [_norm(t.grad, ord) for t in tensors]
    total = norms[0] if len(norms) == 1 else _norm(F.stack(norms), ord)
    scale = F.minimum(max_norm / (total + 1e-6), 1.0)
    for t in tensors:
        t.grad = t.grad * F.astype(scale, t.grad.dtype)
    return total


def clip_grad_value(tensors, lower: float, upper: float) -> None:
    """Clip every gradient to [``lower``, ``upper``].

    >>> optim.clip_grad_value(net.parameters(), lower=-2, upper=5)
    """
    if not lower <= upper:
        raise GraphError(f"clip_grad_value: lower {lower!r} is above upper {upper!r}")
    for t in _with_grad(tensors):
        t.grad = F.clip(t.grad, lower, upper)
