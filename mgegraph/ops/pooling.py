"""Pooling functions made of other ops (no kernel of their own): Lp pooling, global pooling, and
the 1-D forms of max, average and Lp pooling (2-D pooling on a unit height).

Design: an Lp pool is the window sum of |x|^p, then its p-th root. The window sum is
avg_pool2d's "average" (padding counts) times the window's cell count; a ceil-mode window past
the padding would divide by fewer cells, so that overhang is padded with zeros first and every
window is whole. ONNX's LpPool sums this way (padding adds zeros); PyTorch's lp_pool2d raises x
(not |x|) to p and scales an overhanging window's mean by the whole window: the two agree on
every input where x >= 0 or p is even, and on every window that does not overhang.
"""
from __future__ import annotations

import math
import numbers

from ..ir.errors import OpError, user_location
from ..ir.types import TensorType
from .builder import apply
from .conv import (
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool2d,
    max_pool2d,
    window_attrs,
    window_geometry,
)
from .elementwise import abs as elementwise_abs
from .elementwise import mul, sqrt, square
from .elementwise import pow as elementwise_pow
from .movement_api import pad, reshape
from .registry import named

__all__ = ["avg_pool1d", "global_avg_pool2d", "global_max_pool2d", "lp_pool1d", "lp_pool2d",
           "max_pool1d", "max_unpool2d"]


def _fail(op: str, inp, reason: str):
    raise OpError(op, [inp.type], reason, user_location())


def _norm(op, inp, norm_type) -> float:
    if (isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real)
            or not math.isfinite(norm_type) or norm_type <= 0):
        _fail(op, inp, f"norm_type must be a finite number > 0, got {norm_type!r}")
    return float(norm_type)


def _power(x, p):
    # |x|^p, exact for the common norms (and x^2 needs no abs)
    if p == 2:
        return square(x)
    return elementwise_abs(x) if p == 1 else elementwise_pow(elementwise_abs(x), p)


def _root(s, p):
    if p == 2:
        return sqrt(s)
    return s if p == 1 else elementwise_pow(s, 1.0 / p)


def lp_pool2d(inp, norm_type, kernel_size, stride=None, ceil_mode=False, *, padding=0,
              dilation=1):
    """The p-norm of each sliding window: (sum of |x|^p over the window's cells)^(1/p), with
    p = ``norm_type``; padding adds nothing. PyTorch's argument order.

    >>> y = F.lp_pool2d(x, 2, 3, stride=2)   # (N, C, 9, 9) -> (N, C, 4, 4)
    """
    p = _norm("lp_pool2d", inp, norm_type)
    attrs = window_attrs(kernel_size, stride, padding, dilation, ceil_mode)
    powered = _power(inp, p)
    if attrs["ceil_mode"]:
        powered, attrs = _whole_windows(powered, attrs)
    kh, kw = attrs["kernel_size"]
    means = avg_pool2d(powered, (kh, kw), attrs["stride"], _padding_of(attrs), "average",
                       dilation=attrs["dilation"], ceil_mode=attrs["ceil_mode"])
    return _root(mul(means, float(kh * kw)), p)


def _padding_of(attrs):
    begin, end = attrs["padding"], attrs["padding_end"]
    return begin if end is None else tuple(zip(begin, end))


def _whole_windows(x, attrs):
    """x padded with zeros at the end so that every ceil-mode window lies in the input or its
    padding, and the attributes that give the same windows over it without ceil_mode."""
    geo = window_geometry(TensorType(x.shape, x.dtype), attrs)
    extra = []
    for i in range(2):
        span = geo.dilation[i] * (geo.kernel[i] - 1) + 1
        covered = x.shape[2 + i] + geo.padding[i] + geo.padding_end[i]
        extra.append(max((geo.out[i] - 1) * geo.stride[i] + span - covered, 0))
    if any(extra):
        x = pad(x, ((0, 0), (0, 0), (0, extra[0]), (0, extra[1])))
    return x, {**attrs, "ceil_mode": False}


def global_avg_pool2d(inp):
    """The mean of each plane, as (N, C, 1, 1): ONNX's GlobalAveragePool.

    >>> y = F.global_avg_pool2d(x)   # (N, C, 7, 7) -> (N, C, 1, 1)
    """
    return adaptive_avg_pool2d(inp, (1, 1))


def global_max_pool2d(inp):
    """The maximum of each plane, as (N, C, 1, 1): ONNX's GlobalMaxPool.

    >>> y = F.global_max_pool2d(x)
    """
    return adaptive_max_pool2d(inp, (1, 1))


