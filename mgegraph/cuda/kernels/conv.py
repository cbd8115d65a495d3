"""conv2d and its two gradients on CUDA (csrc_cuda/conv.cu), as implicit GEMMs over the shared
Conv parameter block (mgegraph/kernel_abi/conv.py).

>>> sorted(KERNELS)
['conv2d_backward_data_f32', 'conv2d_backward_data_f64', 'conv2d_backward_filter_f32', \
'conv2d_backward_filter_f64', 'conv2d_f32', 'conv2d_f64']
"""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import conv as abi
from ..kernel import Step
from .gemm import LARGE, SMALL, THREADS, tile_for
from .reuse import GRID_YZ, blocks, family_kernels, implement_shared

# The Conv fields csrc_cuda/conv.cu reads, by position (its struct Conv)
FIELDS = ("batch", "cin", "h", "w", "cout", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh",
          "dw", "groups", "has_bias", "path", "activation")


# backward filter's split over the batch's pixels (csrc_cuda/conv.cu): enough blocks for two
# per SM of a 132-SM GPU, each summing at least SPLIT_MIN_PIXELS; the workspace holds a header
# (MG_FILTER_HEADER bytes) and one partial dw per split
SPLIT_BLOCKS = 264
SPLIT_MIN_PIXELS = 2048
FILTER_HEADER = 64


def filter_splits(ints) -> int:
    """Into how many parts backward filter splits its sum over pixels (1: no split)."""
    m, n, groups = product_dims("conv2d_backward_filter", ints)
    p = dict(zip(FIELDS, ints))
    pixels = p["batch"] * p["oh"] * p["ow"]
    tiles = math.ceil(m / SMALL[0]) * math.ceil(n / SMALL[1]) * groups
    if m == 0 or n == 0 or tiles >= SPLIT_BLOCKS:
        return 1
    return max(1, min(math.ceil(SPLIT_BLOCKS / tiles), pixels // SPLIT_MIN_PIXELS,
                      GRID_YZ // groups))


def _workspace(op, cpu_lower):
    # Design: the shared block as it is (the CPU's fields at their plainest: conv.cu reads the
    # geometry alone); no im2col matrix, which an implicit GEMM never builds: what the device
    # reserves is backward filter's partial sums when it splits.
    def lower(node) -> Launch:
        launch = cpu_lower(node)
        splits = filter_splits(launch.ints) if op == "conv2d_backward_filter" else 1
        size = node.outputs[0].size * node.outputs[0].dtype.itemsize
        return Launch(launch.ints, launch.floats,
                      workspace=FILTER_HEADER + splits * size if splits > 1 else 0)
    return lower


def product_dims(family: str, ints) -> tuple[int, int, int]:
    """(m, n, groups) of the product each group computes: rows and columns of its result."""
    p = dict(zip(FIELDS, ints))
    cg, ocg = p["cin"] // p["groups"], p["cout"] // p["groups"]
    if family == "conv2d":
        return ocg, p["batch"] * p["oh"] * p["ow"], p["groups"]
    if family == "conv2d_backward_data":
        return cg, p["batch"] * p["h"] * p["w"], p["groups"]
    return ocg, cg * p["kh"] * p["kw"], p["groups"]


def _steps(family, dtype):
    base = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        m, n, groups = product_dims(family, launch.ints)
        if m == 0 or n == 0 or groups == 0:
            return []
        splits = filter_splits(launch.ints) if family == "conv2d_backward_filter" else 1
        if splits > 1:
            grid = (math.ceil(n / SMALL[1]), min(GRID_YZ, math.ceil(m / SMALL[0])),
                    groups * splits)
            return [Step(base + "_split", grid, (THREADS, 1, 1)),
                    Step(base + "_sum", (blocks(m * n * groups, 256), 1, 1), (256, 1, 1))]
        suffix = tile_for(dtype, math.ceil(m / LARGE[0]) * math.ceil(n / LARGE[1]) * groups)
        bm, bn = LARGE if np.dtype(dtype) == np.float32 and not suffix else SMALL
        grid = (math.ceil(n / bn), min(GRID_YZ, math.ceil(m / bm)), min(GRID_YZ, groups))
        return [Step(base + suffix, grid, (THREADS, 1, 1))]
    return steps


if abi.FIELDS[:len(FIELDS)] != FIELDS:
    raise ImportError(f"the shared Conv fields {abi.FIELDS} no longer start with {FIELDS}, which "
                      "csrc_cuda/conv.cu reads by position")


def implement(table) -> None:
    """Register conv2d and its gradients on ``table``."""
    implement_shared(table, abi, _workspace)


KERNELS = family_kernels(abi, "conv.cu", _steps)
