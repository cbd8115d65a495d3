"""CPU lowering of the int8 ops on packed weights: their parameter blocks
(mgegraph/kernel_abi/quantized_pack.py), threads planned as the unpacked ops' (by the
multiply-adds), once _kernels/qgemm.pyx is checked to read them."""
from __future__ import annotations

from ...kernel_abi import quantized_pack as abi
from .. import qgemm as K
from .built import check_built
from .quantized import _threads


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, threads=_threads)
