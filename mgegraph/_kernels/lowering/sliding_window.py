"""CPU lowering of sliding_window and its transpose: the shared parameter block
(mgegraph/kernel_abi/sliding_window.py) with the CPU's threads, once
_kernels/sliding_window.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import sliding_window as abi
from .. import sliding_window as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=node_threads)
