"""CPU lowering of the int8 compute ops: the shared parameter block
(mgegraph/kernel_abi/quantized.py) with threads planned by the multiply-adds, once
_kernels/quantized.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import quantized as abi
from ...ops.registry import get_op
from .. import parallel
from .. import quantized as K
from .built import check_built
from .matmul import GRAIN_FLOPS


def _threads(node) -> int:
    """One thread per GRAIN_FLOPS of multiply-adds (an add: per 8 bytes moved, as the
    memory-bound kernels)."""
    return parallel.threads_for(int(get_op(node.op.name).cost(node)), GRAIN_FLOPS)


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=_threads)
