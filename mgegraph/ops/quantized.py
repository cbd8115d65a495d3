"""The int8 compute ops: a convolution, a linear layer and an add on quantized values, with the
requantisation of their results fused in.

What they compute, exactly (every backend gives these integers):

- ``quantized_conv2d(x, w[, bias])`` and ``quantized_linear(x, w[, bias])`` accumulate in int32
  ``acc = sum (x - zx) * (w - zw[o]) + bias[o]`` over each output's window (conv2d's geometry:
  stride, padding, dilation, groups; a padded position holds ``zx``, the real 0) or over the
  last axis (linear: ``w`` is (out, in), as ``nn.Linear``'s weight). ``x`` is int8 or uint8
  per tensor; ``w`` int8 or uint8, per tensor or per output channel (axis 0); ``bias`` is int32
  of shape (out,) in units of ``sx * sw[o]`` (plain int32, or qs32 with those scales, as
  ONNX's QLinearConv and MegEngine's qint32 bias have it). A window holds at most
  ``MAX_WINDOW`` values (33025: each centred product is at most 255 * 255 in size, so the sum
  always fits in int32; the rule refuses a larger one), and the bias is added modulo 2^32, as
  every int32 accumulator (ONNX Runtime's, MegEngine's) adds it: only a bias within a window's
  reach of int32's ends can wrap.
- With ``out_dtype`` "int32" the result is ``acc`` itself, typed qs32 with scales
  ``sx * sw[o]`` (per channel along the output's channel axis when ``w`` is).
- With "int8" or "uint8" it is requantised to ``out_scale`` and ``out_zero_point``:
  ``clamp(rint(float32(acc) * m[o]) + zy, lo, hi)``, where ``m[o]`` is
  ``float32(sx) * float32(sw[o]) / float32(sy)`` computed in float32 (ONNX Runtime's
  multiplier), ``rint`` rounds half to even (as ``quantize`` and the fake quantizer do), and
  ``[lo, hi]`` is the storage range, narrowed to ``[max(lo, zy), hi]`` when ``relu`` is set
  (the real 0 is ``zy``).
- ``quantized_conv_transpose2d(x, w[, bias])`` is the transposed convolution (conv2d's data
  gradient) of ``x`` (N, C_in, H, W) by ``w`` (C_in, C_out/groups, kh, kw), as
  ``conv_transpose2d``: ``acc[o, oh, ow] = sum (x[c, ih, iw] - zx) * (w[c, o, i, j] - zw[o]) +
  bias[o]`` over the inputs and taps with ``oh = ih * stride - padding + i * dilation`` (and
  likewise across), ``output_padding`` adding cells at the bottom and right. ``w`` is per tensor,
  or per output channel along axis 1 when groups is 1 (axis 1 is then the output channel).
  An output sums at most ``C_in/groups * ceil(kh / (sh / gcd(sh, dh)))`` (times the same across)
  products, which ``MAX_WINDOW`` bounds.
- ``quantized_batch_matmul(a, b[, bias])`` is ``a @ b`` of ``a`` (batch or 1, n, k) and ``b``
  (batch or 1, k, m), per batch, giving (batch, n, m): ``acc[n, m] = sum (a - za[n]) * (b - zb)
  + bias[n]``. ``a`` plays the weight (per tensor, or per row along axis 1), ``b`` the
  activation (per tensor), and the bias is per row of the result (an output feature of
  ``BatchMatMulActivation``'s ``weight @ x``, as MegEngine's int8 module adds it).
- ``quantized_add(a, b)`` broadcasts as ``add`` and gives
  ``clamp(rint(float32(a - za) * ma + float32(b - zb) * mb) + zy, lo, hi)``, ``ma`` being
  ``float32(sa) / float32(sy)`` in float32 (``mb`` likewise), the two products rounded to
  float32 and then added (no fused multiply-add), ``relu`` as above.

The result of the fake-quantised float computation (dequantize, the float op, quantize) can
differ from these integers by one step where the float sum's order or the float bias moves a
value across a rounding boundary; where it does not, they are equal.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.quant import QUANT_STORAGE, QuantParams, per_tensor
from ..ir.types import TensorType
from .builder import apply, graph_of
from .conv import _as_pair, weight_dims
from .registry import OpDef, get_op, named, register, same_shape

__all__ = ["quantized_add", "quantized_batch_matmul", "quantized_conv2d",
           "quantized_conv_transpose2d", "quantized_linear"]

EIGHT_BITS = (np.dtype(np.int8), np.dtype(np.uint8))
# the most values one int32 accumulator sums: 33025 * 255 * 255 < 2^31
MAX_WINDOW = (2 ** 31 - 1) // (255 * 255)
OUT_DTYPES = ("int8", "uint8", "int32")
# how close a qs32 bias's scales must be to sx * sw: float rounding of the product, no more
_SCALE_TOLERANCE = 1e-6
REQUANT_ATTRS = {"out_dtype": "int8", "out_scale": None, "out_zero_point": 0, "relu": False}


def _activation(t: TensorType, what: str) -> QuantParams:
    """The per-tensor parameters of an int8 or uint8 activation ``t``."""
    if t.quant is None or t.dtype not in EIGHT_BITS:
        raise TypeError(f"{what} must be a quantized int8 or uint8 value, got {t}")
    if t.quant.per_channel:
        raise TypeError(f"{what} must be quantized per tensor, got {t}")
    return t.quant


def _weight(w: TensorType, axis: int = 0, what: str = "the weight") -> QuantParams:
    """The parameters of an int8 or uint8 weight ``w``: per tensor, or per channel along
    ``axis``, its output channels."""
    if w.quant is None or w.dtype not in EIGHT_BITS:
        raise TypeError(f"{what} must be a quantized int8 or uint8 value, got {w}")
    if w.quant.per_channel and w.quant.axis != axis:
        raise TypeError(f"a per-channel {what} is quantized along axis {axis} (its output "
                        f"channels), got {w}")
    return w.quant


def accumulator_scales(xq: QuantParams, wq: QuantParams) -> tuple[float, ...]:
    """The scale of each output channel's int32 accumulator: ``sx * sw[o]`` (one per tensor)."""
    return tuple(xq.scale * s for s in wq.scales) if wq.per_channel else (xq.scale * wq.scale,)


