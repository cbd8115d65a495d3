"""The parameter blocks of the int8 ops on packed weights (mgegraph/ops/quantized_pack.py), read
by _kernels/qgemm.pyx (the pack) and _kernels/quantized.pyx (the packed convolution).

quantized_pack_weight: the ints are QPACK_FIELDS (the weight's k values per output channel, the
input zero point shifted as the pack wants it: +128 for an int8 input); the floats are each
output channel's weight zero point. Buffers: w, the bias when there is one, the packed bytes.
quantized_conv2d_packed and quantized_linear_packed take quantized_conv2d's block
(kernel_abi/quantized.py; w_code and has_bias unused, the bias being in the pack), with the
multipliers as floats. Buffers: x, the packed bytes, the output.
quantized_pack_transposed_weight: the ints are QPACKT_FIELDS (C_in, C_out/groups, the taps kh *
kw, groups, the shifted input zero point); the floats each output channel's weight zero point.
Buffers: w, the packed bytes. quantized_conv_transpose2d_packed takes the transposed
convolution's block (w_code unused), the multipliers as floats; buffers x, the packed bytes,
the bias when there is one, the output. quantized_batch_matmul_packed runs on
quantized_conv2d_packed's kernel: b (batch, k, cols) is a batch of (k, 1, cols) images of a 1x1
convolution whose (batch, n, 1, cols) output is the result's memory.
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import Launch
from .layout import one_thread, pack
from .quantized import CODES, EIGHT_BIT_DTYPES, _output_range, multipliers
from .quantized import FIELDS as QUANTIZED_FIELDS

FIELDS = {"QPACK_FIELDS": ("out_channels", "k", "groups", "x_zero_shifted", "has_bias",
                           "threads"),
          "QPACKT_FIELDS": ("c_in", "out_per_group", "taps", "groups", "x_zero_shifted",
                            "threads")}


def _zero_shifted(attrs) -> int:
    return attrs["x_zero_point"] + (128 if attrs["x_dtype"] == "int8" else 0)


def _zero_points(w, count: int) -> tuple:
    return tuple(map(float, np.broadcast_to(np.asarray(w.type.quant.zero_points, np.float64),
                                            (count,))))


def _pack_block(node, threads: int) -> Launch:
    w = node.inputs[0]
    attrs = node.attr
    # a 3-D weight: a batched matmul's (1, n, k) a, its n rows along axis 1
    rows, k = (w.shape[1], w.shape[2]) if w.ndim == 3 else (w.shape[0], math.prod(w.shape[1:]))
    ints = pack(FIELDS["QPACK_FIELDS"], out_channels=rows, k=k, groups=attrs["groups"],
                x_zero_shifted=_zero_shifted(attrs), has_bias=len(node.inputs) == 2,
                threads=threads)
    return Launch(ints, _zero_points(w, rows))


def _pack_transposed_block(node, threads: int) -> Launch:
    w = node.inputs[0]
    attrs = node.attr
    c_in, per_group, kh, kw = w.shape
    ints = pack(FIELDS["QPACKT_FIELDS"], c_in=c_in, out_per_group=per_group, taps=kh * kw,
                groups=attrs["groups"], x_zero_shifted=_zero_shifted(attrs), threads=threads)
    return Launch(ints, _zero_points(w, attrs["groups"] * per_group))


def _geometry(node) -> dict:
    x, y = node.inputs[0], node.outputs[0]
    shape, a = node.attr["weight_shape"], node.attr
    if len(shape) == 3:  # a batched matmul: b's (k, cols) matrices the images of a 1x1 conv
        return {"batch": y.shape[0], "channels": shape[2], "height": 1, "width": y.shape[2],
                "out_channels": shape[1], "kernel_h": 1, "kernel_w": 1, "out_h": 1,
                "out_w": y.shape[2], "stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0,
                "dilation_h": 1, "dilation_w": 1, "groups": 1}
    if len(shape) == 2:  # a linear layer: the 1x1 convolution of its rows
        return {"batch": math.prod(x.shape[:-1]), "channels": shape[1], "height": 1,
                "width": 1, "out_channels": shape[0], "kernel_h": 1, "kernel_w": 1,
                "out_h": 1, "out_w": 1, "stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0,
                "dilation_h": 1, "dilation_w": 1, "groups": 1}
    # a convolution or a transposed one: the input's and the output's sizes (conv2d's output
    # channels are its weight's first dim, the transposed convolution's its second by groups)
    return {"batch": x.shape[0], "channels": x.shape[1], "height": x.shape[2],
            "width": x.shape[3], "out_channels": y.shape[1], "kernel_h": shape[2],
            "kernel_w": shape[3], "out_h": y.shape[2], "out_w": y.shape[3],
            "stride_h": a["stride"][0], "stride_w": a["stride"][1],
            "pad_h": a["padding"][0], "pad_w": a["padding"][1],
            "dilation_h": a["dilation"][0], "dilation_w": a["dilation"][1],
            "groups": a["groups"]}


def _packed_block(node, threads: int) -> Launch:
    x, attrs = node.inputs[0], node.attr
    geometry = _geometry(node)
    low, high = _output_range(attrs) if attrs["out_dtype"] != "int32" else (0, 0)
    ints = pack(QUANTIZED_FIELDS["QCONV_FIELDS"], **geometry, w_code=0,
                out_code=CODES[attrs["out_dtype"]], x_zero=x.type.quant.zero_point,
                out_zero=attrs["out_zero_point"], low=low, high=high,
                has_bias=len(node.inputs) == 3, threads=threads)
    channels = geometry["out_channels"]
    m = ((1.0,) * channels if attrs["out_dtype"] == "int32" else
         multipliers(x.type.quant.scale, attrs["weight_scales"], attrs["out_scale"], channels))
    return Launch(ints, m)


def implement(table, threads=one_thread) -> None:
    """Register the packed int8 ops on ``table``; ``threads(node)`` fills the threads field."""
    table.implement("quantized_pack_weight", kernel="quantized_pack_weight",
                    dtypes=EIGHT_BIT_DTYPES, lower=lambda node: _pack_block(node, threads(node)))
    for op in ("quantized_conv2d_packed", "quantized_linear_packed",
               "quantized_batch_matmul_packed"):
        table.implement(op, kernel="quantized_conv2d_packed", dtypes=EIGHT_BIT_DTYPES,
                        lower=lambda node: _packed_block(node, threads(node)))
    table.implement("quantized_pack_transposed_weight", kernel="quantized_pack_deconv_weight",
                    dtypes=EIGHT_BIT_DTYPES,
                    lower=lambda node: _pack_transposed_block(node, threads(node)))
    table.implement("quantized_conv_transpose2d_packed", kernel="quantized_deconv2d_packed",
                    dtypes=EIGHT_BIT_DTYPES, lower=lambda node: _packed_block(node, threads(node)))
