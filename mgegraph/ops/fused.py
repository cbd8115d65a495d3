"""The fused elementwise op: a group of elementwise ops as one node and one kernel call.

Its attributes are the group's expression as an SSA program (see mgegraph.planner.fuse):
``code`` holds ``(op, dst, a, b, c)`` steps over numbered values ("load" value dst <- input a,
"const" dst <- constants[a], registry op names on values, "store" output a <- value b), and
``constants`` the floats they use. That is the form a GPU backend renders as one kernel; the
CPU lowering maps values to a few registers and hands the program to _kernels/expr.pyx.
"""
from __future__ import annotations

import math

from .._kernels import expr as K
from ..ir.types import TensorType, as_dtype, broadcast_shapes
from .layout import broadcast_strides, collapse, contiguous_strides
from .registry import FLOAT_DTYPES, REQUIRED, Launch, OpDef, register

# op name -> its float attributes, passed as constants (in the b and c operands)
FUSABLE_OPS = {
    **dict.fromkeys(("neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sin",
                     "cos", "tanh", "sigmoid", "relu", "floor", "ceil", "sign", "reciprocal",
                     "erf", "silu", "softplus", "add", "sub", "mul", "div", "pow", "maximum",
                     "minimum", "relu_backward"), ()),
    "leaky_relu": ("negative_slope",),
    "clip": ("lower", "upper"),
}
REGISTER_BYTES = 64 * 1024   # all registers of one thread: well inside L2
PARALLEL_ELEMENTS = 1 << 16  # below this, one thread is faster than waking others


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


_BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "relu_backward"}


def _reads(op, a, b) -> tuple:
    if op in ("load", "const"):
        return ()
    if op == "store":      # ("store", output index, value)
        return (a,)
    return (a, b) if op in _BINARY else (a,)


def allocate_registers(code) -> tuple[list, int]:
    """SSA values -> registers, reusing a register once its value is read for the last time
    (a step may write the register it reads: the kernels go element by element).

    >>> allocate_registers([("load", 0, 0, 0, 0), ("exp", 1, 0, 0, 0), ("store", 0, 1, 0, 0)])
    ([('load', 0, 0, 0, 0), ('exp', 0, 0, 0, 0), ('store', 0, 0, 0, 0)], 1)
    """
    last = {v: k for k, (op, _, a, b, _) in enumerate(code) for v in _reads(op, a, b)}
    reg, free, top, out = {}, [], 0, []
    for k, (op, dst, a, b, c) in enumerate(code):
        reads = _reads(op, a, b)
        free += sorted({reg[v] for v in reads if last[v] == k}, reverse=True)
        if op == "store":
            out.append((op, dst, reg[a], 0, 0))
            continue
        if free:
            reg[dst] = free.pop()
        else:
            reg[dst], top = top, top + 1
        if op in ("load", "const"):
            out.append((op, reg[dst], a, 0, 0))
        elif op in _BINARY:
            out.append((op, reg[dst], reg[a], reg[b], 0))
        else:
            out.append((op, reg[dst], reg[a], b, c))
    return out, max(top, 1)


def _lower(node):
    out = node.outputs[0].type
    code, n_regs = allocate_registers(node.attr["code"])
    strides = [broadcast_strides(v.shape, out.shape) for v in node.inputs]
    shape, merged = collapse(out.shape or (1,), [contiguous_strides(out.shape or (1,))] +
                             [s or (0,) for s in strides])
    itemsize = out.dtype.itemsize
    block = 1 << max(8, min(12, int(math.log2(REGISTER_BYTES // (n_regs * itemsize))),
                            (max(out.size, 1) - 1).bit_length()))
    threads = K.max_threads() if out.size >= PARALLEL_ELEMENTS else 1
    ints = [len(node.inputs), node.attr["n_outputs"], len(shape), *shape]
    for s in merged[1:]:
        ints.extend(s)
    ints += [block, threads, n_regs, len(code)]
    for op, dst, a, b, c in code:
        ints += [K.OPCODES[op], dst, a, b, c]
    return Launch(tuple(ints), tuple(node.attr["constants"]),
                  workspace=threads * n_regs * block * itemsize)


register(OpDef("fused_elementwise", "elementwise", _infer,
               attrs={"code": REQUIRED, "constants": (), "shape": REQUIRED, "dtype": REQUIRED,
                      "n_outputs": 1},
               kernel="expr", dtypes=FLOAT_DTYPES, lower=_lower, dispatch_input=-1,
               # in place: a block is stored only after every step of it has read its inputs
               inplace=True, flops_per_element=4.0))

