"""CPU lowerings of the reductions: the parameter block of _kernels/reduce.pyx."""
from __future__ import annotations

from ...backend import Launch
from ...ops.reduce import REDUCE_OPS, canonical_axes
from ...ops.registry import ALL_DTYPES
from .. import reduce as K
from .layout import collapse, contiguous_strides, pack
from .threads import node_threads


def reduce_params(opcode: int, shape, axes, threads: int = 1) -> tuple[int, ...]:
    """The Reduce fields, then [kept shape, kept strides, ndr, reduced shape, reduced strides,
    threads] for _kernels/reduce.pyx: the input read as (kept dims..., reduced dims...), each
    group collapsed."""
    strides = contiguous_strides(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    kept_shape = [shape[d] for d in kept]
    oshape, (_, ostrides) = collapse(kept_shape, [contiguous_strides(kept_shape),
                                                  [strides[d] for d in kept]])
    rshape, (rstrides,) = collapse([shape[d] for d in axes], [[strides[d] for d in axes]])
    head = pack(K.REDUCE_FIELDS, op=opcode, kept_ndim=len(oshape))
    return (*head, *oshape, *ostrides, len(rshape), *rshape, *rstrides, threads)


def _lower(opcode: int):
    def lower(node) -> Launch:
        (x,) = node.inputs
        axes = canonical_axes(node.attr["axis"], x.ndim)
        return Launch(reduce_params(opcode, x.shape, axes, node_threads(node)))
    return lower


def implement(table) -> None:
    if set(REDUCE_OPS) != set(K.REDUCE_OPS):
        raise ImportError(f"reduce.pyx's ops {sorted(K.REDUCE_OPS)} differ from the op "
                          f"layer's {sorted(REDUCE_OPS)}")
    for name in REDUCE_OPS:
        table.implement(name, kernel="reduce", dtypes=ALL_DTYPES, lower=_lower(K.REDUCE_OPS[name]))
