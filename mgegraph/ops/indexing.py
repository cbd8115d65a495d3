"""NumPy's (and MegEngine's) advanced indexing, ``x[index]`` and ``x[index] = value``, as
compositions of existing ops: no op of its own.

``getitem`` takes what ``movement_api.subscript`` takes (ints, slices, ``None``, ``...``) and
index arrays too: lists, tuples and NumPy arrays of ints or bools, and integer Vars. Index
arrays broadcast together, and their axes go where NumPy puts them (in place when the arrays
are adjacent, else first); an int beside an array counts as a 0-d array, as in NumPy. A boolean
mask stands for its ``nonzero()`` positions, so its values must be known (an eager Tensor or a
constant): the shape of ``x[mask]`` depends on them.

Design: the slices run first (one ``subscript`` that keeps every axis), then the indexed axes
move to the front and flatten into one, whose row is the index arrays combined as a row-major
position, read by ``take``. A Var index component outside its axis gives a position past the
end, so ``take`` raises KernelError instead of reading a neighbour.

``setitem`` gives the new value of ``x``: the positions the index names are found by the same
walk over the positions of ``x`` (known while the graph is built, so an element named twice
takes the last value written, as in NumPy), and ``where`` takes ``value`` there (through
``take``) and ``x`` elsewhere, so gradients reach both.

>>> y = getitem(x, (slice(None), [0, 2]))  # x[:, [0, 2]]
"""
from __future__ import annotations

import numbers

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from . import elementwise as ew
from . import movement_api as movement
from .builder import cast_to, graph_of


class IndexingError(OpError, IndexError):
    """An index that does not fit the input (too many indices, two ellipses, out of range, a
    mask of the wrong shape); an IndexError as NumPy's and MegEngine's are."""


def _fail(x, reason: str, cls=IndexingError):
    raise cls("subscript", [x.type], reason, user_location())


def is_array_index(item) -> bool:
    """Whether ``item`` is an index array (a Var, list, tuple or NumPy array) or a bool."""
    return isinstance(item, (Var, list, tuple, np.ndarray, bool, np.bool_))


def getitem(x: Var, index) -> Var:
    """``x[index]`` with NumPy's basic and advanced indexing (see the module's note)."""
    items = list(index) if isinstance(index, tuple) else [index]
    if not any(is_array_index(i) for i in items):
        _check_count(x, items)
        return movement.subscript(x, index)
    items = [_known(x, i) for i in items]
    if not any(isinstance(i, Var) for i in items):
        where = positions(x, tuple(items))
        return movement.take(movement.reshape(x, (x.size,)), where, axis=0)
    x, items = _with_new_axes(x, _expand(x, items))
    return _gather(x, items)


def _known(x, item):
    """``item`` with an eager tensor's mask as a NumPy array (its values decide the result's
    shape; reading them tells a trace); a mask in a graph is refused."""
    if not isinstance(item, Var) or item.dtype != np.bool_:
        return item
    if not getattr(item.graph, "eager", False):
        _fail(x, f"a boolean mask {item.type} in a graph: the result's shape depends on its "
              "values, known only for eager tensors")
    return np.asarray(item)


def positions(x, index) -> np.ndarray:
    """The flat positions in ``x`` that ``x[index]`` reads, by NumPy's indexing of them
    (``index`` holds no Var); NumPy's refusals become IndexingErrors naming ``x``."""
    items = [np.asarray(i) if isinstance(i, (list, tuple)) and len(i) == 0 else i
             for i in (index if isinstance(index, tuple) else (index,))]
    items = [i.astype(np.int64) if isinstance(i, np.ndarray) and i.size == 0
             and i.dtype != np.bool_ else i for i in items]
    try:
        return np.arange(x.size, dtype=np.int64).reshape(x.shape)[tuple(items)]
    except IndexError as exc:
        _fail(x, str(exc))


def _as_index_array(x, item):
    """An int64 array or integer Var for an array index (a bool mask: its nonzero arrays)."""
    if isinstance(item, Var):
        return [item]
    array = np.asarray(item)
    if array.dtype == np.bool_:
        return list(np.nonzero(array))
    if array.size == 0:
        return [array.astype(np.int64)]
    if array.dtype.kind not in "iu":
        _fail(x, f"index arrays must hold ints or bools, got {array.dtype}")
    return [array.astype(np.int64)]


def _check_count(x, items) -> None:
    if sum(i is Ellipsis for i in items) > 1:
        _fail(x, "an index can only have a single ellipsis ('...')")
    used = sum(i is not None and i is not Ellipsis for i in items)
    if used > x.ndim:
        _fail(x, f"too many indices ({used}) for a {x.ndim}-d input")


def _expand(x, items) -> list:
    """The items with masks as their index arrays and ``...`` as the slices it stands for."""
    _check_count(x, items)
    out = []
    for item in items:
        if is_array_index(item):
            out += _as_index_array(x, item)
        elif item is None or item is Ellipsis or isinstance(item, slice):
            out.append(item)
        elif isinstance(item, (numbers.Integral, np.integer)):
            out.append(int(item))
        else:
            _fail(x, f"unsupported index {item!r}: use ints, slices, None, ..., int or bool "
                  "arrays", cls=OpError)
    used = sum(i is not None and i is not Ellipsis for i in out)
    if used > x.ndim:
        _fail(x, f"too many indices ({used}) for a {x.ndim}-d input")
    at = next((k for k, i in enumerate(out) if i is Ellipsis), None)  # (no ==: Vars compare)
    if at is None:
        return out + [slice(None)] * (x.ndim - used)
    return out[:at] + [slice(None)] * (x.ndim - used) + out[at + 1:]


