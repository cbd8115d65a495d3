"""2-D pooling and its gradients on CUDA (csrc_cuda/pool.cu): every op of the CPU's
mgegraph/_kernels/lowering/pool.py, from the same Pool parameter block.

>>> sorted(KERNELS)[:2]
['avg_pool2d_backward_f32', 'avg_pool2d_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import family_kernels, implement_like_cpu

BACKWARD = ("max_pool2d_backward", "avg_pool2d_backward")  # a thread per input cell


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        _, planes, h, w, oh, ow = launch.ints[:6]
        return elementwise_steps(entry, planes * (h * w if family in BACKWARD else oh * ow))
    return steps


def _cpu():
    from ..._kernels.lowering import pool
    return pool


def implement(table) -> None:
    """Register the pooling ops (max, average, adaptive, their gradients) on ``table``."""
    implement_like_cpu(table, _cpu())


KERNELS = family_kernels(_cpu(), "pool.cu", _steps)
