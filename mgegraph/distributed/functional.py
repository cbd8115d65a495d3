"""Collectives on eager tensors, MegEngine's ``megengine.distributed.functional`` (also
``F.distributed``): every rank of the group calls the same function in the same order with
tensors of the same shape and dtype.

>>> total = all_reduce_sum(tensor([rank + 1.0]))     # on 2 ranks: [3.] on both

Design: each collective is a ``Function`` (eager mode's custom gradient), so a GradManager sees
one node whose gradient rule is the collective MegEngine pairs with it: all_reduce_sum with
itself, all_gather with reduce_scatter_sum and back, broadcast with reduce_sum to the root,
scatter with gather, all_to_all with itself on the swapped axes. ``reduce_sum`` and ``gather``
leave the other ranks no output, so nothing would bring them into the backward pass; their
gradient raises instead of hanging the job.
"""
from __future__ import annotations

import numpy as np

from ..communicator import DistributedError
from ..eager.function import Function
from ..eager.mode import MODE
from ..eager.tensor import Tensor, wrap
from ..ir.errors import user_location
from ..ir.types import HALF_DTYPES, is_float
from .group import WORLD, Group

__all__ = ["all_gather", "all_reduce_max", "all_reduce_mean", "all_reduce_min",
           "all_reduce_sum", "all_to_all", "broadcast", "gather", "reduce_scatter_sum",
           "reduce_sum", "scatter"]


def _group(group) -> Group:
    """``group``: a Group, or a list of ranks (MegEngine makes a group of them)."""
    if isinstance(group, Group):
        return group
    if isinstance(group, (list, tuple)):
        return Group(list(group))
    raise DistributedError(f"group must be a Group or a list of ranks, got {group!r:.60} (at "
                           f"{user_location()})")


def refuse_replay(what: str) -> None:
    """A trace would replay a collective's result as a constant of its plan, the other ranks'
    later values never seen: refuse it until collectives are graph ops."""
    if any(r.replays for r in MODE.recorders):
        raise DistributedError(f"{what}: collectives cannot be traced yet (a replay would keep "
                               "the other ranks' values of the traced call); run the step "
                               f"eagerly (at {user_location()})")


def _check(what: str, x, min_ndim: int = 0) -> Tensor:
    refuse_replay(what)
    if not isinstance(x, Tensor):
        raise DistributedError(f"{what}: needs a Tensor, got {type(x).__name__} (at "
                               f"{user_location()})")
    if x.type.quant is not None:
        raise DistributedError(f"{what}: a quantized tensor ({x.type}) is not exchanged; "
                               f"dequantize it first (at {user_location()})")
    if x.ndim < min_ndim:
        raise DistributedError(f"{what}: needs a tensor with an axis to split or join, got "
                               f"{x.type} (at {user_location()})")
    return x


def _axis(what: str, x: Tensor, axis: int, divisible_by: int | None = None) -> int:
    if not -x.ndim <= axis < x.ndim:
        raise DistributedError(f"{what}: axis {axis} is out of range for {x.type} (at "
                               f"{user_location()})")
    axis %= x.ndim
    if divisible_by and x.shape[axis] % divisible_by:
        raise DistributedError(f"{what}: axis {axis} of {x.type} ({x.shape[axis]}) does not "
                               f"split into {divisible_by} equal blocks, one per rank (at "
                               f"{user_location()})")
    return axis


