"""matinv on CUDA (csrc_cuda/matinv.cu), from the shared parameter block
(mgegraph/kernel_abi/matinv.py): a thread per matrix.

>>> sorted(KERNELS)
['matinv_f32', 'matinv_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import matinv as abi
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types):
        batch, n = launch.ints[:2]
        return elementwise_steps(entry, batch) if n else []
    return steps


def implement(table) -> None:
    """Register matinv on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "matinv.cu", _steps)
