"""Convolutions made of conv2d and its data gradient: ``conv1d``, and the transposed convolutions
``conv_transpose2d`` and ``conv_transpose1d`` (re-exported by mgegraph.functional).

Design: a transposed convolution is conv2d's data gradient, which mgegraph already has as the op
``conv2d_backward_data`` (weight (C_in, C_out/groups, kh, kw) is conv2d's weight layout read
backwards), with its CPU paths (per image and group one GEMM W^T x then col2im; the blocked and
Winograd tiles at stride 1), its CUDA kernel, its gradient rules (dx = conv2d(dy, w), dw =
conv2d_backward_filter with the roles of input and gradient swapped) and its model-file and ONNX
forms. So ``conv_transpose2d`` is that op, and no new one: what the data gradient cannot say by
itself (asymmetric padding, an ``output_padding`` of at least the stride) is a crop or a zero
pad of its result; the bias is the op's optional bias input (added by the kernel as it writes
each cell, ONNX's B), or a broadcast add after a crop or pad. The 1-D functions are the
2-D ones on a unit width; ``conv3d`` is a sum over the kernel's depth of 2-D convolutions of
depth slices, each slice's depth folded into the batch, and ``conv_transpose3d`` the same sum of
transposed 2-D convolutions, each tap's result spread along the depth by the stride and shifted
to the depths it reaches.
"""
from __future__ import annotations

import operator

from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import is_float
from .autocast import gemm_operands
from .conv import check_conv_modes, conv2d, conv2d_backward_data
from .elementwise import add
from .movement_api import pad, reshape, subscript, transpose
from .registry import named

