"""ONNX's QuantizeLinear and DequantizeLinear onto mgegraph's quantize and dequantize, and
ONNX's quantized operators (QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
DynamicQuantizeLinear) onto the int8 ops of ``ops/quantized.py``.

A QuantizeLinear's output is a quantized value (its type carries the scale and zero point); a
DequantizeLinear reads its input's integers with its own scale and zero point: an initializer
becomes a quantized constant (a QDQ model's int8 weights), a computed value keeps its bytes
(``as_quantized``, no copy) when its parameters differ. Per-axis parameters are 1-D along
``axis``; blocked quantization (opset 21's ``block_size``) and the 4-bit, 16-bit and float8 types
are refused. A scale or zero point computed at run time (a graph input, say) has no quantized
type, so the pair runs in float as ONNX defines it (``(x - zp) * scale``; ``clip(round half to
even(x / scale) + zp)`` cast to the storage type), its integers plain: the QDQ folding pass
leaves such a chain in float.

The quantized operators: QLinearConv is ``quantized_conv2d`` (ONNX Runtime's float32 multiplier
and rounding, so the same integers); QLinearMatMul with a constant 2-D B is
``quantized_linear`` on B transposed once here, with any other B it runs in float (dequantize
both, matmul, quantize: correct, not int8). ConvInteger and MatMulInteger read their inputs as
quantized with scale 1 and give the int32 accumulator as plain int32 (ONNX's type), through a
float64 dequantize that holds every int32 exactly. DynamicQuantizeLinear computes its scale
and zero point from the data at run time, so its uint8 result is plain integers (mgegraph's
quantized types carry constant parameters): a MatMulInteger of it with a constant B still runs
the int8 GEMM, on zero point 0, and subtracts ``a_zero_point * column sums of (B - b_zero_point)``
afterwards in float64 (exact); with a computed B it multiplies in float64 (exact, not int8).
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.quant import QUANT_STORAGE, QuantParams, per_tensor
from ..ops.quantize import as_quantized, dequantize, quantize
from ..ops.quantized import EIGHT_BITS, quantized_conv2d, quantized_linear
from .context import DTYPES, shape_of
from .convert_nn import _auto_pad, _check_window

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


def _computed(*values) -> bool:
    """Whether a scale or zero point is computed at run time (not an initializer)."""
    return any(v is not None and not isinstance(v, np.ndarray) for v in values)


def _along_axis(cx, v, rank: int, at):
    """A scale or zero point as a float32 value that broadcasts: a 1-D one along ``axis``."""
    v = F.astype(cx.g.const(v) if isinstance(v, np.ndarray) else cx.var(v), "float32")
    if v.ndim == 0:
        return v
    axis = cx.axis(int(at.get("axis", 1)), rank)
    return F.reshape(v, tuple(-1 if d == axis else 1 for d in range(rank)))


def _quantize_in_float(cx, x, scale, zero_point, at):
    dtype = np.dtype(cx.var(zero_point).dtype) if _computed(zero_point) else _storage(
        cx, zero_point, at)
    if dtype not in EIGHT_BITS:
        cx.fail(f"quantized type {dtype}: int8 and uint8 are supported")
    q = F.round_half_even(x / _along_axis(cx, scale, x.ndim, at))
    if zero_point is not None:
        q = q + _along_axis(cx, zero_point, x.ndim, at)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    return [F.astype(F.clip(q, lo, hi), dtype.name)]


def _dequantize_in_float(cx, x, scale, zero_point, at):
    xv = cx.g.const(x) if isinstance(x, np.ndarray) else cx.var(x)
    if xv.type.quant is not None:
        cx.fail("a quantized value read with a scale or zero point computed at run time: "
                "constant ones are supported there")
    xf = F.astype(xv, "float32")
    if zero_point is not None:
        xf = xf - _along_axis(cx, zero_point, xf.ndim, at)
    return [xf * _along_axis(cx, scale, xf.ndim, at)]


def _quantize_linear(cx, ins, at):
    x = cx.var(ins[0])
    if x.dtype != FLOAT32:
        cx.fail(f"input of {x.dtype}: float32 inputs are quantized")
    _float32_only(cx, at, "precision", "the division by the scale is computed")
    zero_point = ins[2] if len(ins) > 2 else None
    if _computed(ins[1], zero_point):
        return _quantize_in_float(cx, x, ins[1], zero_point, at)
    dtype = _storage(cx, zero_point, at)
    p = _params(cx, x.shape, ins[1], zero_point, at)
    return [quantize(x, p.scales, p.zero_points, dtype, p.axis)]


def _dequantize_linear(cx, ins, at):
    x, scale = ins[0], ins[1]
    zero_point = ins[2] if len(ins) > 2 else None
    _float32_only(cx, at, "output_dtype", "values are dequantized")
    if _computed(scale, zero_point):
        return _dequantize_in_float(cx, x, scale, zero_point, at)
    shape = x.shape if isinstance(x, np.ndarray) else cx.var(x).shape
    return [dequantize(_quantized(cx, x, _params(cx, shape, scale, zero_point, at)))]


def _quantized(cx, x, p: QuantParams, storage=QUANT_STORAGE):
    """``x``'s integers read with parameters ``p``: an initializer becomes a quantized constant,
    a computed value keeps its bytes."""
    dtype = np.dtype(x.dtype)
    if dtype not in storage:
        names = [d.name for d in storage]
        cx.fail(f"input of {dtype}: {', '.join(names[:-1])} or {names[-1]} inputs are read as "
                "quantized")
    if isinstance(x, np.ndarray):
        return cx.g.const(x, quant=p)
    q = cx.var(x)
    return q if q.type.quant == p else as_quantized(q, p.scales, p.zero_points, p.axis)


def _operand(cx, ins, first: int, axis: int | None = None):
    """The quantized value of the operator's inputs ``first`` (integers), ``first + 1`` (scale)
    and ``first + 2`` (zero point); per-axis parameters along ``axis`` (None: per tensor)."""
    x = ins[first]
    shape = shape_of(x) if isinstance(x, np.ndarray) else cx.var(x).shape
    p = _params(cx, shape, _scale(cx, ins[first + 1]), ins[first + 2], {"axis": axis or 0})
    if p.per_channel and axis is None:
        cx.fail(f"input {first} is quantized per axis: per tensor is supported there")
    return _quantized(cx, x, p, EIGHT_BITS)


def _scale(cx, x) -> np.ndarray:
    """A quantized operator's scale, float16 widened to float32 (exactly): its results are
    integers, whatever type the scales came in."""
    scale = cx.known(x, "scale")
    return scale.astype(np.float32) if scale.dtype == np.float16 else scale


def _requant(cx, ins, first: int) -> dict:
    """The result's dtype, scale and zero point from inputs ``first`` and ``first + 1``."""
    zero_point = cx.known(ins[first + 1], "y zero point")
    if np.dtype(zero_point.dtype) not in EIGHT_BITS:
        cx.fail(f"y zero point of {zero_point.dtype}: int8 or uint8 results are supported")
    p = _params(cx, (), _scale(cx, ins[first]), zero_point, {})
    if p.per_channel:
        cx.fail("y is quantized per axis: per tensor is supported")
    return {"out_dtype": zero_point.dtype.name, "out_scale": p.scale,
            "out_zero_point": p.zero_point}


