"""The fused elementwise op: a group of elementwise ops as one node and one kernel call.

Its attributes are the group's expression as an SSA program (see mgegraph.planner.fuse):
``code`` holds ``(op, dst, a, b, c)`` steps over numbered values ("load" value dst <- input a,
"const" dst <- constants[a], table op names on values, "store" output a <- value b), and
``constants`` the floats they use. That is the form a GPU backend renders as one kernel; the
CPU lowering (mgegraph/_kernels/lowering/fused.py) maps values to a few registers and hands the
program to the fused kernel (_kernels/fused_body.pxi). A float32 program may load and store
per-tensor quantized int8 and uint8 values (dequantize and quantize at the group's boundary):
an output stored as integers is typed with the parameters of the quantize step it comes from.
"""
from __future__ import annotations

import numpy as np

from ..ir.quant import per_tensor
from ..ir.types import TensorType, as_dtype, broadcast_shapes
from . import elementwise_table as TABLE
from .fused_program import QUANT_STEPS, QUANTIZE, STORAGE, Program, check_code, reads, steps
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, register

# The ops the fusion pass may put in a group -> their attributes, which become constants (in
# the b and c operands): the table's float ops marked fusable. Comparisons give bool in the
# registry, so they and where stay out of float groups.
FUSABLE_OPS = {op.name: op.params for op in TABLE.OPS
               if op.fusable and set(FLOAT_DTYPES) <= set(op.dtypes)}
FLOAT32 = np.dtype(np.float32)


def _infer(in_types, attrs):
    shape, dtype = tuple(attrs["shape"]), as_dtype(attrs["dtype"])
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"a fused program computes in float32 or float64, not {dtype}")
    if broadcast_shapes(shape, *(t.shape for t in in_types)) != shape:
        raise ValueError(f"inputs do not broadcast to {shape}")
    # the whole program, before any backend sees it: a kernel indexes its buffers by it
    code = steps(attrs["code"])
    check_code(code, len(in_types), len(attrs["constants"]), attrs["n_outputs"])
    loads = {a: b for op, _, a, b, _ in code if op == "load"}
    if set(loads) != set(range(len(in_types))):
        raise ValueError(f"the program loads inputs {sorted(loads)} of {len(in_types)}")
    if len({(a, b) for op, _, a, b, _ in code if op == "load"}) != len(loads):
        raise ValueError("the program loads an input as two dtypes")
    quantized = any(loads.values()) or any(op in QUANT_STEPS for op, *_ in code)
    if quantized and dtype != FLOAT32:
        raise TypeError(f"quantized values fuse into float32 programs only, not {dtype}")
    for i, t in enumerate(in_types):
        want = STORAGE.get(loads[i], dtype)
        if t.dtype != want or (t.quant is not None) != (loads[i] != 0):
            raise TypeError(f"input {i} is {t}, but the program loads it as "
                            f"{'quantized ' if loads[i] else ''}{want}")
    if quantized:
        check_quantized(code, attrs["constants"], in_types)
    stored = {dst: (a, b) for op, dst, a, b, _ in code if op == "store"}
    return tuple(_stored_type(code, attrs["constants"], shape, dtype, *stored[k])
                 for k in range(attrs["n_outputs"]))


def check_quantized(code, constants, in_types) -> None:
    """Raise TypeError unless every quantized input is per tensor and read only by dequantize
    steps of its own scale and zero point (the integers mean nothing else)."""
    loaded = {dst: in_types[a] for op, dst, a, b, _ in code if op == "load" and b}
    for t in loaded.values():
        if t.quant.per_channel:
            raise TypeError(f"a fused program loads per-tensor quantized values only, got {t}")
    for op, _, a, b, c in code:
        for v in reads(op, a, b, c):
            if v not in loaded:
                continue
            q = loaded[v].quant
            if op != "dequantize" or (constants[b], constants[c]) != (q.scale, q.zero_point):
                raise TypeError(f"{loaded[v]} is read by {op}, not dequantized with its own "
                                f"scale and zero point ({q.scale}, {q.zero_point})")


def _stored_type(code, constants, shape, dtype, value, storage) -> TensorType:
    if not storage:
        return TensorType(shape, dtype)
    op, _, _, b, c = next(s for s in code if s[1] == value and s[0] != "store")
    if QUANTIZE.get(op) != storage:
        raise TypeError(f"output of storage {STORAGE[storage]} must be stored from a "
                        f"quantize step to it, not from {op}")
    quant = per_tensor(constants[b], int(constants[c]))
    quant.check(shape, STORAGE[storage])
    return TensorType(shape, STORAGE[storage], quant)


def program_of(node) -> Program:
    """The node's expression as a fused_program.Program (what the kernel and tests run)."""
    return Program([v.shape for v in node.inputs], node.outputs[0].shape,
                   as_dtype(node.attr["dtype"]), list(node.attr["code"]),
                   list(node.attr["constants"]))


register(OpDef("fused_elementwise", "elementwise", _infer,
               attrs={"code": REQUIRED, "constants": (), "shape": REQUIRED, "dtype": REQUIRED,
                      "n_outputs": 1},
               # in place: the program stores its outputs after its last step, so a block of an
               # input is read in full before the same block of an output is written
               inplace=True, flops_per_element=4.0, quantized=True))
