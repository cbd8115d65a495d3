"""Fused elementwise programs: what a fused group computes, and its NumPy reference.

A Program is one elementwise expression over inputs of one float dtype, as steps
``(op, dst, a, b, c)``: ``("load", v, input)``, ``("const", v, constant index)``, elementwise
table ops on values (``("exp", v, x)``, ``("add", v, x, y)``; a unary op's parameters, such as
leaky_relu's slope and clip's bounds, are constant indices in b and c), ``("where", v, cond, x,
y)``, and ``("store", output, v)``. Values may be SSA numbers or reused names (``to_ssa`` makes
them SSA).

Quantized values at a group's boundary (float32 programs only): ``("load", v, input, storage)``
and ``("store", output, v, storage)`` with ``storage`` a STORAGE code read or write int8 or
uint8 integers (0: the program's dtype); ``("dequantize", v, q, scale, zero_point)`` gives
``(q - zero_point) * scale``, and ``("quantize_int8", v, x, scale, zero_point)`` (or
``quantize_uint8``) ``clamp(rint(x / scale) + zero_point)``, a NaN refused (ops/quantize.py's
meaning, bit for bit); scale and zero_point are constant indices. How a device runs a program is its backend's: the CPU's register allocation and
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


# The integers a load or store step may move besides the program's dtype (its b operand), and
# the quantizing steps, each with the storage its values fit
STORAGE = {1: np.dtype(np.int8), 2: np.dtype(np.uint8)}
QUANTIZE = {"quantize_int8": 1, "quantize_uint8": 2}
QUANT_STEPS = frozenset(("dequantize", *QUANTIZE))


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

    def buffer_dtypes(self) -> tuple[list, list]:
        """The dtypes of the input and output buffers: the program's, or the integers a load or
        store step names (its b)."""
        dtype = np.dtype(self.dtype)
        loads = {a: b for op, _, a, b, _ in steps(self.code) if op == "load"}
        stores = {dst: b for op, dst, _, b, _ in steps(self.code) if op == "store"}
        return ([STORAGE.get(loads.get(i, 0), dtype) for i in range(len(self.input_shapes))],
                [STORAGE.get(stores.get(k, 0), dtype) for k in range(self.n_outputs)])


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
    if op in UNARY or op in QUANT_STEPS:
        return (a,)
    raise ValueError(f"op {op!r} cannot be fused")


def constants(op, a, b, c) -> tuple:
    """The constants (indices into the program's) a step reads: const's ``a``, and a unary op's
    parameters, ``b`` and ``c`` in the order of the table's ``params``.

    >>> constants("clip", 4, 0, 1), constants("exp", 4, 0, 0), constants("const", 3, 0, 0)
    ((0, 1), (), (3,))
    """
    if op == "const":
        return (a,)
    if op in UNARY:
        return (b, c)[:len(TABLE.BY_NAME[op].params)]
    if op in QUANT_STEPS:  # scale, zero point
        return (b, c)
    return ()


def to_ssa(code) -> list[tuple]:
    """The steps with each definition of a reused name a fresh value (its step's index).

    >>> to_ssa([("load", "x", 0), ("exp", "x", "x"), ("store", 0, "x")])
    [('load', 0, 0, 0, 0), ('exp', 1, 0, 0, 0), ('store', 0, 1, 0, 0)]
    """
    current, out = {}, []
    for k, (op, dst, a, b, c) in enumerate(steps(code)):
        read = [current[v] if v in current else _undefined(v, k) for v in reads(op, a, b, c)]
        if op == "store":
            out.append((op, dst, read[0], b, 0))
            continue
        current[dst] = k
        if op in UNARY or op in QUANT_STEPS:
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
    return entry.numpy(values[0], *[k[i] for i in constants(op, 0, b, c)])


def _quantize_numpy(op, x, scale, zero_point, dtype):
    info = np.iinfo(STORAGE[QUANTIZE[op]])
    v = x.astype(dtype) / dtype.type(scale)
    if np.isnan(v).any():
        raise ValueError("a NaN has no integer")
    return np.clip(np.rint(v.astype(np.float64)) + zero_point, info.min, info.max)


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
                outputs[dst] = np.array(values[a], STORAGE.get(b, program.dtype))
            elif op == "dequantize":
                dtype = np.dtype(program.dtype)
                values[dst] = (values[a] - k[c]).astype(dtype) * dtype.type(k[b])
            elif op in QUANTIZE:
                values[dst] = _quantize_numpy(op, values[a], k[b], k[c], np.dtype(program.dtype))
            else:
                values[dst] = _numpy_step(op, [values[v] for v in reads(op, a, b, c)], b, c, k)
    return [outputs[i] for i in range(program.n_outputs)]


def check_code(code, n_inputs: int, n_constants: int, n_outputs) -> None:
    """Raise ValueError unless ``code`` is a well-formed SSA program: known ops, int operands,
    every value defined once before it is read, loads of inputs ``< n_inputs``, constant indices
    (a const's a, a unary op's parameters) ``< n_constants``, and outputs ``0..n_outputs-1``
    each stored exactly once. What the fused op's shape rule checks before any kernel sees it.

    >>> check_code([("load", 0, 0), ("store", 0, 1)], 1, 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: step 1 (store): reads value 1 before it is defined
    """
    if isinstance(n_outputs, bool) or not isinstance(n_outputs, int) or n_outputs < 0:
        raise ValueError(f"n_outputs must be an int >= 0, got {n_outputs!r}")
    defined, stored = set(), set()
    for k, step in enumerate(code):
        if not isinstance(step, (tuple, list)) or not 2 <= len(step) <= 5 or not isinstance(
                step[0], str):
            raise ValueError(f"step {k} is not (op, dst, a, b, c): {step!r}")
        op, dst, a, b, c = tuple(step) + (0,) * (5 - len(step))
        where = f"step {k} ({op})"
        if op not in ("load", "const", "store", "where") and op not in UNARY | BINARY | \
                QUANT_STEPS:
            raise ValueError(f"{where}: not an op a fused program may hold")
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (dst, a, b, c)):
            raise ValueError(f"{where}: operands must be ints, got {step!r}")
        for v in reads(op, a, b, c):
            if v not in defined:
                raise ValueError(f"{where}: reads value {v} before it is defined")
        if op in ("load", "store") and b not in (0, *STORAGE):
            raise ValueError(f"{where}: storage {b} is not one of 0 (the program's dtype), "
                             f"{', '.join(f'{k} ({d})' for k, d in STORAGE.items())}")
        if op == "store":
            if not 0 <= dst < n_outputs or dst in stored:
                raise ValueError(f"{where}: output {dst} is out of range 0..{n_outputs - 1} "
                                 "or stored twice")
            stored.add(dst)
            continue
        if dst < 0 or dst in defined:
            raise ValueError(f"{where}: value {dst} is negative or defined twice")
        if op == "load" and not 0 <= a < n_inputs:
            raise ValueError(f"{where}: input {a} of {n_inputs}")
        for i in constants(op, a, b, c):
            if not 0 <= i < n_constants:
                raise ValueError(f"{where}: constant {i} of {n_constants}")
        defined.add(dst)
    if len(stored) != n_outputs:
        raise ValueError(f"outputs {sorted(set(range(n_outputs)) - stored)} are never stored")
