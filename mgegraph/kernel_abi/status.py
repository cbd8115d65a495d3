"""What a kernel's status means: the codes every backend's kernels return or record (the CPU's
``abi.pxd``, CUDA's ``mg_abi.cuh``) and the KernelError a failed run raises, in one wording.

>>> MESSAGES[CODES["INDEX_OUT_OF_RANGE"]]
'an index is out of range'
"""
from __future__ import annotations

from ..ir.errors import KernelError, KernelMemoryError

CODES = {"INDEX_OUT_OF_RANGE": 1, "BAD_VALUE": 2, "UNSUPPORTED": 3, "NEGATIVE_POWER": 4,
         "NOT_A_NUMBER": 5, "OUT_OF_MEMORY": 6}
MESSAGES = {
    CODES["INDEX_OUT_OF_RANGE"]: "an index is out of range",
    CODES["BAD_VALUE"]: "a value is invalid",
    CODES["UNSUPPORTED"]: "the kernel does not support these parameters",
    CODES["NEGATIVE_POWER"]: "integers to negative integer powers are not allowed (as in NumPy)",
    CODES["NOT_A_NUMBER"]: "a NaN has no integer to stand for it",
    CODES["OUT_OF_MEMORY"]: "the kernel could not allocate its scratch memory",
}


def kernel_error(ins, status: int) -> KernelError:
    """The KernelError of instruction ``ins`` (a plan's Instruction) that returned ``status``:
    op, kernel, the user's line and what went wrong (a KernelMemoryError, also a MemoryError,
    where the kernel could not allocate)."""
    error = KernelMemoryError if status == CODES["OUT_OF_MEMORY"] else KernelError
    return error(f"{ins.op} (kernel {ins.kernel}, node made at {ins.location}): "
                       f"{MESSAGES.get(status, f'status {status}')}")
