"""The int8 compute ops on CUDA: quantized_conv2d and quantized_linear (int32 sums through
``__dp4a``, csrc_cuda/quantized.cuh) and quantized_add (csrc_cuda/quantized.cu).

Design: a convolution's or a linear layer's per-channel constants (the requantisation
multipliers ``m[o]`` and the weight zero points) are tables of as many entries as output
channels, thousands in a wide layer, while MgArgs holds 8 floats. The backend has no per-launch
constant buffer, so conv and linear are rendered kernels: each instruction's text bakes its
tables (exact hexadecimal literals) into a thin entry over the templates of quantized.cuh, and
the plan's rendered module compiles them together, layers of equal tables sharing one kernel.
The geometry and the per-tensor numbers stay in the ints, read by the kernel at run time.

Zero points: dp4a multiplies signed bytes, so a uint8 value is read as the int8 ``q - 128``
(its byte XOR 0x80) and its zero point moves by 128 too (``_shifted``); the centred products,
and so the integers, are unchanged.

>>> sorted(KERNELS)
['quantized_add_i8', 'quantized_add_u8', 'quantized_conv2d_i8', 'quantized_conv2d_u8', \
'quantized_linear_i8', 'quantized_linear_u8']
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi.conv import geometry
from ...kernel_abi.layout import broadcast_strides, collapse, contiguous_strides, pack
from ...ops.quantized import STORAGE_RANGES
from .. import geometry as grid
from ..kernel import CudaKernel, RenderedKernel

CODES = {"int8": 0, "uint8": 1, "int32": 2}  # quantized.cuh's MG_Q_INT8, MG_Q_UINT8, MG_Q_INT32
EIGHT_BITS = ("int8", "uint8")
REQUANT_FIELDS = ("out_code", "zy", "lo", "hi")
CONV_FIELDS = ("batch", "cin", "h", "w", "cout", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw",
               "dh", "dw", "groups", "has_bias", "x_code", "w_code", "zx", *REQUANT_FIELDS)
LINEAR_FIELDS = ("rows", "k", "n", "has_bias", "x_code", "w_code", "zx", *REQUANT_FIELDS)
ADD_FIELDS = ("a_code", "b_code", "out_code", "za", "zb", "zy", "lo", "hi", "ndim")


def _code(t) -> int:
    return CODES[np.dtype(t.dtype).name]


def _shifted(zero_point: int, t) -> int:
    """The zero point of ``t``'s values as the int8 that dp4a reads (uint8: less 128)."""
    return int(zero_point) - (128 if np.dtype(t.dtype) == np.uint8 else 0)


def _requant(y, attrs) -> dict[str, int]:
    """The epilogue's fields: the output's code, zero point and (relu-narrowed) range."""
    out = np.dtype(y.dtype).name
    zy = 0 if out == "int32" else y.quant.zero_point
    lo, hi = STORAGE_RANGES[out]
    return {"out_code": CODES[out], "zy": zy, "lo": max(lo, zy) if attrs["relu"] else lo,
            "hi": hi}


def _lower_conv(node) -> Launch:
    x, w = (v.type for v in node.inputs[:2])
    y = node.outputs[0].type
    attrs = node.attr
    return Launch(pack(CONV_FIELDS, **geometry(x, w, y, attrs),
                       has_bias=len(node.inputs) == 3, x_code=_code(x), w_code=_code(w),
                       zx=_shifted(x.quant.zero_point, x), **_requant(y, attrs)))


def _lower_linear(node) -> Launch:
    x, w = (v.type for v in node.inputs[:2])
    return Launch(pack(LINEAR_FIELDS, rows=math.prod(x.shape[:-1]), k=w.shape[1],
                       n=w.shape[0], has_bias=len(node.inputs) == 3, x_code=_code(x),
                       w_code=_code(w), zx=_shifted(x.quant.zero_point, x),
                       **_requant(node.outputs[0].type, node.attr)))


def _lower_add(node) -> Launch:
    a, b = (v.type for v in node.inputs)
    y = node.outputs[0].type
    out = tuple(y.shape)
    shape, strides = collapse(out, [contiguous_strides(out), broadcast_strides(a.shape, out),
                                    broadcast_strides(b.shape, out)])
    sy = np.float32(y.quant.scale)
    ma, mb = np.float32(a.quant.scale) / sy, np.float32(b.quant.scale) / sy
    requant = _requant(y, node.attr)
    block = pack(ADD_FIELDS, a_code=_code(a), b_code=_code(b), za=a.quant.zero_point,
                 zb=b.quant.zero_point, ndim=len(shape), **requant)
    return Launch((*block, *shape, *strides[1], *strides[2]), (float(ma), float(mb)))


