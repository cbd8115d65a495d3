"""The CPU lowerings: for each op, its kernel family, the dtypes the kernels implement, and the
function that lays out a node's parameter block (``Launch``) as the kernel module reads it.

One module per kernel module; each has ``implement(table)``, which registers its ops.
"""
from __future__ import annotations

from . import conv, elementwise, fused, matmul, movement, nn, pool, reduce, resize

FAMILIES = (elementwise, reduce, nn, matmul, conv, pool, movement, fused)
FAMILIES += (resize,)


def implement_all(table) -> None:
    for family in FAMILIES:
        family.implement(table)
