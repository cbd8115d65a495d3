"""Deformable sampling and correlation over NCHW images: ``deform_im2col`` (the columns of a
modulated deformable convolution, DCN v2), ``correlation`` (FlowNet's correlation layer, as
MegEngine defines it), and the backward ops their gradient rules are made of.

deform_im2col(x, offset, mask) gives, for each output cell p of a convolution window (kernel
KH x KW, stride, padding, dilation), the window's taps read at shifted points:

    cols[n, (c, i, j), p] = mask[n, (g, i, j), p] * x[n, c](y, x)
    y = p_h * stride_h - pad_h + i * dilation_h + offset[n, (g, i, j, 0), p]
    x = p_w * stride_w - pad_w + j * dilation_w + offset[n, (g, i, j, 1), p]

with g = c // (C / DG) the channel's deformable group (DG = offset channels / (2 KH KW)), x
read bilinearly with zeros outside the image (torchvision's deform_conv2d, MegEngine's
DeformableConv, ONNX's DeformConv), offsets in (dy, dx) pairs. The output is (N, C*KH*KW, OH,
OW), the taps (c, i, j) as channels.

Design: the public ``deformable_conv2d`` (functional/vision.py) is these columns times the
weight through the matmul op, as MegEngine's and torchvision's kernels are (im2col + GEMM);
so the GEMM is the tuned one and the weight's and columns' gradients are matmul's. Only the
sampling is a new kernel, whose backward gives the input's, the offsets' and the mask's
gradients in one pass (they share the four taps and weights of each point). The cost is the
column buffer, C*KH*KW*OH*OW elements per image.

correlation(data1, data2) compares each cell of data1 (strided by stride1, inside a border of
max_displacement + kernel radius r in the data padded by pad_size) with the cells of data2 at
displacements dy, dx = stride2 * (-G..G), G = max_displacement // stride2, summed over a
kernel_size x kernel_size patch and the channels, divided by their count (k*k*C):

    out[n, (dy, dx), oy, ox] = sum_{c, i, j} f(data1[n, c, y1 + i, x1 + j],
                                              data2[n, c, y1 + dy + i, x1 + dx + j]) / (k k C)
    y1 = oy * stride1 + r + max_displacement - pad_size (likewise x1), i, j in -r..r

f is the product (``is_multiply``) or the absolute difference; cells outside the data read 0.
The output has (2G + 1)^2 channels, dy the slower, and ceil((H + 2 pad_size - 2 border) /
stride1) rows (columns likewise), border = max_displacement + r. The absolute
difference's gradient at a tie is MegEngine's: -1 for data1, +1 for data2.

The family lives in: ops/deform.py (meaning), functional/vision.py (``deformable_conv2d``,
``correlation``), nn/conv.py (``DeformableConv2d``), kernel_abi/deform.py (parameter blocks),
_kernels/deform.pyx and _kernels/lowering/deform.py (CPU), csrc_cuda/deform.cu and
cuda/kernels/deform.py (CUDA), onnx/convert_vision.py and onnx/exporter.py (ONNX DeformConv).
The backward ops have no gradient of their own (no second derivative).
"""
from __future__ import annotations

import math

from ..ir.types import TensorType
from .builder import apply_multi
from .matmul import same_dtype
from .registry import (
    FLOAT_DTYPES,
    REQUIRED,
    OpDef,
    int_pair,
    named,
    register,
    require_dtypes,
    same_shape,
)

_WINDOW_ATTRS = {"kernel_size": REQUIRED, "stride": (1, 1), "padding": (0, 0),
                 "dilation": (1, 1)}
_CORRELATION_ATTRS = {"kernel_size": 1, "max_displacement": 1, "stride1": 1, "stride2": 1,
                      "pad_size": 0, "is_multiply": True}


def _int(attrs, key, minimum) -> int:
    value = attrs[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key} must be an int >= {minimum}, got {value!r}")
    return value


def _image(name, t, what):
    """A 4-D float image whose channels and sides are numbers (the batch may be named)."""
    require_dtypes(name, t, FLOAT_DTYPES, what)
    if t.ndim != 4:
        raise ValueError(f"{what} must be 4-D (N, C, H, W), got shape {t.shape}")
    if named(*t.shape[1:]):
        raise ValueError(f"{what} {t.shape}: {name} needs its channels and sides as numbers")


def _same_batch(a, b, what):
    if not same_shape(a.shape[:1], b.shape[:1], what):
        raise ValueError(f"{what} has batch {b.shape[0]}, the input {a.shape[0]}")


