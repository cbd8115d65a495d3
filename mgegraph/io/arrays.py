"""Arrays in NumPy's own files: one ``.npy`` read for a model's input, and named outputs
written as an ``.npz`` (what ``mgegraph run`` reads and writes).

>>> x = read_npy("x.npy", (4, 3), np.dtype("float32"), refuse, "the input x")
>>> write_npz("y.npz", ["output0"], [y], refuse)
"""
from __future__ import annotations

import math
import os
import zipfile

import numpy as np

from ..ir.types import BFLOAT16
from .files import Refuse, open_regular, write_atomically

_READ_HEADER = {1: np.lib.format.read_array_header_1_0, 2: np.lib.format.read_array_header_2_0}


# NumPy's .npy header cannot name bfloat16 (ml_dtypes'): np.save writes its values as 2-byte
# void records, and mgegraph's own files hold them as uint16 bits (io/container.py)
BFLOAT16_BITS = (np.dtype("V2"), np.dtype("<u2"))


def read_npy(path, shape, dtype, refuse: Refuse, what: str = "the array wanted") -> np.ndarray:
    """The array of shape ``shape`` and dtype ``dtype`` (``what`` names it in messages) in the
    ``.npy`` at ``path``, a regular file; its header is checked before its data is read (a
    header may claim any size), and ``refuse`` gets what is wrong: another kind of file, shape
    or dtype, a pickle, an .npz. A named dimension of ``shape`` (``batch``) takes any size
    here; the model's plan checks what the names' values must satisfy."""
    with open_regular(path, refuse) as f:
        found = _header(f, refuse)
        if found is not None and found[1] in BFLOAT16_BITS and dtype == BFLOAT16:
            found = (found[0], BFLOAT16)  # np.save writes bfloat16 as raw 2-byte records
        if found is not None and (not _conforms(found[0], shape) or found[1] != dtype):
            refuse(f"the array is {type_text(*found)}, {what} is {type_text(shape, dtype)}")
        if found is not None:
            _check_data_size(f, *found, refuse)
        f.seek(0)
        try:
            array = np.load(f, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # truncated, or not NumPy's format
            # np.load takes a file without NumPy's magic for a pickle: say what the user has
            refuse("not an array file written by np.save" +
                   ("" if "pickle" in str(exc) else f" ({exc})"))
    if not isinstance(array, np.ndarray):
        refuse("an .npz archive; give one array as .npy")
    return array.view(BFLOAT16) if dtype == BFLOAT16 else array


def _conforms(found: tuple, shape) -> bool:
    """Whether ``found`` has ``shape``'s rank and its numbers where ``shape`` has numbers."""
    return len(found) == len(shape) and all(
        not isinstance(want, int) or got == want for got, want in zip(found, shape))


def _check_data_size(f, shape: tuple, dtype: np.dtype, refuse: Refuse) -> None:
    """The data after the header (``f`` stands there) must hold what the header promises:
    a named dimension lets a header claim any size, which np.load would allocate first."""
    need = math.prod(shape) * dtype.itemsize
    held = os.fstat(f.fileno()).st_size - f.tell()
    if held < need:
        refuse(f"the header promises {type_text(shape, dtype)}, {need} bytes, the file holds "
               f"{held} after it (truncated?)")


def _header(f, refuse: Refuse) -> tuple[tuple, np.dtype] | None:
    """(shape, dtype) from the header of the .npy open in ``f``; None where ``f`` does not
    start with NumPy's magic or has a header version this reads (np.load then decides)."""
    if f.read(6) != b"\x93NUMPY":
        return None
    f.seek(0)
    try:
        major, _ = np.lib.format.read_magic(f)
        if major not in _READ_HEADER:
            return None
        shape, _, dtype = _READ_HEADER[major](f)
    except (ValueError, SyntaxError, TypeError, EOFError, OverflowError) as exc:
        refuse(f"not an array file written by np.save (its header: {exc})")
    return tuple(shape), dtype


def write_npz(path, names, arrays, refuse: Refuse) -> None:
    """``arrays`` under ``names`` in an ``.npz`` at ``path`` that ``np.load`` reads back whole,
    replacing ``path`` when complete. The members are written here: ``np.savez(path, **named)``
    takes a name such as ``file`` or ``allow_pickle`` for its own parameter, and a dict holds a
    repeated name once. ``refuse`` gets a repeated name or one no member can carry (empty,
    ``.``, ``..``, or holding ``/``, ``\\`` or NUL)."""
    names = list(names)
    for name in names:
        if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
            refuse(f"the output name {name!r} cannot name an array in an .npz (empty, '.', "
                   "'..', or holding '/', '\\' or NUL)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        refuse(f"the outputs repeat the name(s) {repeated}; an .npz holds each name once")

    def write(f) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, array in zip(names, arrays, strict=True):
                with zf.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)

    write_atomically(path, write, refuse)


def type_text(shape, dtype) -> str:
    """How messages write an array's type: ``float32[1, 1, 8, 8]``; a model's input with a
    named dimension ``float32[batch, 1, 8, 8]``."""
    return f"{np.dtype(dtype)}[{', '.join(map(str, shape))}]"
