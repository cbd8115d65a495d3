"""Host arrays that start on a cache line, for the CPU kernels' vector loads.

NumPy aligns an array's data to 16 bytes only (here most arrays start 48 bytes into a 64-byte
line, large ones 16), so a kernel's every 64-byte vector load of such an array straddles two
lines. For a matrix read at cache speed that costs the product a quarter or more: mlp-infer's
784 x 1024 and 1024 x 1024 rows times a matrix took 117 us against 90 with the matrices 64-byte
aligned (a C loop, AMD EPYC Zen 4, matrices in L3). So the buffers a plan owns (parameters,
constants, inputs and outputs: ``plan.host_buffers``), an nn.Parameter's array and the outputs a
run hands back start on a line; NumPy's own alignment (of the dtype) is all a kernel needs to be
correct.
"""
from __future__ import annotations

import numpy as np

CACHE_LINE = 64


def _aligned(raw: np.ndarray, nbytes: int, alignment: int) -> np.ndarray:
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes]


def aligned_empty(shape, dtype, alignment: int = CACHE_LINE) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose first byte is
    ``alignment``-aligned (it keeps the bytes it starts in alive: its ``base``).

    >>> aligned_empty((3, 5), np.float32).ctypes.data % 64
    0
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return _aligned(np.empty(nbytes + alignment, np.uint8), nbytes, alignment) \
        .view(dtype).reshape(shape)


def aligned_copy(array, alignment: int = CACHE_LINE) -> np.ndarray:
    """A C-contiguous copy of ``array`` (any layout) starting on an ``alignment`` boundary."""
    array = np.asarray(array)
    out = aligned_empty(array.shape, array.dtype, alignment)
    out[...] = array
    return out


def host_arena(nbytes: int, alignment: int) -> np.ndarray:
    """A zeroed uint8 array of ``nbytes`` whose first byte is ``alignment``-aligned: the arena
    of a backend whose memory is the host's (np.zeros: the OS's zero pages, touched only when
    a run first writes them)."""
    return _aligned(np.zeros(nbytes + alignment, np.uint8), nbytes, alignment)
