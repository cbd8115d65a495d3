"""resize and its gradient on CUDA (csrc_cuda/resize.cu), from the shared Resize parameter
block of mgegraph/kernel_abi/resize.py: the forward a thread per output, the backward a thread
per plane (the CPU's scatter order, so no atomics).

>>> sorted(KERNELS)
['resize_backward_f32', 'resize_backward_f64', 'resize_f32', 'resize_f64']
"""
from __future__ import annotations

import math

from ...ir.types import short_name
from ...kernel_abi import resize as abi
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared

# the ints' fields the launch geometry reads
_PLANES, _OUT = abi.FIELDS.index("planes"), abi.FIELDS.index("out0")


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        planes = launch.ints[_PLANES]
        if family == "resize_backward":
            return elementwise_steps(entry, planes)
        return elementwise_steps(entry, planes * math.prod(launch.ints[_OUT:_OUT + 3]))
    return steps


def implement(table) -> None:
    """Register resize and resize_backward on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "resize.cu", _steps)