# -- deform_im2col --------------------------------------------------------------------------------
def window(x, attrs) -> tuple[int, int]:
    """The output cells (OH, OW) of the convolution window over input ``x``."""
    kernel, stride = int_pair(attrs, "kernel_size", 1), int_pair(attrs, "stride", 1)
    padding, dilation = int_pair(attrs, "padding", 0), int_pair(attrs, "dilation", 1)
    out = tuple((x.shape[2 + a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1)
                // stride[a] + 1 for a in range(2))
    if min(out) < 1:
        raise ValueError(f"output size would be {out[0]}x{out[1]}: the {x.shape[2]}x"
                         f"{x.shape[3]} input (padding {padding}) is smaller than the "
                         f"{kernel[0]}x{kernel[1]} window (dilation {dilation})")
    return out


def deformable_groups(x, offset, attrs) -> int:
    """DG, read from the offsets' channels (2 * DG * KH * KW), which must divide x's."""
    taps = math.prod(attrs["kernel_size"])
    groups, rest = divmod(offset.shape[1], 2 * taps)
    if rest or groups == 0 or x.shape[1] % groups:
        raise ValueError(f"offset has {offset.shape[1]} channels: it needs 2 * groups * "
                         f"{taps} (a (dy, dx) pair per tap of each deformable group), with the "
                         f"groups dividing the input's {x.shape[1]} channels")
    return groups


def _check_sampling(name, in_types, attrs):
    """The cols type of deform_im2col(x, offset, mask), every input checked."""
    x, offset, mask = in_types[:3]
    same_dtype(in_types)
    _image(name, x, "input")
    _image(name, offset, "offset")
    _image(name, mask, "mask")
    oh, ow = window(x, attrs)
    groups = deformable_groups(x, offset, attrs)
    taps = math.prod(attrs["kernel_size"])
    for t, what, channels in ((offset, "offset", 2 * groups * taps),
                              (mask, "mask", groups * taps)):
        _same_batch(x, t, what)
        if t.shape[1:] != (channels, oh, ow):
            raise ValueError(f"{what} must be (N, {channels}, {oh}, {ow}) for {groups} "
                             f"deformable group(s) of a {attrs['kernel_size']} window over "
                             f"the {x.shape} input, got {t.shape}")
    return TensorType((x.shape[0], x.shape[1] * taps, oh, ow), x.dtype)


def _im2col_infer(in_types, attrs):
    return (_check_sampling("deform_im2col", in_types, attrs),)


def _im2col_backward_infer(in_types, attrs):
    # (x, offset, mask, dcols) -> (dx, doffset, dmask)
    cols = _check_sampling("deform_im2col_backward", in_types, attrs)
    dcols = in_types[3]
    if not same_shape(dcols.shape, cols.shape, "deform_im2col's output gradient"):
        raise ValueError(f"output gradient has shape {dcols.shape}, deform_im2col gives "
                         f"{cols.shape}")
    return tuple(in_types[:3])


def _im2col_grad(node, out_grads):
    return apply_multi("deform_im2col_backward", (*node.inputs, out_grads[0]), **node.attr)


def _im2col_flops(per_entry):
    # per column entry (the forward's output, the backward's last input): four taps, a
    # multiply and an add each, and the mask's product; the backward three times that
    def flops(node) -> float:
        cols = node.outputs[0] if node.op.name == "deform_im2col" else node.inputs[3]
        return 0.0 if named(cols.shape[0]) else per_entry * cols.size
    return flops


register(OpDef("deform_im2col", "nn", _im2col_infer, attrs=_WINDOW_ATTRS, grad=_im2col_grad,
               flops=_im2col_flops(9.0)))
register(OpDef("deform_im2col_backward", "nn", _im2col_backward_infer, attrs=_WINDOW_ATTRS,
               flops=_im2col_flops(27.0)))


# -- correlation ----------------------------------------------------------------------------------
def correlation_geometry(attrs) -> tuple[int, int]:
    """(kernel radius, neighbourhood radius in stride2 steps), the attributes checked."""
    k = _int(attrs, "kernel_size", 1)
    if k % 2 == 0:
        raise ValueError(f"kernel_size must be odd (a patch centred on its cell), got {k}")
    _int(attrs, "max_displacement", 0)
    _int(attrs, "stride1", 1)
    _int(attrs, "stride2", 1)
    _int(attrs, "pad_size", 0)
    if not isinstance(attrs["is_multiply"], bool):
        raise TypeError(f"is_multiply must be a bool, got {attrs['is_multiply']!r}")
    return k // 2, attrs["max_displacement"] // attrs["stride2"]


def _correlation_out(name, in_types, attrs):
    a, b = in_types[:2]
    same_dtype(in_types)
    _image(name, a, "data1")
    _image(name, b, "data2")
    if not same_shape(a.shape, b.shape, "correlation's data2"):
        raise ValueError(f"data1 {a.shape} and data2 {b.shape} must have one shape")
    radius, grid = correlation_geometry(attrs)
    border = attrs["max_displacement"] + radius
    sides = tuple(-(-(a.shape[2 + i] + 2 * attrs["pad_size"] - 2 * border) // attrs["stride1"])
                  for i in range(2))
    if min(sides) < 1:
        raise ValueError(f"output size would be {sides[0]}x{sides[1]}: the {a.shape[2]}x"
                         f"{a.shape[3]} data padded by {attrs['pad_size']} has no cell "
                         f"{border} (max_displacement + kernel radius) inside its border")
    return TensorType((a.shape[0], (2 * grid + 1) ** 2, *sides), a.dtype)


def _correlation_infer(in_types, attrs):
    return (_correlation_out("correlation", in_types, attrs),)


def _correlation_backward_infer(in_types, attrs):
    # (data1, data2, dy) -> (d1, d2)
    out = _correlation_out("correlation_backward", in_types, attrs)
    if not same_shape(in_types[2].shape, out.shape, "correlation's output gradient"):
        raise ValueError(f"output gradient has shape {in_types[2].shape}, correlation gives "
                         f"{out.shape}")
    return tuple(in_types[:2])


def _correlation_grad(node, out_grads):
    return apply_multi("correlation_backward", (*node.inputs, out_grads[0]), **node.attr)


def _correlation_flops(per_term):
    # per output (the forward's, the backward's last input): a product and a sum per channel
    # and patch cell; the backward twice that
    def flops(node) -> float:
        y = node.outputs[0] if node.op.name == "correlation" else node.inputs[2]
        if named(y.shape[0]):
            return 0.0
        return per_term * y.size * node.inputs[0].shape[1] * node.attr["kernel_size"] ** 2
    return flops


register(OpDef("correlation", "nn", _correlation_infer, attrs=_CORRELATION_ATTRS,
               grad=_correlation_grad, flops=_correlation_flops(2.0)))
register(OpDef("correlation_backward", "nn", _correlation_backward_infer,
               attrs=_CORRELATION_ATTRS, flops=_correlation_flops(4.0)))
