"""The int8 compute ops' parameter blocks (mgegraph/ops/quantized.py), read by
_kernels/quantized.pyx.

quantized_conv2d and quantized_linear share one block: a linear layer over x (..., in) with w
(out, in) is the 1x1 convolution of x as (rows, in, 1, 1), whose output (rows, out, 1, 1) has
the linear output's memory order. The floats are each output channel's requantisation
multiplier (ONNX Runtime's float32 ``float32(sx) * float32(sw[o]) / float32(sy)``, passed as
the double holding that float32 exactly), then each one's weight zero point.
quantized_conv_transpose2d reads the convolution's block: the sizes are its input's and output's
(the output padding is in out_h and out_w), the floats the same per output channel.
quantized_batch_matmul has its own block (QBMM_FIELDS): a (batch or 1, rows, depth) times b
(batch or 1, depth, cols), whether each operand has a batch, a's code, b's zero point; its
floats are each row's multiplier, then each row's zero point of a; its kernel is named by b's
dtype (the activation's, as the convolution's by x's).
quantized_add's block goes on after its fields with the collapsed output shape and the two
inputs' element strides, then b's dtype code; its floats are the two multipliers.
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import Launch
from ..ops.quantized import STORAGE_RANGES
from .layout import broadcast_strides, collapse, contiguous_strides, one_thread, pack

FIELDS = {
    "QCONV_FIELDS": ("batch", "channels", "height", "width", "out_channels", "kernel_h",
                     "kernel_w", "out_h", "out_w", "stride_h", "stride_w", "pad_h", "pad_w",
                     "dilation_h", "dilation_w", "groups", "w_code", "out_code", "x_zero",
                     "out_zero", "low", "high", "has_bias", "threads"),
    "QBMM_FIELDS": ("batch", "rows", "depth", "cols", "a_batched", "b_batched", "a_code",
                    "out_code", "b_zero", "out_zero", "low", "high", "has_bias", "threads"),
    "QADD_FIELDS": ("a_zero", "b_zero", "out_zero", "low", "high", "out_code", "threads",
                    "ndim"),
}
CODES = {"int8": 0, "uint8": 1, "int32": 2}
EIGHT_BIT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def multipliers(x_scale: float, w_scales, out_scale: float, channels: int) -> tuple:
    """Each output channel's float32 requantisation multiplier, as doubles."""
    m = (np.float32(x_scale) * np.asarray(w_scales, np.float32)) / np.float32(out_scale)
    return tuple(float(v) for v in np.broadcast_to(m, (channels,)))


def _output_range(attrs) -> tuple[int, int]:
    low, high = STORAGE_RANGES[attrs["out_dtype"]]
    if attrs["relu"]:
        low = max(low, attrs["out_zero_point"])
    return low, high


def _requant_floats(node, channels: int, x, w) -> tuple:
    """Each output channel's multiplier, then its weight zero point: activation ``x``, weight
    ``w``."""
    attrs = node.attr
    zw = np.broadcast_to(np.asarray(w.type.quant.zero_points, np.float64), (channels,))
    if attrs["out_dtype"] == "int32":
        m = (1.0,) * channels  # unused: the accumulator is stored as it is
    else:
        m = multipliers(x.type.quant.scale, w.type.quant.scales, attrs["out_scale"], channels)
    return (*m, *map(float, zw))


def _conv_geometry(node) -> dict:
    x, w = node.inputs[:2]
    y = node.outputs[0]
    a = node.attr
    return {"batch": x.shape[0], "channels": x.shape[1], "height": x.shape[2],
            "width": x.shape[3], "out_channels": y.shape[1], "kernel_h": w.shape[-2],
            "kernel_w": w.shape[-1], "out_h": y.shape[2], "out_w": y.shape[3],
            "stride_h": a["stride"][0], "stride_w": a["stride"][1],
            "pad_h": a["padding"][0], "pad_w": a["padding"][1],
            "dilation_h": a["dilation"][0], "dilation_w": a["dilation"][1],
            "groups": a["groups"]}


def _conv_transpose_geometry(node) -> dict:
    x, w = node.inputs[:2]
    y = node.outputs[0]
    a = node.attr
    return {"batch": x.shape[0], "channels": x.shape[1], "height": x.shape[2],
            "width": x.shape[3], "out_channels": y.shape[1], "kernel_h": w.shape[2],
            "kernel_w": w.shape[3], "out_h": y.shape[2], "out_w": y.shape[3],
            "stride_h": a["stride"][0], "stride_w": a["stride"][1],
            "pad_h": a["padding"][0], "pad_w": a["padding"][1],
            "dilation_h": a["dilation"][0], "dilation_w": a["dilation"][1],
            "groups": a["groups"]}


