"""The reductions' parameter block, read by _kernels/reduce.pyx and csrc_cuda/reduce.cu."""
from __future__ import annotations

from ..backend import Launch
from ..ops.reduce import REDUCE_OPS, canonical_axes
from ..ops.registry import ALL_DTYPES, SMALL_INT_OPS
from .layout import collapse, contiguous_strides, one_thread, pack

FIELDS = ("op", "kept_ndim")  # the Reduce struct's
CODES = {name: code for code, name in enumerate(REDUCE_OPS)}  # the kernels' op codes
UINT8 = SMALL_INT_OPS["sum"]  # the small integer they have: uint8, read as bool is


def reduce_params(opcode: int, shape, axes, threads: int = 1) -> tuple[int, ...]:
    """The Reduce fields, then [kept shape, kept strides, ndr, reduced shape, reduced strides,
    threads]: the input read as (kept dims..., reduced dims...), each group collapsed."""
    strides = contiguous_strides(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    kept_shape = [shape[d] for d in kept]
    oshape, (_, ostrides) = collapse(kept_shape, [contiguous_strides(kept_shape),
                                                  [strides[d] for d in kept]])
    rshape, (rstrides,) = collapse([shape[d] for d in axes], [[strides[d] for d in axes]])
    head = pack(FIELDS, op=opcode, kept_ndim=len(oshape))
    return (*head, *oshape, *ostrides, len(rshape), *rshape, *rstrides, threads)


def _lower(opcode: int, threads):
    def lower(node) -> Launch:
        (x,) = node.inputs
        axes = canonical_axes(node.attr["axis"], x.ndim)
        return Launch(reduce_params(opcode, x.shape, axes, threads(node)))
    return lower


def implement(table, threads=one_thread) -> None:
    """Register the reductions on ``table``; ``threads(node)`` fills the block's threads field
    (the device's plan for a memory-bound kernel)."""
    for name in REDUCE_OPS:
        table.implement(name, kernel="reduce", dtypes=ALL_DTYPES + UINT8,
                        lower=_lower(CODES[name], threads))
