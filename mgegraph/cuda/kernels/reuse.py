"""What the hand-written CUDA families share: the shared lowerings, and launch geometry.

Design: a CUDA kernel of csrc_cuda/ reads the same ints/floats layout as the CPU kernel of its
op, so the lowering of mgegraph/kernel_abi/<family>.py is reused as it is (with the defaults of
the fields only the CPU reads); a family that needs more (a workspace for a two-step launch)
wraps it and says why.
"""
from __future__ import annotations

import math

from ...backend import KernelTable, OpImpl, kernel_name
from ..kernel import CudaKernel, Step

MAX_GRID = 1 << 20  # kernels stride over the rest: no grid is larger than this many blocks
GRID_YZ = 65535     # the limit of grid.y and grid.z; kernels stride past it too
SHORT_RUN = 16      # runs up to this long take a thread each rather than a warp


def shared_impls(family) -> dict[str, OpImpl]:
    """The ``OpImpl`` per op of one shared lowering module (its kernel family, dtypes, lowering),
    with its defaults for what only the CPU decides.

    >>> from mgegraph.kernel_abi import reduce
    >>> shared_impls(reduce)["sum"].kernel
    'reduce'
    """
    table = KernelTable("cuda")
    family.implement(table)
    return table.impls


def implement_shared(table, family, wrap=None, ops=None) -> None:
    """Register the ops of the shared lowering module ``family`` (those of ``ops`` when given)
    on ``table``; ``wrap(op, lower)``, when given, returns the lowering to use instead."""
    for op, impl in shared_impls(family).items():
        if ops is not None and op not in ops:
            continue
        lower = impl.lower if wrap is None else wrap(op, impl.lower)
        table.implement(op, kernel=impl.kernel, dtypes=impl.dtypes, lower=lower,
                        dispatch_input=impl.dispatch_input)


def family_kernels(family, source: str, make_steps, ops=None) -> dict:
    """KERNELS for every (kernel family, dtype) of the shared lowering module ``family``'s ops
    (those of ``ops`` when given): ``make_steps(family, dtype)`` gives the steps function of one
    kernel."""
    kernels = {}
    for op, impl in shared_impls(family).items():
        if ops is not None and op not in ops:
            continue
        for dtype in impl.dtypes:
            kernels[kernel_name(impl.kernel, dtype)] = CudaKernel(source,
                                                                  make_steps(impl.kernel, dtype))
    return kernels


def blocks(items: int, per_block: int) -> int:
    """Blocks for ``items`` at ``per_block`` each, capped at MAX_GRID (kernels grid-stride)."""
    return max(1, min(MAX_GRID, math.ceil(items / per_block)))


def column_steps(entry: str, columns: int, length: int, contiguous: bool) -> list[Step]:
    """One launch of a kernel that reduces ``columns`` runs of ``length`` elements, a group of
    blockDim.x threads per run (csrc_cuda/reduce_block.cuh): a thread per run when neighbouring
    runs are neighbours in memory (``not contiguous``: their loads coalesce) or runs are short
    (a warp would idle), else a warp per run, or a whole block for long runs. No launch when
    there is nothing to write."""
    if columns == 0:
        return []
    if columns >= 32 and (not contiguous or length <= SHORT_RUN):
        return [Step(entry, (blocks(columns, 256), 1, 1), (1, 256, 1))]
    if length >= 4096 or (length >= 512 and columns < 512):
        return [Step(entry, (blocks(columns, 1), 1, 1), (256, 1, 1))]
    return [Step(entry, (blocks(columns, 8), 1, 1), (32, 8, 1))]
