"""The fused elementwise op: a group of elementwise ops as one node and one kernel call.

Its attributes are the group's expression as an SSA program (see mgegraph.planner.fuse):
``code`` holds ``(op, dst, a, b, c)`` steps over numbered values ("load" value dst <- input a,
"const" dst <- constants[a], registry op names on values, "store" output a <- value b), and
``constants`` the floats they use. That is the form a GPU backend renders as one kernel; the
CPU lowering (mgegraph.ops.fused_program.encode) maps values to a few registers and hands the
program to the fused kernel (_kernels/fused_body.pxi).
"""
from __future__ import annotations

from ..ir.types import TensorType, as_dtype, broadcast_shapes
from .fused_program import BINARY, UNARY, Program, encode
from .registry import FLOAT_DTYPES, REQUIRED, Launch, OpDef, register

# op name -> its float attributes, passed as constants (in the b and c operands). Comparisons
# give bool in the registry, so they and where stay out of float groups.
_COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}
FUSABLE_OPS = {
    **dict.fromkeys(sorted((UNARY | BINARY) - _COMPARISONS), ()),
    "leaky_relu": ("negative_slope",),
    "clip": ("lower", "upper"),
}


def _infer(in_types, attrs):
    shape, dtype = tuple(attrs["shape"]), as_dtype(attrs["dtype"])
    if dtype not in FLOAT_DTYPES or any(t.dtype != dtype for t in in_types):
        raise TypeError(f"inputs must all be {dtype} and floating point")
    if broadcast_shapes(shape, *(t.shape for t in in_types)) != shape:
        raise ValueError(f"inputs do not broadcast to {shape}")
    loads = {a for op, _, a, _, _ in attrs["code"] if op == "load"}
    if loads != set(range(len(in_types))):
        raise ValueError(f"the program loads inputs {sorted(loads)} of {len(in_types)}")
    return tuple(TensorType(shape, dtype) for _ in range(attrs["n_outputs"]))


def program_of(node) -> Program:
    """The node's expression as a fused_program.Program (what the kernel and tests run)."""
    return Program([v.shape for v in node.inputs], node.outputs[0].shape,
                   node.outputs[0].dtype, list(node.attr["code"]), list(node.attr["constants"]))


def _lower(node):
    ints, floats, workspace = encode(program_of(node))
    return Launch(ints, floats, workspace=workspace)


register(OpDef("fused_elementwise", "elementwise", _infer,
               attrs={"code": REQUIRED, "constants": (), "shape": REQUIRED, "dtype": REQUIRED,
                      "n_outputs": 1},
               kernel="fused", dtypes=FLOAT_DTYPES, lower=_lower, dispatch_input=-1,
               # in place: the program stores its outputs after its last step, so a block of an
               # input is read in full before the same block of an output is written
               inplace=True, flops_per_element=4.0))
