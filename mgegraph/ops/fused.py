"""The fused elementwise op: a group of elementwise ops as one node and one kernel call.

Its attributes are the group's expression as an SSA program (see mgegraph.planner.fuse):
``code`` holds ``(op, dst, a, b, c)`` steps over numbered values ("load" value dst <- input a,
"const" dst <- constants[a], table op names on values, "store" output a <- value b), and
``constants`` the floats they use. That is the form a GPU backend renders as one kernel; the
CPU lowering (mgegraph/_kernels/lowering/fused.py) maps values to a few registers and hands the
program to the fused kernel (_kernels/fused_body.pxi).
"""
from __future__ import annotations

from ..ir.types import TensorType, as_dtype, broadcast_shapes
from . import elementwise_table as TABLE
from .fused_program import Program, check_code
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, register

# The ops the fusion pass may put in a group -> their attributes, which become constants (in
# the b and c operands): the table's float ops marked fusable. Comparisons give bool in the
# registry, so they and where stay out of float groups.
FUSABLE_OPS = {op.name: op.params for op in TABLE.OPS
               if op.fusable and set(FLOAT_DTYPES) <= set(op.dtypes)}


def _infer(in_types, attrs):
    shape, dtype = tuple(attrs["shape"]), as_dtype(attrs["dtype"])
    if dtype not in FLOAT_DTYPES or any(t.dtype != dtype for t in in_types):
        raise TypeError(f"inputs must all be {dtype} and floating point")
    if broadcast_shapes(shape, *(t.shape for t in in_types)) != shape:
        raise ValueError(f"inputs do not broadcast to {shape}")
    # the whole program, before any backend sees it: a kernel indexes its buffers by it
    check_code(attrs["code"], len(in_types), len(attrs["constants"]), attrs["n_outputs"])
    loads = {a for op, _, a, *_ in attrs["code"] if op == "load"}
    if loads != set(range(len(in_types))):
        raise ValueError(f"the program loads inputs {sorted(loads)} of {len(in_types)}")
    return tuple(TensorType(shape, dtype) for _ in range(attrs["n_outputs"]))


def program_of(node) -> Program:
    """The node's expression as a fused_program.Program (what the kernel and tests run)."""
    return Program([v.shape for v in node.inputs], node.outputs[0].shape,
                   node.outputs[0].dtype, list(node.attr["code"]), list(node.attr["constants"]))


register(OpDef("fused_elementwise", "elementwise", _infer,
               attrs={"code": REQUIRED, "constants": (), "shape": REQUIRED, "dtype": REQUIRED,
                      "n_outputs": 1},
               # in place: the program stores its outputs after its last step, so a block of an
               # input is read in full before the same block of an output is written
               inplace=True, flops_per_element=4.0))
