"""group_norm and its gradient on CUDA (csrc_cuda/group_norm.cu), from the shared parameter
block (mgegraph/kernel_abi/norm.py), whose workspace (2 doubles per sample and channel) holds
the backward's per-group statistics here.

>>> sorted(KERNELS)[:2]
['group_norm_backward_f32', 'group_norm_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import norm as abi
from ..kernel import Step
from .reuse import blocks, column_steps, family_kernels, implement_shared


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        batch, channels, inner, groups = launch.ints[:4]
        units, length = batch * groups, (channels // groups) * inner
        if family == "group_norm":
            return column_steps(entry, units, length, contiguous=True)
        # dweight and dbias get zeros when there are no samples, so their step always runs
        return (column_steps(entry + "_stats", units, length, contiguous=True)
                + ([Step(entry + "_params", (blocks(channels, 256), 1, 1), (256, 1, 1))]
                   if channels else [])
                + column_steps(entry, units, length, contiguous=True))
    return steps


def implement(table) -> None:
    """Register group_norm and its backward on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "group_norm.cu", _steps)
