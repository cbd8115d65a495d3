"""matmul (batched, broadcast, transposed; float and integer) and linear (bias and relu
epilogue) on CUDA (csrc_cuda/gemm.cu), from the CPU's mgegraph/_kernels/lowering/matmul.py.

>>> tile_for(np.float32, tiles_large=4)
'_small'
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.types import short_name
from ..kernel import Step
from .reuse import GRID_YZ, family_kernels, implement_like_cpu

# csrc_cuda/gemm.cu's tiles (BM, BN) and threads: float32 takes the large one unless the
# product has too few of its tiles to fill a GPU's SMs; the other dtypes always the small one
LARGE, SMALL, THREADS = (128, 128), (64, 64), 256
LARGE_MIN_TILES = 256  # about two blocks per SM of an A100/H100


def tile_for(dtype, tiles_large: int) -> str:
    """The entry's suffix: "" (the dtype's default tile) or "_small" (float32's small one)."""
    return "_small" if np.dtype(dtype) == np.float32 and tiles_large < LARGE_MIN_TILES else ""


def _dims(family, ints) -> tuple[int, int, int]:
    """(m, n, batch elements) of a matmul or linear parameter block."""
    m, n = ints[0], ints[1]
    if family == "linear":
        return m, n, 1
    nd = ints[5]
    return m, n, math.prod(ints[6:6 + nd])


def _steps(family, dtype):
    base = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        m, n, batch = _dims(family, launch.ints)
        if m == 0 or n == 0 or batch == 0:
            return []
        tiles = math.ceil(m / LARGE[0]) * math.ceil(n / LARGE[1]) * batch
        suffix = tile_for(dtype, tiles)
        bm, bn = LARGE if np.dtype(dtype) == np.float32 and not suffix else SMALL
        grid = (math.ceil(n / bn), min(GRID_YZ, math.ceil(m / bm)), min(GRID_YZ, batch))
        return [Step(base + suffix, grid, (THREADS, 1, 1))]
    return steps


def _cpu():
    from ..._kernels.lowering import matmul
    return matmul


def implement(table) -> None:
    """Register matmul and linear on ``table`` with the CPU's lowerings."""
    implement_like_cpu(table, _cpu())


KERNELS = family_kernels(_cpu(), "gemm.cu", _steps)
