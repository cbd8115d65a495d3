"""dropout on CUDA (csrc_cuda/dropout.cu): the CPU's counter-based mask, bitwise, from the
parameter block of mgegraph/kernel_abi/nn.py.

>>> sorted(KERNELS)
['dropout_f32', 'dropout_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import nn as abi
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared

OPS = ("dropout",)


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        return elementwise_steps(entry, launch.ints[0])
    return steps



def implement(table) -> None:
    """Register dropout on ``table``."""
    implement_shared(table, abi, ops=OPS)


KERNELS = family_kernels(abi, "dropout.cu", _steps, ops=OPS)