# -- 1-D: (N, C, L) pooled as (N, C, 1, L) ---------------------------------------------------------
def _one(op, inp, name, value, minimum):
    """An int, or a sequence of one int (for ``padding``, also a (begin, end) pair)."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        _fail(op, inp, f"{name} must be an int >= {minimum} (1-D pooling), got {value!r}")
    return int(value)


def _as_2d(op, inp, kernel_size, stride, padding, dilation):
    """The 4-D view of a 1-D input and the 2-D window arguments of its pooling."""
    if inp.ndim != 3:
        _fail(op, inp, f"input must be 3-D (N, C, L), got shape {inp.shape}")
    k = _one(op, inp, "kernel_size", kernel_size, 1)
    s = k if stride is None else _one(op, inp, "stride", stride, 1)
    if isinstance(padding, (tuple, list)) and len(padding) == 2:
        ends = tuple(_one(op, inp, "padding", v, 0) for v in padding)
    else:
        ends = (_one(op, inp, "padding", padding, 0),) * 2
    x = reshape(inp, (inp.shape[0], inp.shape[1], 1, inp.shape[2]))
    return x, (1, k), (1, s), ((0, 0), ends), (1, _one(op, inp, "dilation", dilation, 1))


def _as_1d(y):
    return reshape(y, (y.shape[0], y.shape[1], y.shape[3]))


def max_pool1d(inp, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """max_pool2d over the last axis of an (N, C, L) input; ``padding`` an int or a
    (begin, end) pair.

    >>> y = F.max_pool1d(x, 3, 2, 1)   # (N, C, 9) -> (N, C, 5)
    """
    x, k, s, p, d = _as_2d("max_pool1d", inp, kernel_size, stride, padding, dilation)
    return _as_1d(max_pool2d(x, k, s, p, d, ceil_mode))


def avg_pool1d(inp, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding",
               *, ceil_mode=False, count_include_pad=None):
    """avg_pool2d over the last axis of an (N, C, L) input, with avg_pool2d's ``mode`` (and
    PyTorch's ``count_include_pad``, whose default there counts padding: pass it to match).

    >>> y = F.avg_pool1d(x, 3, 1, 1, count_include_pad=True)
    """
    x, k, s, p, _ = _as_2d("avg_pool1d", inp, kernel_size, stride, padding, 1)
    return _as_1d(avg_pool2d(x, k, s, p, mode, ceil_mode=ceil_mode,
                             count_include_pad=count_include_pad))


def lp_pool1d(inp, norm_type, kernel_size, stride=None, ceil_mode=False, *, padding=0,
              dilation=1):
    """lp_pool2d over the last axis of an (N, C, L) input.

    >>> y = F.lp_pool1d(x, 2, 3)
    """
    x, k, s, p, d = _as_2d("lp_pool1d", inp, kernel_size, stride, padding, dilation)
    return _as_1d(lp_pool2d(x, norm_type, k, s, ceil_mode, padding=p, dilation=d))


# -- max_unpool2d: each value put back at the cell its index names --------------------------------
def max_unpool2d(inp, indices, kernel_size, stride=None, padding=0, output_size=None):
    """PyTorch's max_unpool2d: zeros of the pooled input's size, with each value of ``inp`` at
    the cell of its plane that ``indices`` names (h * W + w, as max_pool2d's return_indices
    gives them); an index outside the plane is a KernelError when the plan runs.

    Design: overlapping windows are refused: two of them may name one cell, where PyTorch keeps
    an arbitrary one of their values. Indices that repeat otherwise (not from a pooling) add up.

    >>> y, where = F.max_pool2d(x, 2, return_indices=True)
    >>> x2 = F.max_unpool2d(y, where, 2)   # x's shape, zeros but at each window's maximum
    """
    attrs = window_attrs(kernel_size, stride, padding, 1, False)
    hw = _unpooled_size(inp, indices, attrs, output_size)
    n, c, oh, ow = inp.shape
    flat = (n, c, oh * ow)
    where = reshape(indices, flat)
    out = apply("scatter_add", (reshape(inp, flat), where), axis=2, shape=(n, c, hw[0] * hw[1]))
    return reshape(out, (n, c, *hw))


def _unpooled_size(inp, indices, attrs, output_size) -> tuple:
    """The unpooled image size: PyTorch's default, or ``output_size`` ((H, W) or the whole
    shape) within one stride of it."""
    if inp.ndim != 4 or indices.shape != inp.shape:
        _fail("max_unpool2d", inp, f"input must be 4-D (N, C, H, W) with indices of its shape, "
              f"got {inp.shape} and indices {indices.shape}")
    if indices.dtype.kind not in "iu":
        _fail("max_unpool2d", inp, f"indices must be integers, got {indices.dtype}")
    kernel, stride, padding = (_ints(inp, name, attrs[name], low) for name, low in
                               (("kernel_size", 1), ("stride", 1), ("padding", 0)))
    if attrs["padding_end"] is not None:
        _fail("max_unpool2d", inp, f"padding must be an int or a pair, got {padding!r}")
    if stride[0] < kernel[0] or stride[1] < kernel[1]:
        _fail("max_unpool2d", inp, f"windows {kernel} at stride {stride} overlap, so two may "
              "name one cell, whose value PyTorch picks arbitrarily: refused")
    default = tuple((inp.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + kernel[i]
                    for i in range(2))
    if output_size is None:
        return default
    size = tuple(output_size)[-2:]
    for i in range(2):
        low, high = default[i] - stride[i], default[i] + stride[i]
        if named(size[i], default[i]) or not low < size[i] < high:
            _fail("max_unpool2d", inp, f"output_size {tuple(output_size)} must be within a "
                  f"stride {stride} of {default} per axis")
    return size


def _ints(inp, name, values, low) -> tuple:
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in values):
        _fail("max_unpool2d", inp, f"{name} must be an int >= {low} or a pair, got {values!r}")
    return values
