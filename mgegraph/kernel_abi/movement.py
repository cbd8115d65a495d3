"""The movement ops' parameter blocks (mgegraph/ops/movement.py onto the kernels of
_kernels/movement.pyx and csrc_cuda/movement.cu, which read the same blocks). Each lowering packs
a node's block by the field names declared here; shapes and strides, whose length varies, follow
the fixed fields in the order the kernels' comments give. The CPU build exports the fields of
the structs it was compiled with, and its backend refuses to load when they differ from these
(_kernels/lowering/movement.py).

Design: every op that reads its input with a linear layout (transpose, broadcast_to, slice) lowers
to one strided-copy kernel: the lowering turns the op into element strides (possibly 0 or
negative) and a start offset, collapses dimensions, and the kernel walks the input once. Reshape
and contiguous slices are views (``OpDef.view``) and never get here.
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import Launch
from ..ir.types import INT_DTYPES
from ..ops.movement import PAD_MODES, axis_index, slice_ranges, transpose_axes
from ..ops.registry import MOVED_DTYPES, NUMERIC_DTYPES
from .layout import MAX_DIMS, broadcast_strides, collapse, contiguous_strides, pack

# The structs' fields, in the kernels' order (movement.pyx exports its own *_FIELDS)
FIELDS = {
    "STRIDED_FIELDS": ("ndim",),
    "STRIDED_TAIL_FIELDS": ("offset",),
    "SLICE_BACKWARD_TAIL_FIELDS": ("offset", "size"),
    "CONCAT_FIELDS": ("count", "outer"),
    "SPLIT_FIELDS": ("count", "outer", "in_row"),
    "SPLIT_PART_FIELDS": ("start", "row"),
    "TAKE_FIELDS": ("index64", "outer", "axis_length", "row", "count"),  # take and index_add
    "GATHER_FIELDS": ("index64", "ndim"),  # gather and scatter_add
    "GATHER_TAIL_FIELDS": ("axis_length", "axis_stride"),
    "SCATTER_ADD_TAIL_FIELDS": ("axis_length", "axis_stride", "size"),
    "PAD_FIELDS": ("mode", "ndim", "fill_bits"),  # pad and pad_backward
    "FILL_FIELDS": ("count", "value_bits"),
    "ONE_HOT_FIELDS": ("count", "classes"),
    "RANGE_FIELDS": ("count", "end_exact"),
    "RANGE_FLOAT_FIELDS": ("start", "step", "end"),  # the floats
}
# the kernels' pad modes: the op layer's, in its order
PAD_CODES = {mode: code for code, mode in enumerate(PAD_MODES)}
# the dims of every strided, gather and pad layout (nditer.pxd, csrc_cuda/movement_index.cuh)
LIMITS = {"dims": MAX_DIMS}


def implement(table) -> None:
    """Register the movement ops on ``table`` (both backends run them on these blocks)."""
    for op, kernel, lower, dtypes, dispatch_input in _OPS:
        table.implement(op, kernel=kernel, dtypes=dtypes, lower=lower,
                        dispatch_input=dispatch_input)


# -- strided copies: transpose, broadcast_to, slice, slice_backward ------------------------------
def _strided_window(out_shape, strides) -> tuple[int, ...]:
    """The Strided fields, shape and strides of walking ``out_shape`` in order over element
    ``strides`` of a buffer; the kernel's tail follows."""
    shape, (_, merged) = collapse(out_shape, [contiguous_strides(out_shape), strides])
    return pack(FIELDS["STRIDED_FIELDS"], ndim=len(shape)) + shape + merged


def strided_params(out_shape, strides, offset=0) -> tuple[int, ...]:
    """The strided kernel's parameters: a contiguous ``out_shape`` read from element
    ``strides`` of the input, starting at element ``offset``."""
    return _strided_window(out_shape, strides) + pack(FIELDS["STRIDED_TAIL_FIELDS"], offset=offset)


def _transpose_lower(node):
    (x,) = node.inputs
    base = contiguous_strides(x.shape)
    axes = transpose_axes(node.attr["pattern"], x.ndim)
    strides = [0 if a == "x" else base[a] for a in axes]
    return Launch(strided_params(node.outputs[0].shape, strides))


def _broadcast_lower(node):
    (x,), (y,) = node.inputs, node.outputs
    return Launch(strided_params(y.shape, broadcast_strides(x.shape, y.shape)))