def _check_window(size) -> None:
    if not named(size) and size > MAX_WINDOW:
        raise ValueError(f"each output sums {size} products: an int32 accumulator can overflow "
                         f"past {MAX_WINDOW} (split the reduction, or compute in float)")


def _check_bias(bias: TensorType, scales: tuple, out_channels) -> None:
    if bias.dtype != np.dtype(np.int32) or bias.ndim != 1:
        raise TypeError(f"the bias must be 1-D int32 (in units of input scale times weight "
                        f"scale), got {bias}")
    if not named(out_channels) and bias.shape[0] != out_channels:
        raise ValueError(f"the bias has {bias.shape[0]} values for {out_channels} output "
                         f"channels")
    if bias.quant is None:
        return
    given = bias.quant.scales
    expected = scales * len(given) if len(scales) == 1 else scales
    if bias.quant.zero_points != (0,) * len(given) or len(given) != len(expected) or any(
            not math.isclose(g, e, rel_tol=_SCALE_TOLERANCE) for g, e in zip(given, expected)):
        raise TypeError(f"a quantized bias must have zero point 0 and scales input scale x "
                        f"weight scale {expected[:4]}, got {bias}")


def _result(shape, scales: tuple, attrs, channel_axis: int) -> TensorType:
    """The output type: the int32 accumulator, or the requantised 8-bit value."""
    out = attrs["out_dtype"]
    if out not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {out!r}")
    dtype = np.dtype(out)
    if out == "int32":
        if attrs["out_scale"] is not None or attrs["relu"]:
            raise ValueError("an int32 result is the accumulator itself: it takes no "
                             "out_scale and no relu")
        quant = (per_tensor(scales[0]) if len(scales) == 1 else
                 QuantParams(scales, (0,) * len(scales), channel_axis))
        return TensorType(shape, dtype, quant)
    if attrs["out_scale"] is None:
        raise ValueError(f"an {out} result needs out_scale")
    quant = per_tensor(attrs["out_scale"], attrs["out_zero_point"])
    quant.check(shape, dtype)
    return TensorType(shape, dtype, quant)


