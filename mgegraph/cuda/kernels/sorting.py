"""sort, topk and the scans on CUDA (csrc_cuda/sorting.cu), from the shared parameter blocks
(mgegraph/kernel_abi/sorting.py): a thread per row or scan line, the CPU's algorithms and
results bit for bit. Each sorting thread works in its own two index arrays of the workspace;
there are as many as rows up to SLOTS_BUDGET bytes of them (then a thread sorts several rows
in turn), so a long row's workspace stays bounded.

>>> sorted(KERNELS)[:2]
['cumprod_backward_f32', 'cumprod_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import sorting as abi
from ..kernel import Step
from .reuse import blocks, family_kernels

ORDER_OPS = ("sort", "topk")


SLOTS_BUDGET = 64 << 20  # workspace bytes of the sorting threads' index arrays, at most
MIN_SORTERS = 128         # ... unless fewer than a block of threads would fit


def sorters(node) -> int:
    """Rows sorted at once: one per row, within SLOTS_BUDGET (at least MIN_SORTERS)."""
    rows, per = abi.order_rows(node), abi.slot_bytes(node)
    return max(1, min(rows, max(MIN_SORTERS, SLOTS_BUDGET // max(per, 1))))


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        ints = launch.ints
        # rows sorted at once (the threads field), or scan lines
        units = min(ints[0], ints[4]) if family in ORDER_OPS else ints[0] * ints[2]
        return [Step(entry, (blocks(units, 128), 1, 1), (128, 1, 1))] if units else []
    return steps


def implement(table) -> None:
    """Register sort, topk and the scans on ``table``."""
    abi.implement(table, sorters=sorters)


KERNELS = family_kernels(abi, "sorting.cu", _steps)
