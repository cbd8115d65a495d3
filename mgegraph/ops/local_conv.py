"""Two convolutions over NCHW images that plain conv2d cannot say: MegEngine's ``local_conv2d``
(a locally connected layer: every output cell has its own weights) and
``region_restricted_conv`` (a grouped convolution whose taps count only where the input cell
and the output cell lie in the same region), each with one backward op giving the input's and
the weight's gradients.

With G groups of ICg input and OCg output channels, the window of output cell (oh, ow) reads
ih = oh * stride_h - pad_h + kh * dilation_h (iw likewise), zeros outside the image:

    local_conv2d:
        y[n, g OCg + o, oh, ow] = sum_{i, kh, kw} x[n, g ICg + i, ih, iw]
                                  * w[g, oh, ow, i, kh, kw, o]
    region_restricted_conv:
        y[n, g OCg + o, oh, ow] = sum_{i, kh, kw} x[n, g ICg + i, ih, iw] * w[g, o, i, kh, kw]
                                  * [rin[n, ih, iw] == rout[n, oh, ow]]

The weights are MegEngine's layouts: GroupLocal's (G, OH, OW, ICg, KH, KW, OCg) and the grouped
(G, OCg, ICg, KH, KW) of RegionRestrictedConvolution; the region ids rin (N, H, W) and rout
(N, OH, OW) are int32 (the public function casts MegEngine's uint8 ids). The ids get no
gradient.

Design: one kernel walks both (kernel_abi/local_conv.py): the two weights differ only in the
strides of their axes (the local one has a stride per output cell, the shared one none) and in
the region test, so the loops and their order are written once per device. The family lives
in: ops/local_conv.py (meaning and the public functions), nn/local_conv.py (``LocalConv2d``,
``RegionRestrictedConv``), kernel_abi/local_conv.py, _kernels/local_conv.pyx and
_kernels/lowering/local_conv.py (CPU), csrc_cuda/local_conv.cu and cuda/kernels/local_conv.py
(CUDA). ONNX has neither op: the exporter refuses them by name.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.types import TensorType
from .autocast import gemm_operands
from .builder import apply, apply_multi, cast_to, graph_of
from .conv import _as_pair
from .matmul import same_dtype
from .movement_api import reshape
from .registry import FLOAT_DTYPES, OpDef, int_pair, named, register, require_dtypes, same_shape

_WINDOW = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
REGION_DTYPES = (np.dtype(np.int32),)


def window(x, kernel, attrs) -> tuple[int, int]:
    """The output cells (OH, OW) of a ``kernel`` window over image ``x``."""
    stride, padding = int_pair(attrs, "stride", 1), int_pair(attrs, "padding", 0)
    dilation = int_pair(attrs, "dilation", 1)
    out = tuple((x.shape[2 + a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1)
                // stride[a] + 1 for a in range(2))
    if min(out) < 1:
        raise ValueError(f"output size would be {out[0]}x{out[1]}: the {x.shape[2]}x"
                         f"{x.shape[3]} input (padding {padding}) is smaller than the "
                         f"{kernel[0]}x{kernel[1]} window (dilation {dilation})")
    return out


def _image(name, x):
    require_dtypes(name, x, FLOAT_DTYPES)
    if x.ndim != 4:
        raise ValueError(f"input must be 4-D (N, C, H, W), got shape {x.shape}")
    if named(*x.shape[1:]):
        raise ValueError(f"input {x.shape}: {name} needs its channels and sides as numbers")


def _groups_of(x, w, groups, in_per_group, layout):
    if groups * in_per_group != x.shape[1]:
        raise ValueError(f"weight {w.shape} ({layout}) has {groups} group(s) of "
                         f"{in_per_group} input channels, the input {x.shape} has "
                         f"{x.shape[1]} channels")


# -- local_conv2d -----------------------------------------------------------------------------
LOCAL_LAYOUT = "G, OH, OW, ICg, KH, KW, OCg"


def _local_out(name, in_types, attrs):
    x, w = in_types[:2]
    same_dtype(in_types[:2])
    _image(name, x)
    if w.ndim != 7 or named(*w.shape):
        raise ValueError(f"weight must be 7-D ({LOCAL_LAYOUT}) of numbers, got {w.shape}")
    groups, oh, ow, icg, kh, kw, ocg = w.shape
    _groups_of(x, w, groups, icg, LOCAL_LAYOUT)
    cells = window(x, (kh, kw), attrs)
    if cells != (oh, ow):
        raise ValueError(f"weight {w.shape} holds {oh}x{ow} output cells, the {kh}x{kw} "
                         f"window over the input {x.shape} gives {cells[0]}x{cells[1]}")
    return TensorType((x.shape[0], groups * ocg, oh, ow), x.dtype)


def _local_infer(in_types, attrs):
    return (_local_out("local_conv2d", in_types, attrs),)


def _local_backward_infer(in_types, attrs):
    # (x, w, dy) -> (dx, dw)
    y = _local_out("local_conv2d_backward", in_types, attrs)
    _gradient_like(in_types[2], y, "local_conv2d")
    return tuple(in_types[:2])


def _gradient_like(dy, y, op):
    if not same_shape(dy.shape, y.shape, f"{op}'s output gradient") or dy.dtype != y.dtype:
        raise ValueError(f"output gradient is {dy}, {op} gives {y}")


def _local_grad(node, out_grads):
    return apply_multi("local_conv2d_backward", (*node.inputs, out_grads[0]), **node.attr)


# -- region_restricted_conv -------------------------------------------------------------------
REGION_LAYOUT = "G, OCg, ICg, KH, KW"


def _region_out(name, in_types, attrs):
    x, w, rin, rout = in_types[:4]
    same_dtype(in_types[:2])
    _image(name, x)
    if w.ndim != 5 or named(*w.shape):
        raise ValueError(f"weight must be 5-D ({REGION_LAYOUT}) of numbers, got {w.shape}")
    groups, ocg, icg, kh, kw = w.shape
    _groups_of(x, w, groups, icg, REGION_LAYOUT)
    oh, ow = window(x, (kh, kw), attrs)
    for ids, what, want in ((rin, "rin", (x.shape[0], *x.shape[2:])),
                            (rout, "rout", (x.shape[0], oh, ow))):
        require_dtypes(name, ids, REGION_DTYPES, what)
        if not same_shape(ids.shape, want, f"{name}'s {what}"):
            raise ValueError(f"{what} must be {want} (a region id per "
                             f"{'input' if what == 'rin' else 'output'} cell), got {ids.shape}")
    return TensorType((x.shape[0], groups * ocg, oh, ow), x.dtype)


def _region_infer(in_types, attrs):
    return (_region_out("region_restricted_conv", in_types, attrs),)


def _region_backward_infer(in_types, attrs):
    # (x, w, rin, rout, dy) -> (dx, dw)
    y = _region_out("region_restricted_conv_backward", in_types, attrs)
    _gradient_like(in_types[4], y, "region_restricted_conv")
    return tuple(in_types[:2])


def _region_grad(node, out_grads):
    dx, dw = apply_multi("region_restricted_conv_backward", (*node.inputs, out_grads[0]),
                         **node.attr)
    return dx, dw, None, None


def _flops(per_term, out_of):
    # two per (output, tap of its group's input channels); the backward twice that
    def flops(node) -> float:
        y, w = out_of(node), node.inputs[1]
        if named(y.shape[0]):
            return 0.0
        taps = math.prod(w.shape[3:6]) if w.ndim == 7 else math.prod(w.shape[2:])
        return per_term * y.size * taps
    return flops


register(OpDef("local_conv2d", "matmul", _local_infer, attrs=_WINDOW, grad=_local_grad,
               flops=_flops(2.0, lambda node: node.outputs[0])))
register(OpDef("local_conv2d_backward", "matmul", _local_backward_infer, attrs=_WINDOW,
               flops=_flops(4.0, lambda node: node.inputs[2])))
register(OpDef("region_restricted_conv", "matmul", _region_infer, attrs=_WINDOW,
               grad=_region_grad, flops=_flops(2.0, lambda node: node.outputs[0])))
register(OpDef("region_restricted_conv_backward", "matmul", _region_backward_infer,
               attrs=_WINDOW, flops=_flops(4.0, lambda node: node.inputs[4])))


# -- the public functions (MegEngine's F.local_conv2d, F.region_restricted_conv) --------------
def _refuse(op, values, reason):
    raise OpError(op, [v.type for v in values], reason, user_location())


def _modes(op, values, conv_mode, compute_mode="default"):
    mode = getattr(conv_mode, "name", conv_mode)  # MegEngine's enum member or its name
    if not isinstance(mode, str) or mode.lower() != "cross_correlation":
        _refuse(op, values, f"supports conv_mode='cross_correlation' only, got {conv_mode!r}")
    if compute_mode not in ("default", "float32"):  # sums are in double either way
        _refuse(op, values, f"compute_mode must be 'default' or 'float32', got "
                            f"{compute_mode!r}")


def _window_attrs(stride, padding, dilation) -> dict:
    return {"stride": _as_pair(stride), "padding": _as_pair(padding),
            "dilation": _as_pair(dilation)}


def _with_bias(y, bias):
    return y if bias is None else y + bias


def local_conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1,
                 conv_mode="cross_correlation"):
    """MegEngine's locally connected convolution: each output cell (oh, ow) has its own
    weights, (OH, OW, IC, KH, KW, OC) or grouped (G, OH, OW, IC/G, KH, KW, OC/G); ``bias`` is
    added to the result.

    >>> y = F.local_conv2d(x, w, padding=1)   # x: (2, 4, 10, 10), w: (10, 10, 4, 3, 3, 8)
    """
    x, w = gemm_operands(inp, weight)
    _modes("local_conv2d", (x, w), conv_mode)
    if w.ndim == 6:  # MegEngine's ungrouped layout: one group
        w = reshape(w, (1, *w.shape))
    y = apply("local_conv2d", (x, w), **_window_attrs(stride, padding, dilation))
    return _with_bias(y, bias)


def _region_ids(values, rin, rout):
    g = graph_of(*values)
    rin, rout = g.lift(rin), g.lift(rout)
    allowed = (np.dtype(np.int32), np.dtype(np.uint8))
    if rin.dtype != rout.dtype or rin.dtype not in allowed:
        _refuse("region_restricted_conv", (*values, rin, rout),
                f"rin and rout must both be int32 or both uint8, got {rin.dtype} and "
                f"{rout.dtype}")
    return cast_to(rin, np.int32), cast_to(rout, np.int32)


def region_restricted_conv(inp, weight, rin, rout, bias=None, stride=1, padding=0, dilation=1,
                           groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """MegEngine's region-restricted convolution: a grouped convolution, weight (groups,
    OC/groups, IC/groups, KH, KW), where input cell (ih, iw) reaches output cell (oh, ow) only
    when ``rin[n, ih, iw] == rout[n, oh, ow]`` (ids int32 or uint8, both alike).

    >>> y = F.region_restricted_conv(x, w, rin, rout, groups=2)  # x (1, 2, 2, 2), w (2, 1, 1, 2, 2)
    """
    x, w = gemm_operands(inp, weight)
    _modes("region_restricted_conv", (x, w), conv_mode, compute_mode)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 \
            or w.ndim != 5 or w.shape[0] != groups:
        _refuse("region_restricted_conv", (x, w), f"groups={groups!r} must be a positive int "
                f"equal to the weight's first axis ({REGION_LAYOUT}), weight {tuple(w.shape)}")
    ids = _region_ids((x, w), rin, rout)
    y = apply("region_restricted_conv", (x, w, *ids), **_window_attrs(stride, padding, dilation))
    return _with_bias(y, bias)


__all__ = ["local_conv2d", "region_restricted_conv"]