def _blocks(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """``x`` cut into ``n`` equal blocks along ``axis``, stacked on a new first axis."""
    return np.stack(np.split(x, n, axis=axis))


def _joined(stacked: np.ndarray, axis: int) -> np.ndarray:
    """Blocks stacked on the first axis, concatenated along ``axis`` of a block."""
    return np.ascontiguousarray(np.concatenate(list(stacked), axis=axis))


# -- reductions to every rank --------------------------------------------------------------
class _AllReduce(Function):
    def __init__(self, op: str, group: Group):
        self.op, self.group = op, group

    def forward(self, x):
        comm, value = self.group.comm, x.value
        if self.op == "mean":
            total = comm.allreduce(value.astype(np.float32) if x.dtype in HALF_DTYPES
                                   else value, "sum")
            out = (total / comm.size).astype(x.dtype)
        else:
            out = comm.allreduce(value, self.op)
        self.x, self.out = x, wrap(np.ascontiguousarray(out))
        return self.out

    def backward(self, dy):
        if self.op in ("sum", "mean"):
            return _AllReduce(self.op, self.group)(dy)
        # MegEngine's rule: the summed gradient goes to the ranks whose value was the extreme
        return _AllReduce("sum", self.group)(dy) * (self.x == self.out).astype(dy.dtype)


def all_reduce_sum(inp: Tensor, group=WORLD, device=None) -> Tensor:
    """The elementwise sum of the ranks' ``inp``, on every rank (gradient: all_reduce_sum).

    >>> all_reduce_sum(tensor([1.0, 2.0]) + 2 * rank)   # 2 ranks: [4. 6.]
    """
    return _AllReduce("sum", _group(group))(_check("all_reduce_sum", inp))


def all_reduce_mean(inp: Tensor, group=WORLD, device=None) -> Tensor:
    """The elementwise mean of the ranks' float ``inp``, on every rank (gradient:
    all_reduce_mean). ``all_reduce_mean(loss)``"""
    _check("all_reduce_mean", inp)
    if not is_float(inp.dtype):
        raise DistributedError(f"all_reduce_mean: needs a float tensor, got {inp.type} (use "
                               f"all_reduce_sum for integers; at {user_location()})")
    return _AllReduce("mean", _group(group))(inp)


def all_reduce_max(inp: Tensor, group=WORLD, device=None) -> Tensor:
    """The elementwise maximum over the ranks, on every rank. ``all_reduce_max(x)``"""
    return _AllReduce("max", _group(group))(_check("all_reduce_max", inp))


def all_reduce_min(inp: Tensor, group=WORLD, device=None) -> Tensor:
    """The elementwise minimum over the ranks, on every rank. ``all_reduce_min(x)``"""
    return _AllReduce("min", _group(group))(_check("all_reduce_min", inp))


# -- gathering and scattering among all ranks --------------------------------------------
class _AllGather(Function):
    def __init__(self, group: Group, axis: int):
        self.group, self.axis = group, axis

    def forward(self, x):
        return wrap(_joined(self.group.comm.allgather(x.value), self.axis))

    def backward(self, dy):
        return _ReduceScatter(self.group, self.axis)(dy)


class _ReduceScatter(Function):
    def __init__(self, group: Group, axis: int):
        self.group, self.axis = group, axis

    def forward(self, x):
        comm = self.group.comm
        blocks = _blocks(x.value, comm.size, self.axis)
        return wrap(comm.reduce_scatter(blocks).reshape(blocks.shape[1:]))

    def backward(self, dy):
        return _AllGather(self.group, self.axis)(dy)


def all_gather(inp: Tensor, group=WORLD, device=None, axis: int = 0) -> Tensor:
    """The ranks' ``inp`` concatenated along ``axis`` in rank order, on every rank (gradient:
    reduce_scatter_sum). ``all_gather(x)  # (size * n, ...)``"""
    x = _check("all_gather", inp, min_ndim=1)
    return _AllGather(_group(group), _axis("all_gather", x, axis))(x)


def reduce_scatter_sum(inp: Tensor, group=WORLD, device=None, axis: int = 0) -> Tensor:
    """The ranks' ``inp`` summed, cut along ``axis`` into one block per rank; rank i gets
    block i (gradient: all_gather). ``reduce_scatter_sum(x)  # (n / size, ...)``"""
    x, g = _check("reduce_scatter_sum", inp, min_ndim=1), _group(group)
    return _ReduceScatter(g, _axis("reduce_scatter_sum", x, axis, g.size))(x)


class _AllToAll(Function):
    def __init__(self, group: Group, split_axis: int, concat_axis: int):
        self.group, self.split_axis, self.concat_axis = group, split_axis, concat_axis

    def forward(self, x):
        comm = self.group.comm
        received = comm.alltoall(_blocks(x.value, comm.size, self.split_axis))
        return wrap(_joined(received, self.concat_axis))

    def backward(self, dy):
        return _AllToAll(self.group, self.concat_axis, self.split_axis)(dy)


def all_to_all(inp: Tensor, group=WORLD, device=None, split_axis: int = 0,
               concat_axis: int = 0) -> Tensor:
    """``inp`` cut along ``split_axis`` into one block per rank, block j sent to rank j; the
    blocks received concatenated along ``concat_axis`` in rank order (gradient: all_to_all
    back). ``all_to_all(x)``"""
    x, g = _check("all_to_all", inp, min_ndim=1), _group(group)
    split = _axis("all_to_all", x, split_axis, g.size)
    return _AllToAll(g, split, _axis("all_to_all", x, concat_axis))(x)


# -- from and to the root ----------------------------------------------------------------
class _Broadcast(Function):
    def __init__(self, group: Group):
        self.group = group

    def forward(self, x):
        return wrap(self.group.comm.broadcast(x.value, x.shape, x.dtype))

    def backward(self, dy):
        total = self.group.comm.reduce(dy.value, "sum")
        return None if total is None else wrap(total)


class _Scatter(Function):
    def __init__(self, group: Group, axis: int):
        self.group, self.axis = group, axis

    def forward(self, x):
        comm = self.group.comm
        block = list(x.shape)
        block[self.axis] //= comm.size
        blocks = _blocks(x.value, comm.size, self.axis) if comm.rank == 0 else None
        return wrap(comm.scatter(blocks, tuple(block), x.dtype))

    def backward(self, dy):
        stacked = self.group.comm.gather(dy.value)
        return None if stacked is None else wrap(_joined(stacked, self.axis))


class _ToRootOnly(Function):
    """reduce_sum and gather: only the root has an output, so no other rank would take part in
    a backward pass through it."""

    def __init__(self, name: str, value: np.ndarray):
        self.name, self.value = name, value

    def forward(self, x):
        return wrap(self.value)

    def backward(self, dy):
        raise DistributedError(f"{self.name} has no gradient here: only the root holds its "
                               "output, so the other ranks would not join the backward "
                               "collective; use all_reduce_sum or all_gather")


def _like_root(what: str, inp, g: Group) -> Tensor:
    """The root's tensor; on the other ranks, whose ``inp`` is not read (MegEngine's rule),
    ``inp`` itself if it has the root's shape and dtype (so that a GradManager recording it
    takes part in the backward collective, as the root's does), else a zero tensor."""
    refuse_replay(what)
    if g.rank == 0:
        _check(what, inp)
    shape, dtype = g.comm.allgather_object(
        (inp.shape, inp.dtype) if g.rank == 0 else None, what)[0]
    if g.rank == 0 or (isinstance(inp, Tensor) and inp.shape == shape and inp.dtype == dtype):
        return inp
    return wrap(np.zeros(shape, dtype))


def broadcast(inp, group=WORLD, device=None) -> Tensor:
    """The root's ``inp`` on every rank (the others' ``inp`` is not read; gradient: the sum of
    the ranks' gradients, on the root). ``w = broadcast(w)``"""
    g = _group(group)
    return _Broadcast(g)(_like_root("broadcast", inp, g))


def scatter(inp, group=WORLD, device=None, axis: int = 0) -> Tensor:
    """The root's ``inp`` cut along ``axis`` into one block per rank; rank i gets block i
    (gradient: gathered on the root). ``part = scatter(batch)``"""
    g = _group(group)
    x = _like_root("scatter", inp, g)
    return _Scatter(g, _axis("scatter", x, axis, g.size))(x)


def reduce_sum(inp: Tensor, group=WORLD, device=None) -> Tensor | None:
    """The elementwise sum of the ranks' ``inp`` on the root; None on the others.
    ``total = reduce_sum(x)``"""
    x, g = _check("reduce_sum", inp), _group(group)
    total = g.comm.reduce(x.value, "sum")
    return None if total is None else _ToRootOnly("reduce_sum", total)(x)


def gather(inp: Tensor, group=WORLD, device=None, axis: int = 0) -> Tensor | None:
    """The ranks' ``inp`` concatenated along ``axis`` in rank order, on the root; None on the
    others. ``everything = gather(x)``"""
    x, g = _check("gather", inp, min_ndim=1), _group(group)
    axis = _axis("gather", x, axis)
    stacked = g.comm.gather(x.value)
    return None if stacked is None else _ToRootOnly("gather", _joined(stacked, axis))(x)