__all__ = ["conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]


def _fail(op, inputs, reason):
    raise OpError(op, [v.type for v in inputs if isinstance(v, Var)], reason, user_location())


def _ints(op, inputs, what, value, n, low) -> tuple[int, ...]:
    """``value`` (an int or ``n`` ints) as n ints >= ``low``, or an OpError naming ``what``."""
    try:
        values = (operator.index(value),) * n if hasattr(value, "__index__") else \
            tuple(operator.index(v) for v in value)
    except TypeError:
        values = ()
    if len(values) != n or any(v < low for v in values):
        _fail(op, inputs, f"{what} must be an int >= {low} or {n} of them, got {value!r}")
    return values


def _bias_vector(op, inputs, bias, c_out, ndim):
    """``bias`` of an ``ndim``-d convolution's output as (C_out,): given so, or in MegEngine's
    broadcast form (1, C_out, 1, ...)."""
    broadcast = (1, c_out) + (1,) * (ndim - 2)
    if bias.shape not in ((c_out,), broadcast):
        _fail(op, inputs, f"bias must have shape ({c_out},) or {broadcast}, got {bias.shape}")
    return bias if bias.ndim == 1 else reshape(bias, (c_out,))


# -- transposed convolution -----------------------------------------------------------------------
def _check_transpose(op, x, w, bias, groups):
    """The input, weight and bias of a transposed convolution: (N, C_in, H, W), (C_in,
    C_out/groups, kh, kw), (C_out,) or (1, C_out, 1, 1); returns C_out."""
    inputs = [v for v in (x, w, bias) if v is not None]
    if not is_float(x.dtype):
        _fail(op, inputs, f"takes floating-point inputs, got {x.dtype}")
    if x.ndim != 4 or w.ndim != 4:
        _fail(op, inputs, f"input must be 4-D (N, C_in, H, W) and weight 4-D (C_in, "
              f"C_out/groups, kh, kw), got shapes {x.shape} and {w.shape}")
    c_in = x.shape[1]
    if not named(c_in) and (c_in != w.shape[0] or c_in % groups):
        _fail(op, inputs, f"the weight's first dim ({w.shape[0]}) must equal the input's "
              f"{c_in} channels, and groups={groups} must divide them")
    c_out = w.shape[1] * groups
    if bias is not None and bias.shape not in ((c_out,), (1, c_out, 1, 1)):
        _fail(op, inputs, f"bias must have shape ({c_out},) or (1, {c_out}, 1, 1), "
              f"got {bias.shape}")
    return c_out


def _axis_plan(n, k, s, d, pads, out):
    """How one spatial axis of a transposed convolution comes from conv2d_backward_data: (the
    symmetric padding q it runs with, the size it makes, the crop (start, stop) of that, the
    zeros appended after). The full result has f = (n - 1) s + d (k - 1) + 1 cells, and the
    output is its cells [b, b + out) (those past f are zero); the data gradient padded by q makes
    cells [q, q + size) of it, for any size in [f - 2q, f - 2q + s - 1]."""
    begin, end = pads
    full = (n - 1) * s + d * (k - 1) + 1
    q = min(begin, end)
    if begin - q + out > full - 2 * q + s - 1:  # the output reaches past what q allows
        q = 0
    stop = begin - q + out
    size = min(max(stop, full - 2 * q), full - 2 * q + s - 1)
    return q, size, (begin - q, min(stop, size)), max(stop - size, 0)


def transposed(x, w, bias, stride, pads, out_hw, dilation, groups, op="conv_transpose2d"):
    """The transposed convolution of NCHW ``x`` by ``w`` (C_in, C_out/groups, kh, kw) with
    padding ``pads`` ((top, bottom), (left, right)), giving an ``out_hw`` output: the
    form every public function and the ONNX importer reduce to.

    >>> y = transposed(x, w, None, (2, 2), ((1, 1), (1, 1)), (64, 64), (1, 1), 1)
    """
    _check_transpose(op, x, w, bias, groups)
    plans = [_axis_plan(x.shape[2 + i], w.shape[2 + i], stride[i], dilation[i], pads[i],
                        out_hw[i]) for i in range(2)]
    crops = [p[2] for p in plans]
    cropped = any(crop != (0, p[1]) for crop, p in zip(crops, plans))
    padded = any(p[3] for p in plans)
    # the kernel adds the bias as it writes each cell (as ONNX's B); a crop or pad comes after
    # the kernel and before the bias, so those keep it a separate add
    inner_bias = None if cropped or padded else bias
    y = conv2d_backward_data(w, x, tuple(p[1] for p in plans), inner_bias, stride=tuple(stride),
                             padding=tuple(p[0] for p in plans), dilation=tuple(dilation),
                             groups=groups)
    if cropped:
        y = subscript(y, (slice(None), slice(None), slice(*crops[0]), slice(*crops[1])))
    if padded:
        y = pad(y, ((0, 0), (0, 0), (0, plans[0][3]), (0, plans[1][3])))
    if bias is None or inner_bias is not None:
        return y
    return add(y, bias if bias.ndim == 4 else reshape(bias, (1, bias.shape[0], 1, 1)))


def _out_hw(op, inputs, x, w, stride, padding, output_padding, dilation):
    out = []
    for i in range(len(stride)):
        n, k = x.shape[2 + i], w.shape[2 + i]
        if output_padding[i] >= max(stride[i], dilation[i]):
            _fail(op, inputs, f"output_padding {output_padding} must be smaller than the stride "
                  f"{stride} or the dilation {dilation} on each axis")
        if named(n):
            _fail(op, inputs, f"the input's spatial size {x.shape[2:]} must be known")
        size = (n - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + 1 + output_padding[i]
        if size < 1:
            _fail(op, inputs, f"output size would be {size} on axis {2 + i}: padding {padding} "
                  f"crops more than the {x.shape[2:]} input spreads to")
        out.append(size)
    return tuple(out)


def conv_transpose2d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """Transposed 2-D convolution (the data gradient of conv2d) of an NCHW input by a
    (C_in, C_out/groups, kh, kw) weight; bias (C_out,). The output side is
    (H - 1) * stride - 2 * padding + dilation * (kh - 1) + 1 + output_padding.

    >>> y = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)  # 32x32 -> 64x64
    """
    op = "conv_transpose2d"
    check_conv_modes(op, conv_mode, compute_mode)
    x, w, *rest = gemm_operands(inp, weight, bias)
    inputs = [x, w, *rest]
    groups = _ints(op, inputs, "groups", groups, 1, 1)[0]
    stride = _ints(op, inputs, "stride", stride, 2, 1)
    padding = _ints(op, inputs, "padding", padding, 2, 0)
    output_padding = _ints(op, inputs, "output_padding", output_padding, 2, 0)
    dilation = _ints(op, inputs, "dilation", dilation, 2, 1)
    _check_transpose(op, x, w, rest[0] if rest else None, groups)
    out_hw = _out_hw(op, inputs, x, w, stride, padding, output_padding, dilation)
    return transposed(x, w, rest[0] if rest else None, stride, tuple((p, p) for p in padding),
                      out_hw, dilation, groups)


# -- 1-D: the 2-D functions on a unit width -------------------------------------------------------
def _as_2d(op, x, w):
    if x.ndim != 3 or w.ndim != 3:
        _fail(op, [x, w], f"input must be 3-D (N, C, L) and weight 3-D, got shapes {x.shape} "
              f"and {w.shape}")
    return reshape(x, (*x.shape, 1)), reshape(w, (*w.shape, 1))


def _one(op, inputs, what, value, low):
    return _ints(op, inputs, what, value, 1, low) + ((1,) if low >= 1 else (0,))


def conv1d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation", compute_mode="default"):
    """1-D convolution of an (N, C, L) input by an (out, in/groups, k) weight; bias (out,) or
    (1, out, 1).

    >>> y = F.conv1d(x, w, b, stride=2, padding=1)   # x: (8, 3, 100), w: (16, 3, 5)
    """
    op = "conv1d"
    check_conv_modes(op, conv_mode, compute_mode)
    x, w, *rest = gemm_operands(inp, weight, bias)
    inputs = [x, w, *rest]
    x2, w2 = _as_2d(op, x, w)
    bias = _bias_vector(op, inputs, rest[0], w.shape[0], 3) if rest else None
    y = conv2d(x2, w2, bias, _one(op, inputs, "stride", stride, 1),
               _one(op, inputs, "padding", padding, 0), _one(op, inputs, "dilation", dilation, 1),
               groups)
    return reshape(y, y.shape[:3])


def conv_transpose1d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """Transposed 1-D convolution of an (N, C_in, L) input by a (C_in, C_out/groups, k) weight.

    >>> y = F.conv_transpose1d(x, w, stride=2)   # x: (1, 64, 50), w: (64, 32, 4) -> (1, 32, 102)
    """
    op = "conv_transpose1d"
    check_conv_modes(op, conv_mode, compute_mode)
    x, w, *rest = gemm_operands(inp, weight, bias)
    inputs = [x, w, *rest]
    x2, w2 = _as_2d(op, x, w)
    groups = _ints(op, inputs, "groups", groups, 1, 1)[0]
    bias = _bias_vector(op, inputs, rest[0], w.shape[1] * groups, 3) if rest else None
    y = conv_transpose2d(x2, w2, bias, _one(op, inputs, "stride", stride, 1),
                         _one(op, inputs, "padding", padding, 0),
                         _one(op, inputs, "output_padding", output_padding, 0),
                         _one(op, inputs, "dilation", dilation, 1), groups)
    return reshape(y, y.shape[:3])


# -- 3-D: a sum of 2-D convolutions over the kernel's depth ----------------------------------------
def _check_3d(op, x, w):
    if x.ndim != 5 or w.ndim != 5:
        _fail(op, [x, w], f"input must be 5-D (N, C, D, H, W) and weight 5-D (out, in/groups, "
              f"kd, kh, kw), got shapes {x.shape} and {w.shape}")
    if named(x.shape[2]):
        _fail(op, [x, w], f"the input's depth {x.shape[2]} must be known")


def conv3d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation", compute_mode="default"):
    """3-D convolution of an (N, C, D, H, W) input by an (out, in/groups, kd, kh, kw) weight;
    bias (out,) or (1, out, 1, 1, 1). Each depth tap dz convolves, as one conv2d, the input's depth slices it reads
    (with the output depths folded into the batch), and the taps' results are summed.

    >>> y = F.conv3d(x, w, b, padding=1)   # x: (2, 3, 8, 16, 16), w: (8, 3, 3, 3, 3)
    """
    op = "conv3d"
    check_conv_modes(op, conv_mode, compute_mode)
    x, w, *rest = gemm_operands(inp, weight, bias)
    inputs = [x, w, *rest]
    _check_3d(op, x, w)
    stride, padding = _ints(op, inputs, "stride", stride, 3, 1), \
        _ints(op, inputs, "padding", padding, 3, 0)
    dilation = _ints(op, inputs, "dilation", dilation, 3, 1)
    n, c, depth = x.shape[:3]
    kd, (sd, pd, dd) = w.shape[2], (stride[0], padding[0], dilation[0])
    out_d = (depth + 2 * pd - dd * (kd - 1) - 1) // sd + 1
    if out_d < 1:
        _fail(op, inputs, f"output depth would be {out_d}: the input's depth {depth} (padded "
              f"by {pd}) is smaller than the {dd * (kd - 1) + 1}-deep window")
    if pd:
        x = pad(x, ((0, 0), (0, 0), (pd, pd), (0, 0), (0, 0)))
    total = None
    for dz in range(kd):
        rows = subscript(x, (slice(None), slice(None),
                             slice(dz * dd, dz * dd + sd * (out_d - 1) + 1, sd)))
        planes = reshape(transpose(rows, (0, 2, 1, 3, 4)), (n * out_d, c, *x.shape[3:]))
        y = conv2d(planes, subscript(w, (slice(None), slice(None), dz)), None, stride[1:],
                   padding[1:], dilation[1:], groups)
        total = y if total is None else add(total, y)
    y = transpose(reshape(total, (n, out_d, *total.shape[1:])), (0, 2, 1, 3, 4))
    if not rest:
        return y
    bias = _bias_vector(op, inputs, rest[0], w.shape[0], 5)
    return add(y, reshape(bias, (1, w.shape[0], 1, 1, 1)))


# -- 3-D transposed: a sum over the kernel's depth of transposed 2-D convolutions -----------------
def _depth_window(y, start, size):
    """Cells [start, start + size) of ``y``'s axis 1, zeros where they fall outside it."""
    length = y.shape[1]
    lo, hi = min(max(start, 0), length), min(max(start + size, 0), length)
    if (lo, hi) != (0, length):
        y = subscript(y, (slice(None), slice(lo, hi)))
    before, after = lo - start, start + size - hi
    if before or after:
        y = pad(y, ((0, 0), (before, after)) + ((0, 0),) * (y.ndim - 2))
    return y


def _spread_depth(y, stride):
    """(N, D, ...) -> (N, D * stride, ...) with y's slice d at depth d * stride, zeros
    between."""
    if stride == 1:
        return y
    n, depth, *rest = y.shape
    y = pad(reshape(y, (n, depth, 1, *rest)), ((0, 0), (0, 0), (0, stride - 1))
            + ((0, 0),) * len(rest))
    return reshape(y, (n, depth * stride, *rest))


def _check_transpose3d(op, x, w, groups):
    _check_3d(op, x, w)
    if not is_float(x.dtype):
        _fail(op, [x, w], f"takes float32 or float64 inputs, got {x.dtype}")
    c_in = x.shape[1]
    if not named(c_in) and (c_in != w.shape[0] or c_in % groups):
        _fail(op, [x, w], f"the weight's first dim ({w.shape[0]}) must equal the input's "
              f"{c_in} channels, and groups={groups} must divide them")


def transposed3d(x, w, bias, stride, pads, out_size, dilation, groups, op="conv_transpose3d"):
    """The transposed convolution of NCDHW ``x`` by ``w`` (C_in, C_out/groups, kd, kh, kw)
    with padding ``pads`` ((front, back), (top, bottom), (left, right)), giving an ``out_size``
    output (depth, height, width): ``transposed`` in 3-D, which the public function and the
    ONNX importer reduce to. Depth tap dz sends input depth d to output depth
    d * stride + dz * dilation - front; each tap is one transposed 2-D convolution of all
    depth slices (folded into the batch).

    >>> y = transposed3d(x, w, None, (2, 2, 2), ((1, 1),) * 3, (16, 16, 16), (1, 1, 1), 1)
    """
    _check_transpose3d(op, x, w, groups)
    n, c, depth = x.shape[:3]
    planes = reshape(transpose(x, (0, 2, 1, 3, 4)), (n * depth, c, *x.shape[3:]))
    total = None
    for dz in range(w.shape[2]):
        y = transposed(planes, subscript(w, (slice(None), slice(None), dz)), None, stride[1:],
                       pads[1:], out_size[1:], dilation[1:], groups, op)
        y = _spread_depth(reshape(y, (n, depth, *y.shape[1:])), stride[0])
        y = _depth_window(y, pads[0][0] - dz * dilation[0], out_size[0])
        total = y if total is None else add(total, y)
    y = transpose(total, (0, 2, 1, 3, 4))
    if bias is None:
        return y
    bias = _bias_vector(op, [x, w, bias], bias, y.shape[1], 5)
    return add(y, reshape(bias, (1, y.shape[1], 1, 1, 1)))


def conv_transpose3d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """Transposed 3-D convolution (the data gradient of conv3d) of an (N, C_in, D, H, W) input
    by a (C_in, C_out/groups, kd, kh, kw) weight; bias (C_out,). Each output side is
    (n - 1) * stride - 2 * padding + dilation * (k - 1) + 1 + output_padding.

    >>> y = F.conv_transpose3d(x, w, stride=2)   # x: (1, 8, 4, 4, 4), w: (8, 4, 2, 2, 2)
    """
    op = "conv_transpose3d"
    check_conv_modes(op, conv_mode, compute_mode)
    x, w, *rest = gemm_operands(inp, weight, bias)
    inputs = [x, w, *rest]
    groups = _ints(op, inputs, "groups", groups, 1, 1)[0]
    _check_transpose3d(op, x, w, groups)
    stride = _ints(op, inputs, "stride", stride, 3, 1)
    padding = _ints(op, inputs, "padding", padding, 3, 0)
    output_padding = _ints(op, inputs, "output_padding", output_padding, 3, 0)
    dilation = _ints(op, inputs, "dilation", dilation, 3, 1)
    out_size = _out_hw(op, inputs, x, w, stride, padding, output_padding, dilation)
    return transposed3d(x, w, rest[0] if rest else None, stride,
                        tuple((p, p) for p in padding), out_size, dilation, groups)
