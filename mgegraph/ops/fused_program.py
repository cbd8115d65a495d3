"""Fused elementwise programs for the fused kernel (_kernels/fused_body.pxi): encoding,
register allocation, a NumPy reference.

A Program is one elementwise expression over inputs of one float dtype, as steps
``(op, dst, a, b, c)``: ``("load", v, input)``, ``("const", v, constant index)``, registry op
names on values (``("exp", v, x)``, ``("add", v, x, y)``, ``("where", v, cond, x, y)``;
leaky_relu's slope and clip's bounds are constant indices in b and c) and
``("store", output, v)``. Values may be SSA numbers or reused names; ``encode`` maps them to a
few registers by liveness and lays out the kernel's parameters (see _kernels/fused_body.pxi).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._kernels import fused as K
from .._kernels.lowering.layout import broadcast_strides, collapse, contiguous_strides
from .registry import get_op

UNARY, BINARY = frozenset(K.UNARY), frozenset(K.BINARY)
REGISTER_BYTES = 48 * 1024    # one thread's registers: inside L2 with room for the streams
MIN_BLOCK, MAX_BLOCK = 256, 4096
# Work (elements x the registry's flops per element of each step, plus one per load and store)
# below which one thread runs the program: waking a sleeping OpenMP thread (passive wait, see
# _kernels/__init__.py) costs some 60-90 us on 2 cores here, about this much work. Measured:
# fusion-chain gains from 2 threads above ~100k elements, a lone add above ~500k.
PARALLEL_WORK = 2_500_000


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


def _steps(code):
    return [tuple(s) + (0,) * (5 - len(s)) for s in code]


def _reads(op, a, b, c) -> tuple:
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


def _to_ssa(code) -> list:
    # a reused name becomes a fresh value (its step's index) per definition
    current, out = {}, []
    for k, (op, dst, a, b, c) in enumerate(_steps(code)):
        reads = [current[v] if v in current else _undefined(v, k) for v in _reads(op, a, b, c)]
        if op == "store":
            out.append((op, dst, reads[0], 0, 0))
            continue
        current[dst] = k
        if op in UNARY:
            out.append((op, k, reads[0], b, c))
        else:  # load and const keep their operands; binary ops and where read values only
            out.append((op, k, *(reads + [0, 0, 0])[:3]) if reads else (op, k, a, b, c))
    return out


def _undefined(v, k):
    raise ValueError(f"step {k} reads value {v} before it is defined")


def allocate_registers(ssa_code) -> tuple[list, int]:
    """Values -> registers: a register is free again after its value's last read.

    A step never writes a register it reads, so no loop has its output alias an input.

    >>> allocate_registers([("load", 5, 0), ("exp", 6, 5), ("store", 0, 6)])
    ([('load', 0, 0, 0, 0), ('exp', 1, 0, 0, 0), ('store', 0, 1, 0, 0)], 2)
    """
    code = _to_ssa(ssa_code)
    last = {v: k for k, (op, _, a, b, c) in enumerate(code) for v in _reads(op, a, b, c)}
    reg, free, top, out = {}, [], 0, []
    for k, (op, dst, a, b, c) in enumerate(code):
        reads = _reads(op, a, b, c)
        if op == "store":
            out.append((op, dst, reg[a], 0, 0))
        elif k in last:  # a value nobody reads needs no step
            if free:
                reg[dst] = free.pop()
            else:
                reg[dst], top = top, top + 1
            operands = (a, b, c) if not reads else (reg[a], b, c) if op in UNARY else \
                tuple(reg[v] for v in reads) + (0,) * (3 - len(reads))
            out.append((op, reg[dst], *operands))
        free += sorted({reg[v] for v in reads if last[v] == k}, reverse=True)
    return out, max(top, 1)


def _layout(program):
    out = tuple(program.output_shape) or (1,)
    strides = [broadcast_strides(tuple(s), out) for s in program.input_shapes]
    return collapse(out, [contiguous_strides(out)] + strides)


def encode(program: Program, threads: int | None = None,
           block: int | None = None) -> tuple[tuple, tuple, int]:
    """(ints, floats, workspace bytes) for the kernel ``fused_f32`` or ``fused_f64``.

    >>> ints, floats, ws = encode(Program([(8,)], (8,), "float32",
    ...                                   [("load", 0, 0), ("neg", 1, 0), ("store", 0, 1)]))
    >>> ints[:4], ws
    ((1, 1, 1, 8), 64)
    """
    code, n_regs = allocate_registers(program.code)
    shape, merged = _layout(program)
    itemsize = np.dtype(program.dtype).itemsize
    size = math.prod(shape)
    if block is None:
        block = 1 << int(math.log2(max(1, REGISTER_BYTES // (n_regs * itemsize))))
        block = min(max(MIN_BLOCK, min(MAX_BLOCK, block)), 1 << max(0, size - 1).bit_length())
    if threads is None:
        threads = K.max_threads() if size * _work_per_element(code) >= PARALLEL_WORK else 1
    ints = [len(program.input_shapes), program.n_outputs, len(shape), *shape]
    for s in merged[1:]:
        ints.extend(s)
    ints += [block, threads, n_regs, len(code)]
    for op, dst, a, b, c in code:
        ints += [K.OPCODES[op], dst, a, b, c]
    return tuple(ints), tuple(float(v) for v in program.constants), \
        threads * n_regs * block * itemsize


def _work_per_element(code) -> float:
    return sum(1.0 if op in ("load", "const", "store") else get_op(op).flops_per_element
               for op, *_ in code)


def kernel_name(dtype) -> str:
    return {"float32": "fused_f32", "float64": "fused_f64"}[np.dtype(dtype).name]


def run(program: Program, inputs, threads: int | None = None, block: int | None = None,
        outputs=None) -> list:
    """Run the program through the compiled kernel (tests and benchmarks; plans use encode).

    >>> run(Program([(2,)], (2,), "float64", [("load", 0, 0), ("square", 1, 0),
    ...                                        ("store", 0, 1)]), [np.array([2.0, 3.0])])
    [array([4., 9.])]
    """
    dtype = np.dtype(program.dtype)
    ints, floats, ws = encode(program, threads, block)
    xs = [np.ascontiguousarray(x, dtype) for x in inputs]
    if outputs is None:
        outputs = [np.empty(program.output_shape, dtype) for _ in range(program.n_outputs)]
    workspace = np.empty(max(ws, 1), np.uint8)
    status = K.call_kernel(kernel_name(dtype), xs + list(outputs) + [workspace], ints, floats)
    if status:
        raise RuntimeError(f"fused kernel failed with status {status}")
    return list(outputs)


# -- the NumPy reference -------------------------------------------------------------------------
def _erf(x):
    from scipy.special import erf
    return erf(x)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


NUMPY_UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "square": np.square, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x * 0.7071067811865476)), "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x), "softplus": lambda x: np.logaddexp(x, 0),
    "floor": np.floor, "ceil": np.ceil, "sign": np.sign, "reciprocal": lambda x: 1 / x,
    "erf": _erf,
}
NUMPY_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum,
    "relu_backward": lambda y, g: np.where(y > 0, g, 0), "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "equal": np.equal, "not_equal": np.not_equal,
}


def _numpy_step(op, reads, b, c, k):
    if op == "where":
        return np.where(reads[0] != 0, reads[1], reads[2])
    if op in BINARY:
        return NUMPY_BINARY[op](*reads).astype(np.float64)
    if op == "leaky_relu":
        return np.where(reads[0] > 0, reads[0], reads[0] * k[b])
    if op == "clip":
        return np.clip(reads[0], k[b], k[c])
    return NUMPY_UNARY[op](reads[0])


def evaluate_numpy(program: Program, inputs) -> list:
    """The program evaluated by NumPy in float64, outputs cast to its dtype (the reference).

    >>> evaluate_numpy(Program([()], (), "float32", [("load", 0, 0), ("exp", 1, 0),
    ...                                              ("store", 0, 1)]), [np.float32(0)])
    [array(1., dtype=float32)]
    """
    k = [float(v) for v in program.constants]
    values, outputs = {}, {}
    with np.errstate(all="ignore"):
        for op, dst, a, b, c in _steps(program.code):
            if op == "load":
                x = np.asarray(inputs[a], program.dtype).astype(np.float64)
                values[dst] = np.broadcast_to(x, program.output_shape)
            elif op == "const":
                values[dst] = np.full(program.output_shape, k[a])
            elif op == "store":
                outputs[dst] = np.array(values[a], program.dtype)
            else:
                values[dst] = _numpy_step(op, [values[v] for v in _reads(op, a, b, c)], b, c, k)
    return [outputs[i] for i in range(program.n_outputs)]
