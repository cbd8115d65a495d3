"""fused_elementwise on CUDA: each group's SSA program rendered to one kernel at plan time.

Lowering: the GPU's own, not the CPU's: the CPU kernel interprets an encoded program over a
register workspace (ints hold the code, a workspace holds threads x registers x block), while
here the program becomes straight-line code (mgegraph/cuda/render.py) with the layout baked in,
so the launch needs no parameters and no workspace.
"""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch
from ...ops.fused import program_of
from ...ops.fused_program import STORAGE, Program
from ...ops.registry import FLOAT_DTYPES
from .. import geometry, render
from ..kernel import RenderedKernel


def _lower(node) -> Launch:
    render.fused_kernel(program_of(node))  # an op the renderer lacks fails here, at compile
    return Launch()


def program_of_instruction(ins, types) -> Program:
    attrs = dict(ins.attrs)
    n_in = len(ins.inputs)
    return Program([t.shape for t in types[:n_in]], tuple(attrs["shape"]), attrs["dtype"],
                   list(attrs["code"]), list(attrs["constants"]))


def fused_steps(entry: str, program: Program):
    _shape, strides, contiguous = render.fused_layout(program)
    flat = all(render._input_kind(s, contiguous) != "strided" for s in strides)
    per = geometry.vector_width(np.dtype(program.dtype).itemsize, flat)
    step = geometry.grid_stride(math.prod(program.output_shape), per, entry)
    return [] if step is None else [step]


def _render(ins, types):
    program = program_of_instruction(ins, types)
    entry, text = render.fused_kernel(program, f"fused_elementwise at {ins.location}")
    return text, fused_steps(entry, program)


# i8, u8: a float32 program whose first output is quantized (the rule allows no other)
KERNELS = {f"fused_{d}": RenderedKernel(_render) for d in ("f32", "f64", "i8", "u8")}


def implement(table) -> None:
    # dispatched by the first output's dtype (-1): the program's own, or the integers it stores
    table.implement("fused_elementwise", kernel="fused",
                    dtypes=FLOAT_DTYPES + tuple(STORAGE.values()), lower=_lower,
                    dispatch_input=-1)
