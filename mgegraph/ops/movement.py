"""Movement ops: reshape views, strided copies (transpose, broadcast_to, slice), concat, split,
pad, gather/take, one_hot, and fills (fill, arange, linspace).

Design: every op that reads its input with a linear layout (transpose, broadcast_to, slice) lowers
to one strided-copy kernel: the lowering turns the op into element strides (possibly 0 or
negative) and a start offset, collapses dimensions, and the kernel walks the input once. Reshape
and the functions built on it (flatten, expand_dims, squeeze, subscript's axis changes) are views:
the plan aliases the input buffer and no kernel runs.
"""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from .._kernels import movement as K
from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import INT_DTYPES, TensorType, as_dtype, broadcast_shapes, tensor_type
from .layout import MAX_DIMS, broadcast_strides, collapse, contiguous_strides
from .registry import NUMERIC_DTYPES, REQUIRED, Launch, OpDef, register, require_dtypes


def _shape_attr(shape) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (numbers.Integral, np.integer)) else tuple(shape)
    if not all(isinstance(d, (numbers.Integral, np.integer)) and not isinstance(d, bool)
               for d in dims):
        raise TypeError(f"a shape must be a sequence of ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def _axis(axis, ndim: int) -> int:
    """A non-negative axis; unlike registry.normalize_axis a 0-d input has none."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim}-d input")
    return axis % ndim


def _same_shape(t: TensorType, shape) -> TensorType:
    return TensorType(tuple(shape), t.dtype)


# -- reshape (a view) -------------------------------------------------------------------------
def _reshape_infer(in_types, attrs):
    (x,) = in_types
    shape = list(_shape_attr(attrs["shape"]))
    if shape.count(-1) > 1:
        raise ValueError(f"shape {tuple(shape)} has more than one -1")
    if any(d < -1 for d in shape):
        raise ValueError(f"shape {tuple(shape)} has a negative dimension")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or x.size % known:
            raise ValueError(f"cannot reshape {x.size} elements into shape {tuple(shape)}")
        shape[shape.index(-1)] = x.size // known
    if math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape {x.size} elements into shape {tuple(shape)}")
    return (_same_shape(x, shape),)


register(OpDef("reshape", "movement", _reshape_infer, attrs={"shape": REQUIRED}, view=True))


# -- strided copies: transpose, broadcast_to, slice --------------------------------------------
def strided_params(out_shape, strides, offset=0) -> tuple[int, ...]:
    """[ndim, shape, input strides, offset] for the strided kernel of _kernels/movement.pyx."""
    shape, (_, merged) = collapse(out_shape, [contiguous_strides(out_shape), strides])
    return (len(shape), *shape, *merged, offset)


def _transpose_pattern(pattern, ndim) -> tuple:
    """Normalised pattern: input axes (non-negative) and "x" for new axes of size 1."""
    axes = tuple("x" if p == "x" else _axis(p, ndim) for p in pattern)
    if sorted(a for a in axes if a != "x") != list(range(ndim)):
        raise ValueError(f"pattern {tuple(pattern)} must name each of the {ndim} input axes "
                         "exactly once ('x' inserts a new axis)")
    return axes


def _transpose_infer(in_types, attrs):
    (x,) = in_types
    axes = _transpose_pattern(attrs["pattern"], x.ndim)
    return (_same_shape(x, [1 if a == "x" else x.shape[a] for a in axes]),)


def _transpose_lower(node):
    (x,) = node.inputs
    base = contiguous_strides(x.shape)
    axes = _transpose_pattern(node.attr["pattern"], x.ndim)
    strides = [0 if a == "x" else base[a] for a in axes]
    return Launch(strided_params(node.outputs[0].shape, strides))


def _broadcast_infer(in_types, attrs):
    (x,) = in_types
    shape = _shape_attr(attrs["shape"])
    pad = len(shape) - x.ndim
    if pad < 0 or any(d < 0 for d in shape) or any(
            s not in (1, shape[pad + i]) for i, s in enumerate(x.shape)):
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    return (_same_shape(x, shape),)


def _broadcast_lower(node):
    (x,), (y,) = node.inputs, node.outputs
    return Launch(strided_params(y.shape, broadcast_strides(x.shape, y.shape)))


def _slice_ranges(x: TensorType, attrs):
    """(start, length, step) per axis; the attrs follow Python slice semantics (None allowed)."""
    starts, stops, steps = attrs["starts"], attrs["stops"], attrs["steps"]
    if not len(starts) == len(stops) == len(steps) == x.ndim:
        raise ValueError(f"starts, stops and steps need one entry per axis ({x.ndim})")
    ranges = []
    for n, *bounds in zip(x.shape, starts, stops, steps):
        if bounds[2] == 0:
            raise ValueError("slice step cannot be zero")
        r = range(*slice(*bounds).indices(n))
        ranges.append((r.start, len(r), r.step))
    return ranges


def _slice_infer(in_types, attrs):
    (x,) = in_types
    return (_same_shape(x, [length for _, length, _ in _slice_ranges(x, attrs)]),)


def _slice_lower(node):
    (x,) = node.inputs
    ranges = _slice_ranges(x.type, node.attr)
    base = contiguous_strides(x.shape)
    empty = any(length == 0 for _, length, _ in ranges)
    offset = 0 if empty else sum(start * b for (start, _, _), b in zip(ranges, base))
    strides = [step * b for (_, _, step), b in zip(ranges, base)]
    return Launch(strided_params(node.outputs[0].shape, strides, offset))


register(OpDef("transpose", "movement", _transpose_infer, attrs={"pattern": REQUIRED},
               kernel="strided", lower=_transpose_lower, flops_per_element=0))
register(OpDef("broadcast_to", "movement", _broadcast_infer, attrs={"shape": REQUIRED},
               kernel="strided", lower=_broadcast_lower, flops_per_element=0))
register(OpDef("slice", "movement", _slice_infer,
               attrs={"starts": REQUIRED, "stops": REQUIRED, "steps": REQUIRED},
               kernel="strided", lower=_slice_lower, flops_per_element=0))


# -- concat and split: rows of bytes ----------------------------------------------------------
def _outer_inner(shape, axis) -> tuple[int, int]:
    return math.prod(shape[:axis]), math.prod(shape[axis + 1:])


def _concat_infer(in_types, attrs):
    if not in_types:
        raise ValueError("needs at least one input")
    first = in_types[0]
    axis = _axis(attrs["axis"], first.ndim)
    for t in in_types[1:]:
        if t.dtype != first.dtype:
            raise TypeError("input dtypes differ; mgegraph.functional.concat promotes them")
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape))
                                       if i != axis):
            raise ValueError(f"shapes must agree except on axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in in_types)
    return (_same_shape(first, shape),)


def _concat_lower(node):
    axis = _axis(node.attr["axis"], node.inputs[0].ndim)
    outer, inner = _outer_inner(node.outputs[0].shape, axis)
    itemsize = node.outputs[0].dtype.itemsize
    rows = [v.shape[axis] * inner * itemsize for v in node.inputs]
    return Launch((len(rows), outer, *rows))


def _split_infer(in_types, attrs):
    (x,) = in_types
    axis = _axis(attrs["axis"], x.ndim)
    out = []
    for start, stop in attrs["ranges"]:
        if not 0 <= start <= stop <= x.shape[axis]:
            raise ValueError(f"range [{start}, {stop}) is not inside axis {axis} of size "
                             f"{x.shape[axis]}")
        shape = list(x.shape)
        shape[axis] = stop - start
        out.append(_same_shape(x, shape))
    if not out:
        raise ValueError("needs at least one range")
    return tuple(out)


def _split_lower(node):
    (x,) = node.inputs
    axis = _axis(node.attr["axis"], x.ndim)
    outer, inner = _outer_inner(x.shape, axis)
    row = inner * x.dtype.itemsize
    params = [len(node.attr["ranges"]), outer, x.shape[axis] * row]
    for start, stop in node.attr["ranges"]:
        params += [start * row, (stop - start) * row]
    return Launch(tuple(params))


register(OpDef("concat", "movement", _concat_infer, attrs={"axis": 0}, kernel="concat",
               lower=_concat_lower, flops_per_element=0))
register(OpDef("split", "movement", _split_infer, attrs={"axis": 0, "ranges": REQUIRED},
               kernel="split", lower=_split_lower, flops_per_element=0))


# -- pad -----------------------------------------------------------------------------------------
def _pad_infer(in_types, attrs):
    (x,) = in_types
    widths, mode = attrs["pad_width"], attrs["mode"]
    if mode not in K.PAD_MODES:
        raise ValueError(f"mode must be one of {sorted(K.PAD_MODES)}, got {mode!r}")
    if len(widths) != x.ndim or any(len(w) != 2 or min(w) < 0 for w in widths):
        raise ValueError(f"pad_width must be {x.ndim} pairs of non-negative ints, got {widths}")
    for n, w in zip(x.shape, widths):
        if n == 0 and any(w) and mode != "constant":
            raise ValueError(f"{mode} padding cannot extend an empty axis")
    return (_same_shape(x, [n + a + b for n, (a, b) in zip(x.shape, widths)]),)


def value_bits(value, dtype: np.dtype) -> int:
    """The bits of ``value`` cast to ``dtype``, as a signed integer kernel parameter."""
    view = {1: np.int8, 4: np.int32, 8: np.int64}[dtype.itemsize]
    return int(np.array(value).astype(dtype).view(view))


def _pad_dims(in_shape, widths):
    """Merge neighbouring unpadded dims (they index input and output alike), keep at least one."""
    dims = []
    for n, w in zip(in_shape, widths):
        if dims and not any(w) and not any(dims[-1][1]):
            dims[-1] = (dims[-1][0] * n, (0, 0))
        else:
            dims.append((n, tuple(w)))
    return dims or [(1, (0, 0))]


def _pad_lower(node):
    (x,) = node.inputs
    dims = _pad_dims(x.shape, node.attr["pad_width"])
    if len(dims) > MAX_DIMS:
        raise ValueError(f"pad needs {len(dims)} dimensions after merging; at most {MAX_DIMS}")
    in_shape = [n for n, _ in dims]
    params = [K.PAD_MODES[node.attr["mode"]], len(dims),
              value_bits(node.attr["constant_value"], x.dtype)]
    params += [n + a + b for n, (a, b) in dims] + in_shape + [a for _, (a, _) in dims]
    params += contiguous_strides(in_shape)
    return Launch(tuple(params))


register(OpDef("pad", "movement", _pad_infer,
               attrs={"pad_width": REQUIRED, "mode": "constant", "constant_value": 0.0},
               kernel="pad", lower=_pad_lower, flops_per_element=0))


# -- indexing: gather, take, one_hot ------------------------------------------------------------
def _gather_infer(in_types, attrs):
    x, index = in_types
    require_dtypes("gather", index, INT_DTYPES, "index")
    if index.ndim != x.ndim:
        raise ValueError(f"index must have the input's number of dims ({x.ndim}), got "
                         f"{index.ndim}")
    axis = _axis(attrs["axis"], x.ndim)
    # NumPy's take_along_axis: the other axes broadcast against each other
    others = [(a, b) for i, (a, b) in enumerate(zip(x.shape, index.shape)) if i != axis]
    shape = list(broadcast_shapes(*map(tuple, zip(*others)))) if others else []
    shape.insert(axis, index.shape[axis])
    return (_same_shape(x, shape),)


def _gather_lower(node):
    (x, index), (y,) = node.inputs, node.outputs
    axis = _axis(node.attr["axis"], x.ndim)
    xb, ib = contiguous_strides(x.shape), contiguous_strides(index.shape)
    xs = [0 if d == axis or x.shape[d] == 1 else xb[d] for d in range(x.ndim)]
    js = [0 if index.shape[d] == 1 else ib[d] for d in range(x.ndim)]
    shape, (_, xs, js) = collapse(y.shape, [contiguous_strides(y.shape), xs, js])
    return Launch((index.dtype.itemsize == 8, len(shape), *shape, *xs, *js, x.shape[axis],
                   xb[axis]))


def _take_infer(in_types, attrs):
    x, indices = in_types
    require_dtypes("take", indices, INT_DTYPES, "indices")
    axis = _axis(attrs["axis"], x.ndim)
    return (_same_shape(x, x.shape[:axis] + indices.shape + x.shape[axis + 1:]),)


def _take_lower(node):
    x, indices = node.inputs
    axis = _axis(node.attr["axis"], x.ndim)
    outer, inner = _outer_inner(x.shape, axis)
    return Launch((indices.dtype.itemsize == 8, outer, x.shape[axis], inner * x.dtype.itemsize,
                   indices.size))


def _one_hot_infer(in_types, attrs):
    (x,) = in_types
    require_dtypes("one_hot", x, INT_DTYPES)
    classes = attrs["num_classes"]
    if not isinstance(classes, int) or classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {classes!r}")
    return (_same_shape(x, x.shape + (classes,)),)


def _one_hot_lower(node):
    return Launch((node.inputs[0].size, node.attr["num_classes"]))


register(OpDef("gather", "movement", _gather_infer, attrs={"axis": REQUIRED}, kernel="gather",
               lower=_gather_lower, flops_per_element=0))
register(OpDef("take", "movement", _take_infer, attrs={"axis": 0}, kernel="take",
               lower=_take_lower, flops_per_element=0))
register(OpDef("one_hot", "movement", _one_hot_infer, attrs={"num_classes": REQUIRED},
               kernel="one_hot", dtypes=INT_DTYPES, lower=_one_hot_lower, flops_per_element=0))


# -- fills: ops without inputs ----------------------------------------------------------------
def _fill_infer(in_types, attrs):
    return (tensor_type(_shape_attr(attrs["shape"]), attrs["dtype"]),)


def _fill_lower(node):
    (y,) = node.outputs
    return Launch((y.size, value_bits(node.attr["value"], y.dtype)))


def _arange_count(start, stop, step) -> int:
    if step == 0:
        raise ValueError("step must not be zero")
    return max(0, math.ceil((stop - start) / step))


def _range_infer(name, count):
    def infer(in_types, attrs):
        dtype = as_dtype(attrs["dtype"])
        require_dtypes(name, TensorType((), dtype), NUMERIC_DTYPES, "output")
        return (TensorType((count(attrs),), dtype),)
    return infer


def _arange_lower(node):
    a = node.attr
    return Launch((node.outputs[0].size, 0), (float(a["start"]), float(a["step"])))


def _linspace_count(attrs) -> int:
    if not isinstance(attrs["num"], int) or attrs["num"] < 0:
        raise ValueError(f"num must be a non-negative int, got {attrs['num']!r}")
    return attrs["num"]


def _linspace_lower(node):
    a = node.attr
    start, stop, num = float(a["start"]), float(a["stop"]), a["num"]
    step = (stop - start) / (num - 1) if num > 1 else 0.0
    return Launch((num, int(num > 1)), (start, step, stop))  # num == 1 gives start, as NumPy


_FILL_ATTRS = {"shape": REQUIRED, "dtype": "float32", "value": 0}
register(OpDef("fill", "movement", _fill_infer, attrs=_FILL_ATTRS, kernel="fill",
               lower=_fill_lower, dispatch_input=-1, flops_per_element=0))
register(OpDef("arange", "movement",
               _range_infer("arange", lambda a: _arange_count(a["start"], a["stop"], a["step"])),
               attrs={"start": 0, "stop": REQUIRED, "step": 1, "dtype": "float32"},
               kernel="range", dtypes=NUMERIC_DTYPES, lower=_arange_lower, dispatch_input=-1))
register(OpDef("linspace", "movement", _range_infer("linspace", _linspace_count),
               attrs={"start": REQUIRED, "stop": REQUIRED, "num": REQUIRED, "dtype": "float32"},
               kernel="range", dtypes=NUMERIC_DTYPES, lower=_linspace_lower, dispatch_input=-1))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
from .builder import apply, apply_multi, graph_of, promote  # noqa: E402

__all__ = ["reshape", "flatten", "expand_dims", "squeeze", "transpose", "broadcast_to", "concat",
           "stack", "split", "pad", "subscript", "gather", "take", "one_hot", "flip", "tile",
           "repeat", "roll", "full", "zeros", "ones", "full_like", "zeros_like", "ones_like",
           "arange", "linspace"]


def _fail(op: str, inputs, reason: str):
    """Build-time errors found by a public function read like those of an op's shape rule."""
    raise OpError(op, [v.type for v in inputs], reason, user_location())


def _int_tuple(op: str, inp, values) -> tuple[int, ...]:
    values = (values,) if isinstance(values, (numbers.Integral, np.integer)) else values
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        _fail(op, [inp], f"expected an int or a sequence of ints, got {values!r}")


def _axes(op: str, inp, axis, ndim: int) -> tuple[int, ...]:
    axes = _int_tuple(op, inp, axis)
    try:
        result = tuple(_axis(a, ndim) for a in axes)
    except ValueError as exc:
        _fail(op, [inp], str(exc))
    if len(set(result)) != len(result):
        _fail(op, [inp], f"repeated axis in {axis}")
    return result


def _view(x: Var, shape) -> Var:
    shape = tuple(shape)
    return x if x.shape == shape else apply("reshape", (x,), shape=shape)


def reshape(inp, target_shape):
    """Reshape without copying (the result views ``inp``'s buffer); one dimension may be -1.

    >>> y = F.reshape(x, (2, -1))
    """
    return apply("reshape", (inp,), shape=_int_tuple("reshape", inp, target_shape))


def flatten(inp, start_axis=0, end_axis=-1):
    """Merge axes ``start_axis..end_axis`` (inclusive) into one. ``F.flatten(x, 1)``"""
    if inp.ndim == 0:
        return _view(inp, (1,))
    start, end = (_axes("flatten", inp, a, inp.ndim)[0] for a in (start_axis, end_axis))
    if start > end:
        _fail("flatten", [inp], f"start_axis {start_axis} comes after end_axis {end_axis}")
    s = inp.shape
    return _view(inp, s[:start] + (math.prod(s[start:end + 1]),) + s[end + 1:])


def expand_dims(inp, axis):
    """Insert axes of size 1 at ``axis`` (int or tuple, positions in the result)."""
    ndim = inp.ndim + len(_int_tuple("expand_dims", inp, axis))
    new = set(_axes("expand_dims", inp, axis, ndim))
    dims = iter(inp.shape)
    return _view(inp, [1 if d in new else next(dims) for d in range(ndim)])


def squeeze(inp, axis=None):
    """Remove axes of size 1: all of them, or those in ``axis``, which must have size 1."""
    axes = [d for d, n in enumerate(inp.shape) if n == 1] if axis is None else \
        _axes("squeeze", inp, axis, inp.ndim)
    for d in axes:
        if inp.shape[d] != 1:
            _fail("squeeze", [inp], f"cannot squeeze axis {d} of size {inp.shape[d]}")
    return _view(inp, [n for d, n in enumerate(inp.shape) if d not in axes])


def transpose(inp, pattern):
    """Permute axes; ``pattern=None`` reverses them and ``"x"`` inserts a new axis of size 1.

    >>> F.transpose(x, (1, "x", 0)).shape  # x: (2, 3) -> (3, 1, 2)
    """
    if pattern is None:
        pattern = tuple(reversed(range(inp.ndim)))
    if len(pattern) == 1 and isinstance(pattern[0], (tuple, list)):
        pattern = pattern[0]  # Var.transpose((1, 0)) as well as Var.transpose(1, 0)
    pattern = tuple("x" if p == "x" else _int_tuple("transpose", inp, p)[0] for p in pattern)
    if pattern == tuple(range(inp.ndim)):
        return inp
    return apply("transpose", (inp,), pattern=pattern)


def broadcast_to(inp, shape):
    """Broadcast to ``shape`` by NumPy's rules (copies; size-1 axes are read with stride 0)."""
    shape = _int_tuple("broadcast_to", inp, shape)
    return inp if inp.shape == shape else apply("broadcast_to", (inp,), shape=shape)


def concat(inps, axis=0):
    """Join along an existing axis; dtypes are promoted as NumPy does.

    >>> F.concat([a, b], axis=1)
    """
    inps = list(inps)
    if not inps:
        raise ValueError("concat needs at least one input")
    inps = promote(*inps)
    return inps[0] if len(inps) == 1 else apply("concat", inps, axis=axis)


def stack(inps, axis=0):
    """Join equally shaped inputs along a new axis. ``F.stack([a, b], axis=-1)``"""
    inps = promote(*inps)
    if len({v.shape for v in inps}) != 1:
        _fail("stack", inps, "all inputs must have the same shape")
    (axis,) = _axes("stack", inps[0], axis, inps[0].ndim + 1)
    return concat([expand_dims(v, axis) for v in inps], axis)


def _split_ranges(inp, sections, n: int):
    if isinstance(sections, (numbers.Integral, np.integer)):
        k = int(sections)
        if k < 1 or n % k:
            _fail("split", [inp], f"axis of size {n} cannot be split into {k} equal parts")
        return tuple((i * n // k, (i + 1) * n // k) for i in range(k))
    points = (0, *_int_tuple("split", inp, sections), n)
    ranges = []
    for a, b in zip(points, points[1:]):  # numpy.split: part i is x[points[i]:points[i + 1]]
        r = range(*slice(a, b).indices(n))
        ranges.append((r.start, r.start + len(r)))
    return tuple(ranges)


def split(inp, nsplits_or_sections, axis=0):
    """Split into a list of parts: an int is a number of equal parts, a list holds split indices
    as in ``numpy.split``. ``a, b = F.split(x, [2], axis=1)``"""
    (axis,) = _axes("split", inp, axis, inp.ndim)
    ranges = _split_ranges(inp, nsplits_or_sections, inp.shape[axis])
    return list(apply_multi("split", (inp,), axis=axis, ranges=ranges))


def _pad_width(src, pad_width):
    ndim = src.ndim
    if isinstance(pad_width, (numbers.Integral, np.integer)):
        return ((int(pad_width),) * 2,) * ndim
    pad_width = tuple(pad_width)
    if len(pad_width) == 2 and all(isinstance(p, (numbers.Integral, np.integer))
                                   for p in pad_width):
        return (_int_tuple("pad", src, pad_width),) * ndim  # NumPy's (before, after) for all
    pairs = tuple(_int_tuple("pad", src, p) for p in pad_width)
    return pairs + ((0, 0),) * (ndim - len(pairs))  # MegEngine: missing trailing axes unpadded


def pad(src, pad_width, mode="constant", constant_value=0.0):
    """Pad with ``pad_width`` (per-axis (before, after) pairs from the first axis, as MegEngine;
    an int or one pair pads every axis, as NumPy). Modes: constant, edge (or replicate), reflect.

    >>> F.pad(x, ((1, 1), (2, 0)), mode="reflect")
    """
    mode = "edge" if mode == "replicate" else mode
    return apply("pad", (src,), pad_width=_pad_width(src, pad_width), mode=mode,
                 constant_value=float(constant_value))


def _index_items(inp, index) -> list:
    items = list(index) if isinstance(index, tuple) else [index]
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not (
                item is None or item is Ellipsis or isinstance(item, slice)
                or isinstance(item, (numbers.Integral, np.integer))):
            _fail("subscript", [inp], f"unsupported index {item!r}: use ints, slices, None and "
                  "..., or F.take / F.gather for index arrays")
    if sum(item is Ellipsis for item in items) > 1:
        _fail("subscript", [inp], "an index can only have a single ellipsis")
    used = sum(item is not None and item is not Ellipsis for item in items)
    if used > inp.ndim:
        _fail("subscript", [inp], f"too many indices ({used}) for a {inp.ndim}-d input")
    fill = [slice(None)] * (inp.ndim - used)
    if Ellipsis in items:
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        return items[:at] + fill + items[at + 1:]
    return items + fill


def _index_bounds(inp, item, axis: int):
    """(start, stop, step) for the slice op, the kept length or None, and whether it is a no-op."""
    n = inp.shape[axis]
    if isinstance(item, slice):
        try:
            r = range(*item.indices(n))
        except (TypeError, ValueError) as exc:
            _fail("subscript", [inp], f"bad slice {item}: {exc}")
        return (item.start, item.stop, item.step), len(r), len(r) == n and (n < 2 or r.step == 1)
    i = operator.index(item)
    if not -n <= i < n:
        _fail("subscript", [inp], f"index {i} is out of range for axis {axis} of size {n}")
    return (i % n, i % n + 1, 1), None, n == 1


def subscript(inp, index):
    """``inp[index]`` with ints (negative too; each removes its axis), slices with any step,
    ``...`` and ``None`` (a new axis): one ``slice`` node plus a view for removed/added axes.
    An integer Var or array as the whole index takes rows: ``x[ids]`` is ``F.take(x, ids, 0)``.

    >>> y = x[1, ::-2, None]
    """
    if isinstance(index, Var) or (isinstance(index, (list, np.ndarray))
                                  and np.asarray(index).dtype.kind in "iu"):
        return take(inp, index, axis=0)
    bounds, shape, trivial = [], [], True
    for item in _index_items(inp, index):
        if item is None:
            shape.append(1)
            continue
        b, length, same = _index_bounds(inp, item, len(bounds))
        bounds.append(b)
        shape += [] if length is None else [length]
        trivial &= same
    x = inp
    if not trivial:
        starts, stops, steps = zip(*bounds)
        x = apply("slice", (inp,), starts=starts, stops=stops, steps=steps)
    return _view(x, shape)


def gather(inp, axis, index):
    """``out[..., i, ...] = inp[..., index[..., i, ...], ...]`` along ``axis``, as
    ``numpy.take_along_axis`` (negative indices count from the end; the other axes broadcast).

    >>> F.gather(x, 1, idx)  # x: (N, C), idx: (N, 1) int32 -> (N, 1)
    """
    return apply("gather", (inp, index), axis=axis)


def take(inp, indices, axis=None):
    """``numpy.take``: rows of ``inp`` along ``axis`` (the flattened input when None) picked by
    integer ``indices`` of any shape; negative indices count from the end."""
    g = graph_of(inp)
    indices = g.const(np.asarray(indices, np.int64)) if not isinstance(indices, Var) else indices
    if axis is None:
        inp, axis = _view(inp, (inp.size,)), 0
    return apply("take", (inp, indices), axis=axis)


def one_hot(inp, num_classes):
    """One-hot rows of an int32/int64 input, in the input's dtype (as MegEngine)."""
    return apply("one_hot", (inp,), num_classes=operator.index(num_classes))


def flip(inp, axis):
    """Reverse the order of elements along ``axis`` (int or tuple)."""
    axes = _axes("flip", inp, axis, inp.ndim)
    return subscript(inp, tuple(slice(None, None, -1) if d in axes else slice(None)
                                for d in range(inp.ndim)))


def tile(inp, reps):
    """Repeat the whole input ``reps[i]`` times along axis i, as ``numpy.tile``."""
    reps = _int_tuple("tile", inp, reps)
    ndim = max(len(reps), inp.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - inp.ndim) + inp.shape
    x = _view(inp, [d for n in shape for d in (1, n)])
    x = broadcast_to(x, [d for r, n in zip(reps, shape) for d in (r, n)])
    return _view(x, [r * n for r, n in zip(reps, shape)])


def repeat(inp, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (the flattened input when None)."""
    if axis is None:
        inp, axis = _view(inp, (inp.size,)), 0
    (axis,) = _axes("repeat", inp, axis, inp.ndim)
    s = inp.shape
    x = broadcast_to(_view(inp, s[:axis + 1] + (1,) + s[axis + 1:]),
                     s[:axis + 1] + (operator.index(repeats),) + s[axis + 1:])
    return _view(x, s[:axis] + (s[axis] * operator.index(repeats),) + s[axis + 1:])


def roll(inp, shift, axis=None):
    """Roll elements along ``axis`` (int or tuple, with a shift each); None rolls the flat input.
    Each axis is one split into two parts and one concat."""
    if axis is None:
        return _view(roll(_view(inp, (inp.size,)), shift, 0), inp.shape)
    shifts, axes = _int_tuple("roll", inp, shift), _axes("roll", inp, axis, inp.ndim)
    if len(shifts) != len(axes):
        _fail("roll", [inp], f"shift {shift} and axis {axis} differ in length")
    x = inp
    for s, d in zip(shifts, axes):
        n = x.shape[d]
        if n and s % n:
            cut = n - s % n
            head, tail = apply_multi("split", (x,), axis=d, ranges=((cut, n), (0, cut)))
            x = apply("concat", (head, tail), axis=d)
    return x


# -- fills -----------------------------------------------------------------------------------
def _no_input_node(graph, op: str, **attrs) -> Var:
    from ..ir.graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"{op} has no input Var, so it needs graph=<mgegraph.Graph>, got {graph!r}")
    (out,) = graph.add_node(op, (), attrs).outputs
    return out


def full(shape, value, dtype="float32", *, graph):
    """A tensor of ``shape`` filled with ``value``, made by a fill kernel (no constant stored).

    >>> F.full((2, 3), 7, "int32", graph=g)
    """
    dtype = as_dtype(dtype)
    return _no_input_node(graph, "fill", shape=tuple(shape), dtype=str(dtype),
                          value=np.array(value).astype(dtype).item())


def zeros(shape, dtype="float32", *, graph):
    return full(shape, 0, dtype, graph=graph)


def ones(shape, dtype="float32", *, graph):
    return full(shape, 1, dtype, graph=graph)


def full_like(inp, value):
    """Shape and dtype of ``inp`` filled with ``value``; does not depend on ``inp``'s values."""
    return full(inp.shape, value, inp.dtype, graph=inp.graph)


def zeros_like(inp):
    return full_like(inp, 0)


def ones_like(inp):
    return full_like(inp, 1)


def arange(start=0, stop=None, step=1, dtype="float32", *, graph):
    """Values ``start, start + step, ...`` below ``stop`` (``arange(n)`` counts from 0).

    >>> F.arange(5, graph=g)
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = (v.item() if isinstance(v, np.generic) else v for v in (start, stop, step))
    return _no_input_node(graph, "arange", start=start, stop=stop, step=step,
                          dtype=str(as_dtype(dtype)))


def linspace(start, stop, num, dtype="float32", *, graph):
    """``num`` evenly spaced values from ``start`` to ``stop``, both included."""
    return _no_input_node(graph, "linspace", start=start, stop=stop, num=operator.index(num),
                          dtype=str(as_dtype(dtype)))
