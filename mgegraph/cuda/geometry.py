"""Launch geometry of the grid-stride kernels the CUDA backend renders: pure functions.

>>> grid_stride(4 << 20, per_thread=4)
Step(entry='k', grid=(4096, 1, 1), block=(256, 1, 1), shared_bytes=0)
"""
from __future__ import annotations

import math

from .kernel import Step

BLOCK = 256
# Blocks beyond this many stride over the rest: 1M threads, several waves on any current GPU
# (an H100 holds 132 SMs x 2048 threads), and launch cost does not grow with the size.
MAX_BLOCKS = 4096


def blocks_for(items: int, per_block: int, max_blocks: int = MAX_BLOCKS) -> int:
    """Blocks to cover ``items`` at ``per_block`` each, at least 1, at most ``max_blocks``."""
    return max(1, min(max_blocks, math.ceil(items / per_block)))


def grid_stride(n: int, per_thread: int = 1, entry: str = "k", block: int = BLOCK) -> Step | None:
    """One launch of a grid-stride loop over ``n`` elements, ``per_thread`` at a time (the
    vector width); None when there is nothing to do (a grid cannot be empty)."""
    if n <= 0:
        return None
    return Step(entry, (blocks_for(n, block * per_thread), 1, 1), (block, 1, 1))


def vector_width(itemsize: int, contiguous: bool) -> int:
    """Elements one 16-byte access holds where a kernel can vectorise, else 1."""
    return 16 // itemsize if contiguous else 1
