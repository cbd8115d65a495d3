"""Shape tensors that hold named dimensions: ``Shape`` of an input ``float[batch, 3]`` is
``[batch, 3]``, known at import though ``batch`` is not a number.

Design: the importer folds a node whose inputs are all known (``importer._convert``). With
named dimensions a shape tensor is known as an expression, not as numbers, so it is a
``ShapeValue``: a small NumPy object array of ``int | Dim`` with the ONNX integer dtype it
stands for. The shape arithmetic exporters emit around reshapes (``Shape`` -> ``Gather`` ->
``Unsqueeze`` -> ``Concat`` -> ``Reshape``) is folded here on those expressions (``FOLDS``), so
``Reshape(x, Concat(Shape(x)[0:1], [-1]))`` becomes ``reshape(x, (batch, -1))`` and the graph
keeps the name. A result with no names left is a plain int64 array again (``known``), so a
model without named dimensions folds exactly as before. A ShapeValue that must become a graph
value (a shape used as data) is computed at run time from the named sizes (``materialize``).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from .. import functional as F
from ..ir.dims import Dim, fold, is_known_nonnegative, names

# the ONNX integer dtypes a shape tensor may be cast to and stay a shape
INTEGER = (np.dtype(np.int64), np.dtype(np.int32))


class ShapeValue:
    """An integer tensor known at import whose elements are ints or Dims (at least one Dim).

    >>> ShapeValue(np.array([Dim("batch"), 3], object)).shape
    (2,)
    """

    __slots__ = ("dtype", "items")

    def __init__(self, items: np.ndarray, dtype=np.int64):
        self.items, self.dtype = items, np.dtype(dtype)

    @property
    def shape(self) -> tuple:
        return self.items.shape

    @property
    def ndim(self) -> int:
        return self.items.ndim

    @property
    def size(self) -> int:
        return self.items.size

    def names(self) -> list[str]:
        return sorted(set().union(*(names(d) for d in self.items.reshape(-1))))

    def __repr__(self) -> str:
        return f"ShapeValue({[str(d) for d in self.items.reshape(-1)]}, {self.dtype})"


def known(items, dtype=np.int64):
    """``items`` (ints and Dims) as an int array when no Dim is left, else a ShapeValue."""
    items = np.asarray(items, dtype=object)
    if any(isinstance(d, Dim) for d in items.reshape(-1)):
        return ShapeValue(items, dtype)
    return np.asarray(items.astype(np.int64), dtype)


def objects(value) -> np.ndarray:
    """A known value (an array or a ShapeValue) as an object array of ints and Dims."""
    if isinstance(value, ShapeValue):
        return value.items
    return np.asarray(value).astype(object)


def materialize(value: ShapeValue, graph):
    """A graph value computing ``value`` at run time: each name is counted once as the sum
    of a fill of that many ones, and the expressions are computed from those counts, so a
    specialisation computes them from the bound names."""
    counts: dict[str, object] = {}

    def count(name):
        if name not in counts:
            counts[name] = F.reshape(F.sum(F.full((Dim(name),), 1, "int64", graph=graph)), (1,))
        return counts[name]

    def number(v):
        return graph.const(np.asarray([v], np.int64))

    ops = {"+": F.add, "-": F.sub, "*": F.mul, "//": F.floor_div, "neg": F.neg}
    parts = [fold(d, count, number, ops) if isinstance(d, Dim) else number(int(d))
             for d in value.items.reshape(-1)]
    flat = parts[0] if len(parts) == 1 else F.concat(parts, 0)
    out = F.reshape(flat, value.shape)
    return out if value.dtype == np.int64 else F.astype(out, value.dtype)


# -- the folds: (inputs as known values, attributes) -> outputs ---------------------------
def _gather(ins, at, check):
    if isinstance(ins[1], ShapeValue):
        return None  # named indices: a gather of the graph
    data, idx = objects(ins[0]), np.asarray(objects(ins[1]))
    axis = check.axis(at.get("axis", 0), data.ndim)
    n = data.shape[axis]
    flat = [int(i) for i in idx.reshape(-1)]
    if any(not -n <= i < n for i in flat):
        check.fail(f"indices {flat} on an axis of {n} (ONNX allows {-n} to {n - 1})")
    return [known(np.take(data, np.asarray(flat, np.int64).reshape(idx.shape), axis=axis),
                  _dtype(ins[0]))]


def _slice(ins, at, check):
    if any(isinstance(v, ShapeValue) for v in ins[1:]):
        return None  # named bounds: a slice of the graph
    data = objects(ins[0])
    starts, ends = _ints(ins[1]), _ints(ins[2])
    axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    axes = check.axes(axes, data.ndim)
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        check.fail("starts, ends, axes and steps need one each per axis, no step 0")
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st < 0 and s < -data.shape[a]:
            s = 0  # ONNX clamps a start before the first element to it; Python takes nothing
        index[a] = slice(s, e, st)
    return [known(data[tuple(index)], _dtype(ins[0]))]


def _concat(ins, at, check):
    parts = [objects(v) for v in ins if v is not None]
    axis = check.axis(at["axis"], parts[0].ndim)
    return [known(np.concatenate(parts, axis=axis), _dtype(ins[0]))]


def _unsqueeze(ins, at, check):
    if isinstance(ins[1], ShapeValue):
        return None  # the converter refuses named axes
    data = objects(ins[0])
    axes = sorted(check.axes(_ints(ins[1]), data.ndim + len(_ints(ins[1]))))
    shape = list(data.shape)
    for a in axes:
        shape.insert(a, 1)
    return [known(data.reshape(shape), _dtype(ins[0]))]


def _squeeze(ins, at, check):
    if len(ins) > 1 and isinstance(ins[1], ShapeValue):
        return None  # the converter refuses named axes
    data = objects(ins[0])
    axes = _ints(ins[1]) if len(ins) > 1 and ins[1] is not None else \
        [i for i, d in enumerate(data.shape) if d == 1]
    axes = set(check.axes(axes, data.ndim))
    if any(data.shape[a] != 1 for a in axes):
        check.fail(f"squeezes axes {sorted(axes)} of shape {list(data.shape)}: each must be 1")
    return [known(data.reshape([d for i, d in enumerate(data.shape) if i not in axes]),
                  _dtype(ins[0]))]


def _trunc_div(a, b):
    """ONNX's integer Div (truncating); on a Dim only where it is floor division: a
    numerator known >= 0 over a positive int, or an exact quotient."""
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        if b == 0:
            raise ValueError("an integer division by 0 in a shape computation")
        q = abs(int(a)) // abs(int(b))
        return q if (a >= 0) == (b > 0) else -q
    if not isinstance(b, Dim) and b < 0:
        return _trunc_div(-a, -b)
    if not is_known_nonnegative(a):
        raise ValueError(f"{a} // {b}: ONNX's Div truncates, which is floor division only for "
                         "a numerator known to be >= 0")
    return a // b


_ARITH = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
          "Div": _trunc_div}


def _arith(op):
    def fold(ins, at, check):
        a, b = objects(ins[0]), objects(ins[1])
        out = np.frompyfunc(_ARITH[op], 2, 1)(a, b)
        return [known(np.asarray(out, object), _dtype(ins[0]))]
    return fold


def _cast(ins, at, check):
    to = helper.tensor_dtype_to_np_dtype(at["to"])
    if to not in INTEGER:
        return None  # a shape used as data: the converter makes it a graph value
    return [known(objects(ins[0]), to)]


def _identity(ins, at, check):
    return [ins[0]]


def _dtype(value) -> np.dtype:
    return np.dtype(value.dtype)


def _ints(value) -> list[int]:  # starts, axes: the folds leave named ones to the converters
    return [int(i) for i in np.asarray(value).reshape(-1)]


# ONNX op -> fold of known values some of which are ShapeValues; a fold may return None to
# leave the node to its converter
FOLDS = {"Gather": _gather, "Slice": _slice, "Concat": _concat, "Unsqueeze": _unsqueeze,
         "Squeeze": _squeeze, "Cast": _cast, "Identity": _identity,
         **{op: _arith(op) for op in _ARITH}}
