"""The CPU lowerings: for each op, its kernel family, the dtypes the kernels implement, and the
function that lays out a node's parameter block (``Launch``) as the kernel module reads it.

One module per kernel module; each has ``implement(table)``, which registers its ops.
"""
from __future__ import annotations

from . import conv, elementwise, fused, matmul, movement, nn, norm, pool, reduce, resize, vision

FAMILIES = (elementwise, reduce, nn, norm, matmul, conv, pool, movement, fused, vision, resize)
# deformable sampling and correlation (lowering/deform.py)
from . import deform

FAMILIES += (deform,)
# sort, topk and the scans cumsum, cumprod (lowering/sorting.py)
from . import sorting

FAMILIES += (sorting,)
# RMS norm (lowering/rms_norm.py)
from . import rms_norm

FAMILIES += (rms_norm,)
# scaled dot-product attention and its backward (lowering/attention.py)
from . import attention

FAMILIES += (attention,)
# random draws: uniform, gamma, poisson (lowering/random.py)
from . import random

FAMILIES += (random,)
# MegEngine's matinv and sliding windows (lowering/matinv.py, lowering/sliding_window.py)
from . import matinv, sliding_window

FAMILIES += (matinv, sliding_window)
# convolutions with unshared weights or region-restricted taps (lowering/local_conv.py)
from . import local_conv

FAMILIES += (local_conv,)
# quantize and dequantize (lowering/quantize.py)
from . import quantize

FAMILIES += (quantize,)
# quantization-aware training's fake_quant (lowering/fake_quant.py)
from . import fake_quant

FAMILIES += (fake_quant,)
# the int8 compute ops: quantized conv2d, linear and add (lowering/quantized.py)
from . import quantized

FAMILIES += (quantized,)
# the int8 ops on packed weights: quantized_pack_weight, quantized conv2d/linear packed
from . import quantized_pack

FAMILIES += (quantized_pack,)
# the collectives over MPI: all_reduce and its planned start/wait pair (lowering/collective.py)
from . import collective

FAMILIES += (collective,)


def implement_all(table) -> None:
    for family in FAMILIES:
        family.implement(table)
