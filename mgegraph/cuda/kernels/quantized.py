"""The int8 compute ops on CUDA: quantized_conv2d and quantized_linear (int32 sums through
``__dp4a``, csrc_cuda/quantized.cuh) and quantized_add (csrc_cuda/quantized.cu), over the CPU's
parameter blocks (mgegraph/kernel_abi/quantized.py): a linear layer is the 1x1 convolution of x
as (rows, in, 1, 1), as on the CPU.

Design: the shared block passes each output channel's requantisation multiplier ``m[o]`` and
weight zero point in the floats, as many as there are channels (thousands in a wide layer),
while MgArgs holds 8. The backend has no per-launch constant buffer, so conv and linear are
rendered kernels: each instruction's text bakes the two tables (exact hexadecimal literals) into
a thin entry over quantized.cuh's template, and the plan's rendered module compiles them
together, layers of equal tables sharing one kernel (named by the text's hash); the launch
keeps the block's ints, its floats dropped. quantized_add's block fits
MgArgs as it is.

Zero points: dp4a multiplies signed bytes, so a uint8 value is read as the int8 ``q - 128``
(its byte XOR 0x80) and its zero point moves by 128 too (``shifted``); the centred products,
and so the integers, are unchanged.

>>> sorted(KERNELS)
['quantized_add_i8', 'quantized_add_u8', 'quantized_conv2d_i8', 'quantized_conv2d_u8']
"""
from __future__ import annotations

import hashlib

import numpy as np

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import quantized as abi
from .. import geometry as grid
from ..kernel import CudaKernel, RenderedKernel
from .reuse import implement_shared

CONV_FIELDS = abi.FIELDS["QCONV_FIELDS"]
ADD_FIELDS = abi.FIELDS["QADD_FIELDS"]


def shifted(zero_point: int, dtype) -> int:
    """The zero point of values of ``dtype`` as the int8 that dp4a reads (uint8: less 128)."""
    return int(zero_point) - (128 if np.dtype(dtype) == np.uint8 else 0)


def tables(types, channels: int) -> tuple[list[float] | None, list[int]]:
    """(m[o], None for an int32 result; zw'[o]) of each of ``channels`` output channels from
    the types of (x, w, [bias,] y): the multipliers as the CPU's block has them."""
    x, w, y = types[0], types[1], types[-1]
    zw = [shifted(z, w.dtype) for z in np.broadcast_to(w.quant.zero_points, (channels,))]
    if np.dtype(y.dtype) == np.int32:
        return None, zw
    return list(abi.multipliers(x.quant.scale, w.quant.scales, y.quant.scale, channels)), zw


def kernel_text(op: str, x_dtype, m, zw) -> tuple[str, str]:
    """(entry, text) of one instruction's kernel: its tables and an entry calling quantized.cuh's
    mg_qconv2d; the entry's name is a hash of the text, so equal layers share it."""
    name = "MG_QUANTIZED"
    m_arg = "nullptr"
    lines = [f"// mg-op: {op}", '#include "quantized.cuh"']
    if m is not None:
        lines.append(f"MG_QTABLE float {name}_m[] = {{{', '.join(v.hex() + 'f' for v in m)}}};")
        m_arg = f"{name}_m"
    lines.append(f"MG_QTABLE int {name}_zw[] = {{{', '.join(str(z) for z in zw)}}};")
    lines.append(f'extern "C" __global__ void {name}(const __grid_constant__ MgArgs a) '
                 f"{{ mg_qconv2d(a, {m_arg}, {name}_zw, {abi.CODES[np.dtype(x_dtype).name]}); }}")
    text = "\n".join(lines) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    entry = f"mg_{op}_{short_name(np.dtype(x_dtype))}_{digest}"
    return entry, text.replace(name, entry)


def _field(ints, name: str) -> int:
    return ints[CONV_FIELDS.index(name)]


def _render(ins, types):
    m, zw = tables(types, _field(ins.ints, "out_channels"))
    entry, text = kernel_text("quantized_conv2d", types[0].dtype, m, zw)
    outputs = 1
    for name in ("batch", "out_channels", "out_h", "out_w"):
        outputs *= _field(ins.ints, name)
    step = grid.grid_stride(outputs, entry=entry)
    return text, [] if step is None else [step]


def _add_steps(entry):
    def steps(launch, types) -> list:
        ndim = launch.ints[ADD_FIELDS.index("ndim")]
        start = len(ADD_FIELDS)
        outputs = 1
        for size in launch.ints[start:start + ndim]:
            outputs *= size
        step = grid.grid_stride(outputs, entry=entry)
        return [] if step is None else [step]
    return steps


def _ints_only(op, cpu_lower):
    # conv and linear: the tables the floats hold are in the rendered text
    if op == "quantized_add":
        return cpu_lower
    return lambda node: Launch(cpu_lower(node).ints)


# the int8 transposed convolution and batched matmul have no CUDA kernel yet: a plan with them
# on CUDA is refused at compile, naming the op
CUDA_OPS = ("quantized_conv2d", "quantized_linear", "quantized_add")


def implement(table) -> None:
    """Register quantized_conv2d, quantized_linear and quantized_add on ``table``, dispatched
    by the dtype of their input 0 (int8 or uint8)."""
    implement_shared(table, abi, _ints_only, ops=CUDA_OPS)


KERNELS = {
    **{f"quantized_conv2d_{short_name(d)}": RenderedKernel(_render)
       for d in abi.EIGHT_BIT_DTYPES},
    **{f"quantized_add_{short_name(d)}": CudaKernel(
        "quantized.cu", _add_steps(f"mg_quantized_add_{short_name(d)}"))
       for d in abi.EIGHT_BIT_DTYPES},
}
