"""The int8 convolution and linear layer on weights packed once (inference on the CPU).

Design: the prepack pass (planner/passes/prepack.py) rewrites ``quantized_conv2d(x, w, b)``
whose weight and bias read only weights into
``quantized_conv2d_packed(x, quantized_pack_weight(w, b))`` (``quantized_linear`` likewise),
and the plan's prologue computes the pack once instead of on every run. The packed value is
opaque bytes (held as int32, the dtype a prologue's assign takes): the CPU's int8 GEMM layout
(``_kernels/qgemm.h``: the weights shifted to int8, row-major, rows padded with zeros to a
multiple of 16 and k to a multiple of 64, the AMX tiles' shape; one layout that every
instruction-set variant reads, so a pack stays valid whichever runs) followed by each output
channel's int32 constant (the bias and the zero points' cross terms, which depend on the input's
zero point) and shifted weight zero point, and one int32 saying whether any of those is not 0.
The packed op keeps what the rule of the op it replaces needs as attributes (the weight's shape
and scales, and the input zero point and dtype the pack assumed, which its rule checks against
the input's type), so it gives the same output type and, bitwise, the same integers.

>>> packed = quantized_pack_weight(wq, bias, x_zero_point=128, x_dtype="uint8")
>>> y = quantized_conv2d_packed(xq, packed, weight_shape=(64, 64, 3, 3), ...)
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.quant import QuantParams
from ..ir.types import TensorType
from .quantized import EIGHT_BITS, REQUANT_ATTRS
from .registry import REQUIRED, OpDef, get_op, named, register

__all__ = ["pack_weight_array", "packed_size"]

ROWS = 16      # weight rows (output channels) are padded to a multiple of this: qgemm.h's QG_AR
K_STEP = 64    # k is padded to a multiple of this: qgemm.h's QG_KS groups of 4
_CONV_GEOMETRY = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
_PACK_ATTRS = {"groups": 1, "x_zero_point": REQUIRED, "x_dtype": REQUIRED}
_PACKED_ATTRS = {**REQUANT_ATTRS, "weight_shape": REQUIRED, "weight_scales": REQUIRED,
                 "x_zero_point": REQUIRED, "x_dtype": REQUIRED}


def packed_size(out_channels: int, k: int, groups: int = 1) -> int:
    """Bytes of the packed weights of ``out_channels`` rows of ``k`` values in ``groups`` (a
    multiple of 4: the packed value is int32, which the plan's prologue can assign)."""
    per_group = out_channels // groups
    return (groups * -(-per_group // ROWS) * ROWS * -(-k // K_STEP) * K_STEP
            + (2 * out_channels + 1) * 4)


def pack_weight_array(w: np.ndarray, zero_points, bias, groups: int, x_zero_point: int,
                      x_dtype: str) -> np.ndarray:
    """quantized_pack_weight of stored integers, in NumPy: bitwise the kernel's bytes (the
    prepack pass packs a constant weight so, at compile time)."""
    oc, k = w.shape[0], math.prod(w.shape[1:])
    m, unsigned = oc // groups, w.dtype == np.uint8
    shifted = (w.reshape(oc, k) ^ np.uint8(0x80)).view(np.int8) if unsigned else w.reshape(oc, k)
    zw = np.broadcast_to(np.asarray(zero_points, np.int64) - (128 if unsigned else 0), (oc,))
    zx = x_zero_point + (128 if x_dtype == "int8" else 0)
    a = np.zeros((groups, -(-m // ROWS) * ROWS, -(-k // K_STEP) * K_STEP), np.int8)
    a[:, :m, :k] = shifted.reshape(groups, m, k)
    b = np.zeros(oc, np.int64) if bias is None else np.asarray(bias, np.int64)
    const = b - zx * shifted.astype(np.int64).sum(1) + k * zx * zw
    wrapped = (const % 2 ** 32).astype(np.uint32).view(np.int32)  # the kernels' sums wrap
    tail = np.concatenate([wrapped, zw.astype(np.int32), [np.int32(zw.any())]]).astype("<i4")
    return np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                           tail.view(np.uint8)]).view(np.int32)


def _k(weight_shape) -> int:
    return math.prod(weight_shape[1:]) if len(weight_shape) == 4 else weight_shape[1]


def _check_x_dtype(attrs) -> np.dtype:
    if attrs["x_dtype"] not in ("int8", "uint8"):
        raise ValueError(f"x_dtype must be 'int8' or 'uint8', got {attrs['x_dtype']!r}")
    return np.dtype(attrs["x_dtype"])


def _pack_rule(in_types, attrs):
    if len(in_types) not in (1, 2):
        raise ValueError(f"takes (w) or (w, bias), got {len(in_types)} inputs")
    w = in_types[0]
    if w.quant is None or w.dtype not in EIGHT_BITS or w.ndim not in (2, 4):
        raise TypeError(f"the weight must be a quantized int8 or uint8 (out, in) or (out, "
                        f"in/groups, kh, kw) value, got {w}")
    if named(*w.shape):
        raise ValueError(f"packs weights of a shape in numbers, got {w.shape}")
    _check_x_dtype(attrs)
    groups = attrs["groups"]
    if not isinstance(groups, int) or groups < 1 or w.shape[0] % groups:
        raise ValueError(f"groups={groups!r} must divide the weight's {w.shape[0]} outputs")
    if len(in_types) == 2:
        bias = in_types[1]
        if bias.dtype != np.dtype(np.int32) or bias.shape != (w.shape[0],):
            raise TypeError(f"the bias must be int32 of shape ({w.shape[0]},), got {bias}")
    size = packed_size(w.shape[0], _k(w.shape), groups)
    return (TensorType((size // 4,), np.dtype(np.int32)),)


def _weight_stand_in(attrs) -> TensorType:
    """The weight type the packed bytes came from, as far as the rule needs it."""
    shape, scales = tuple(attrs["weight_shape"]), tuple(attrs["weight_scales"])
    if len(shape) not in (2, 4) or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ValueError(f"weight_shape must be (out, in) or (out, in/groups, kh, kw), "
                         f"got {shape}")
    if len(scales) not in (1, shape[0]):
        raise ValueError(f"weight_scales must hold 1 or {shape[0]} scales, got {len(scales)}")
    quant = QuantParams(scales, (0,) * len(scales), 0 if len(scales) > 1 else None)
    return TensorType(shape, np.dtype(np.int8), quant)


def _check_packed(x, packed, attrs, groups: int) -> None:
    x_dtype = _check_x_dtype(attrs)
    if x.quant is None or x.dtype != x_dtype or x.quant.zero_points != (attrs["x_zero_point"],):
        raise TypeError(f"the weights were packed for a {x_dtype.name} input of zero point "
                        f"{attrs['x_zero_point']}, got {x}")
    shape = tuple(attrs["weight_shape"])
    size = packed_size(shape[0], _k(shape), groups)
    if packed.dtype != np.dtype(np.int32) or packed.shape != (size // 4,):
        raise TypeError(f"the packed weights of a {shape} weight in {groups} group(s) are "
                        f"int32 ({size // 4},), got {packed}")


def _packed_rule(name: str):
    """The rule of the packed form of op ``name``: its own, on the weight's stand-in."""
    def rule(in_types, attrs):
        if len(in_types) != 2:
            raise ValueError(f"takes (x, packed weights), got {len(in_types)} inputs")
        x, packed = in_types
        own = {k: v for k, v in attrs.items() if k in get_op(name).attrs}
        _check_packed(x, packed, attrs, own.get("groups", 1))
        return get_op(name).infer((x, _weight_stand_in(attrs)), own)
    return rule


def _packed_flops(node) -> float:
    return 2.0 * node.outputs[0].size * _k(node.attr["weight_shape"])


register(OpDef("quantized_pack_weight", "movement", _pack_rule, quantized=True,
               attrs=_PACK_ATTRS, flops_per_element=0.0))
# no gradient: made by a pass after autodiff, from weights no step writes
register(OpDef("quantized_conv2d_packed", "matmul", _packed_rule("quantized_conv2d"),
               quantized=True, attrs={**_CONV_GEOMETRY, **_PACKED_ATTRS},
               flops=_packed_flops))
register(OpDef("quantized_linear_packed", "matmul", _packed_rule("quantized_linear"),
               quantized=True, attrs=_PACKED_ATTRS, flops=_packed_flops))
