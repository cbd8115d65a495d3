"""The random draws on CUDA (csrc_cuda/rng.cu): the CPU's counter-based samplers, from the
parameter block of mgegraph/kernel_abi/random.py, a thread per element.

>>> sorted(KERNELS)[:2]
['rng_gamma_f32', 'rng_gamma_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import random as abi
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        return elementwise_steps(entry, launch.ints[0])
    return steps


def implement(table) -> None:
    """Register rng_uniform, rng_gamma and rng_poisson on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "rng.cu", _steps)
