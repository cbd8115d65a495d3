"""CPU lowering of RMS norm: the shared parameter block (mgegraph/kernel_abi/rms_norm.py) with
the CPU's threads, once _kernels/rms_norm.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import rms_norm as abi
from .. import rms_norm as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=node_threads)