def _batch_matmul_block(node, threads: int) -> Launch:
    a, b = node.inputs[:2]
    y = node.outputs[0]
    attrs = node.attr
    low, high = _output_range(attrs) if attrs["out_dtype"] != "int32" else (0, 0)
    ints = pack(FIELDS["QBMM_FIELDS"], batch=y.shape[0], rows=a.shape[1], depth=a.shape[2],
                cols=b.shape[2], a_batched=a.shape[0] != 1,
                b_batched=b.shape[0] != 1, a_code=CODES[a.dtype.name],
                out_code=CODES[attrs["out_dtype"]], b_zero=b.type.quant.zero_point,
                out_zero=attrs["out_zero_point"], low=low, high=high,
                has_bias=len(node.inputs) == 3, threads=threads)
    return Launch(ints, _requant_floats(node, a.shape[1], b, a))


def _linear_geometry(node) -> dict:
    x, w = node.inputs[:2]
    rows = math.prod(x.shape[:-1])
    return {"batch": rows, "channels": w.shape[1], "height": 1, "width": 1,
            "out_channels": w.shape[0], "kernel_h": 1, "kernel_w": 1, "out_h": 1, "out_w": 1,
            "stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0, "dilation_h": 1,
            "dilation_w": 1, "groups": 1}


def _conv_block(node, geometry: dict, threads: int) -> Launch:
    x, w = node.inputs[:2]
    attrs = node.attr
    low, high = _output_range(attrs) if attrs["out_dtype"] != "int32" else (0, 0)
    ints = pack(FIELDS["QCONV_FIELDS"], **geometry, w_code=CODES[w.dtype.name],
                out_code=CODES[attrs["out_dtype"]], x_zero=x.type.quant.zero_point,
                out_zero=attrs["out_zero_point"], low=low, high=high,
                has_bias=len(node.inputs) == 3, threads=threads)
    return Launch(ints, _requant_floats(node, geometry["out_channels"], x, w))


def _add_block(node, threads: int) -> Launch:
    a, b = node.inputs
    y = node.outputs[0]
    attrs = node.attr
    shape, (_, sa, sb) = collapse(y.shape, [contiguous_strides(y.shape),
                                            broadcast_strides(a.shape, y.shape),
                                            broadcast_strides(b.shape, y.shape)])
    low, high = _output_range(attrs)
    ints = pack(FIELDS["QADD_FIELDS"], a_zero=a.type.quant.zero_point,
                b_zero=b.type.quant.zero_point, out_zero=attrs["out_zero_point"], low=low,
                high=high, out_code=CODES[attrs["out_dtype"]], threads=threads,
                ndim=len(shape))
    sy = np.float32(attrs["out_scale"])
    ma = np.float32(a.type.quant.scale) / sy
    mb = np.float32(b.type.quant.scale) / sy
    return Launch((*ints, *shape, *sa, *sb, CODES[b.dtype.name]), (float(ma), float(mb)))


def implement(table, threads=one_thread) -> None:
    """Register the int8 compute ops on ``table``; ``threads(node)`` fills the threads field."""
    table.implement("quantized_conv2d", kernel="quantized_conv2d", dtypes=EIGHT_BIT_DTYPES,
                    lower=lambda node: _conv_block(node, _conv_geometry(node), threads(node)))
    table.implement("quantized_linear", kernel="quantized_conv2d", dtypes=EIGHT_BIT_DTYPES,
                    lower=lambda node: _conv_block(node, _linear_geometry(node), threads(node)))
    table.implement("quantized_conv_transpose2d", kernel="quantized_conv_transpose2d",
                    dtypes=EIGHT_BIT_DTYPES,
                    lower=lambda node: _conv_block(node, _conv_transpose_geometry(node),
                                                   threads(node)))
    table.implement("quantized_batch_matmul", kernel="quantized_batch_matmul",
                    dtypes=EIGHT_BIT_DTYPES, dispatch_input=1,
                    lower=lambda node: _batch_matmul_block(node, threads(node)))
    table.implement("quantized_add", kernel="quantized_add", dtypes=EIGHT_BIT_DTYPES,
                    lower=lambda node: _add_block(node, threads(node)))
