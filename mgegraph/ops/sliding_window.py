"""MegEngine's sliding windows over NCHW images: ``sliding_window`` (im2col in MegEngine's
layout, its ``Images2Neibs``) and ``sliding_window_transpose`` (col2im, its adjoint).

sliding_window(x) takes an (N, C, H, W) image to (N, C, OH, OW, WH, WW): for each output cell
(oh, ow) the window of taps (i, j) read with zeros outside the image,

    y[n, c, oh, ow, i, j] = x[n, c, oh * stride_h - pad_h + i * dilation_h,
                                    ow * stride_w - pad_w + j * dilation_w]

with OH = (H + 2 pad_h - dilation_h (WH - 1) - 1) // stride_h + 1 (OW likewise).
sliding_window_transpose(y, output_size=(H, W)) sums every tap back onto the cell it read,
dropping the taps that fell in the padding; so each is the other's gradient (adjoint linear
maps). PyTorch's ``unfold`` / ``fold`` are the same maps in the (N, C*WH*WW, OH*OW) layout.

Design: two ops, not compositions. sliding_window could be a pad and WH*WW strided slices
stacked, but that writes the padded image and WH*WW intermediates; its transpose would be as
many pad-backs added up. One loop each writes every output once (the transpose gathers the
taps that read a cell, in a fixed order, so results are the same bits on every thread count
and on CUDA). Kernels _kernels/sliding_window.pyx and csrc_cuda/sliding_window.cu, parameter
block kernel_abi/sliding_window.py; ONNX: the transpose is ONNX's Col2Im (opset 18), the
window a Pad and a Slice per tap (onnx/exporter.py).

>>> cols = F.sliding_window(x, (3, 3), padding=1)          # (N, C, H, W, 3, 3)
>>> x2 = F.sliding_window_transpose(cols, x.shape[2:], (3, 3), padding=1)
"""
from __future__ import annotations

import operator

from ..ir.errors import OpError, user_location
from ..ir.types import TensorType
from .builder import apply, graph_of
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, int_pair, named, register, require_dtypes

__all__ = ["sliding_window", "sliding_window_transpose"]

_WINDOW_ATTRS = {"kernel_size": REQUIRED, "padding": (0, 0), "stride": (1, 1),
                 "dilation": (1, 1)}
_MINIMUM = {"kernel_size": 1, "padding": 0, "stride": 1, "dilation": 1, "output_size": 1}


def _pair(attrs, key) -> tuple[int, int]:
    return int_pair(attrs, key, _MINIMUM[key])


def cells(image_hw, attrs) -> tuple[int, int]:
    """The window's output cells (OH, OW) over an image of sides ``image_hw``; a ValueError
    when the window does not fit once."""
    kernel, padding = _pair(attrs, "kernel_size"), _pair(attrs, "padding")
    stride, dilation = _pair(attrs, "stride"), _pair(attrs, "dilation")
    out = tuple((image_hw[a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1)
                // stride[a] + 1 for a in range(2))
    if min(out) < 1:
        raise ValueError(f"the {kernel[0]}x{kernel[1]} window (dilation {dilation}) does not "
                         f"fit the {image_hw[0]}x{image_hw[1]} image padded by {padding}")
    return out


def _window_infer(in_types, attrs):
    (x,) = in_types
    require_dtypes("sliding_window", x, FLOAT_DTYPES)
    if x.ndim != 4:
        raise ValueError(f"input must be 4-D (N, C, H, W), got shape {x.shape}")
    if named(*x.shape[2:]):
        raise ValueError(f"input {x.shape}: sliding_window needs the image's sides as numbers")
    oh, ow = cells(x.shape[2:], attrs)
    return (TensorType((*x.shape[:2], oh, ow, *attrs["kernel_size"]), x.dtype),)


def _transpose_infer(in_types, attrs):
    (y,) = in_types
    require_dtypes("sliding_window_transpose", y, FLOAT_DTYPES)
    out_hw = _pair(attrs, "output_size")
    if y.ndim != 6:
        raise ValueError(f"input must be 6-D (N, C, OH, OW, WH, WW), got shape {y.shape}")
    expected = (*cells(out_hw, attrs), *attrs["kernel_size"])
    if named(*y.shape[2:]) or tuple(y.shape[2:]) != expected:
        raise ValueError(f"input {y.shape} does not match output_size {out_hw}: its last four "
                         f"dims must be (OH, OW, WH, WW) = {expected}")
    return (TensorType((*y.shape[:2], *out_hw), y.dtype),)


def _window_attrs(node) -> dict:
    return {k: node.attr[k] for k in _WINDOW_ATTRS}


def _window_grad(node, out_grads):
    (x,), (g,) = node.inputs, out_grads
    return (apply("sliding_window_transpose", (g,), output_size=tuple(x.shape[2:]),
                  **_window_attrs(node)),)


def _transpose_grad(node, out_grads):
    return (apply("sliding_window", (out_grads[0],), **_window_attrs(node)),)


register(OpDef("sliding_window", "movement", _window_infer, attrs=_WINDOW_ATTRS,
               grad=_window_grad, flops_per_element=0.0))
register(OpDef("sliding_window_transpose", "movement", _transpose_infer,
               attrs={"output_size": REQUIRED, **_WINDOW_ATTRS}, grad=_transpose_grad,
               flops_per_element=1.0))


def _hw(op: str, x, key: str, value) -> tuple[int, int]:
    """MegEngine's ``expand_hw``: an int is both sides, else a pair of ints."""
    try:
        if hasattr(value, "__iter__"):
            pair = tuple(operator.index(v) for v in value)
        else:
            pair = (operator.index(value),) * 2
    except TypeError:
        pair = ()
    if len(pair) != 2:
        raise OpError(op, (x.type,), f"{key} must be an int or a pair of ints, got {value!r}",
                      user_location())
    return pair


def _attrs(op: str, x, kernel_size, padding, stride, dilation) -> dict:
    return {"kernel_size": _hw(op, x, "kernel_size", kernel_size),
            "padding": _hw(op, x, "padding", padding), "stride": _hw(op, x, "stride", stride),
            "dilation": _hw(op, x, "dilation", dilation)}


def sliding_window(inp, kernel_size, padding=0, stride=1, dilation=1):
    """The sliding windows of an (N, C, H, W) image as (N, C, OH, OW, WH, WW), zeros read
    outside it (MegEngine's ``F.sliding_window``; PyTorch's ``unfold`` in another layout).

    >>> cols = F.sliding_window(x, (3, 2), padding=(1, 0), stride=2)
    """
    x = graph_of(inp).lift(inp)
    attrs = _attrs("sliding_window", x, kernel_size, padding, stride, dilation)
    return apply("sliding_window", (x,), **attrs)


def sliding_window_transpose(inp, output_size, kernel_size, padding=0, stride=1, dilation=1):
    """The sum of (N, C, OH, OW, WH, WW) windows back onto an (N, C, *output_size) image, taps
    in the padding dropped: ``sliding_window``'s adjoint (MegEngine's
    ``F.sliding_window_transpose``; PyTorch's ``fold`` in another layout).

    >>> x = F.sliding_window_transpose(cols, (7, 8), (3, 2), padding=(1, 0), stride=2)
    """
    y = graph_of(inp).lift(inp)
    attrs = _attrs("sliding_window_transpose", y, kernel_size, padding, stride, dilation)
    out = _hw("sliding_window_transpose", y, "output_size", output_size)
    return apply("sliding_window_transpose", (y,), output_size=out, **attrs)
