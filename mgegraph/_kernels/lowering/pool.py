"""CPU lowerings of the pooling ops: the shared Pool block (mgegraph/kernel_abi/pool.py) with
the CPU's threads, once _kernels/pool.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import pool as abi
from .. import pool as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, POOL_FIELDS=abi.FIELDS, POOL_MODES=abi.CODES)
    abi.implement(table, threads=node_threads)
