"""The elementwise ops on CUDA: unary, binary, compare, where, cast and assign (the half types:
where, cast and assign's copy, which move or convert bits; every other op widens to float32).

Lowering: the shared one (mgegraph/kernel_abi/elementwise.py), as the CPU's: the rendered
kernels (mgegraph/cuda/render.py over csrc_cuda/elementwise.cuh) read its ints layout
``[opcode, ndim, shape, strides per input]`` and floats. A kernel per (op, dtype) is rendered
from the table, so ``steps`` picks the entry by the opcode the lowering packed (the table's
order, which the CPU build checks too).

An integer ``pow`` with a negative exponent fails the run as on the CPU (NumPy raises): the
kernel writes 0 and records the CPU's status in the plan's status word (``mg_fail``,
csrc_cuda/mg_abi.cuh), and the run raises the CPU's KernelError instead of returning.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.types import SUPPORTED, short_name
from ...kernel_abi import elementwise as abi
from ...ops import elementwise_table as TABLE
from .. import geometry, render
from ..kernel import RenderedKernel
from .reuse import implement_shared

DTYPE_OF_CODE = {code: dtype for dtype, (_, code) in SUPPORTED.items()}


def _contiguous(ints, n_inputs: int) -> bool:
    """Whether the layout collapsed to one dimension with every input contiguous or a scalar
    (the kernels' vector path)."""
    return ints[1] == 1 and all(s in (0, 1) for s in ints[3:3 + n_inputs])


def launch_steps(entry: str, ints, types, n_inputs: int):
    """The grid-stride launch over the output of an elementwise instruction."""
    out = types[-1]
    per = geometry.vector_width(out.dtype.itemsize, _contiguous(ints, n_inputs)) \
        if all(t.dtype.itemsize == out.dtype.itemsize for t in types) else 1
    step = geometry.grid_stride(math.prod(out.shape), per, entry)
    return [] if step is None else [step]


def _render_table_op(ins, types):
    op = TABLE.OPS[ins.ints[0]]
    dtype = types[0].dtype
    entry, text = (render.unary_kernel if op.kind == "unary" else render.binary_kernel)(
        op.name, dtype)
    return text, launch_steps(entry, ins.ints, types, len(types) - 1)


def _render_where(ins, types):
    entry, text = render.where_kernel(types[1].dtype)
    return text, launch_steps(entry, ins.ints, types, 3)


def _render_cast(ins, types):
    entry, text = render.cast_kernel(types[0].dtype, DTYPE_OF_CODE[ins.ints[0]])
    return text, launch_steps(entry, ins.ints, types, 1)


def _render_copy(ins, types):
    entry, text = render.copy_kernel(types[0].dtype)
    return text, launch_steps(entry, ins.ints, types, 1)


def _kernels() -> dict[str, RenderedKernel]:
    dtypes = [np.dtype(d) for d in render.CTYPES]
    kernels = {}
    for family, fn in (("unary", _render_table_op), ("binary", _render_table_op),
                       ("compare", _render_table_op), ("where", _render_where),
                       ("cast", _render_cast)):
        kernels.update({f"{family}_{short_name(d)}": RenderedKernel(fn) for d in dtypes})
    # the half types: where and cast, and assign's copy as their one unary kernel
    for d in map(np.dtype, render.HALF_CTYPES):
        kernels.update({f"where_{short_name(d)}": RenderedKernel(_render_where),
                        f"cast_{short_name(d)}": RenderedKernel(_render_cast),
                        f"unary_{short_name(d)}": RenderedKernel(_render_copy)})
    return kernels


KERNELS = _kernels()


def implement(table) -> None:
    implement_shared(table, abi)
