"""CPU lowerings of sort, topk and the scans: the shared parameter blocks
(mgegraph/kernel_abi/sorting.py) with the CPU's threads (each sorting in its own workspace slot), once
_kernels/sorting.pyx is checked to read them."""
from __future__ import annotations

from ...kernel_abi import sorting as abi
from .. import sorting as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=node_threads)
