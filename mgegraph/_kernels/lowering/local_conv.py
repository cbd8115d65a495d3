"""CPU lowerings of the local_conv family (local_conv2d, region_restricted_conv and their
gradients): the shared block of mgegraph/kernel_abi/local_conv.py with the CPU's threads, once
_kernels/local_conv.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import local_conv as abi
from .. import local_conv as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, FIELDS=abi.FIELDS)
    abi.implement(table, threads=node_threads)
