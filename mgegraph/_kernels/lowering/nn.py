"""CPU lowerings of the nn ops: the shared parameter blocks (mgegraph/kernel_abi/nn.py) with the
CPU's threads, once _kernels/nn.pyx is checked to read them."""
from __future__ import annotations

from ...kernel_abi import nn as abi
from .. import nn as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS, REDUCTIONS=abi.REDUCTION_CODES)
    abi.implement(table, threads=node_threads)