def _slice_window(x, attrs, window_shape) -> tuple[tuple[int, ...], int]:
    """The strided window ``attrs`` cut from a contiguous ``x`` (of ``window_shape``), and the
    element it starts at."""
    ranges = slice_ranges(x, attrs)
    base = contiguous_strides(x.shape)
    empty = any(length == 0 for _, length, _ in ranges)
    offset = 0 if empty else sum(start * b for (start, _, _), b in zip(ranges, base))
    strides = [step * b for (_, _, step), b in zip(ranges, base)]
    return _strided_window(window_shape, strides), offset


def _slice_lower(node):
    (x,), (y,) = node.inputs, node.outputs
    window, offset = _slice_window(x.type, node.attr, y.shape)
    return Launch(window + pack(FIELDS["STRIDED_TAIL_FIELDS"], offset=offset))


def _slice_backward_lower(node):
    (g,), (y,) = node.inputs, node.outputs
    window, offset = _slice_window(y.type, node.attr, g.shape)
    return Launch(window + pack(FIELDS["SLICE_BACKWARD_TAIL_FIELDS"], offset=offset, size=y.size))


# -- concat and split: rows of bytes ----------------------------------------------------------
def _outer_inner(shape, axis) -> tuple[int, int]:
    return math.prod(shape[:axis]), math.prod(shape[axis + 1:])


def _concat_lower(node):
    axis = axis_index(node.attr["axis"], node.inputs[0].ndim)
    outer, inner = _outer_inner(node.outputs[0].shape, axis)
    itemsize = node.outputs[0].dtype.itemsize
    rows = tuple(v.shape[axis] * inner * itemsize for v in node.inputs)
    return Launch(pack(FIELDS["CONCAT_FIELDS"], count=len(rows), outer=outer) + rows)


def _split_lower(node):
    (x,) = node.inputs
    axis = axis_index(node.attr["axis"], x.ndim)
    outer, inner = _outer_inner(x.shape, axis)
    row = inner * x.dtype.itemsize
    ranges = node.attr["ranges"]
    params = pack(FIELDS["SPLIT_FIELDS"], count=len(ranges), outer=outer,
                  in_row=x.shape[axis] * row)
    for start, stop in ranges:
        params += pack(FIELDS["SPLIT_PART_FIELDS"], start=start * row, row=(stop - start) * row)
    return Launch(params)


# -- pad -----------------------------------------------------------------------------------------
def value_bits(value, dtype: np.dtype) -> int:
    """The bits of ``value`` cast to ``dtype``, as a signed integer kernel parameter."""
    view = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[dtype.itemsize]
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


def _pad_params(name, in_shape, attrs, fill_bits=0) -> tuple[int, ...]:
    dims = _pad_dims(in_shape, attrs["pad_width"])
    limit = LIMITS["dims"]
    if len(dims) > limit:
        raise ValueError(f"{name} needs {len(dims)} dimensions after merging; at most {limit}")
    in_shape = tuple(n for n, _ in dims)
    head = pack(FIELDS["PAD_FIELDS"], mode=PAD_CODES[attrs["mode"]], ndim=len(dims),
                fill_bits=fill_bits)
    out_shape = tuple(n + a + b for n, (a, b) in dims)
    before = tuple(a for _, (a, _) in dims)
    return head + out_shape + in_shape + before + contiguous_strides(in_shape)


def _pad_lower(node):
    (x,) = node.inputs
    return Launch(_pad_params("pad", x.shape, node.attr,
                              value_bits(node.attr["constant_value"], x.dtype)))


def _pad_backward_lower(node):
    return Launch(_pad_params("pad_backward", node.outputs[0].shape, node.attr))


# -- indexing: gather, scatter_add, take, index_add, one_hot -------------------------------------
def _gather_window(x_shape, index, y_shape, axis: int) -> tuple[tuple[int, ...], dict]:
    """The Gather fields, shape and strides of gathering ``y_shape`` from ``x_shape`` (also
    scatter_add's), and the fields of gather's tail."""
    xb, ib = contiguous_strides(x_shape), contiguous_strides(index.shape)
    xs = [0 if d == axis or x_shape[d] == 1 else xb[d] for d in range(len(x_shape))]
    js = [0 if index.shape[d] == 1 else ib[d] for d in range(len(x_shape))]
    shape, (_, xs, js) = collapse(y_shape, [contiguous_strides(y_shape), xs, js])
    head = pack(FIELDS["GATHER_FIELDS"], index64=index.dtype.itemsize == 8, ndim=len(shape))
    return head + shape + xs + js, {"axis_length": x_shape[axis], "axis_stride": xb[axis]}


