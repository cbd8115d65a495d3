"""CPU lowering of quantize and dequantize: the shared parameter block
(mgegraph/kernel_abi/quantize.py) with the CPU's threads, once _kernels/quantize.pyx is checked
to read it."""
from __future__ import annotations

from ...kernel_abi import quantize as abi
from .. import quantize as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=node_threads)
