"""The movement ops on CUDA (csrc_cuda/movement.cu): every op and dtype of the shared
mgegraph/kernel_abi/movement.py, from the same parameter blocks.

>>> [s.entry for s in KERNELS["slice_backward_f32"].steps(Launch((1, 4, 1, 2, 10)), ())]
['mg_slice_backward_f32_zero', 'mg_slice_backward_f32']
"""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch  # noqa: F401  (the doctest's)
from ...ir.types import short_name
from ...kernel_abi import movement as abi
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import GRID_YZ, blocks, family_kernels, implement_shared


def _strided(ints, item):
    nd = ints[0]
    return [math.prod(ints[1:1 + nd])]


def _slice_backward(ints, item):
    nd = ints[0]
    return [ints[2 * nd + 2], math.prod(ints[1:1 + nd])]  # zero the output, then place


def _concat(ints, item):
    count, outer = ints[:2]
    return [outer * sum(ints[2:2 + count]) // item]


def _take(ints, item):
    _, outer, _, row, count = ints[:5]
    return [outer * count * row // item]


def _index_add(ints, item):
    _, outer, n, inner, m = ints[:5]
    return [outer * n * inner, outer * m * inner]


def _gather(ints, item):
    nd = ints[1]
    return [math.prod(ints[2:2 + nd])]


def _scatter_add(ints, item):
    nd = ints[1]
    return [ints[2 + 3 * nd + 2], math.prod(ints[2:2 + nd])]


def _pad(ints, item):
    nd = ints[1]
    return [math.prod(ints[3:3 + nd])]


def _pad_backward(ints, item):
    nd = ints[1]
    return [math.prod(ints[3 + nd:3 + 2 * nd]), math.prod(ints[3:3 + nd])]


# kernel family -> the element counts of its steps; two counts: a "_zero" step, then the main one
COUNTS = {"strided": _strided, "slice_backward": _slice_backward, "concat": _concat,
          "take": _take, "index_add": _index_add, "gather": _gather,
          "scatter_add": _scatter_add, "pad": _pad, "pad_backward": _pad_backward,
          "fill": lambda ints, item: [ints[0]], "one_hot": lambda ints, item: [ints[0] * ints[1]],
          "range": lambda ints, item: [ints[0]]}


def _split_steps(entry, ints, item) -> list[Step]:
    # grid.y walks the outputs, grid.x the elements of the longest
    count, outer = ints[:2]
    longest = max((outer * ints[4 + 2 * k] // item for k in range(count)), default=0)
    if longest == 0:
        return []
    return [Step(entry, (blocks(longest, 256), min(GRID_YZ, count), 1), (256, 1, 1))]


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"
    item = np.dtype(dtype).itemsize

    def steps(launch, types) -> list[Step]:
        if family == "split":
            return _split_steps(entry, launch.ints, item)
        counts = COUNTS[family](launch.ints, item)
        if len(counts) == 1:
            return elementwise_steps(entry, counts[0])
        return elementwise_steps(entry + "_zero", counts[0]) + elementwise_steps(entry,
                                                                                counts[1])
    return steps



def implement(table) -> None:
    """Register the movement ops on ``table`` with the shared lowerings."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "movement.cu", _steps)