def _geometry(cx, at, x, w_shape) -> dict:
    """QLinearConv's and ConvInteger's attributes as conv2d's (2-D, symmetric pads)."""
    if x.ndim != 4 or len(w_shape) != 4:
        cx.fail(f"an input of shape {list(shape_of(x))} and a weight of {list(w_shape)}: "
                "mgegraph convolves quantized 2-D images (4-D) only")
    _check_window(cx, at, 2, tuple(w_shape[2:]))
    strides = list(at.get("strides", [1, 1]))
    dilations = list(at.get("dilations", [1, 1]))
    pads = _auto_pad(cx, at, shape_of(x)[2:], list(w_shape[2:]), strides, dilations)
    if any(b != e for b, e in pads):
        cx.fail(f"pads {pads}: a quantized convolution takes symmetric pads only")
    return {"stride": tuple(strides), "padding": tuple(b for b, _ in pads),
            "dilation": tuple(dilations), "groups": int(at.get("group", 1))}


def _qlinear_conv(cx, ins, at):
    x, w = _operand(cx, ins, 0), _operand(cx, ins, 3, axis=0)
    bias = ins[8] if len(ins) > 8 and ins[8] is not None else None
    if bias is not None:
        bias = cx.g.const(bias) if isinstance(bias, np.ndarray) else cx.var(bias)
    return [quantized_conv2d(x, w, bias, **_geometry(cx, at, x, w.shape),
                             **_requant(cx, ins, 6))]


