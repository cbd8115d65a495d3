"""``F.einsum``: Einstein summation, composed of transposes, reshapes, diagonals (a take),
sums and batched matmuls, so it runs and differentiates wherever those do.

>>> F.einsum("bij,bjk->bik", a, b)

Design: ``...`` becomes one fresh label per broadcast axis, aligned from the right as NumPy
aligns them. A label repeated within one operand takes that operand's diagonal first. Then
operands are contracted two at a time, left to right, each pair as one batched matmul: labels
both share and later need are the batch, labels both share and nobody needs are summed by the
matmul, a label only one of them has and nobody needs is summed before it. The implicit output
(no ``->``) is NumPy's: the broadcast axes, then the labels used once, in alphabetical order.
"""
from __future__ import annotations

import math
import string

from ..ir.errors import OpError, user_location
from ..ops import movement_api as movement
from ..ops import reduce
from ..ops.builder import graph_of
from ..ops.matmul import matmul

__all__ = ["einsum"]

FREE_LABELS = string.ascii_uppercase + "".join(map(chr, range(0x3b1, 0x3ca)))  # for "..."


def _refuse(operands, reason: str):
    raise OpError("einsum", tuple(v.type for v in operands), reason, user_location())


def _parse(equation: str, operands) -> tuple[list[str], str]:
    """Each operand's labels and the output's, with ``...`` spelt out as fresh labels."""
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        _refuse(operands, f"{equation!r} names {len(terms)} operands, got {len(operands)}")
    used = set(equation) - set(".,->")
    free = [c for c in FREE_LABELS if c not in used]
    broadcast = max((x.ndim - len(t.replace("...", "")) for t, x in zip(terms, operands)
                     if "..." in t), default=0)
    dots = "".join(free[:broadcast])
    labels = []
    for term, x in zip(terms, operands):
        plain = term.replace("...", "")
        if not plain.isalpha() or term.count("...") > 1 or "." in plain:
            _refuse(operands, f"{term!r} in {equation!r}: labels are letters and one '...'")
        spelt = term.replace("...", dots[len(dots) - (x.ndim - len(plain)):] if
                             "..." in term else "")
        if len(spelt) != x.ndim:
            _refuse(operands, f"{term!r} names {len(spelt)} axes of a {x.ndim}-d operand")
        labels.append(spelt)
    if not arrow:
        once = sorted(c for c in used if inputs.count(c) == 1)
        return labels, dots + "".join(once)
    output = output.replace("...", dots)
    if len(set(output)) != len(output) or not set(output) <= set("".join(labels)):
        _refuse(operands, f"the output {output!r} of {equation!r} must name distinct labels of "
                "the inputs")
    return labels, output


def _diagonal(x, labels: str, operands):
    """``x`` with each label repeated within it reduced to one axis (its diagonal)."""
    while len(set(labels)) != len(labels):
        label = next(c for c in labels if labels.count(c) > 1)
        a, b = [i for i, c in enumerate(labels) if c == label][:2]
        n = x.shape[a]
        if x.shape[b] != n:
            _refuse(operands, f"label {label!r} names axes of sizes {n} and {x.shape[b]}")
        rest = [i for i in range(x.ndim) if i not in (a, b)]
        moved = movement.reshape(movement.transpose(x, rest + [a, b]),
                                 tuple(x.shape[i] for i in rest) + (n * n,))
        x = movement.take(moved, [i * n + i for i in range(n)], axis=len(rest))
        labels = "".join(labels[i] for i in rest) + label
    return x, labels


def _sum_out(x, labels: str, keep: set):
    gone = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not gone:
        return x, labels
    return reduce.sum(x, gone), "".join(c for c in labels if c in keep)


def _arranged(x, labels: str, order: str, sizes: dict):
    """``x`` with its axes in ``order`` (labels it lacks or holds as 1 broadcast to ``sizes``)."""
    x = movement.transpose(x, [labels.index(c) for c in order if c in labels])
    present = [c for c in order if c in labels]
    x = movement.reshape(x, tuple(x.shape[present.index(c)] if c in labels else 1 for c in order))
    return movement.broadcast_to(x, tuple(sizes[c] for c in order))


def _contract(a, la: str, b, lb: str, keep: set, sizes: dict):
    """The pair as one batched matmul: (batch, a's own, shared) @ (batch, shared, b's own)."""
    a, la = _sum_out(a, la, keep | set(lb))
    b, lb = _sum_out(b, lb, keep | set(la))
    batch = "".join(c for c in la if c in lb and c in keep)
    summed = "".join(c for c in la if c in lb and c not in keep)
    own_a = "".join(c for c in la if c not in lb)
    own_b = "".join(c for c in lb if c not in la)
    size = lambda labels: math.prod(sizes[c] for c in labels)
    left = movement.reshape(_arranged(a, la, batch + own_a + summed, sizes),
                            (size(batch), size(own_a), size(summed)))
    right = movement.reshape(_arranged(b, lb, batch + summed + own_b, sizes),
                             (size(batch), size(summed), size(own_b)))
    out = movement.reshape(matmul(left, right), tuple(sizes[c] for c in batch + own_a + own_b))
    return out, batch + own_a + own_b


def _sizes(operands, labels) -> dict:
    """Each label's size; 1 broadcasts against any size, others must agree."""
    sizes = {}
    for x, spelt in zip(operands, labels):
        for c, n in zip(spelt, x.shape):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                _refuse(operands, f"label {c!r} names axes of sizes {sizes[c]} and {n}")
            sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
    return sizes


def einsum(equation: str, *operands):
    """Einstein summation over ``operands`` as ``numpy.einsum`` reads ``equation`` (``...``
    broadcasts, a label repeated in one operand takes its diagonal, no ``->`` gives NumPy's
    implicit output). ``F.einsum("ij,jk->ik", a, b)``"""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    g = graph_of(*operands)
    operands = [g.lift(x) for x in operands]
    labels, output = _parse(equation, operands)
    pairs = [_diagonal(x, spelt, operands) for x, spelt in zip(operands, labels)]
    sizes = _sizes([p[0] for p in pairs], [p[1] for p in pairs])
    x, lx = pairs[0]
    for i, (y, ly) in enumerate(pairs[1:], start=1):
        later = set(output).union(*(p[1] for p in pairs[i + 1:]))
        x, lx = _contract(x, lx, y, ly, later, sizes)
    x, lx = _sum_out(x, lx, set(output))
    return _arranged(x, lx, output, sizes)
