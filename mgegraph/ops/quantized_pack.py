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
zero point) and shifted weight zero point, and one int32 of flags: whether any of those is not 0
(ZERO_POINTS), and whether every k pair of the packed rows is in vpmaddubsw's range
(PAIRS_FIT, ``pairs_fit``: AVX2 then runs its vpmaddubsw tile, exact on such weights).
The packed op keeps what the rule of the op it replaces needs as attributes (the weight's shape
and scales, and the input zero point and dtype the pack assumed, which its rule checks against
the input's type), so it gives the same output type and, bitwise, the same integers.

The transposed convolution and the batched matmul are packed so too, as the GEMM rows their
kernels run on: ``quantized_conv_transpose2d_packed(x, quantized_pack_transposed_weight(w)[,
bias])`` reads the transposed weight's rows (o, i, j) by C_in/groups, each row the zero point
of its output channel, packed without a bias (the bias is added per output channel after the
col2im, so it stays an input); ``quantized_batch_matmul_packed(b, quantized_pack_weight(a[,
bias]))`` reads the pack of an ``a`` without a batch, (1, n, k), as a linear layer's (n, k)
weight (its zero points along axis 1), and runs on ``quantized_conv2d_packed``'s kernel: b's
(k, cols) matrix per batch is the image of a 1x1 convolution.

>>> packed = quantized_pack_weight(wq, bias, x_zero_point=128, x_dtype="uint8")
>>> y = quantized_conv2d_packed(xq, packed, weight_shape=(64, 64, 3, 3), ...)
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import OpError
from ..ir.quant import QuantParams
from ..ir.types import TensorType
from .quantized import EIGHT_BITS, REQUANT_ATTRS
from .registry import REQUIRED, OpDef, get_op, named, register

__all__ = ["check_packed_consts", "gemm_rows", "pack_transposed_weight_array",
           "pack_weight_array", "packed_size", "pairs_fit"]

ROWS = 16      # weight rows (output channels) are padded to a multiple of this: qgemm.h's QG_AR
K_STEP = 64    # k is padded to a multiple of this: qgemm.h's QG_KS groups of 4
ZERO_POINTS, PAIRS_FIT = 1, 2  # the flags word: qgemm.h's QG_ZERO_POINTS, QG_PAIRS_FIT
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


def pairs_fit(a: np.ndarray) -> bool:
    """Whether vpmaddubsw is exact on packed weight rows ``a`` (int8, the last axis k padded to
    an even length; qgemm.h's qg_pairs_fit): every pair (2i, 2i + 1) has positive parts summing
    to at most 128 and negative parts to at least -128, so 255 times either fits int16."""
    pairs = a.astype(np.int16).reshape(*a.shape[:-1], -1, 2)
    return bool((np.maximum(pairs, 0).sum(-1) <= 128).all()
                and (np.minimum(pairs, 0).sum(-1) >= -128).all())


def proved_flags(a: np.ndarray, zw: np.ndarray) -> int:
    """The flags word packed weight rows ``a`` with shifted zero points ``zw`` earn (qgemm.h's
    qg_weights_flags): ZERO_POINTS where a zero point is not 0, PAIRS_FIT where pairs_fit holds."""
    return ZERO_POINTS * bool(zw.any()) | PAIRS_FIT * pairs_fit(a)


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
    flags = proved_flags(a, zw)
    tail = np.concatenate([wrapped, zw.astype(np.int32), [np.int32(flags)]]).astype("<i4")
    return np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                           tail.view(np.uint8)]).view(np.int32)


