"""sort, topk and the scans on CUDA (csrc_cuda/sorting.cu), from the shared parameter blocks
(mgegraph/kernel_abi/sorting.py): a thread per row or scan line, the CPU's algorithms and
results bit for bit. A row's sort works in its own two index arrays of the workspace (the CPU
keeps two per thread instead).

>>> sorted(KERNELS)[:2]
['cumprod_backward_f32', 'cumprod_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import sorting as abi
from ..kernel import Step
from .reuse import blocks, family_kernels

ORDER_OPS = ("sort", "topk")


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        ints = launch.ints
        units = ints[0] if family in ORDER_OPS else ints[0] * ints[2]  # rows, or lines
        return [Step(entry, (blocks(units, 128), 1, 1), (128, 1, 1))] if units else []
    return steps


def _row_slots(node, threads: int) -> int:
    return abi.order_rows(node)  # a thread per row, each its own slot


def implement(table) -> None:
    """Register sort, topk and the scans on ``table``, the sorts' workspace a slot per row."""
    abi.implement(table, slots=_row_slots)


KERNELS = family_kernels(abi, "sorting.cu", _steps)
