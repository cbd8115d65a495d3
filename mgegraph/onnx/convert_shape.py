"""The ONNX converters of shapes and data movement: Reshape, Flatten, Transpose, Concat,
(Un)Squeeze, Expand, Tile, Gather(Elements), Slice, Split, Pad, Trilu, and the ops whose value
is known at import (Shape, Size, ConstantOfShape, Range, Constant); their table is
``CONVERTERS`` (ONNX op -> converter, see ``context`` for the signature), merged with the other
families' in ``converters``.

Design: Shape and Size give values known at import, not graph values: arrays where the
shape is numbers, ``ShapeValue``s (``shape_values``) where it holds named dims. An input that
decides a shape (a Reshape target, Slice's starts, Squeeze's axes) is read with ``cx.ints``,
which refuses one that is only known at run time, or with ``cx.dims`` where a named size may
stand (a Reshape or Expand target, Slice's bounds, ConstantOfShape).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from .. import functional as F
from . import checks, shape_values
from .context import shape_of


def _reshape(cx, ins, at):
    x = cx.var(ins[0])
    target = cx.dims(ins[1], "the target shape")
    if not at.get("allowzero", 0):
        target = [shape_of(x)[i] if d == 0 else d for i, d in enumerate(target)]
    return [F.reshape(x, tuple(target))]


def _flatten(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 1), x.ndim, inclusive=True)
    s = shape_of(x)
    return [F.reshape(x, (math.prod(s[:axis]), math.prod(s[axis:])))]


def _transpose(cx, ins, at):
    x = cx.var(ins[0])
    perm = tuple(at.get("perm", range(x.ndim - 1, -1, -1)))
    if sorted(perm) != list(range(x.ndim)):
        cx.fail(f"perm {list(perm)} is not a permutation of the {x.ndim} axes")
    return [F.transpose(x, perm)]


def _concat(cx, ins, at):
    parts = [cx.var(x) for x in ins if x is not None]
    axis = cx.axis(at["axis"], parts[0].ndim)
    parts = [p for p in parts if p.size or len(parts) == 1]
    return [F.concat(parts, axis)]


def _squeeze(cx, ins, at):
    x = cx.var(ins[0])
    axes = cx.ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None
    if axes is None:
        axes = [i for i, d in enumerate(shape_of(x)) if d == 1]
    axes = set(cx.axes(axes, x.ndim))
    if any(shape_of(x)[a] != 1 for a in axes):
        cx.fail(f"squeezes axes {sorted(axes)} of shape {list(shape_of(x))}: each must be 1")
    return [F.reshape(x, tuple(d for i, d in enumerate(shape_of(x)) if i not in axes))]


def _unsqueeze(cx, ins, at):
    x = cx.var(ins[0])
    axes = cx.ints(ins[1], "axes")
    axes = sorted(cx.axes(axes, x.ndim + len(axes)))  # axes of the output
    shape = list(shape_of(x))
    for a in axes:
        shape.insert(a, 1)
    return [F.reshape(x, tuple(shape))]


def _expand(cx, ins, at):
    x = cx.var(ins[0])
    target = tuple(cx.dims(ins[1], "the target shape"))
    shape = _broadcast(cx, shape_of(x), target)
    if shape == shape_of(x):
        return [F.reshape(x, shape)]
    return [F.broadcast_to(x, shape)]


def _broadcast(cx, a: tuple, b: tuple) -> tuple:
    """NumPy's broadcast of two shapes; a named size meets only 1 or itself."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for p, q in zip(a, b):
        if not (p == q or p == 1 or q == 1):
            cx.fail(f"cannot broadcast shape {list(map(str, a))} to {list(map(str, b))}")
        out.append(q if p == 1 else p)
    return tuple(out)


def _tile(cx, ins, at):
    x = cx.var(ins[0])
    repeats = cx.ints(ins[1], "repeats")
    if len(repeats) != x.ndim or min(repeats, default=0) < 0:
        cx.fail(f"repeats {repeats} for a rank-{x.ndim} input (ONNX needs one per axis, none "
                "negative)")
    return [F.tile(x, tuple(repeats))]


def _gather(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim == 0:
        cx.fail("gathers from a 0-d input (ONNX needs rank >= 1)")
    axis = cx.axis(at.get("axis", 0), x.ndim)
    return [F.take(x, _indices(cx, ins[1], shape_of(x)[axis]), axis)]


def _indices(cx, idx, n: int):
    """Gather's indices as a Var; known ones checked against the axis's ``[-n, n-1]``."""
    if not isinstance(idx, np.ndarray):
        return cx.var(idx)  # a Var, or a ShapeValue computed at run time
    if idx.size and (idx.min() < -n or idx.max() >= n):
        cx.fail(f"indices from {idx.min()} to {idx.max()} on an axis of {n} (ONNX allows "
                f"{-n} to {n - 1})")
    return cx.g.const(np.asarray(idx, np.int64))


def _gather_elements(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 0), x.ndim)
    if len(shape_of(ins[1])) != x.ndim:
        cx.fail(f"indices of rank {len(shape_of(ins[1]))} for a rank-{x.ndim} input (ONNX needs "
                "the same rank)")
    return [F.gather(x, axis, _indices(cx, ins[1], shape_of(x)[axis]))]


