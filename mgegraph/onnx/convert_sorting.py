"""Converters of ONNX's TopK and CumSum onto mgegraph's topk and cumsum (ops/sorting.py).

TopK orders any axis: another than the last is moved last and back (a transpose each way). Its
k must be known at import (a shape depends on it); ``sorted=0`` allows any order, and the
values come sorted anyway. Equal values keep the lower index first, as ONNX says; NaN counts as
the largest value. Indices come back int64, as ONNX's. CumSum's axis must be known at import.
"""
from __future__ import annotations

import numpy as np

from ..ops.builder import apply, cast_to
from ..ops.movement_api import transpose
from ..ops.sorting import topk


def _flag(cx, at, key: str, default: int) -> bool:
    value = at.get(key, default)
    if value not in (0, 1):
        cx.fail(f"{key} must be 0 or 1, got {value!r}")
    return bool(value)


def _topk(cx, ins, at):
    x = cx.var(ins[0])
    k = cx.ints(ins[1], "k")
    if k is None or len(k) != 1:
        cx.fail(f"K must hold one value, got {k}")
    axis = cx.axis(at.get("axis", -1), x.ndim)
    if not 1 <= k[0] <= x.shape[axis]:
        cx.fail(f"K={k[0]} must be in 1..{x.shape[axis]} (axis {axis} of shape {list(x.shape)})")
    _flag(cx, at, "sorted", 1)  # either way: mgegraph's values come sorted
    last = list(range(x.ndim))
    last.append(last.pop(axis))  # moves axis last; the same pattern's inverse moves it back
    back = tuple(int(i) for i in np.argsort(last))
    moved = x if axis == x.ndim - 1 else transpose(x, tuple(last))
    values, indices = topk(moved, k[0], descending=_flag(cx, at, "largest", 1))
    if axis != x.ndim - 1:
        values, indices = transpose(values, back), transpose(indices, back)
    return [values, cast_to(indices, np.int64)]


def _cumsum(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.ints(ins[1], "axis")
    if axis is None or len(axis) != 1:
        cx.fail(f"axis must hold one value, got {axis}")
    return [apply("cumsum", (x,), axis=cx.axis(axis[0], x.ndim),
                  exclusive=_flag(cx, at, "exclusive", 0), reverse=_flag(cx, at, "reverse", 0))]


CONVERTERS = {"TopK": _topk, "CumSum": _cumsum}
