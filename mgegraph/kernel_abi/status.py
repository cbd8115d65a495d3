"""What a kernel's status means: the codes every backend's kernels return or record (the CPU's
``abi.pxd``, CUDA's ``mg_abi.cuh``) and the KernelError a failed run raises, in one wording.

>>> MESSAGES[CODES["INDEX_OUT_OF_RANGE"]]
'an index is out of range'
"""
from __future__ import annotations

from ..communicator import CollectiveTimeout
from ..ir.errors import KernelError, KernelMemoryError

CODES = {"INDEX_OUT_OF_RANGE": 1, "BAD_VALUE": 2, "UNSUPPORTED": 3, "NEGATIVE_POWER": 4,
         "NOT_A_NUMBER": 5, "OUT_OF_MEMORY": 6, "TIMED_OUT": 7, "COLLECTIVE_FAILED": 8}
MESSAGES = {
    CODES["INDEX_OUT_OF_RANGE"]: "an index is out of range",
    CODES["BAD_VALUE"]: "a value is invalid",
    CODES["UNSUPPORTED"]: "the kernel does not support these parameters",
    CODES["NEGATIVE_POWER"]: "integers to negative integer powers are not allowed (as in NumPy)",
    CODES["NOT_A_NUMBER"]: "a NaN has no integer to stand for it",
    CODES["OUT_OF_MEMORY"]: "the kernel could not allocate its scratch memory",
    CODES["TIMED_OUT"]: "timed out waiting for the other ranks (one died, hangs, or did not "
                        "run the same collective)",
    CODES["COLLECTIVE_FAILED"]: "MPI returned an error",
}


class CollectiveKernelTimeout(KernelError, CollectiveTimeout):
    """A planned collective's wait ran out of time: both a KernelError (a run failed) and the
    CollectiveTimeout an eager collective raises."""


def kernel_error(ins, status: int) -> KernelError:
    """The KernelError of instruction ``ins`` (a plan's Instruction) that returned ``status``:
    op, kernel, the user's line and what went wrong (a KernelMemoryError, also a MemoryError,
    where the kernel could not allocate; a CollectiveKernelTimeout, also a CollectiveTimeout,
    where a collective waited too long)."""
    error = {CODES["OUT_OF_MEMORY"]: KernelMemoryError,
             CODES["TIMED_OUT"]: CollectiveKernelTimeout}.get(status, KernelError)
    group = dict(ins.attrs).get("group") if ins.op.startswith("all_reduce") else None
    where = "" if group is None else f" of group [{group}]"
    return error(f"{ins.op}{where} (kernel {ins.kernel}, node made at {ins.location}): "
                 f"{MESSAGES.get(status, f'status {status}')}")
