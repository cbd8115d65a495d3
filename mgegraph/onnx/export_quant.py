"""(export) The int8 compute ops as QDQ: each quantized input behind a DequantizeLinear, the
float op, a Relu where ``relu`` is set, and a QuantizeLinear to the result's parameters.

The int32 bias is a DequantizeLinear of its integers with the accumulator's scales
``sx * sw[o]`` (zero point 0), as ONNX Runtime's ``quantize_static`` writes it; so ONNX Runtime
fuses each group into its QLinearConv (or QLinear/integer kernels) and mgegraph's importer folds
it back into the same int8 op (planner/passes/qdq.py). An int32 result (the accumulator
itself) has no QuantizeLinear form at the opsets written and is refused.
"""
from __future__ import annotations

import numpy as np

from ..ops.quantized import accumulator_scales
from . import OnnxExportError


def _quant_inputs(w, quant, dtype) -> list[str]:
    """The scale and zero point initializers of ``quant`` (1-D per axis, scalars per tensor)."""
    shape = (len(quant.scales),) if quant.per_channel else ()
    scale = np.asarray(quant.scales, np.float32).reshape(shape)
    zero_point = np.asarray(quant.zero_points, dtype).reshape(shape)
    return [w.const(scale, "scale"), w.const(zero_point, "zero_point")]


def _dequantized(w, var, name: str) -> str:
    quant = var.type.quant
    axis = {"axis": quant.axis} if quant.per_channel else {}
    return w.add("DequantizeLinear", [name, *_quant_inputs(w, quant, var.dtype)], **axis)[0]


def _bias(w, n, ins, activation: int = 0, weight: int = 1) -> list[str]:
    """The int32 bias dequantized with the accumulator's scales (its integers as they are):
    those of input ``activation`` times input ``weight``."""
    if len(ins) < 3:
        return []
    scales = accumulator_scales(n.inputs[activation].type.quant, n.inputs[weight].type.quant)
    scale = np.asarray(scales, np.float32)
    zero_point = np.zeros(scale.shape, np.int32)
    if len(scales) == 1:
        scale, zero_point = scale.reshape(()), zero_point.reshape(())
    axis = {"axis": 0} if len(scales) > 1 else {}
    return w.add("DequantizeLinear", [ins[2], w.const(scale, "scale"),
                                      w.const(zero_point, "zero_point")], **axis)


def _requantized(w, n, out: str) -> list[str]:
    attrs = n.attr
    if attrs["out_dtype"] == "int32":
        raise OnnxExportError(f"{n.op.name} with an int32 result (the accumulator) has no QDQ "
                              "form: QuantizeLinear gives int8 or uint8 at the opsets written")
    if attrs["relu"]:
        out = w.add("Relu", [out])[0]
    y = n.outputs[0]
    return w.add("QuantizeLinear", [out, *_quant_inputs(w, y.type.quant, y.dtype)])


def _conv(w, n, ins):
    x, wt = (_dequantized(w, v, name) for v, name in zip(n.inputs[:2], ins[:2]))
    ph, pw = n.attr["padding"]
    out = w.add("Conv", [x, wt, *_bias(w, n, ins)], strides=list(n.attr["stride"]),
                pads=[ph, pw, ph, pw], dilations=list(n.attr["dilation"]),
                group=int(n.attr["groups"]), kernel_shape=list(n.inputs[1].shape[2:]))
    return _requantized(w, n, out[0])


def _conv_transpose(w, n, ins):
    x, wt = (_dequantized(w, v, name) for v, name in zip(n.inputs[:2], ins[:2]))
    ph, pw = n.attr["padding"]
    out = w.add("ConvTranspose", [x, wt, *_bias(w, n, ins)], strides=list(n.attr["stride"]),
                pads=[ph, pw, ph, pw], dilations=list(n.attr["dilation"]),
                output_padding=list(n.attr["output_padding"]), group=int(n.attr["groups"]),
                kernel_shape=list(n.inputs[1].shape[2:]))
    return _requantized(w, n, out[0])


def _batch_matmul(w, n, ins):
    """MatMul (which broadcasts a batch of 1), then the bias per row: a (rows, 1) column."""
    a, b = (_dequantized(w, v, name) for v, name in zip(n.inputs[:2], ins[:2]))
    out = w.add("MatMul", [a, b])[0]
    bias = _bias(w, n, ins, activation=1, weight=0)
    if bias:
        out = w.add("Add", [out, w.add("Reshape", [bias[0], w.ints([-1, 1])])[0]])[0]
    return _requantized(w, n, out)


def _linear(w, n, ins):
    x, wt = (_dequantized(w, v, name) for v, name in zip(n.inputs[:2], ins[:2]))
    bias = _bias(w, n, ins)
    if n.inputs[0].ndim == 2:
        out = w.add("Gemm", [x, wt, *bias], transB=1)
    else:
        out = w.add("MatMul", [x, w.add("Transpose", [wt], perm=[1, 0])[0]])
        if bias:
            out = w.add("Add", [out[0], bias[0]])
    return _requantized(w, n, out[0])


def _add(w, n, ins):
    a, b = (_dequantized(w, v, name) for v, name in zip(n.inputs, ins))
    return _requantized(w, n, w.add("Add", [a, b])[0])


WRITERS = {"quantized_conv2d": _conv, "quantized_linear": _linear, "quantized_add": _add,
           "quantized_conv_transpose2d": _conv_transpose,
           "quantized_batch_matmul": _batch_matmul}
