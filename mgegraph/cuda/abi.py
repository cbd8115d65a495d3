"""The MgArgs struct of csrc_cuda/mg_abi.cuh as ctypes, and its packing for one instruction.

Design: the header is the one definition; ``LIMITS`` reads its ``#define``s, and the tests
check that this struct's size and field offsets equal what g++ and NVRTC compute for the
header, so the two cannot drift. A kernel takes MgArgs by value: the launch passes the address
of one packed struct as the kernel's only parameter.

>>> args = pack([0x1000, 0x2000], (3, 1, 8), (0.5,))
>>> args.n_bufs, args.ints[2], args.floats[0]
(2, 8, 0.5)
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

HEADER = Path(__file__).parent / "csrc" / "mg_abi.cuh"


def _limits(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"#define MG_MAX_(\w+) (\d+)", text)}


LIMITS = _limits(HEADER.read_text())  # {"BUFS": 16, "INTS": 64, "FLOATS": 8}


class MgArgs(ctypes.Structure):
    """The kernel parameter block (see mg_abi.cuh)."""

    _fields_ = [("bufs", ctypes.c_void_p * LIMITS["BUFS"]),
                ("ints", ctypes.c_longlong * LIMITS["INTS"]),
                ("floats", ctypes.c_double * LIMITS["FLOATS"]),
                ("n_bufs", ctypes.c_longlong),
                ("n_ints", ctypes.c_longlong),
                ("n_floats", ctypes.c_longlong)]


def field_offsets() -> dict[str, int]:
    """Each field's byte offset in MgArgs (what the layout test compares with the compilers)."""
    return {name: getattr(MgArgs, name).offset for name, _ in MgArgs._fields_}


def pack(bufs, ints, floats) -> MgArgs:
    """One MgArgs of buffer addresses (ints; 0 for none), integer and float parameters; a
    ValueError naming the limit when one does not fit.

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
    return args
