"""``quantize`` and ``dequantize``: between real numbers and the integers of a quantized type;
``as_quantized``: integers read with other parameters.

A quantized value stores integers q standing for ``scale * (q - zero_point)`` (``ir.quant``).
``quantize`` divides ``x`` by the scale in ``x``'s dtype (a float32 value by the scale rounded to
float32, as ONNX's QuantizeLinear computes), rounds to the nearest integer, ties to even (ONNX's
and PyTorch's rounding), adds the zero point and saturates to the storage type's range. A NaN
is refused when the kernel meets it: an integer has no NaN, and any integer in its place would
be a wrong number given silently. ``dequantize`` gives ``(q - zero_point) * scale``, multiplied
in its result's dtype. Per channel, ``axis`` picks the scale and zero point of each index
along it.
"""
from __future__ import annotations

import numpy as np

from ..ir.quant import QUANT_STORAGE, QuantParams
from ..ir.types import FLOAT_DTYPES, TensorType
from .builder import graph_of
from .registry import REQUIRED, OpDef, register, whole_input

__all__ = ["as_quantized", "dequantize", "quant_params", "quantize"]


def quant_params(attrs: dict) -> QuantParams:
    """The parameters a quantize node's attributes give (a TypeError or ValueError names what
    is wrong)."""
    scales, zps, axis = attrs["scales"], attrs["zero_points"], attrs["axis"]
    if not isinstance(scales, tuple) or not isinstance(zps, tuple):
        raise TypeError(f"scales and zero_points must be tuples, got {scales!r}, {zps!r}")
    if axis is not None and not isinstance(axis, int):
        raise TypeError(f"axis must be None or an int, got {axis!r}")
    return QuantParams(scales, zps, axis)


def _quantize_rule(in_types, attrs):
    (x,) = in_types
    if x.quant is not None or x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"quantize takes float32 or float64 values, got {x}")
    dtype = np.dtype(attrs["dtype"])
    if dtype not in QUANT_STORAGE:
        raise TypeError(f"quantize stores int8, uint8 or int32, not {dtype}")
    quant = quant_params(attrs)
    quant.check(x.shape, dtype)
    return (TensorType(x.shape, dtype, quant),)


def _dequantize_rule(in_types, attrs):
    (q,) = in_types
    if q.quant is None:
        raise TypeError(f"dequantize takes a quantized value, got {q} (plain integers have no "
                        f"scale: give them one with as_quantized, or cast them)")
    dtype = np.dtype(attrs["dtype"])
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dequantize gives float32 or float64, not {dtype}")
    return (TensorType(q.shape, dtype),)


def _as_quantized_rule(in_types, attrs):
    (q,) = in_types
    if q.dtype not in QUANT_STORAGE:
        raise TypeError(f"as_quantized takes int8, uint8 or int32 integers, got {q}")
    quant = quant_params(attrs)
    quant.check(q.shape, q.dtype)
    return (TensorType(q.shape, q.dtype, quant),)


QUANT_ATTRS = {"scales": REQUIRED, "zero_points": REQUIRED, "axis": None}
register(OpDef("quantize", "elementwise", _quantize_rule, quantized=True,
               attrs={**QUANT_ATTRS, "dtype": REQUIRED}, flops_per_element=3.0))
register(OpDef("dequantize", "elementwise", _dequantize_rule, quantized=True,
               attrs={"dtype": "float32"}, flops_per_element=2.0))
# the same integers read with other parameters: a view of its input's bytes, no kernel
register(OpDef("as_quantized", "movement", _as_quantized_rule, quantized=True,
               attrs=QUANT_ATTRS, view=whole_input))


def _params_attrs(scale, zero_point, axis, ndim: int) -> dict:
    scales = tuple(np.asarray(scale, np.float64).reshape(-1).tolist())
    zps = tuple(int(z) for z in np.asarray(zero_point).reshape(-1))
    if len(zps) == 1 and len(scales) > 1:
        zps = zps * len(scales)
    if axis is not None and -ndim <= int(axis) < 0:
        axis = int(axis) + ndim  # an axis out of range stays so: the rule names it
    return {"scales": scales, "zero_points": zps, "axis": axis}


def quantize(x, scale, zero_point=0, dtype="int8", axis=None):
    """``x`` as integers of ``dtype`` (int8, uint8 or int32) standing for
    ``scale * (q - zero_point)``; ``scale`` and ``zero_point`` are numbers (per tensor) or
    sequences of one per index of ``axis`` (per channel)."""
    x = graph_of(x).lift(x)
    attrs = _params_attrs(scale, zero_point, axis, x.ndim)
    return x.graph.add_node("quantize", (x,), {**attrs, "dtype": np.dtype(dtype).name}
                            ).outputs[0]


def dequantize(q, dtype="float32"):
    """The real numbers quantized value ``q`` stands for: ``(q - zero_point) * scale``."""
    q = graph_of(q).lift(q)
    return q.graph.add_node("dequantize", (q,), {"dtype": np.dtype(dtype).name}).outputs[0]


def as_quantized(q, scale, zero_point=0, axis=None):
    """Integers ``q`` (int8, uint8 or int32, quantized or not) read as standing for
    ``scale * (q - zero_point)``: the same bytes, no copy."""
    q = graph_of(q).lift(q)
    return q.graph.add_node("as_quantized", (q,),
                            _params_attrs(scale, zero_point, axis, q.ndim)).outputs[0]