def multipliers(x, w, y) -> np.ndarray:
    """m[o] = float32(sx) * float32(sw[o]) / float32(sy), each step in float32 (ONNX Runtime's
    requantisation multiplier, ops/quantized.py)."""
    return (np.float32(x.quant.scale) * np.asarray(w.quant.scales, np.float32)) \
        / np.float32(y.quant.scale)


def tables(types, channels: int) -> tuple[list[float] | None, list[int]]:
    """(m[o] or None for an int32 result, zw'[o]) of each of ``channels`` output channels,
    from the types of (x, w, [bias,] y)."""
    x, w, y = types[0], types[1], types[-1]
    zw = [_shifted(z, w) for z in w.quant.zero_points]
    m = None if np.dtype(y.dtype) == np.int32 else multipliers(x, w, y).tolist()
    if len(zw) == 1:
        zw, m = zw * channels, None if m is None else m * channels
    return m, zw


def kernel_text(op: str, template: str, m, zw) -> tuple[str, str]:
    """(entry, text) of one instruction's kernel: its tables and an entry calling ``template``
    (quantized.cuh); the entry's name is a hash of the text, so equal layers share it."""
    name = "MG_QUANTIZED"
    m_arg = "nullptr"
    lines = [f"// mg-op: {op}", '#include "quantized.cuh"']
    if m is not None:
        lines.append(f"MG_QTABLE float {name}_m[] = {{{', '.join(v.hex() + 'f' for v in m)}}};")
        m_arg = f"{name}_m"
    lines.append(f"MG_QTABLE int {name}_zw[] = {{{', '.join(str(z) for z in zw)}}};")
    lines.append(f'extern "C" __global__ void {name}(const __grid_constant__ MgArgs a) '
                 f"{{ {template}(a, {m_arg}, {name}_zw); }}")
    text = "\n".join(lines) + "\n"
    entry = f"mg_{op}_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return entry, text.replace(name, entry)


def _renderer(op: str, template: str, channels_at: int, outputs_at):
    def render(ins, types):
        m, zw = tables(types, ins.ints[channels_at])
        entry, text = kernel_text(op, template, m, zw)
        step = grid.grid_stride(outputs_at(ins.ints), entry=entry)
        return text, [] if step is None else [step]
    return render


def _conv_outputs(ints) -> int:
    n, cout, oh, ow = (ints[CONV_FIELDS.index(f)] for f in ("batch", "cout", "oh", "ow"))
    return n * cout * oh * ow


def _add_steps(entry):
    def steps(launch, types) -> list:
        ndim = launch.ints[ADD_FIELDS.index("ndim")]
        start = len(ADD_FIELDS)
        step = grid.grid_stride(math.prod(launch.ints[start:start + ndim]), entry=entry)
        return [] if step is None else [step]
    return steps


def _kernels() -> dict:
    kernels = {}
    for dtype in EIGHT_BITS:
        short = short_name(np.dtype(dtype))
        kernels[f"quantized_conv2d_{short}"] = RenderedKernel(_renderer(
            "quantized_conv2d", "mg_qconv2d", CONV_FIELDS.index("cout"), _conv_outputs))
        kernels[f"quantized_linear_{short}"] = RenderedKernel(_renderer(
            "quantized_linear", "mg_qlinear", LINEAR_FIELDS.index("n"),
            lambda ints: ints[0] * ints[2]))
        kernels[f"quantized_add_{short}"] = CudaKernel("quantized.cu",
                                                       _add_steps(f"mg_quantized_add_{short}"))
    return kernels


KERNELS = _kernels()


def implement(table) -> None:
    """Register quantized_conv2d, quantized_linear and quantized_add on ``table``, dispatched
    by the dtype of their input 0 (int8 or uint8)."""
    for op, lower in (("quantized_conv2d", _lower_conv), ("quantized_linear", _lower_linear),
                      ("quantized_add", _lower_add)):
        table.implement(op, kernel=op, dtypes=EIGHT_BITS, lower=lower)
