"""CPU lowerings of the deform family (deform_im2col, correlation and their gradients): the
shared blocks of mgegraph/kernel_abi/deform.py with the CPU's threads, once _kernels/deform.pyx
is checked to read them."""
from __future__ import annotations

from ...kernel_abi import deform as abi
from .. import deform as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, IM2COL_FIELDS=abi.IM2COL_FIELDS, CORRELATION_FIELDS=abi.CORRELATION_FIELDS)
    abi.implement(table, threads=node_threads)
