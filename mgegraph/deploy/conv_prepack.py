"""Convolution weights prepared at export for the C runtime: what ``conv2d_f32`` computed from
its filters on every call, computed once here (docs/c_runtime.md, "Convolutions").

- **Winograd** (the plan's path): U = G g G^T of every (output, input channel) filter, by the
  float32 adds and halvings of ``wino_conv.h``'s ``wino_filter`` in its order (no product
  there to fuse: bitwise the transform the runtime made on each call), packed as the row tiles
  of ``conv_tile.h`` read their weights: a (16, ceil(cout / 8), cin, 8) float32 tensor, blocks
  of 8 output channels, zeros past cout. The instruction becomes ``conv2d_winograd_packed_f32``
  (its block's ``packed`` set to 8), reading U where the filters were; a runtime from before has
  no kernel of that name and refuses the blob by it. (Blobs of ``conv2d_winograd_f32``, U
  unpacked as ``winograd_filters`` gives it, still run: the runtime packs that U per call.)
- **The gather tiles**, on filters the plan did not pack: packed here into blocks of output
  channels (the prepack pass's layout, ``ops.conv.pack_weight_array``) and the block's
  ``packed`` field set, so the instruction is the ``conv2d_f32`` on packed weights that every
  runtime runs: each output the same sum in the same order as when it packed them per call.

A filter an instruction writes (a state update) is left as it is, as its prepared copy would go
stale.
"""
from __future__ import annotations

import numpy as np

from ..kernel_abi.conv import FIELDS
from ..ops.conv import pack_weight_array

WINOGRAD_KERNEL = "conv2d_winograd_packed_f32"
WINOGRAD_PACK = 8  # output channels per block of U: conv_tile.h's CONV_PACK, every row tile's
WINOGRAD_PATH = 6  # the block's path code of Winograd (conv.pyx's C_WINOGRAD, conv_wino_c.h)
# the gather tiles' limits (conv_gather.h's taps, conv_gather_c.h's channels): more taps, or
# fewer output channels per group, run a plain loop, which gains nothing from packed filters
MAX_TAPS = 64
MIN_GROUP_CHANNELS = 8
# the channels per block: a multiple of every tile's width that the runtime may pick (the
# baseline's 8, AVX2's 16, AVX-512's 32, 48 or 64 reading a block of 64 or 48), the fewest
# padding channels; so a blob packed on any machine runs its tiles on every other
BLOCKS = (64, 48, 32, 16)


def winograd_filters(w: np.ndarray) -> np.ndarray:
    """U (16, cout, cin): U[4 i + j, o, c] = (G g G^T)[i, j] of the 3x3 filter g = w[o, c],
    G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]], in float32, each step rounded
    as wino_conv.h's wino_filter rounds it.

    >>> float(winograd_filters(np.ones((1, 1, 3, 3), np.float32))[5, 0, 0])   # (3/2)^2
    2.25
    """
    g = np.asarray(w, np.float32)
    half = np.float32(0.5)
    rows = (g[..., 0, :], (g[..., 0, :] + g[..., 1, :] + g[..., 2, :]) * half,
            (g[..., 0, :] - g[..., 1, :] + g[..., 2, :]) * half, g[..., 2, :])  # G g: (o, c, 3)
    u = np.empty((16, *g.shape[:2]), np.float32)
    for i, t in enumerate(rows):  # (G g) G^T, row by row
        u[4 * i] = t[..., 0]
        u[4 * i + 1] = (t[..., 0] + t[..., 1] + t[..., 2]) * half
        u[4 * i + 2] = (t[..., 0] - t[..., 1] + t[..., 2]) * half
        u[4 * i + 3] = t[..., 2]
    return u


def winograd_packed(w: np.ndarray) -> np.ndarray:
    """U of ``winograd_filters`` packed for the row tiles: (16, ceil(cout / 8), cin, 8), block
    j's row c the 8 output channels from 8 j on of input channel c, zeros past cout.

    >>> winograd_packed(np.ones((3, 2, 3, 3), np.float32)).shape
    (16, 1, 2, 8)
    """
    u = winograd_filters(w)
    blocks = -(-u.shape[1] // WINOGRAD_PACK)
    padded = np.zeros((16, blocks * WINOGRAD_PACK, u.shape[2]), np.float32)
    padded[:, :u.shape[1]] = u
    return np.ascontiguousarray(
        padded.reshape(16, blocks, WINOGRAD_PACK, u.shape[2]).transpose(0, 1, 3, 2))


def block_for(cout: int) -> int:
    """The channels per packed block for ``cout`` output channels: of BLOCKS, the one padding
    the fewest, the widest of those."""
    return min(BLOCKS, key=lambda b: (-(-cout // b) * b, -b))


def prepared(kernel: str, ints: tuple, w: np.ndarray) -> tuple[str, tuple, np.ndarray] | None:
    """(the C kernel, its parameter block, the prepared weights) for a ``conv2d_f32`` of block
    ``ints`` on filters ``w`` (cout, cin / groups, kh, kw), or None where it keeps them."""
    if kernel != "conv2d_f32" or w.dtype != np.float32:
        return None
    f = dict(zip(FIELDS, ints))
    if f["packed"] or f["groups"] != 1 or w.shape != (f["cout"], f["cin"], f["kh"], f["kw"]):
        return None
    if f["path"] == WINOGRAD_PATH and (f["kh"], f["kw"], f["sh"], f["sw"], f["dh"],
                                       f["dw"]) == (3, 3, 1, 1, 1, 1):
        ints = list(ints)
        ints[FIELDS.index("packed")] = WINOGRAD_PACK
        return WINOGRAD_KERNEL, tuple(ints), winograd_packed(w)
    if f["path"] == WINOGRAD_PATH or f["kh"] * f["kw"] > MAX_TAPS or \
            f["cout"] < MIN_GROUP_CHANNELS:
        return None
    block = block_for(f["cout"])
    ints = list(ints)
    ints[FIELDS.index("packed")] = block
    return kernel, tuple(ints), pack_weight_array(w, 1, block)[0]
