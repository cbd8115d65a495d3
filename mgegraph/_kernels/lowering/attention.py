"""CPU lowering of attention and its backward: the shared parameter block and workspace
(mgegraph/kernel_abi/attention.py) with the CPU's threads, once _kernels/attention.pyx is
checked to read them. The kernels are compute-bound, so their threads come from their FLOPs,
not the bytes they move: one thread per GRAIN_FLOPS."""
from __future__ import annotations

from ...kernel_abi import attention as abi
from ...ops import get_op
from .. import attention as K
from .. import parallel
from .built import check_built

GRAIN_FLOPS = 1 << 22  # about a millisecond of a core's GEMMs: more than a thread's wake-up


def _threads(node) -> int:
    return parallel.threads_for(int(get_op(node.op.name).cost(node)), GRAIN_FLOPS)


def implement(table) -> None:
    check_built(K, **abi.FIELDS, **abi.MASKS)
    abi.implement(table, threads=_threads)
