"""Collectives as graph ops: a value summed over the processes of a group, in a plan.

``all_reduce(x)`` is every rank's ``x`` summed, times ``scale`` (1 / world size for a mean),
on every rank of ``group`` (the group's key, its world ranks joined by commas: "0,1"). Its
kernel starts the reduction and waits for it at once. A training step marks each gradient so,
and the planner pass ``bucket_grads`` turns the marks into pairs over buckets of gradients:

    %t = all_reduce_start %g1 %g2        the reduction of the bucket's bytes starts, in place
    ...                                  the rest of the backward pass runs meanwhile
    %r1 %r2 = all_reduce_wait %t %g1 %g2 waits for it; r1, r2 are g1's and g2's own bytes

Design: the pair keeps the graph honest about time: ``%t`` (the request, an int64) makes the
wait follow the start, and the wait's outputs are new values, so whatever reads the reduced
gradients follows the wait. They are not new bytes: the wait's outputs are its inputs'
buffers (``OpDef.in_place_from``), which the memory planner lays out one after another
(``bucket_layout``), so one MPI call covers the bucket and nothing is copied. How the kernels
reach MPI is the CPU backend's (``_kernels/collective.pyx``).

>>> r = F.all_reduce(g, group="0,1", scale=0.5)    # normally made by compile_train_step
"""
from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .builder import apply, graph_of
from .registry import REQUIRED, OpDef, register, require_dtypes

__all__ = ["all_reduce"]

# what the planned kernels reduce (MPI's float, double, int32, int64)
REDUCED_DTYPES = tuple(np.dtype(d) for d in (np.float32, np.float64, np.int32, np.int64))
# where each gradient starts inside its bucket: a cache line, as every arena buffer
BUCKET_ALIGNMENT = 64
REQUEST = TensorType((1,), np.dtype(np.int64))  # the token from start to wait: MPI's request
# the schedule runs a start as early as its inputs allow and a wait as late as its readers do
EARLY_OPS = frozenset({"all_reduce_start"})
LATE_OPS = frozenset({"all_reduce_wait"})
_ATTRS = {"group": REQUIRED, "scale": 1.0}
# all_reduce's hint to the planner: the largest bucket it may share with other values (bytes;
# 0: alone). The sum is the same either way. deterministic: the ranks' values summed in rank
# order, ((x0 + x1) + x2) + ..., whatever MPI's algorithm (never bucketed).
_MARK_ATTRS = {**_ATTRS, "bucket_bytes": 0, "deterministic": False}


def bucket_layout(types) -> tuple[tuple[int, ...], int]:
    """(byte offset of each of ``types`` inside its bucket, the bucket's bytes): one after
    another in the order given, each on a ``BUCKET_ALIGNMENT`` boundary. The padding between
    them is reduced too (it holds no value anyone reads).

    >>> bucket_layout([TensorType((3,), np.dtype(np.float32))] * 2)
    ((0, 64), 76)
    """
    offsets, top = [], 0
    for t in types:
        top = -(-top // BUCKET_ALIGNMENT) * BUCKET_ALIGNMENT
        offsets.append(top)
        top += t.nbytes
    return tuple(offsets), top


def _check_group(attrs) -> None:
    group = attrs["group"]
    if not isinstance(group, str) or not group:
        raise ValueError(f"group must be a group's key (its world ranks: '0,1'), got {group!r}")


def _same_dtype(name: str, types) -> None:
    for t in types:
        require_dtypes(name, t, REDUCED_DTYPES)
    if len({t.dtype for t in types}) > 1:
        raise TypeError(f"a bucket holds one dtype, got {sorted({str(t.dtype) for t in types})}")


def _infer_all_reduce(in_types, attrs):
    _check_group(attrs)
    (x,) = in_types
    require_dtypes("all_reduce", x, REDUCED_DTYPES)
    return (TensorType(x.shape, x.dtype),)


def _infer_start(in_types, attrs):
    _check_group(attrs)
    if not in_types:
        raise ValueError("all_reduce_start needs at least one value")
    _same_dtype("all_reduce_start", in_types)
    return (REQUEST,)


def _infer_wait(in_types, attrs):
    _check_group(attrs)
    if len(in_types) < 2 or in_types[0] != REQUEST:
        raise ValueError("all_reduce_wait takes the start's request, then the bucket's values")
    _same_dtype("all_reduce_wait", in_types[1:])
    return tuple(TensorType(t.shape, t.dtype) for t in in_types[1:])


def _grad_all_reduce(node, out_grads):
    # MegEngine's: the gradient of a sum over the ranks is the sum of the ranks' gradients
    return (apply("all_reduce", out_grads, **node.attr),)


def _flops(node) -> float:
    return float(sum(v.size for v in node.inputs if v.type != REQUEST))


register(OpDef("all_reduce", "collective", _infer_all_reduce, attrs=_MARK_ATTRS,
               grad=_grad_all_reduce, flops=_flops))
register(OpDef("all_reduce_start", "collective", _infer_start,
               attrs={**_ATTRS, "bucket": 0}, flops=_flops))
register(OpDef("all_reduce_wait", "collective", _infer_wait, attrs={**_ATTRS, "bucket": 0},
               in_place_from=1, flops=_flops))


def all_reduce(x, group: str, scale: float = 1.0, bucket_bytes: int = 0,
               deterministic: bool = False):
    """``x`` summed over the ranks of ``group`` (its key: "0,1"), times ``scale``, in a graph;
    ``bucket_bytes``: the planner may reduce it in one bucket with others up to that size;
    ``deterministic``: summed in rank order, ((x0 + x1) + x2) + ..., the same bits however
    MPI would sum (blocking: such a value is never bucketed).

    >>> r = all_reduce(g, group="0,1", scale=0.5)   # the mean over two ranks
    """
    return apply("all_reduce", (graph_of(x).lift(x),), group=group, scale=float(scale),
                 bucket_bytes=int(bucket_bytes), deterministic=bool(deterministic))
