"""quantize's and dequantize's parameter block, read by _kernels/quantize.pyx.

The value is (outer, channels, inner): ``channels`` the size of the per-channel axis (1 per
tensor). The floats are the scales, then the zero points, one of each per channel.
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import Launch
from ..ir.types import FLOAT_DTYPES
from .layout import one_thread, pack

FIELDS = {"QUANT_FIELDS": ("outer", "channels", "inner", "code", "threads")}
# the storage dtypes' codes in the block (quantize's output, dequantize's input)
CODES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2}
FLOAT_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}
QUANT_DTYPES = tuple(CODES)


def _block(value, code: int, threads: int) -> Launch:
    q = value.type.quant
    shape = value.shape
    if q.axis is None:
        outer, channels, inner = 1, 1, math.prod(shape)
    else:
        outer, channels = math.prod(shape[:q.axis]), shape[q.axis]
        inner = math.prod(shape[q.axis + 1:])
    ints = pack(FIELDS["QUANT_FIELDS"], outer=outer, channels=channels, inner=inner, code=code,
                threads=threads)
    return Launch(ints, (*q.scales, *map(float, q.zero_points)))


def implement(table, threads=one_thread) -> None:
    """Register quantize and dequantize on ``table``; ``threads(node)`` fills the threads
    field."""
    table.implement("quantize", kernel="quantize", dtypes=FLOAT_DTYPES,
                    lower=lambda node: _block(node.outputs[0], CODES[node.outputs[0].dtype],
                                              threads(node)))
    table.implement("dequantize", kernel="dequantize", dtypes=QUANT_DTYPES,
                    lower=lambda node: _block(node.inputs[0], FLOAT_CODES[node.outputs[0].dtype],
                                              threads(node)))
