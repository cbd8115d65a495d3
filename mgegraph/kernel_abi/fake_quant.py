"""fake_quant's parameter block, read by _kernels/fake_quant.pyx and csrc_cuda/fake_quant.cu.

The value is (outer, channels, inner): ``channels`` the size of the per-channel axis (1 per
tensor); ``qmin`` and ``qmax`` the integer range. Buffers: x, the scales, the zero points (one
per channel), then the output. No floats: the scale and zero point are tensors (a learned step).
"""
from __future__ import annotations

import math

from ..backend import Launch
from ..ir.types import FLOAT_DTYPES
from .layout import one_thread, pack

FIELDS = {"FAKE_QUANT_FIELDS": ("outer", "channels", "inner", "qmin", "qmax", "threads")}


def _block(node, threads: int) -> Launch:
    shape, axis = node.inputs[0].shape, node.attr["axis"]
    if axis is None:
        outer, channels, inner = 1, 1, math.prod(shape)
    else:
        outer, channels = math.prod(shape[:axis]), shape[axis]
        inner = math.prod(shape[axis + 1:])
    return Launch(pack(FIELDS["FAKE_QUANT_FIELDS"], outer=outer, channels=channels, inner=inner,
                       qmin=node.attr["qmin"], qmax=node.attr["qmax"], threads=threads))


def implement(table, threads=one_thread) -> None:
    """Register fake_quant on ``table``; ``threads(node)`` fills the threads field."""
    table.implement("fake_quant", kernel="fake_quant", dtypes=FLOAT_DTYPES,
                    lower=lambda node: _block(node, threads(node)))
