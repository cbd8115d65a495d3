"""``megengine.functional.tensor``'s names: the movement and fill functions of
``ops/movement_api.py``, and, composed of existing ops here, eye, diag, copy, and the two whose
output length depends on values, cond_take and non_zero.

>>> F.eye(3, 4)
>>> values, positions = F.cond_take(x > 0, x)

Design: eye and diag are an index comparison (arange against arange) and a select or a take,
so they run and differentiate anywhere an op does. cond_take and non_zero read their mask: an
mgegraph shape never depends on a tensor's values, so they run on eager tensors, where the
mask is known, and refuse a graph's Var (in a trace the mask read at recording is kept, and the
trace warns that it reads a value).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import as_dtype
from ..ops import elementwise as ew
from ..ops import movement_api as movement
from ..ops.builder import apply, graph_of
from ..ops.movement_api import *
from ..ops.sequence import scatter
from ..ops.sorting import cumsum

__all__ = movement.__all__ + ["cond_take", "copy", "cumsum", "diag", "eye", "non_zero", "scatter"]

INDEX_DTYPE = np.dtype(np.int32)  # MegEngine's positions (cond_take, non_zero)


def _refuse(op: str, values, reason: str):
    raise OpError(op, tuple(v.type for v in values), reason, user_location())


def _eye_shape(n, m) -> tuple:
    """(rows, columns) from eye's N and M: N alone may be a sequence or 1-d Tensor of one or two
    sizes (``F.eye(x.shape)``)."""
    if m is not None:
        return tuple(movement.shape_sizes((n, m)))
    sizes = movement.shape_sizes(n)
    if len(sizes) not in (1, 2):
        raise OpError("eye", (), f"needs one or two sizes, got {sizes}", user_location())
    return sizes if len(sizes) == 2 else sizes * 2


def eye(N, M=None, *, dtype="float32", device=None, graph=None):
    """An N x M matrix (M defaults to N) of zeros with ones on its diagonal.

    >>> F.eye(2, 3)  # [[1, 0, 0], [0, 1, 0]]
    """
    movement.check_host_device("eye", device)
    n, m = _eye_shape(N, M)
    for size in (n, m):
        if not isinstance(size, numbers.Integral) or size < 0:
            raise OpError("eye", (), f"sizes must be ints >= 0, got ({n}, {m})", user_location())
    rows = movement.arange(n, dtype="int64", graph=graph)
    columns = movement.arange(m, dtype="int64", graph=graph)
    ones = ew.equal(movement.reshape(rows, (n, 1)), movement.reshape(columns, (1, m)))
    return ew.astype(ones, as_dtype(dtype))


def diag(inp, k=0):
    """A 1-d input as the ``k``-th diagonal of a square matrix (k > 0 above the main one); of a
    2-d input, its ``k``-th diagonal, as ``numpy.diag``. ``F.diag(v, k=1)``"""
    x = graph_of(inp).lift(inp)
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)):
        _refuse("diag", (x,), f"k must be an int, got {k!r}")
    k = int(k)
    if x.ndim == 1:
        return _diag_matrix(x, k)
    if x.ndim == 2:
        return _diagonal(x, k)
    _refuse("diag", (x,), f"needs a 1-d or 2-d input, got {x.ndim}-d")


def _diag_matrix(x, k: int):
    n = x.shape[0] + abs(k)
    positions = movement.arange(n, dtype="int64", graph=x.graph)
    on_diagonal = ew.equal(movement.reshape(positions, (1, n)) - movement.reshape(positions, (n, 1)),
                           k)
    # above the diagonal row i holds x[i]; below it column j does
    padded = movement.pad(x, ((0, abs(k)),))
    values = movement.reshape(padded, (n, 1) if k >= 0 else (1, n))
    return ew.where(on_diagonal, values, movement.zeros((), x.dtype, graph=x.graph))


def _diagonal(x, k: int):
    rows, columns = x.shape
    first = max(0, -k)
    length = max(0, min(rows, columns - k) - first)
    flat = (np.arange(first, first + length) * columns + np.arange(first, first + length) + k)
    return movement.take(x, flat)


def copy(inp, device=None):
    """A new tensor with ``inp``'s value (its gradient passes through). ``y = F.copy(x)``"""
    movement.check_host_device("copy", device)
    return apply("copy", (graph_of(inp).lift(inp),))


def _host_values(op: str, values, value: Var) -> np.ndarray:
    """The value of an eager tensor; a graph's Var is refused (its values are not known while
    the graph is built, and the output's length depends on them)."""
    if not hasattr(value, "numpy"):
        _refuse(op, values, "its output's length depends on the mask's values, which a graph "
                "does not know while it is built: call it on eager tensors")
    return value.numpy()


def cond_take(mask, x):
    """The elements of ``x`` where the bool ``mask`` (of ``x``'s shape) is True, as a 1-d
    tensor, and their int32 positions in the flattened ``x``; eager tensors only.

    >>> values, positions = F.cond_take(x > 0, x)
    """
    if not isinstance(mask, Var) or not isinstance(x, Var):
        raise TypeError(f"cond_take needs a mask and an input that are tensors, got "
                        f"{type(mask).__name__} and {type(x).__name__}")
    if mask.dtype != np.bool_:
        _refuse("cond_take", (mask, x), f"the mask must be bool, got {mask.dtype}")
    if mask.shape != x.shape:
        _refuse("cond_take", (mask, x), f"the mask's shape {mask.shape} differs from the "
                f"input's {x.shape}")
    positions = np.flatnonzero(_host_values("cond_take", (mask, x), mask)).astype(INDEX_DTYPE)
    return movement.take(x, positions), x.graph.const(positions)


def non_zero(condition, as_tuple=False):
    """The int32 positions of ``condition``'s nonzero elements: one row per element (shape
    (count, ndim)), or with ``as_tuple`` one 1-d tensor per axis (``numpy.nonzero``); eager
    tensors only. ``rows, columns = F.non_zero(mask, as_tuple=True)``"""
    if not isinstance(condition, Var):
        raise TypeError(f"non_zero needs a tensor, got {type(condition).__name__}")
    if condition.ndim == 0:
        _refuse("non_zero", (condition,), "needs an input of at least 1 dim, got a scalar")
    found = np.nonzero(_host_values("non_zero", (condition,), condition))
    positions = np.stack(found).astype(INDEX_DTYPE)
    if as_tuple:
        return tuple(condition.graph.const(row) for row in positions)
    return condition.graph.const(np.ascontiguousarray(positions.T))
