"""The MgArgs struct of csrc_cuda/mg_abi.cuh as ctypes, and its packing for one instruction.

Design: the header is the one definition; ``LIMITS`` reads its ``#define``s, and the tests
check that this struct's size and field offsets equal what g++ and NVRTC compute for the
header, so the two cannot drift. A kernel takes MgArgs by value: the launch passes the address
of one packed struct as the kernel's only parameter. A kernel that fails (an index out of
range, ...) records ``(index + 1) << 8 | code`` in the plan's status word (``status``) with the
CPU's codes (``STATUS``); ``decode`` reads it back.

>>> args = pack([0x1000, 0x2000], (3, 1, 8), (0.5,), status=0x3000, index=7)
>>> args.n_bufs, args.ints[2], args.floats[0], args.index
(2, 8, 0.5, 7)
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

HEADER = Path(__file__).parent / "csrc" / "mg_abi.cuh"


def _limits(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"#define MG_MAX_(\w+) (\d+)", text)}


LIMITS = _limits(HEADER.read_text())  # {"BUFS": 16, "INTS": 64, "FLOATS": 8}
# the status codes: {"INDEX_OUT_OF_RANGE": 1, ...}, the CPU's (a test compares them)
STATUS = {k: int(v) for k, v in re.findall(r"#define MG_STATUS_(\w+) (\d+)", HEADER.read_text())}
STATUS_BYTES = 8  # the status word: one unsigned long long


class MgArgs(ctypes.Structure):
    """The kernel parameter block (see mg_abi.cuh)."""

    _fields_ = [("bufs", ctypes.c_void_p * LIMITS["BUFS"]),
                ("ints", ctypes.c_longlong * LIMITS["INTS"]),
                ("floats", ctypes.c_double * LIMITS["FLOATS"]),
                ("n_bufs", ctypes.c_longlong),
                ("n_ints", ctypes.c_longlong),
                ("n_floats", ctypes.c_longlong),
                ("status", ctypes.c_void_p),
                ("index", ctypes.c_longlong)]


def field_offsets() -> dict[str, int]:
    """Each field's byte offset in MgArgs (what the layout test compares with the compilers)."""
    return {name: getattr(MgArgs, name).offset for name, _ in MgArgs._fields_}


def pack(bufs, ints, floats, status: int = 0, index: int = 0) -> MgArgs:
    """One MgArgs of buffer addresses (ints; 0 for none), integer and float parameters, the
    status word's address (0: none) and the instruction's index; a ValueError naming the
    limit when one does not fit.

    >>> pack([0] * 17, (), ())
    Traceback (most recent call last):
    ...
    ValueError: a kernel takes at most 16 buffers, got 17 (mg_abi.cuh: MG_MAX_BUFS)
    """
    for what, values, limit in (("buffers", bufs, "BUFS"), ("ints", ints, "INTS"),
                                ("floats", floats, "FLOATS")):
        if len(values) > LIMITS[limit]:
            raise ValueError(f"a kernel takes at most {LIMITS[limit]} {what}, got "
                             f"{len(values)} (mg_abi.cuh: MG_MAX_{limit})")
    args = MgArgs()
    args.bufs[:len(bufs)] = [int(b) or None for b in bufs]
    args.ints[:len(ints)] = [int(i) for i in ints]
    args.floats[:len(floats)] = [float(f) for f in floats]
    args.n_bufs, args.n_ints, args.n_floats = len(bufs), len(ints), len(floats)
    args.status, args.index = int(status) or None, int(index)
    return args


def decode(word: int) -> tuple[int, int] | None:
    """(instruction index, status code) of a status word; None for 0 (no failure).

    >>> decode((5 + 1) << 8 | STATUS["INDEX_OUT_OF_RANGE"])
    (5, 1)
    """
    word = int(word)
    return None if word == 0 else ((word >> 8) - 1, word & 0xFF)
