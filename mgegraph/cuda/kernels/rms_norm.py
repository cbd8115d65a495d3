"""rms_norm on CUDA (csrc_cuda/rms_norm.cu), from the shared parameter block
(mgegraph/kernel_abi/rms_norm.py): a group of threads reduces each row.

>>> sorted(KERNELS)
['rms_norm_f32', 'rms_norm_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import rms_norm as abi
from ..kernel import Step
from .reuse import column_steps, family_kernels, implement_shared


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        rows, cols = launch.ints[:2]
        return column_steps(entry, rows, cols, contiguous=True) if cols else []
    return steps


def implement(table) -> None:
    """Register rms_norm on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "rms_norm.cu", _steps)