def _gather_lower(node):
    (x, index), (y,) = node.inputs, node.outputs
    window, tail = _gather_window(x.shape, index, y.shape, axis_index(node.attr["axis"], x.ndim))
    return Launch(window + pack(FIELDS["GATHER_TAIL_FIELDS"], **tail))


def _scatter_add_lower(node):
    (src, index), (y,) = node.inputs, node.outputs
    axis = axis_index(node.attr["axis"], y.ndim)
    window, tail = _gather_window(y.shape, index, src.shape, axis)
    return Launch(window + pack(FIELDS["SCATTER_ADD_TAIL_FIELDS"], **tail, size=y.size))


def _take_lower(node):
    x, indices = node.inputs
    axis = axis_index(node.attr["axis"], x.ndim)
    outer, inner = _outer_inner(x.shape, axis)
    return Launch(pack(FIELDS["TAKE_FIELDS"], index64=indices.dtype.itemsize == 8, outer=outer,
                       axis_length=x.shape[axis], row=inner * x.dtype.itemsize,
                       count=indices.size))


def _index_add_lower(node):
    (_, indices), (y,) = node.inputs, node.outputs
    axis = axis_index(node.attr["axis"], y.ndim)
    outer, inner = _outer_inner(y.shape, axis)
    return Launch(pack(FIELDS["TAKE_FIELDS"], index64=indices.dtype.itemsize == 8, outer=outer,
                       axis_length=y.shape[axis], row=inner, count=indices.size))


def _one_hot_lower(node):
    return Launch(pack(FIELDS["ONE_HOT_FIELDS"], count=node.inputs[0].size,
                       classes=node.attr["num_classes"]))


# -- fills -----------------------------------------------------------------------------------
def _fill_lower(node):
    (y,) = node.outputs
    return Launch(pack(FIELDS["FILL_FIELDS"], count=y.size,
                       value_bits=value_bits(node.attr["value"], y.dtype)))


def _range_launch(count: int, start: float, step: float, end: float = 0.0,
                  end_exact: bool = False) -> Launch:
    """``count`` values ``start + i * step`` computed in double; the last one pinned to ``end``
    when ``end_exact`` (the kernel reads ``end`` only then)."""
    floats = {"start": start, "step": step, "end": end}
    return Launch(pack(FIELDS["RANGE_FIELDS"], count=count, end_exact=end_exact),
                  tuple(floats[f] for f in FIELDS["RANGE_FLOAT_FIELDS"]))


def _arange_lower(node):
    a = node.attr
    return _range_launch(node.outputs[0].size, float(a["start"]), float(a["step"]))


def _linspace_lower(node):
    a = node.attr
    start, stop, num = float(a["start"]), float(a["stop"]), a["num"]
    step = (stop - start) / (num - 1) if num > 1 else 0.0
    return _range_launch(num, start, step, stop, end_exact=num > 1)  # num == 1: start, as NumPy


# (op, kernel family, lowering, dtypes the family implements, input whose dtype picks the
# kernel; -1: the output's, for ops without inputs)
_OPS = (
    ("transpose", "strided", _transpose_lower, MOVED_DTYPES, 0),
    ("broadcast_to", "strided", _broadcast_lower, MOVED_DTYPES, 0),
    ("slice", "strided", _slice_lower, MOVED_DTYPES, 0),
    ("slice_backward", "slice_backward", _slice_backward_lower, MOVED_DTYPES, 0),
    ("concat", "concat", _concat_lower, MOVED_DTYPES, 0),
    ("split", "split", _split_lower, MOVED_DTYPES, 0),
    ("pad", "pad", _pad_lower, MOVED_DTYPES, 0),
    ("pad_backward", "pad_backward", _pad_backward_lower, NUMERIC_DTYPES, 0),
    ("gather", "gather", _gather_lower, MOVED_DTYPES, 0),
    ("scatter_add", "scatter_add", _scatter_add_lower, NUMERIC_DTYPES, 0),
    ("take", "take", _take_lower, MOVED_DTYPES, 0),
    ("index_add", "index_add", _index_add_lower, NUMERIC_DTYPES, 0),
    ("one_hot", "one_hot", _one_hot_lower, INT_DTYPES, 0),
    ("fill", "fill", _fill_lower, MOVED_DTYPES, -1),
    ("arange", "range", _arange_lower, NUMERIC_DTYPES, -1),
    ("linspace", "range", _linspace_lower, NUMERIC_DTYPES, -1),
)
# the embedding lookup (ops/sequence.py) is take along axis 0: only its gradient differs
_OPS += (("embedding", "take", _take_lower, MOVED_DTYPES, 0),)