def _slice(cx, ins, at):
    x = cx.var(ins[0])
    starts, ends = cx.dims(ins[1], "starts"), cx.dims(ins[2], "ends")
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
    steps = cx.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    axes = list(range(len(starts))) if axes is None else cx.axes(axes, x.ndim)
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        cx.fail(f"starts, ends, axes and steps of lengths {len(starts)}, {len(ends)}, "
                f"{len(axes)} and {len(steps)}: ONNX needs one of each per axis")
    if 0 in steps:
        cx.fail("a step of 0")
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = shape_of(x)[a]
        if st < 0 and isinstance(s, int) and isinstance(n, int) and s < -n:
            s = 0  # ONNX clamps a start before the first element to it; Python takes nothing
        index[a] = slice(s, e, st)
    return [F.subscript(x, tuple(index))]


def _split(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 0), x.ndim)
    n_out = len(cx.node.output)
    sizes = cx.ints(ins[1], "split") if len(ins) > 1 and ins[1] is not None else None
    if sizes is None and "split" in at:  # opset 13's attribute form
        sizes = list(at["split"])
    size = shape_of(x)[axis]
    if sizes is None:
        n = at.get("num_outputs", n_out)
        chunk = -(-size // n)
        sizes = [min(chunk, size - i * chunk) for i in range(n)]
    if len(sizes) != n_out or sum(sizes) != size or min(sizes) < 0:
        cx.fail(f"split sizes {sizes} for {n_out} outputs of an axis of {size}: ONNX needs one "
                "size per output, none negative, summing to the axis")
    bounds = list(np.cumsum(sizes)[:-1])
    if len(sizes) == 1:
        return [F.reshape(x, shape_of(x))]
    return F.split(x, [int(b) for b in bounds], axis)


def _pad(cx, ins, at):
    x = cx.var(ins[0])
    pads = cx.ints(ins[1], "pads")
    value = cx.known(ins[2], "constant_value") if len(ins) > 2 and ins[2] is not None else None
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
    axes = list(range(x.ndim)) if axes is None else cx.axes(axes, x.ndim)
    k = len(axes)
    if len(pads) != 2 * k:
        cx.fail(f"{len(pads)} pads for {k} axes (ONNX needs 2 per axis)")
    width = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        width[a] = (pads[i], pads[i + k])
    if any(b < 0 or e < 0 for b, e in width):
        cx.fail("negative pads are not supported")
    mode = at.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "edge", "reflect", "wrap"):
        cx.fail(f"mode {mode!r} is not supported")
    return [F.pad(x, tuple(width), mode=mode,
                  constant_value=0.0 if value is None else float(np.asarray(value).reshape(-1)[0]))]


def _trilu(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim < 2:
        cx.fail(f"a rank-{x.ndim} input (Trilu needs rank >= 2)")
    n, m = shape_of(x)[-2:]
    if not isinstance(n, int) or not isinstance(m, int):
        cx.fail(f"Trilu over the named dims of shape {list(map(str, shape_of(x)))}: its masks "
                "need the matrix's sizes as numbers")
    rows = cx.g.const(np.arange(n, dtype=np.int64).reshape(n, 1))
    cols = cx.g.const(np.arange(m, dtype=np.int64).reshape(1, m))
    diff = F.sub(cols, rows)
    k = ins[1] if len(ins) > 1 and ins[1] is not None else np.asarray(0, np.int64)
    if isinstance(k, np.ndarray):
        k = int(np.asarray(k).reshape(-1)[0])
        kk = cx.g.const(np.asarray(k, np.int64))
    else:
        kk = F.astype(F.reshape(cx.var(k), ()), np.int64)
    mask = F.greater_equal(diff, kk) if at.get("upper", 1) else F.less_equal(diff, kk)
    return [F.where(mask, x, cx.g.const(np.zeros((), x.dtype)))]


def _shape_op(cx, ins, at):
    return [shape_values.known(shape_of(ins[0])[at.get("start", 0):at.get("end")])]


def _size(cx, ins, at):
    return [shape_values.known(math.prod(shape_of(ins[0])))]


def _constant_of_shape(cx, ins, at):
    shape = tuple(cx.dims(ins[0], "the shape"))
    value = at.get("value")
    value = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value)
    if isinstance(ins[0], shape_values.ShapeValue):  # a named size: made when it is bound
        return [F.full(shape, value.reshape(-1)[0], value.dtype, graph=cx.g)]
    return [np.full(shape, value.reshape(-1)[0], value.dtype)]


def _range(cx, ins, at):
    start, limit, delta = (cx.known(v, name) for v, name in zip(ins, ("start", "limit", "delta")))
    return [np.arange(start, limit, delta, dtype=np.asarray(start).dtype)]


def _constant(cx, ins, at):
    (key,) = at
    value = at[key]
    if key == "value":
        checks.check_half_bits(cx.where(), value)
        return [numpy_helper.to_array(value)]
    if key == "value_float":
        return [np.asarray(value, np.float32)]
    if key == "value_floats":
        return [np.asarray(value, np.float32)]
    if key == "value_int":
        return [np.asarray(value, np.int64)]
    if key == "value_ints":
        return [np.asarray(value, np.int64)]
    cx.fail(f"a {key} constant is not supported")


# ONNX op -> converter
CONVERTERS = {
    "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose, "Concat": _concat,
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Expand": _expand, "Tile": _tile,
    "Gather": _gather, "GatherElements": _gather_elements, "Slice": _slice, "Split": _split,
    "Pad": _pad, "Trilu": _trilu,
    "Shape": _shape_op, "Size": _size, "ConstantOfShape": _constant_of_shape,
    "Range": _range, "Constant": _constant,
}
