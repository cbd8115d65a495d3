"""2-D pooling and its gradients on CUDA (csrc_cuda/pool.cu): every op of the shared
mgegraph/kernel_abi/pool.py, from the same Pool parameter block.

>>> sorted(KERNELS)[:2]
['avg_pool2d_backward_f32', 'avg_pool2d_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import pool as abi
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared

BACKWARD = ("max_pool2d_backward", "avg_pool2d_backward")  # a thread per input cell


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        _, planes, h, w, oh, ow = launch.ints[:6]
        return elementwise_steps(entry, planes * (h * w if family in BACKWARD else oh * ow))
    return steps



def implement(table) -> None:
    """Register the pooling ops (max, average, adaptive, their gradients) on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "pool.cu", _steps)
