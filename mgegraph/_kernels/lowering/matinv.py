"""CPU lowering of matinv: the shared parameter block (mgegraph/kernel_abi/matinv.py) with the
CPU's threads, once _kernels/matinv.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import matinv as abi
from .. import matinv as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=node_threads)
