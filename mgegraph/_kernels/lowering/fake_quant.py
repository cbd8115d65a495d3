"""CPU lowering of fake_quant: the shared parameter block (mgegraph/kernel_abi/fake_quant.py)
with the CPU's threads, once _kernels/fake_quant.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import fake_quant as abi
from .. import fake_quant as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=node_threads)