def pack_transposed_weight_array(w: np.ndarray, zero_points, groups: int, x_zero_point: int,
                                 x_dtype: str) -> np.ndarray:
    """quantized_pack_transposed_weight in NumPy: a transposed convolution's weight (C_in,
    C_out/groups, kh, kw) as its GEMM rows (o, i, j) of C_in/groups values per group, each row
    the zero point of its output channel (qconv.h's qg_transpose_weight), packed without a
    bias; bitwise the kernel's bytes."""
    c_in, per_group, kh, kw = w.shape
    rows = groups * per_group * kh * kw
    wt = w.reshape(groups, c_in // groups, rows // groups).transpose(0, 2, 1)
    zw = np.broadcast_to(np.asarray(zero_points, np.int64), (groups * per_group,))
    return pack_weight_array(np.ascontiguousarray(wt).reshape(rows, c_in // groups),
                             np.repeat(zw, kh * kw), None, groups, x_zero_point, x_dtype)


def gemm_rows(op: str, weight_shape, groups: int = 1) -> tuple[int, int]:
    """(rows, k): the GEMM rows that op ``op``'s packed weight of ``weight_shape`` holds, each
    of k values: a convolution's output channels by its window, a linear layer's weight as it
    is, a transposed convolution's (output channel, tap) rows by C_in/groups, a batched
    matmul's (1, n, k) ``a`` as (n, k)."""
    if op == "quantized_conv_transpose2d":
        c_in, per_group, kh, kw = weight_shape
        return groups * per_group * kh * kw, c_in // groups
    if op == "quantized_batch_matmul":
        return weight_shape[1], weight_shape[2]
    return weight_shape[0], math.prod(weight_shape[1:])


def packed_flags_error(packed: np.ndarray, op: str, weight_shape, groups: int) -> str | None:
    """What is wrong with the flags word of ``packed`` (op ``op``'s weights of
    ``weight_shape``, already of packed_size's length), or None: ZERO_POINTS must be what its
    zero points say, PAIRS_FIT may be set only where its bytes prove it (else AVX2's vpmaddubsw
    tile would saturate silently), no other bit. A word of 0 or 1 (files from before
    PAIRS_FIT) is valid."""
    rows, k = gemm_rows(op, weight_shape, groups)
    m = rows // groups
    shape = (groups, -(-m // ROWS) * ROWS, -(-k // K_STEP) * K_STEP)
    raw = packed.view(np.uint8)
    a = raw[:math.prod(shape)].view(np.int8).reshape(shape)
    tail = raw[a.size:].view("<i4")
    flags, proved = int(tail[2 * rows]), proved_flags(a, tail[rows:2 * rows])
    if flags & ~(ZERO_POINTS | PAIRS_FIT):
        return f"the packed weights' flags word {flags:#x} has bits no kernel knows"
    if (flags ^ proved) & ZERO_POINTS:
        return "the packed weights' flags word disagrees with their zero points"
    if flags & ~proved & PAIRS_FIT:
        return ("the packed weights claim that every k pair's products fit int16 (PAIRS_FIT) "
                "but their bytes do not: corrupt or hand-made packed bytes")
    return None


def check_packed_consts(graph) -> None:
    """Refuse a graph whose packed int8 op reads a const whose flags word its bytes do not
    bear out (a hostile or corrupt model file, a hand-built graph): the kernels trust the word.
    Packs made by quantized_pack_weight's kernel or pack_weight_array are right by making."""
    for node in graph.nodes:
        base = _PACKED_BASE.get(node.op.name)
        packed = graph.values.get(node.inputs[1].id) if base else None
        if packed is None:
            continue
        why = packed_flags_error(np.ascontiguousarray(packed), base, node.attr["weight_shape"],
                                 node.attr.get("groups", 1))
        if why:
            raise OpError(node.op.name, [v.type for v in node.inputs], why, node.location)


# each packed op's weight: the axis of its output channels, and whether the weight is the op's
# first input (the batched matmul's a) rather than its second
_WEIGHT_AXIS = {"quantized_conv2d": 0, "quantized_linear": 0, "quantized_conv_transpose2d": 1,
                "quantized_batch_matmul": 1}
_WEIGHT_FIRST = ("quantized_batch_matmul",)


def _check_x_dtype(attrs) -> np.dtype:
    if attrs["x_dtype"] not in ("int8", "uint8"):
        raise ValueError(f"x_dtype must be 'int8' or 'uint8', got {attrs['x_dtype']!r}")
    return np.dtype(attrs["x_dtype"])


def _check_groups(groups, rows) -> None:
    if not isinstance(groups, int) or groups < 1 or rows % groups:
        raise ValueError(f"groups={groups!r} must divide the weight's {rows} rows")


def _check_weight(w: TensorType, ndims, form: str) -> None:
    if w.quant is None or w.dtype not in EIGHT_BITS or w.ndim not in ndims:
        raise TypeError(f"the weight must be a quantized int8 or uint8 {form} value, got {w}")
    if named(*w.shape):
        raise ValueError(f"packs weights of a shape in numbers, got {w.shape}")


def _pack_rule(in_types, attrs):
    # a 3-D weight is a batched matmul's a without a batch. An older reader refuses one by
    # this rule, and only quantized_batch_matmul_packed, an op it does not know, reads it.
    if len(in_types) not in (1, 2):
        raise ValueError(f"takes (w) or (w, bias), got {len(in_types)} inputs")
    w = in_types[0]
    _check_weight(w, (2, 3, 4), "(out, in), (1, n, k) or (out, in/groups, kh, kw)")
    if w.ndim == 3 and (w.shape[0] != 1 or w.quant.per_channel and w.quant.axis != 1):
        raise TypeError(f"a 3-D weight is a batched matmul's a without a batch, (1, n, k), "
                        f"per tensor or per row along axis 1, got {w}")
    _check_x_dtype(attrs)
    rows, k = gemm_rows("quantized_batch_matmul" if w.ndim == 3 else "quantized_conv2d",
                        w.shape)
    _check_groups(attrs["groups"], rows)
    if len(in_types) == 2:
        bias = in_types[1]
        if bias.dtype != np.dtype(np.int32) or bias.shape != (rows,):
            raise TypeError(f"the bias must be int32 of shape ({rows},), got {bias}")
    return (TensorType((packed_size(rows, k, attrs["groups"]) // 4,), np.dtype(np.int32)),)


def _pack_transposed_rule(in_types, attrs):
    if len(in_types) != 1:
        raise ValueError(f"takes (w), got {len(in_types)} inputs")
    (w,) = in_types
    _check_weight(w, (4,), "(C_in, C_out/groups, kh, kw)")
    _check_x_dtype(attrs)
    groups = attrs["groups"]
    _check_groups(groups, w.shape[0])
    if w.quant.per_channel and (w.quant.axis != 1 or groups != 1):
        raise TypeError(f"a per-channel weight is quantized along axis 1 (its output "
                        f"channels) with groups 1, got {w} with groups={groups}")
    rows, k = gemm_rows("quantized_conv_transpose2d", w.shape, groups)
    return (TensorType((packed_size(rows, k, groups) // 4,), np.dtype(np.int32)),)


def _weight_stand_in(attrs, axis: int) -> TensorType:
    """The weight type the packed bytes came from, as far as the rule needs it."""
    shape, scales = tuple(attrs["weight_shape"]), tuple(attrs["weight_scales"])
    if len(shape) not in (2, 3, 4) or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ValueError(f"weight_shape must be (out, in), (1, n, k) or a convolution's 4-D "
                         f"weight, got {shape}")
    if len(scales) not in (1, shape[axis]):
        raise ValueError(f"weight_scales must hold 1 or {shape[axis]} scales, got "
                         f"{len(scales)}")
    quant = QuantParams(scales, (0,) * len(scales), axis if len(scales) > 1 else None)
    return TensorType(shape, np.dtype(np.int8), quant)


def _check_packed(x, packed, attrs, op: str, groups: int) -> None:
    x_dtype = _check_x_dtype(attrs)
    if x.quant is None or x.dtype != x_dtype or x.quant.zero_points != (attrs["x_zero_point"],):
        raise TypeError(f"the weights were packed for a {x_dtype.name} input of zero point "
                        f"{attrs['x_zero_point']}, got {x}")
    shape = tuple(attrs["weight_shape"])
    size = packed_size(*gemm_rows(op, shape, groups), groups)
    if packed.dtype != np.dtype(np.int32) or packed.shape != (size // 4,):
        raise TypeError(f"the packed weights of a {shape} weight in {groups} group(s) are "
                        f"int32 ({size // 4},), got {packed}")


def _packed_rule(name: str, biased: bool = False):
    """The rule of the packed form of op ``name``: its own, on the weight's stand-in
    (``biased``: the bias stays an input after the packed weights)."""
    def rule(in_types, attrs):
        if len(in_types) not in ((2, 3) if biased else (2,)):
            raise ValueError(f"takes (x, packed weights{'[, bias]' if biased else ''}), got "
                             f"{len(in_types)} inputs")
        x, packed, *bias = in_types
        own = {k: v for k, v in attrs.items() if k in get_op(name).attrs}
        _check_packed(x, packed, attrs, name, own.get("groups", 1))
        w = _weight_stand_in(attrs, _WEIGHT_AXIS[name])
        operands = (w, x) if name in _WEIGHT_FIRST else (x, w)
        return get_op(name).infer((*operands, *bias), own)
    return rule


def _packed_flops(node) -> float:
    return 2.0 * node.outputs[0].size * math.prod(node.attr["weight_shape"][1:])


def _packed_transposed_flops(node) -> float:
    # every input value meets C_out/groups * kh * kw weights
    return 2.0 * node.inputs[0].size * math.prod(node.attr["weight_shape"][1:])


def _packed_batch_matmul_flops(node) -> float:
    return 2.0 * node.outputs[0].size * node.attr["weight_shape"][2]


register(OpDef("quantized_pack_weight", "movement", _pack_rule, quantized=True,
               attrs=_PACK_ATTRS, flops_per_element=0.0))
# no gradient: made by a pass after autodiff, from weights no step writes
register(OpDef("quantized_conv2d_packed", "matmul", _packed_rule("quantized_conv2d"),
               quantized=True, attrs={**_CONV_GEOMETRY, **_PACKED_ATTRS},
               flops=_packed_flops))
register(OpDef("quantized_linear_packed", "matmul", _packed_rule("quantized_linear"),
               quantized=True, attrs=_PACKED_ATTRS, flops=_packed_flops))
# the transposed convolution and the batched matmul on weights packed once
register(OpDef("quantized_pack_transposed_weight", "movement", _pack_transposed_rule,
               quantized=True, attrs=_PACK_ATTRS, flops_per_element=0.0))
register(OpDef("quantized_conv_transpose2d_packed", "matmul",
               _packed_rule("quantized_conv_transpose2d", biased=True), quantized=True,
               attrs={**_CONV_GEOMETRY, "output_padding": (0, 0), **_PACKED_ATTRS},
               flops=_packed_transposed_flops))
register(OpDef("quantized_batch_matmul_packed", "matmul", _packed_rule("quantized_batch_matmul"),
               quantized=True, attrs=_PACKED_ATTRS, flops=_packed_batch_matmul_flops))
# each packed op: the op whose weights it reads packed (its weight's layout, gemm_rows)
_PACKED_BASE = {"quantized_conv2d_packed": "quantized_conv2d",
                "quantized_linear_packed": "quantized_linear",
                "quantized_conv_transpose2d_packed": "quantized_conv_transpose2d",
                "quantized_batch_matmul_packed": "quantized_batch_matmul"}
