"""matmul (batched, broadcast, transposed; float and integer) and linear (bias and activation
epilogue) on CUDA (csrc_cuda/gemm.cu), from the shared blocks of
mgegraph/kernel_abi/matmul.py.

>>> tile_for(np.float32, tiles_large=4)
'_small'
"""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import matmul as abi
from ..kernel import Step
from .reuse import GRID_YZ, blocks, family_kernels, implement_shared

# csrc_cuda/gemm.cu's tiles (BM, BN) and threads: float32 takes the large one unless the
# product has too few of its tiles to fill a GPU's SMs; the other dtypes always the small one
LARGE, SMALL, THREADS = (128, 128), (64, 64), 256
LARGE_MIN_TILES = 256  # about two blocks per SM of an A100/H100
# split-K (csrc_cuda/gemm.cu's `_split` and `_sum`): a product with fewer small tiles than an
# H100/H200 has SMs (132) splits k into parts of at least SPLIT_MIN_K, up to two blocks per SM;
# the workspace holds a header (MG_SPLIT_HEADER bytes) and one partial product per part
SMS = 132
SPLIT_MIN_K = 256
MAX_SPLITS = 32
SPLIT_HEADER = 64


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


def gemm_splits(family: str, ints) -> int:
    """Into how many parts a product splits its k (1: none); only single products split."""
    m, n, batch = _dims(family, ints)
    k = ints[2]
    tiles = math.ceil(m / SMALL[0]) * math.ceil(n / SMALL[1])
    if batch != 1 or tiles == 0 or tiles >= SMS:
        return 1
    return max(1, min(math.ceil(2 * SMS / tiles), k // SPLIT_MIN_K, MAX_SPLITS))


# fields of the CPU's parameter blocks that say how the CPU runs a product (its threads, whether
# on the gather tiles, whether a single row's threads split k), which csrc_cuda/gemm.cu's ints
# leave out
CPU_ONLY = ("threads", "tiles", "gemv_split")


def cuda_ints(op, ints) -> tuple:
    """The shared lowering's ints of ``op`` without its CPU_ONLY fields (matmul's batch groups,
    after the named fields, stay as they are)."""
    names = abi.FIELDS["MATMUL_FIELDS" if op == "matmul" else "LINEAR_FIELDS"]
    return tuple(v for i, v in enumerate(ints) if i >= len(names) or names[i] not in CPU_ONLY)


def _with_workspace(op, cpu_lower):
    # Design: the shared lowering's ints less what only the CPU uses (and no tiles' workspace);
    # a split product's parts meet in a workspace, summed in a fixed order by a second step.
    def lower(node) -> Launch:
        launch = cpu_lower(node)
        ints = cuda_ints(op, launch.ints)
        splits = gemm_splits(op, ints)
        workspace = 0 if splits == 1 else \
            SPLIT_HEADER + splits * node.outputs[0].size * node.outputs[0].dtype.itemsize
        return Launch(ints, launch.floats, workspace)
    return lower


def _steps(family, dtype):
    base = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        m, n, batch = _dims(family, launch.ints)
        if m == 0 or n == 0 or batch == 0:
            return []
        splits = gemm_splits(family, launch.ints)
        if splits > 1:
            grid = (math.ceil(n / SMALL[1]), min(GRID_YZ, math.ceil(m / SMALL[0])), splits)
            return [Step(base + "_split", grid, (THREADS, 1, 1)),
                    Step(base + "_sum", (blocks(m * n, 256), 1, 1), (256, 1, 1))]
        tiles = math.ceil(m / LARGE[0]) * math.ceil(n / LARGE[1]) * batch
        suffix = tile_for(dtype, tiles)
        bm, bn = LARGE if np.dtype(dtype) == np.float32 and not suffix else SMALL
        grid = (math.ceil(n / bn), min(GRID_YZ, math.ceil(m / bm)), min(GRID_YZ, batch))
        return [Step(base + suffix, grid, (THREADS, 1, 1))]
    return steps



# the ops gemm.cu runs (the CPU's addmm has no kernel here: the accumulate pass then leaves
# the product and its add apart)
OPS = ("matmul", "linear")


def implement(table) -> None:
    """Register matmul and linear on ``table`` with the shared lowerings."""
    implement_shared(table, abi, _with_workspace, OPS)


KERNELS = family_kernels(abi, "gemm.cu", _steps, OPS)
