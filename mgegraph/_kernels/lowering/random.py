"""CPU lowering of the random draws: the shared parameter block (mgegraph/kernel_abi/random.py),
once _kernels/rng.pyx is checked to read it."""
from __future__ import annotations

from ...kernel_abi import random as abi
from .. import rng as K
from .built import check_built


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table)
