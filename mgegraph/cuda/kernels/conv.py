"""conv2d and its two gradients on CUDA (csrc_cuda/conv.cu), as implicit GEMMs over the CPU's
Conv parameter block (mgegraph/_kernels/lowering/conv.py).

>>> sorted(KERNELS)
['conv2d_backward_data_f32', 'conv2d_backward_data_f64', 'conv2d_backward_filter_f32', \
'conv2d_backward_filter_f64', 'conv2d_f32', 'conv2d_f64']
"""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch
from ...ir.types import short_name
from ..kernel import Step
from .gemm import LARGE, SMALL, THREADS, tile_for
from .reuse import GRID_YZ, family_kernels, implement_like_cpu

# The Conv fields csrc_cuda/conv.cu reads, by position (its struct Conv)
FIELDS = ("batch", "cin", "h", "w", "cout", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh",
          "dw", "groups", "has_bias", "path", "relu")


def _no_workspace(op, cpu_lower):
    # Design: the CPU lowering's ints as they are; its workspace holds an im2col matrix, which an
    # implicit GEMM never builds, so the device arena does not reserve it.
    def lower(node) -> Launch:
        launch = cpu_lower(node)
        return Launch(launch.ints, launch.floats)
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
        suffix = tile_for(dtype, math.ceil(m / LARGE[0]) * math.ceil(n / LARGE[1]) * groups)
        bm, bn = LARGE if np.dtype(dtype) == np.float32 and not suffix else SMALL
        grid = (math.ceil(n / bn), min(GRID_YZ, math.ceil(m / bm)), min(GRID_YZ, groups))
        return [Step(base + suffix, grid, (THREADS, 1, 1))]
    return steps


def _cpu():
    from ..._kernels import conv
    from ..._kernels.lowering import conv as lowering
    if tuple(conv.CONV_FIELDS[:len(FIELDS)]) != FIELDS:
        raise ImportError(f"conv.pyx's Conv fields {conv.CONV_FIELDS} no longer start with "
                          f"{FIELDS}, which csrc_cuda/conv.cu reads by position")
    return lowering


def implement(table) -> None:
    """Register conv2d and its gradients on ``table``."""
    implement_like_cpu(table, _cpu(), _no_workspace)


KERNELS = family_kernels(_cpu(), "conv.cu", _steps)