def _qlinear_matmul(cx, ins, at):
    a = _operand(cx, ins, 0)
    b = ins[3]
    requant = _requant(cx, ins, 6)
    if isinstance(b, np.ndarray) and b.ndim == 2 and a.ndim >= 2:
        w = _transposed_weight(cx, b, ins[4], ins[5])
        return [quantized_linear(a, w, **requant)]
    # any other B: in float, dequantize both and quantize the product (not int8)
    product = F.matmul(dequantize(a), dequantize(_operand(cx, ins, 3, axis=_b_axis(cx, b))))
    return [quantize(product, requant["out_scale"], requant["out_zero_point"],
                     requant["out_dtype"])]


def _b_axis(cx, b) -> int:
    """The axis of a B operand's per-column parameters: its last."""
    return (b.ndim if isinstance(b, np.ndarray) else cx.var(b).ndim) - 1


def _transposed_weight(cx, b: np.ndarray, scale, zero_point):
    """A constant (K, N) B as the (N, K) quantized weight of quantized_linear."""
    p = _params(cx, b.shape, _scale(cx, scale), zero_point, {"axis": 1})
    if np.dtype(b.dtype) not in EIGHT_BITS:
        cx.fail(f"B of {b.dtype}: int8 or uint8 is supported")
    if p.per_channel:
        p = QuantParams(p.scales, p.zero_points, 0)
    return cx.g.const(np.ascontiguousarray(b.T), quant=p)


def _zero_point(cx, zp, what: str):
    """An integer operator's zero point: an array known at import, a computed Var, or 0."""
    if zp is None:
        return np.zeros((), np.int64)
    if isinstance(zp, np.ndarray):
        return zp.astype(np.int64)
    var = cx.var(zp)
    if var.size != 1:
        cx.fail(f"{what} of shape {list(var.shape)} computed at run time: a scalar is supported")
    return var


def _scale_one(zero_points: np.ndarray, axis: int) -> QuantParams:
    if zero_points.size == 1:
        return per_tensor(1.0, int(zero_points.reshape(-1)[0]))
    return QuantParams((1.0,) * zero_points.size, tuple(zero_points.reshape(-1).tolist()), axis)


def _plain_int32(acc):
    """The int32 accumulator (qs32 of scale 1) as ONNX's plain int32, through float64 (which
    holds every int32 exactly)."""
    return F.astype(dequantize(acc, "float64"), "int32")


def _conv_integer(cx, ins, at):
    # a padded position holds x's zero point: it must be known to build the convolution
    x_zp, w_zp = (_zero_point(cx, cx.known(ins[i] if len(ins) > i else None, what), what)
                  for i, what in ((2, "x zero point"), (3, "w zero point")))
    if x_zp.size != 1:
        cx.fail(f"x zero point per axis ({x_zp.size}): a scalar is supported")
    x = _quantized(cx, ins[0], _scale_one(x_zp, 0), EIGHT_BITS)
    w = _quantized(cx, ins[1], _scale_one(w_zp, 0), EIGHT_BITS)
    return [_plain_int32(quantized_conv2d(x, w, **_geometry(cx, at, x, w.shape),
                                          out_dtype="int32"))]


