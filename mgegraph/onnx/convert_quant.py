"""ONNX's QuantizeLinear and DequantizeLinear onto mgegraph's quantize and dequantize.

A QuantizeLinear's output is a quantized value (its type carries the scale and zero point); a
DequantizeLinear reads its input's integers with its own scale and zero point: an initializer
becomes a quantized constant (a QDQ model's int8 weights), a computed value keeps its bytes
(``as_quantized``, no copy) when its parameters differ. Scales and zero points must be known at
import; per-axis parameters are 1-D along ``axis``; blocked quantization (opset 21's
``block_size``) and the 4-bit, 16-bit and float8 types are refused.
"""
from __future__ import annotations

import numpy as np

from ..ir.quant import QUANT_STORAGE, QuantParams
from ..ops.quantize import as_quantized, dequantize, quantize
from .context import DTYPES

FLOAT32 = np.dtype(np.float32)
INT32 = np.dtype(np.int32)
# what an absent zero point leaves: QuantizeLinear's uint8 (unless output_dtype says), and
# DequantizeLinear's input type
DEFAULT_STORAGE = np.dtype(np.uint8)


def _params(cx, x_shape, scale, zero_point, at) -> QuantParams:
    """The quantization the node's scale and zero point give a value of ``x_shape``."""
    if int(at.get("block_size", 0)) != 0:
        cx.fail("blocked quantization (block_size) is not supported")
    scale = cx.known(scale, "scale")
    zp = None if zero_point is None else cx.known(zero_point, "zero point")
    if scale.dtype != FLOAT32:
        cx.fail(f"scale of {scale.dtype}: float32 scales are supported")
    if scale.ndim > 1 or (zp is not None and zp.shape != scale.shape):
        cx.fail(f"scale {list(scale.shape)} and zero point "
                f"{None if zp is None else list(zp.shape)}: a scalar or a 1-D list of each, "
                "of one shape")
    zps = np.zeros(scale.shape, np.int64) if zp is None else zp.astype(np.int64)
    if scale.size == 1:
        return QuantParams((float(scale.reshape(-1)[0]),), (int(zps.reshape(-1)[0]),))
    axis = cx.axis(int(at.get("axis", 1)), len(x_shape))
    try:
        params = QuantParams(tuple(scale.tolist()), tuple(zps.tolist()), axis)
    except ValueError as exc:
        cx.fail(str(exc))
    return params


def _storage(cx, zero_point, at) -> np.dtype:
    if zero_point is not None:
        dtype = np.dtype(cx.known(zero_point, "zero point").dtype)
    elif int(at.get("output_dtype", 0)):
        dtype = DTYPES.get(int(at["output_dtype"]))
    else:
        dtype = DEFAULT_STORAGE
    if dtype not in QUANT_STORAGE or dtype == INT32:
        cx.fail(f"quantized type {dtype}: int8 and uint8 are supported")
    return dtype


def _float32_only(cx, at, name: str, meaning: str) -> None:
    given = int(at.get(name, 0))
    if given and DTYPES.get(given) != FLOAT32:
        cx.fail(f"{name} {DTYPES.get(given, given)}: {meaning} in float32 only")


def _quantize_linear(cx, ins, at):
    x = cx.var(ins[0])
    if x.dtype != FLOAT32:
        cx.fail(f"input of {x.dtype}: float32 inputs are quantized")
    _float32_only(cx, at, "precision", "the division by the scale is computed")
    zero_point = ins[2] if len(ins) > 2 else None
    dtype = _storage(cx, zero_point, at)
    p = _params(cx, x.shape, ins[1], zero_point, at)
    return [quantize(x, p.scales, p.zero_points, dtype, p.axis)]


def _dequantize_linear(cx, ins, at):
    x, scale = ins[0], ins[1]
    zero_point = ins[2] if len(ins) > 2 else None
    _float32_only(cx, at, "output_dtype", "values are dequantized")
    shape = x.shape if isinstance(x, np.ndarray) else cx.var(x).shape
    p = _params(cx, shape, scale, zero_point, at)
    if isinstance(x, np.ndarray):
        if x.dtype not in QUANT_STORAGE:
            cx.fail(f"input of {x.dtype}: int8, uint8 or int32 inputs are dequantized")
        q = cx.g.const(x, quant=p)
    else:
        q = cx.var(x)
        if q.dtype not in QUANT_STORAGE:
            cx.fail(f"input of {q.dtype}: int8, uint8 or int32 inputs are dequantized")
        if q.type.quant != p:
            q = as_quantized(q, p.scales, p.zero_points, p.axis)
    return [dequantize(q)]


# ONNX op -> converter
CONVERTERS = {"QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear}
