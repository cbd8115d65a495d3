"""Fused elementwise programs: what a fused group computes, and its NumPy reference.

A Program is one elementwise expression over inputs of one float dtype, as steps
``(op, dst, a, b, c)``: ``("load", v, input)``, ``("const", v, constant index)``, elementwise
table ops on values (``("exp", v, x)``, ``("add", v, x, y)``; a unary op's parameters, such as
leaky_relu's slope and clip's bounds, are constant indices in b and c), ``("where", v, cond, x,
y)``, and ``("store", output, v)``. Values may be SSA numbers or reused names (``to_ssa`` makes
them SSA). How a device runs a program is its backend's: the CPU's register allocation and
parameter block are in mgegraph/_kernels/lowering/fused.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import elementwise_table as TABLE

# The table ops a program may hold: every one defined for float dtypes (comparisons give 1.0 or
# 0.0 there, for where to test).
UNARY = frozenset(op.name for op in TABLE.OPS if op.kind == "unary"
                  and np.dtype(np.float32) in op.dtypes)
BINARY = frozenset(op.name for op in TABLE.OPS if op.kind in ("binary", "compare")
                   and np.dtype(np.float32) in op.dtypes)


@dataclass(frozen=True)
class Program:
    """An elementwise expression: input shapes broadcast to ``output_shape``, all ``dtype``.

    >>> Program([(3,)], (3,), "float32", [("load", 0, 0), ("exp", 1, 0), ("store", 0, 1)]).n_outputs
    1
    """
    input_shapes: list
    output_shape: tuple
    dtype: object
    code: list
    constants: list = field(default_factory=list)

    @property
    def n_outputs(self) -> int:
        return 1 + max((s[1] for s in self.code if s[0] == "store"), default=-1)


def steps(code) -> list[tuple]:
    """The steps padded to five fields ``(op, dst, a, b, c)``."""
    return [tuple(s) + (0,) * (5 - len(s)) for s in code]


def reads(op, a, b, c) -> tuple:
    """The values a step reads."""
    if op in ("load", "const"):
        return ()
    if op == "store":
        return (a,)
    if op == "where":
        return (a, b, c)
    if op in BINARY:
        return (a, b)
    if op in UNARY:
        return (a,)
    raise ValueError(f"op {op!r} cannot be fused")


def to_ssa(code) -> list[tuple]:
    """The steps with each definition of a reused name a fresh value (its step's index).

    >>> to_ssa([("load", "x", 0), ("exp", "x", "x"), ("store", 0, "x")])
    [('load', 0, 0, 0, 0), ('exp', 1, 0, 0, 0), ('store', 0, 1, 0, 0)]
    """
    current, out = {}, []
    for k, (op, dst, a, b, c) in enumerate(steps(code)):
        read = [current[v] if v in current else _undefined(v, k) for v in reads(op, a, b, c)]
        if op == "store":
            out.append((op, dst, read[0], 0, 0))
            continue
        current[dst] = k
        if op in UNARY:
            out.append((op, k, read[0], b, c))
        else:  # load and const keep their operands; binary ops and where read values only
            out.append((op, k, *(read + [0, 0, 0])[:3]) if read else (op, k, a, b, c))
    return out


def _undefined(v, k):
    raise ValueError(f"step {k} reads value {v} before it is defined")


# -- the NumPy reference (the table's functions) -------------------------------------------------
def _numpy_step(op, values, b, c, k):
    if op == "where":
        return np.where(values[0] != 0, values[1], values[2])
    entry = TABLE.BY_NAME[op]
    if entry.kind != "unary":
        return np.asarray(entry.numpy(*values)).astype(np.float64)
    return entry.numpy(values[0], *[k[i] for i in (b, c)[:len(entry.params)]])


def evaluate_numpy(program: Program, inputs) -> list:
    """The program evaluated by NumPy in float64, outputs cast to its dtype (the reference).

    >>> evaluate_numpy(Program([()], (), "float32", [("load", 0, 0), ("exp", 1, 0),
    ...                                              ("store", 0, 1)]), [np.float32(0)])
    [array(1., dtype=float32)]
    """
    k = [float(v) for v in program.constants]
    values, outputs = {}, {}
    with np.errstate(all="ignore"):
        for op, dst, a, b, c in steps(program.code):
            if op == "load":
                x = np.asarray(inputs[a], program.dtype).astype(np.float64)
                values[dst] = np.broadcast_to(x, program.output_shape)
            elif op == "const":
                values[dst] = np.full(program.output_shape, k[a])
            elif op == "store":
                outputs[dst] = np.array(values[a], program.dtype)
            else:
                values[dst] = _numpy_step(op, [values[v] for v in reads(op, a, b, c)], b, c, k)
    return [outputs[i] for i in range(program.n_outputs)]
