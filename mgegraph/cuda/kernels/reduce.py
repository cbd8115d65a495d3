"""The reductions on CUDA (csrc_cuda/reduce.cu): every op and dtype of the shared
mgegraph/kernel_abi/reduce.py, from the same parameter block.

>>> from mgegraph.backend import Launch
>>> reduce_parts((0, 1, 1, 0, 1, 1 << 24, 1))  # one output of 16M elements: split
1024
"""
from __future__ import annotations

import math

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import reduce as abi
from ..kernel import Step
from .reuse import blocks, column_steps, family_kernels, implement_shared

# csrc_cuda/reduce.cu: MG_SPLIT_HEADER, MG_PARTIAL_BYTES (a static_assert there keeps a Partial
# within it)
SPLIT_HEADER = 64
PARTIAL_BYTES = 64
SPLIT_MIN = 1 << 16      # elements per output from which few outputs are split over blocks
SPLIT_OUTPUTS = 64       # ... and at most this many outputs
PART_ELEMENTS = 1 << 14  # elements per part
MAX_PARTS = 1024


def parse(ints) -> tuple[int, int, bool]:
    """(outputs, reduced elements per output, whether neighbouring outputs are neighbours in
    the input) of reduce.pyx's parameter block."""
    kd = ints[1]
    oshape, ostride = ints[2:2 + kd], ints[2 + kd:2 + 2 * kd]
    ndr = ints[2 + 2 * kd]
    rshape = ints[3 + 2 * kd:3 + 2 * kd + ndr]
    return math.prod(oshape), math.prod(rshape), bool(ostride) and ostride[-1] == 1


def reduce_parts(ints) -> int:
    """How many blocks share each output (0: no split launch); the lowering sizes the workspace
    and the steps size the grid by it."""
    nout, nred, _ = parse(ints)
    if nout == 0 or nout > SPLIT_OUTPUTS or nred < SPLIT_MIN:
        return 0
    return min(MAX_PARTS, math.ceil(nred / PART_ELEMENTS))


def _with_workspace(op, cpu_lower):
    # Design: the CPU lowering's ints as they are; a split launch adds the workspace its parts
    # meet in, which the CPU kernel (one pass per output) does not need.
    def lower(node) -> Launch:
        launch = cpu_lower(node)
        parts = reduce_parts(launch.ints)
        if not parts:
            return launch
        nout = parse(launch.ints)[0]
        return Launch(launch.ints, launch.floats, SPLIT_HEADER + parts * nout * PARTIAL_BYTES)
    return lower


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        nout, nred, columns = parse(launch.ints)
        parts = reduce_parts(launch.ints)  # as the lowering decided: the ints alone say
        if parts:
            return [Step(entry + "_part", (parts, nout, 1), (256, 1, 1)),
                    Step(entry + "_final", (blocks(nout, 1), 1, 1), (32, 1, 1))]
        return column_steps(entry, nout, nred, contiguous=not columns)
    return steps



def implement(table) -> None:
    """Register the reductions on the CUDA backend's ``table``."""
    implement_shared(table, abi, _with_workspace)


KERNELS = family_kernels(abi, "reduce.cu", _steps)