def _with_new_axes(x, items):
    """``x`` with a size-1 axis where each ``None`` is, which becomes a full slice (NumPy counts
    a new axis as a slice where it decides if the index arrays are adjacent)."""
    if not any(i is None for i in items):
        return x, items
    shape, dims = [], iter(x.shape)
    for item in items:
        shape.append(1 if item is None else next(dims))
    return movement.reshape(x, tuple(shape)), [slice(None) if i is None else i for i in items]


def _gather(x, items) -> Var:
    arrays = {d: i if isinstance(i, (Var, np.ndarray)) else np.asarray(i, np.int64)
              for d, i in enumerate(items) if not isinstance(i, slice)}
    x = movement.subscript(x, tuple(i if isinstance(i, slice) else slice(None) for i in items))
    axes = sorted(arrays)
    rest = [d for d in range(x.ndim) if d not in arrays]
    sizes = [x.shape[d] for d in axes]
    try:
        bshape = np.broadcast_shapes(*(tuple(arrays[d].shape) for d in axes))
    except ValueError:
        _fail(x, "the index arrays' shapes "
              f"{', '.join(str(tuple(arrays[d].shape)) for d in axes)} do not broadcast together")
    flat = movement.reshape(movement.transpose(x, tuple(axes + rest)),
                            (int(np.prod(sizes)),) + tuple(x.shape[d] for d in rest))
    rows = _positions(x, [arrays[d] for d in axes], sizes, bshape)
    out = movement.take(flat, rows, axis=0)
    adjacent = axes == list(range(axes[0], axes[-1] + 1))
    if not adjacent or axes[0] == 0:
        return out
    k, lead = len(bshape), axes[0]  # the broadcast axes go back where the adjacent arrays were
    order = list(range(k, k + lead)) + list(range(k)) + list(range(k + lead, out.ndim))
    return movement.transpose(out, tuple(order))


def _positions(x, arrays, sizes, bshape):
    """Row-major positions in the flattened indexed axes (an int64 array or Var of ``bshape``);
    a Var component out of its axis makes a position past the end."""
    if not any(isinstance(a, Var) for a in arrays):
        for a, n in zip(arrays, sizes):
            if a.size and (a.min() < -n or a.max() >= n):
                bad = a[(a < -n) | (a >= n)][0]
                _fail(x, f"index {bad} is out of range for an axis of size {n}")
        return np.ravel_multi_index(tuple(np.broadcast_to(a % max(n, 1), bshape)
                                          for a, n in zip(arrays, sizes)), sizes) \
            if int(np.prod(bshape)) else np.zeros(bshape, np.int64)
    g = graph_of(x)
    total, pos, bad = int(np.prod(sizes)), g.lift(np.zeros((), np.int64)), None
    for a, n in zip(arrays, sizes):
        a = cast_to(a, np.int64) if isinstance(a, Var) else g.lift(a)
        a = ew.where(ew.less(a, 0), ew.add(a, n), a)
        outside = ew.where(ew.less(a, 0), True, ew.greater_equal(a, n))
        bad = outside if bad is None else ew.where(bad, True, outside)
        pos = ew.add(ew.mul(pos, n), a)
    pos = ew.where(bad, g.lift(np.asarray(total, np.int64)), pos)
    return movement.broadcast_to(pos, bshape)


def setitem(x: Var, index, value) -> Var:
    """The value of ``x`` after ``x[index] = value`` (``value`` broadcast to ``x[index]``'s
    shape and cast to ``x``'s dtype); ``x`` itself is not changed. Index tensors are read."""
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, Var) and not getattr(i.graph, "eager", False) for i in items):
        _fail(x, "x[index] = value with a graph Var in the index: the positions written must be "
              "known while the graph is built")
    where = positions(x, tuple(np.asarray(i) if isinstance(i, Var) else i for i in items))
    g = graph_of(x)
    value = g.lift(value, x) if not isinstance(value, Var) else value
    try:
        fits = np.broadcast_shapes(tuple(value.shape), where.shape) == where.shape
    except ValueError:
        fits = False
    if not fits:
        _fail(x, f"the value's shape {tuple(value.shape)} does not broadcast to the indexed "
              f"shape {where.shape}", cls=OpError)
    if where.size == 0:
        return x
    source = np.full(x.size, -1, np.int64)
    source[where.ravel()] = np.arange(where.size)  # a position named twice: the last write wins
    values = movement.reshape(movement.broadcast_to(cast_to(value, x.dtype), where.shape),
                              (where.size,))
    taken = movement.reshape(movement.take(values, np.maximum(source, 0), axis=0), x.shape)
    return ew.where(g.lift((source >= 0).reshape(x.shape)), taken, x)
