"""CPU lowerings of the movement ops: the shared parameter blocks (mgegraph/kernel_abi/
movement.py) as they are, once the kernels of _kernels/movement.pyx are checked to read them."""
from __future__ import annotations

from ...kernel_abi import movement as abi
from .. import movement as K
from .built import check_built


def implement(table) -> None:
    """Register the movement ops on ``table`` (the CPU backend)."""
    check_built(K, **abi.FIELDS, PAD_MODES=abi.PAD_CODES, LIMITS=abi.LIMITS)
    abi.implement(table)