def _matmul_integer(cx, ins, at):
    a_zp = _zero_point(cx, ins[2] if len(ins) > 2 else None, "a zero point")
    b_zp = _zero_point(cx, ins[3] if len(ins) > 3 else None, "b zero point")
    a, b = ins[0], ins[1]
    if isinstance(a_zp, np.ndarray) and a_zp.size != 1:
        cx.fail(f"a zero point per row ({a_zp.size}): a scalar is supported")
    rank = a.ndim if isinstance(a, np.ndarray) else cx.var(a).ndim
    if not isinstance(b, np.ndarray) or b.ndim != 2 or rank < 2 or not isinstance(
            b_zp, np.ndarray):
        return [_matmul_in_float64(cx, a, b, a_zp, b_zp)]
    w = cx.g.const(np.ascontiguousarray(b.T), quant=_scale_one(b_zp, 0))
    if isinstance(a_zp, np.ndarray):
        x = _quantized(cx, a, _scale_one(a_zp, 0), EIGHT_BITS)
        return [_plain_int32(quantized_linear(x, w, out_dtype="int32"))]
    # a zero point computed at run time: sum (a - za)(b - zb) = sum a (b - zb) - za sum (b - zb)
    x = _quantized(cx, a, per_tensor(1.0), EIGHT_BITS)
    acc = dequantize(quantized_linear(x, w, out_dtype="int32"), "float64")
    column_sums = (b.astype(np.int64) - b_zp.reshape(1, -1)).sum(axis=0).astype(np.float64)
    shift = F.astype(a_zp, "float64") * cx.g.const(column_sums)
    return [F.astype(acc - shift, "int32")]


def _matmul_in_float64(cx, a, b, a_zp, b_zp):
    """MatMulInteger in float64 (every product and sum of 8-bit integers is exact there)."""
    def centred(v, zp):
        v64 = F.astype(cx.g.const(v) if isinstance(v, np.ndarray) else cx.var(v), "float64")
        z = cx.g.const(zp.astype(np.float64)) if isinstance(zp, np.ndarray) else F.astype(
            zp, "float64")
        return v64 - z
    return F.astype(F.matmul(centred(a, a_zp), centred(b, b_zp)), "int32")


def _dynamic_quantize_linear(cx, ins, at):
    """uint8 ``y``, its scale and zero point, from the range of ``x`` (and 0), in float32, as
    ONNX Runtime computes them: NaN left out of the range and quantized to 0 (as is an
    infinity's NaN quotient), scale 1 where the range is empty."""
    x = cx.var(ins[0])
    if x.dtype != FLOAT32:
        cx.fail(f"input of {x.dtype}: float32 inputs are quantized")
    zero, one = cx.g.const(np.float32(0)), cx.g.const(np.float32(1))
    ranged = F.where(F.isnan(x), zero, x)
    lo, hi = F.minimum(F.min(ranged), zero), F.maximum(F.max(ranged), zero)
    scale = F.where(F.equal(hi, lo), one, (hi - lo) / cx.g.const(np.float32(255)))
    zp = F.clip(F.round_half_even(-lo / scale), 0, 255)
    q = F.round_half_even(x / scale) + zp
    y = F.where(F.isnan(q), zero, F.clip(q, 0, 255))
    return [F.astype(y, "uint8"), scale, F.astype(zp, "uint8")]


# ONNX op -> converter
CONVERTERS = {"QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
              "QLinearConv": _qlinear_conv, "QLinearMatMul": _qlinear_matmul,
              "ConvInteger": _conv_integer, "MatMulInteger": _matmul_integer,
              "DynamicQuantizeLinear": _dynamic_quantize_linear}
