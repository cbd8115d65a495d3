"""The int8 compute ops on CUDA: quantized_conv2d, quantized_linear,
quantized_conv_transpose2d and quantized_batch_matmul (int32 sums through ``__dp4a``,
csrc_cuda/quantized.cuh) and quantized_add (csrc_cuda/quantized.cu), over the CPU's parameter
blocks (mgegraph/kernel_abi/quantized.py): a linear layer is the 1x1 convolution of x as
(rows, in, 1, 1), as on the CPU; the transposed convolution reads the convolution's block, the
batched matmul its own.

Design: the shared block passes each output channel's requantisation multiplier ``m[o]`` and
weight zero point in the floats, as many as there are channels (thousands in a wide layer),
while MgArgs holds 8. The backend has no per-launch constant buffer, so these four ops are
rendered kernels: each instruction's text bakes the two tables (exact hexadecimal literals) into
a thin entry over one of quantized.cuh's templates (``RENDERED``), and the plan's rendered
module compiles them together, layers of equal tables sharing one kernel (named by the text's
hash); the launch keeps the block's ints, its floats dropped. The batched matmul's "channels"
are a's rows (a plays the weight, b the activation). quantized_add's block fits MgArgs as it
is.

Zero points: dp4a multiplies signed bytes, so a uint8 value is read as the int8 ``q - 128``
(its byte XOR 0x80) and its zero point moves by 128 too (``shifted``); the centred products,
and so the integers, are unchanged.

The CPU's kernels refuse nothing the ops' rules let through (they stop only when their scratch
memory cannot be had; these kernels have none). The CPU's packed forms (quantized_conv2d_packed,
quantized_linear_packed) have no kernel here: the CUDA backend packs no weights (its
``prepack`` is None), so the prepack pass leaves these ops as they are on CUDA.

>>> sorted(KERNELS)[:4]
['quantized_add_i8', 'quantized_add_u8', 'quantized_batch_matmul_i8', 'quantized_batch_matmul_u8']
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import quantized as abi
from .. import geometry as grid
from ..kernel import CudaKernel, RenderedKernel
from .reuse import implement_shared

CONV_FIELDS = abi.FIELDS["QCONV_FIELDS"]
BMM_FIELDS = abi.FIELDS["QBMM_FIELDS"]
ADD_FIELDS = abi.FIELDS["QADD_FIELDS"]


def shifted(zero_point: int, dtype) -> int:
    """The zero point of values of ``dtype`` as the int8 that dp4a reads (uint8: less 128)."""
    return int(zero_point) - (128 if np.dtype(dtype) == np.uint8 else 0)


def tables(x, w, y, channels: int) -> tuple[list[float] | None, list[int]]:
    """(m[o], None for an int32 result; zw'[o]) of each of ``channels`` output channels from
    the TensorTypes of the activation ``x``, the weight ``w`` and the result ``y``: the
    multipliers as the CPU's block has them."""
    zw = [shifted(z, w.dtype) for z in np.broadcast_to(w.quant.zero_points, (channels,))]
    if np.dtype(y.dtype) == np.int32:
        return None, zw
    return list(abi.multipliers(x.quant.scale, w.quant.scales, y.quant.scale, channels)), zw


def kernel_text(op: str, x_dtype, m, zw) -> tuple[str, str]:
    """(entry, text) of one instruction's kernel of family ``op``: its tables and an entry
    calling the family's template in quantized.cuh; the entry's name is a hash of the text, so
    equal layers share it."""
    name = "MG_QUANTIZED"
    m_arg = "nullptr"
    lines = [f"// mg-op: {op}", '#include "quantized.cuh"']
    if m is not None:
        lines.append(f"MG_QTABLE float {name}_m[] = {{{', '.join(v.hex() + 'f' for v in m)}}};")
        m_arg = f"{name}_m"
    lines.append(f"MG_QTABLE int {name}_zw[] = {{{', '.join(str(z) for z in zw)}}};")
    lines.append(f'extern "C" __global__ void {name}(const __grid_constant__ MgArgs a) '
                 f"{{ {RENDERED[op].template}(a, {m_arg}, {name}_zw, "
                 f"{abi.CODES[np.dtype(x_dtype).name]}); }}")
    text = "\n".join(lines) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    entry = f"mg_{op}_{short_name(np.dtype(x_dtype))}_{digest}"
    return entry, text.replace(name, entry)


@dataclass(frozen=True)
class Rendered:
    """How a rendered family reads its block: quantized.cuh's device function its entry calls,
    the block's fields, which input is the activation (per tensor: its dtype names the entry)
    and which the weight (its scales and zero points make the tables), the field counting the
    tables' channels, and the fields whose product is the output's size."""

    template: str
    fields: tuple[str, ...]
    activation: int
    weight: int
    channels: str
    outputs: tuple[str, ...]


_CONV = {"fields": CONV_FIELDS, "activation": 0, "weight": 1, "channels": "out_channels",
         "outputs": ("batch", "out_channels", "out_h", "out_w")}
RENDERED = {
    "quantized_conv2d": Rendered("mg_qconv2d", **_CONV),
    "quantized_conv_transpose2d": Rendered("mg_qconv_transpose2d", **_CONV),
    "quantized_batch_matmul": Rendered("mg_qbatch_matmul", BMM_FIELDS, activation=1, weight=0,
                                       channels="rows", outputs=("batch", "rows", "cols")),
}


def _renderer(op: str):
    """The ``render(ins, types)`` of family ``op``'s kernels: the text and its one launch."""
    spec = RENDERED[op]

    def render(ins, types):
        field = dict(zip(spec.fields, ins.ints))
        x = types[spec.activation]
        m, zw = tables(x, types[spec.weight], types[-1], field[spec.channels])
        entry, text = kernel_text(op, x.dtype, m, zw)
        step = grid.grid_stride(math.prod(field[name] for name in spec.outputs), entry=entry)
        return text, [] if step is None else [step]
    return render


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
    # the rendered ops (linear is conv2d's kernel): the floats' tables are in the rendered text
    if op == "quantized_add":
        return cpu_lower
    return lambda node: Launch(cpu_lower(node).ints)


# the int8 ops with a CUDA kernel: all but the CPU's packed forms (see the module's docstring)
CUDA_OPS = ("quantized_conv2d", "quantized_linear", "quantized_conv_transpose2d",
            "quantized_batch_matmul", "quantized_add")


def implement(table) -> None:
    """Register the int8 compute ops on ``table``, dispatched by the dtype (int8 or uint8) of
    their activation: input 0, the batched matmul's b (input 1)."""
    implement_shared(table, abi, _ints_only, ops=CUDA_OPS)


KERNELS = {
    **{f"{op}_{short_name(d)}": RenderedKernel(_renderer(op))
       for op in RENDERED for d in abi.EIGHT_BIT_DTYPES},
    **{f"quantized_add_{short_name(d)}": CudaKernel(
        "quantized.cu", _add_steps(f"mg_quantized_add_{short_name(d)}"))
       for d in abi.EIGHT_BIT_DTYPES},
}
