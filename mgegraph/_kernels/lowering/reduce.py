"""CPU lowerings of the reductions: the shared parameter block (mgegraph/kernel_abi/reduce.py)
with the CPU's threads, once _kernels/reduce.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import reduce as abi
from .. import reduce as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, REDUCE_FIELDS=abi.FIELDS, REDUCE_OPS=abi.CODES)
    abi.implement(table, threads=node_threads)