def _float_stand_in(t: TensorType) -> TensorType:
    return TensorType(t.shape, np.dtype(np.float32))


def _conv_rule(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (x, w) or (x, w, bias), got {len(in_types)} inputs")
    x, w = in_types[:2]
    xq, wq = _activation(x, "the input"), _weight(w)
    # the float convolution's rule checks the geometry and gives the output shape
    (y,) = get_op("conv2d").infer((_float_stand_in(x), _float_stand_in(w)),
                                  {**{k: attrs[k] for k in _CONV_GEOMETRY}, "activation": "none"})
    out_channels, per_group, kh, kw = weight_dims(w, attrs["groups"])
    if not named(per_group, kh, kw):
        _check_window(per_group * kh * kw)
    scales = accumulator_scales(xq, wq)
    if len(in_types) == 3:
        _check_bias(in_types[2], scales, out_channels)
    return (_result(y.shape, scales, attrs, channel_axis=1),)


def _linear_rule(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (x, w) or (x, w, bias), got {len(in_types)} inputs")
    x, w = in_types[:2]
    xq, wq = _activation(x, "the input"), _weight(w)
    if x.ndim < 1 or w.ndim != 2:
        raise ValueError(f"takes x (..., in) and w (out, in), got {x.shape} and {w.shape}")
    if not named(x.shape[-1], w.shape[1]) and x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features but w (out, in) takes {w.shape[1]}")
    _check_window(w.shape[1])
    scales = accumulator_scales(xq, wq)
    if len(in_types) == 3:
        _check_bias(in_types[2], scales, w.shape[0])
    return (_result((*x.shape[:-1], w.shape[0]), scales, attrs, channel_axis=x.ndim - 1),)


def _transposed_size(n, k, stride, padding, output_padding, dilation) -> int:
    """One spatial side of a transposed convolution's output (``conv_transpose2d``'s)."""
    if output_padding >= max(stride, dilation):
        raise ValueError(f"output_padding {output_padding} must be smaller than the stride "
                         f"{stride} or the dilation {dilation}")
    size = (n - 1) * stride - 2 * padding + dilation * (k - 1) + 1 + output_padding
    if size < 1:
        raise ValueError(f"the output side would be {size}: padding {padding} crops more than "
                         f"the input of {n} spreads to")
    return size


def _taps_per_output(k, stride, dilation) -> int:
    """The most taps of one axis that reach one output cell of a transposed convolution: those
    ``i`` with ``i * dilation`` in one residue class modulo the stride."""
    return -(-k // (stride // math.gcd(stride, dilation)))


def _conv_transpose_rule(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (x, w) or (x, w, bias), got {len(in_types)} inputs")
    x, w = in_types[:2]
    groups = attrs["groups"]
    xq = _activation(x, "the input")
    wq = _weight(w, axis=1)
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"takes x (N, C_in, H, W) and w (C_in, C_out/groups, kh, kw), got "
                         f"{x.shape} and {w.shape}")
    if groups < 1 or wq.per_channel and groups != 1:
        raise ValueError(f"groups must be at least 1, and 1 for a per-channel weight (axis 1 "
                         f"is then the output channel), got groups={groups} with {w}")
    c_in, per_group, kh, kw = w.shape
    if named(*x.shape[1:], *w.shape):
        raise ValueError(f"the channels, the spatial size and the kernel must be known, got x "
                         f"{x.shape} and w {w.shape}")
    if x.shape[1] != c_in or c_in % groups:
        raise ValueError(f"the weight's first dim ({c_in}) must equal the input's "
                         f"{x.shape[1]} channels, and groups={groups} must divide them")
    if min(*attrs["stride"], *attrs["dilation"]) < 1 or min(attrs["padding"]) < 0:
        raise ValueError(f"stride and dilation must be at least 1 and padding at least 0, got "
                         f"{attrs['stride']}, {attrs['dilation']}, {attrs['padding']}")
    sizes = tuple(_transposed_size(x.shape[2 + a], w.shape[2 + a], attrs["stride"][a],
                                   attrs["padding"][a], attrs["output_padding"][a],
                                   attrs["dilation"][a]) for a in range(2))
    _check_window(c_in // groups * _taps_per_output(kh, attrs["stride"][0], attrs["dilation"][0])
                  * _taps_per_output(kw, attrs["stride"][1], attrs["dilation"][1]))
    scales = accumulator_scales(xq, wq)
    if len(in_types) == 3:
        _check_bias(in_types[2], scales, per_group * groups)
    return (_result((x.shape[0], per_group * groups, *sizes), scales, attrs, channel_axis=1),)


def _batch_matmul_rule(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (a, b) or (a, b, bias), got {len(in_types)} inputs")
    a, b = in_types[:2]
    aq = _weight(a, axis=1, what="a")
    bq = _activation(b, "b")
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"takes a (batch, n, k) and b (batch, k, m), got {a.shape} and "
                         f"{b.shape}")
    if not named(a.shape[2], b.shape[1]) and a.shape[2] != b.shape[1]:
        raise ValueError(f"a has {a.shape[2]} columns but b has {b.shape[1]} rows")
    batch = _batch_of(a.shape[0], b.shape[0])
    _check_window(a.shape[2])
    scales = accumulator_scales(bq, aq)
    if len(in_types) == 3:
        _check_bias(in_types[2], scales, a.shape[1])
    return (_result((batch, a.shape[1], b.shape[2]), scales, attrs, channel_axis=1),)


def _batch_of(batch_a, batch_b):
    """The result's batch: the two operands' where they agree, the other where one is 1."""
    if not named(batch_a) and batch_a == 1:
        return batch_b
    if not named(batch_b) and batch_b == 1:
        return batch_a
    if not same_shape((batch_a,), (batch_b,), "the batches of a and b"):
        raise ValueError(f"batches {batch_a} and {batch_b} differ (one of them may be 1)")
    return batch_a


def _add_rule(in_types, attrs):
    a, b = in_types
    _activation(a, "a")
    _activation(b, "b")
    if attrs["out_dtype"] == "int32":
        raise ValueError("quantized_add gives int8 or uint8")
    (y,) = get_op("add").infer((_float_stand_in(a), _float_stand_in(b)), {})
    return (_result(y.shape, (1.0,), attrs, channel_axis=0),)


def _conv_flops(node) -> float:
    return 2.0 * node.outputs[0].size * math.prod(node.inputs[1].shape[1:])


def _conv_transpose_flops(node) -> float:
    # every input value meets C_out/groups * kh * kw weights
    return 2.0 * node.inputs[0].size * math.prod(node.inputs[1].shape[1:])


def _batch_matmul_flops(node) -> float:
    return 2.0 * node.outputs[0].size * node.inputs[0].shape[2]


def _linear_flops(node) -> float:
    return 2.0 * node.outputs[0].size * node.inputs[1].shape[1]


_CONV_GEOMETRY = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
register(OpDef("quantized_conv2d", "matmul", _conv_rule, quantized=True,
               attrs={**_CONV_GEOMETRY, **REQUANT_ATTRS}, flops=_conv_flops))
register(OpDef("quantized_linear", "matmul", _linear_rule, quantized=True,
               attrs=REQUANT_ATTRS, flops=_linear_flops))
register(OpDef("quantized_conv_transpose2d", "matmul", _conv_transpose_rule, quantized=True,
               attrs={**_CONV_GEOMETRY, "output_padding": (0, 0), **REQUANT_ATTRS},
               flops=_conv_transpose_flops))
register(OpDef("quantized_batch_matmul", "matmul", _batch_matmul_rule, quantized=True,
               attrs=REQUANT_ATTRS, flops=_batch_matmul_flops))
register(OpDef("quantized_add", "elementwise", _add_rule, quantized=True,
               attrs=REQUANT_ATTRS, flops_per_element=6.0))


def _requant(out_dtype, out_scale, out_zero_point, relu) -> dict:
    out = np.dtype(out_dtype).name
    scale = None if out_scale is None else float(out_scale)
    return {"out_dtype": out, "out_scale": scale, "out_zero_point": int(out_zero_point),
            "relu": bool(relu)}


def quantized_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                     out_dtype="int8", out_scale=None, out_zero_point=0, relu=False):
    """conv2d of quantized ``x`` (N, C, H, W) and ``w`` (out, in/groups, kh, kw) in int32,
    requantised to ``out_scale``/``out_zero_point`` (``out_dtype`` "int32": the accumulator).

    >>> y = quantized_conv2d(xq, wq, bq, padding=1, out_scale=0.05, relu=True)
    """
    inputs = (x, w) if bias is None else (x, w, bias)
    return apply("quantized_conv2d", tuple(graph_of(*inputs).lift(v) for v in inputs),
                 stride=_as_pair(stride), padding=_as_pair(padding),
                 dilation=_as_pair(dilation), groups=int(groups),
                 **_requant(out_dtype, out_scale, out_zero_point, relu))


def quantized_linear(x, w, bias=None, *, out_dtype="int8", out_scale=None, out_zero_point=0,
                     relu=False):
    """``x @ w.T (+ bias)`` of quantized ``x`` (..., in) and ``w`` (out, in) in int32,
    requantised as ``quantized_conv2d``."""
    inputs = (x, w) if bias is None else (x, w, bias)
    return apply("quantized_linear", tuple(graph_of(*inputs).lift(v) for v in inputs),
                 **_requant(out_dtype, out_scale, out_zero_point, relu))


def quantized_conv_transpose2d(x, w, bias=None, stride=1, padding=0, output_padding=0,
                               dilation=1, groups=1, *, out_dtype="int8", out_scale=None,
                               out_zero_point=0, relu=False):
    """conv_transpose2d of quantized ``x`` (N, C_in, H, W) and ``w`` (C_in, C_out/groups, kh,
    kw) in int32, requantised as ``quantized_conv2d``.

    >>> y = quantized_conv_transpose2d(xq, wq, bq, stride=2, out_scale=0.05)  # 32x32 -> 64x64
    """
    inputs = (x, w) if bias is None else (x, w, bias)
    return apply("quantized_conv_transpose2d",
                 tuple(graph_of(*inputs).lift(v) for v in inputs), stride=_as_pair(stride),
                 padding=_as_pair(padding), output_padding=_as_pair(output_padding),
                 dilation=_as_pair(dilation), groups=int(groups),
                 **_requant(out_dtype, out_scale, out_zero_point, relu))


def quantized_batch_matmul(a, b, bias=None, *, out_dtype="int8", out_scale=None,
                           out_zero_point=0, relu=False):
    """``a @ b`` per batch of quantized ``a`` (batch or 1, n, k) and ``b`` (batch or 1, k, m)
    in int32, plus ``bias`` (n,) per row, requantised as ``quantized_conv2d``.

    >>> y = quantized_batch_matmul(wq, xq, bq, out_scale=0.1, relu=True)  # (4, 8, 16) @ (4, 16, 5)
    """
    inputs = (a, b) if bias is None else (a, b, bias)
    return apply("quantized_batch_matmul", tuple(graph_of(*inputs).lift(v) for v in inputs),
                 **_requant(out_dtype, out_scale, out_zero_point, relu))


def quantized_add(a, b, *, out_dtype="int8", out_scale=None, out_zero_point=0, relu=False):
    """``a + b`` of quantized values (broadcasting), requantised to ``out_scale``."""
    graph = graph_of(a, b)
    return apply("quantized_add", (graph.lift(a), graph.lift(b)),
                 **_requant(out_dtype, out_scale, out_zero_point, relu))


# storage ranges for kernels and references: (lo, hi) of each output dtype
STORAGE_RANGES = {np.dtype(d).name: rng for d, (_, rng) in QUANT_STORAGE.items()}
