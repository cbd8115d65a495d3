"""CPU lowering of fused_elementwise: a Program's values mapped to the fused kernel's registers,
its parameter block (_kernels/fused_body.pxi: structs Head, Run and Step, which the kernel module
exports by field name), and ``run``, which calls the compiled kernel on NumPy arrays for tests
and benchmarks.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...backend import Launch
from ...kernel_abi.layout import broadcast_strides, collapse, contiguous_strides, pack
from ...ops import elementwise_table as TABLE
from ...ops.fused import program_of
from ...ops.fused_program import QUANT_STEPS, STORAGE, UNARY, Program, reads, to_ssa
from ...ops.registry import FLOAT_DTYPES
from .. import THREADS_SLEEP
from .. import fused as K
from .elementwise import check_build

REGISTER_BYTES = 48 * 1024    # one thread's registers: inside L2 with room for the streams
# ... and when the call streams (below): inside half of L1 (32 KiB on Zen 4), since the streams
# pass through L2 and push the registers out of it. Measured on fusion-chain (5 registers): 512
# elements a block against 2048, 5-12% faster at 1 thread, 2-16% faster to 4% slower at 2
# (paired runs on a shared machine); 1024 as 2048.
STREAM_REGISTER_BYTES = 16 * 1024
MIN_BLOCK, MAX_BLOCK = 256, 4096
# Work (elements x the table's flops per element of each step, plus one per load and store)
# below which one thread runs the program. Where idle threads sleep (passive wait, see
# _kernels/__init__.py), waking one costs some 60-90 us on 2 cores here, about this much work:
# fusion-chain gained from 2 threads above ~100k elements, a lone add above ~500k. Where they
# spin (libgomp's default, the package's choice beside MKL), a parallel region costs a few us:
# an add + relu (work 5 an element) of 50k / 100k / 200k float32 took 17.5 / 32.2 / 62.0 us on
# 1 thread and 13.8 / 23.7 / 46.5 on 2, against 31.3 / 67.7 / 90.1 with the threads sleeping
# (AMD EPYC, median of 50 calls, best of 5 rounds).
PARALLEL_WORK = 2_500_000 if THREADS_SLEEP else 250_000
# A call that moves more bytes than the last-level cache holds streams (fused_body.pxi: stores
# that skip the cache). Measured on fusion-chain (4M float32, AMD EPYC Zen 4, 2 cores, shared):
# 8-12% faster at 1 and at 2 threads (paired runs), the same bits.
DEFAULT_LLC_BYTES = 32 << 20  # where /sys does not say
# the kernel's own steps, beside the table's ops
STEPS = ("load", "const", "store", "where", *sorted(QUANT_STEPS))
# Which programs get a generated body (_kernels/fused_jit.py), by MGEGRAPH_CPU_JIT: "auto" (the
# default) those of at least JIT_MIN_ELEMENTS output elements, "all" every one, "off" none. Below
# that size the interpreter's passes stay in L1 and a run is short: fusion-chain at 4M elements
# saves ~5.6 ms a run at 1 thread (~1.3 ns an element), so a 3 s build pays back after some
# 8,000 runs at this size, fewer above it. Only a program that gets one has the registers for it
# in its workspace, so a small program's memory is as before.
JIT_ENV = "MGEGRAPH_CPU_JIT"
JIT_MIN_ELEMENTS = 1 << 18


def jit_policy() -> str:
    value = os.environ.get(JIT_ENV, "auto").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "off"
    return "all" if value in ("all", "1", "always") else "auto"


def wants_body(size: int) -> bool:
    """Whether a program of ``size`` output elements gets a generated body."""
    policy = jit_policy()
    return policy == "all" or policy == "auto" and size >= JIT_MIN_ELEMENTS


def allocate_registers(ssa_code) -> tuple[list, int]:
    """Values -> registers: a register is free again after its value's last read.

    A step never writes a register it reads, so no loop has its output alias an input.

    >>> allocate_registers([("load", 5, 0), ("exp", 6, 5), ("store", 0, 6)])
    ([('load', 0, 0, 0, 0), ('exp', 1, 0, 0, 0), ('store', 0, 1, 0, 0)], 2)
    """
    code = to_ssa(ssa_code)
    last = {v: k for k, (op, _, a, b, c) in enumerate(code) for v in reads(op, a, b, c)}
    reg, free, top, out = {}, [], 0, []
    for k, (op, dst, a, b, c) in enumerate(code):
        read = reads(op, a, b, c)
        if op == "store":
            out.append((op, dst, reg[a], b, 0))
        elif k in last:  # a value nobody reads needs no step
            if free:
                reg[dst] = free.pop()
            else:
                reg[dst], top = top, top + 1
            operands = (a, b, c) if not read else (reg[a], b, c) if op in UNARY | QUANT_STEPS else \
                tuple(reg[v] for v in read) + (0,) * (3 - len(read))
            out.append((op, reg[dst], *operands))
        free += sorted({reg[v] for v in read if last[v] == k}, reverse=True)
    return out, max(top, 1)


@functools.cache
def last_level_cache_bytes() -> int:
    """The largest CPU cache of cpu0 in bytes, from Linux's /sys; DEFAULT_LLC_BYTES elsewhere.

    >>> last_level_cache_bytes() > 0
    True
    """
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=DEFAULT_LLC_BYTES)


def streams(program) -> bool:
    """Whether a call of ``program`` moves (reads once and writes) more bytes than the
    last-level cache holds, so that its kernel streams its stores past the cache.

    >>> streams(Program([(8,)], (8,), "float32", [("load", 0, 0), ("store", 0, 0)]))
    False
    """
    elements = sum(math.prod(s) for s in program.input_shapes)
    elements += program.n_outputs * math.prod(program.output_shape)
    return elements * np.dtype(program.dtype).itemsize > last_level_cache_bytes()


def _layout(program):
    out = tuple(program.output_shape) or (1,)
    strides = [broadcast_strides(tuple(s), out) for s in program.input_shapes]
    return collapse(out, [contiguous_strides(out)] + strides)


def _block_size(n_regs: int, itemsize: int, size: int, budget: int = REGISTER_BYTES) -> int:
    block = 1 << int(math.log2(max(1, budget // (n_regs * itemsize))))
    return min(max(MIN_BLOCK, min(MAX_BLOCK, block)), 1 << max(0, size - 1).bit_length())


def encode(program: Program, threads: int | None = None, block: int | None = None,
           stream: bool | None = None, body: bool | None = None) -> tuple[tuple, tuple, int]:
    """(ints, floats, workspace bytes) for the kernel ``fused_f32`` or ``fused_f64``;
    ``stream`` defaults to ``streams(program)``, ``body`` (room in the workspace for a
    generated body's registers) to ``wants_body``.

    >>> ints, floats, ws = encode(Program([(8,)], (8,), "float32",
    ...                                   [("load", 0, 0), ("neg", 1, 0), ("store", 0, 1)]))
    >>> ints[:4], ws
    ((1, 1, 1, 8), 64)
    """
    code, n_regs = allocate_registers(program.code)
    shape, merged = _layout(program)
    itemsize = np.dtype(program.dtype).itemsize
    size = math.prod(shape)
    if stream is None:
        stream = streams(program)
    if block is None:
        block = _block_size(n_regs, itemsize, size,
                            STREAM_REGISTER_BYTES if stream else REGISTER_BYTES)
    if threads is None:
        threads = K.max_threads() if size * _work_per_element(code) >= PARALLEL_WORK else 1
    ints = [*pack(K.HEAD_FIELDS, n_in=len(program.input_shapes), n_out=program.n_outputs,
                  ndim=len(shape)), *shape]
    for s in merged[1:]:
        ints.extend(s)
    # the block is sized for the interpreter's registers; for a generated body (fused_jit.py) the
    # workspace also holds one register per input and output, which it resolves them into
    if body if body is not None else wants_body(size):
        n_regs = max(n_regs, len(program.input_shapes) + program.n_outputs)
    ints += pack(K.RUN_FIELDS, block=block, threads=threads, n_regs=n_regs, n_code=len(code),
                 n_floats=len(program.constants), stream=int(stream))
    for op, dst, a, b, c in code:
        ints += pack(K.STEP_FIELDS, op=K.OPCODES[op], dst=dst, a=a, b=b, c=c)
    return tuple(ints), tuple(float(v) for v in program.constants), \
        threads * n_regs * block * itemsize


@dataclass(frozen=True)
class Encoded:
    """What a fused kernel's ints say, read back: the generated bodies are made from it."""

    n_in: int
    n_out: int
    size: int              # output elements
    n_regs: int
    steps: tuple[int, ...]  # the Step structs, flat (5 ints each)

    @property
    def quantized(self) -> bool:
        """Whether a step loads, stores or makes integers (such programs are interpreted)."""
        return any(op in QUANT_STEPS or op in ("load", "store") and b
                   for op, _, _, b, _ in self.code())

    def code(self) -> list[tuple]:
        """The steps as (op name, dst, a, b, c)."""
        names = {v: k for k, v in K.OPCODES.items()}
        s = self.steps
        return [(names[s[k]], *s[k + 1:k + 5]) for k in range(0, len(s), 5)]


def decode(ints) -> Encoded:
    """The inverse of ``encode``'s layout (Head, shape, strides, Run, Steps).

    >>> decode(encode(Program([(8,)], (8,), "float32",
    ...                       [("load", 0, 0), ("neg", 1, 0), ("store", 0, 1)]))[0]).code()
    [('load', 0, 0, 0, 0), ('neg', 1, 0, 0, 0), ('store', 0, 1, 0, 0)]
    """
    head = dict(zip(K.HEAD_FIELDS, ints))
    ndim, n_in = head["ndim"], head["n_in"]
    at = len(K.HEAD_FIELDS)
    size = math.prod(ints[at:at + ndim])
    at += ndim + n_in * ndim
    run = dict(zip(K.RUN_FIELDS, ints[at:]))
    at += len(K.RUN_FIELDS)
    steps = tuple(ints[at:at + len(K.STEP_FIELDS) * run["n_code"]])
    return Encoded(n_in, head["n_out"], size, run["n_regs"], steps)


def _work_per_element(code) -> float:
    return sum(TABLE.BY_NAME[op].flops if op in TABLE.BY_NAME else 1.0 for op, *_ in code)


def kernel_name(dtype) -> str:
    return {"float32": "fused_f32", "float64": "fused_f64"}[np.dtype(dtype).name]


def run(program: Program, inputs, threads: int | None = None, block: int | None = None,
        outputs=None, stream: bool | None = None, kernel=None) -> list:
    """Run the program through the compiled kernel (tests and benchmarks; plans use encode);
    ``kernel``: the address of another kernel taking the same parameters (a generated one).

    >>> run(Program([(2,)], (2,), "float64", [("load", 0, 0), ("square", 1, 0),
    ...                                        ("store", 0, 1)]), [np.array([2.0, 3.0])])
    [array([4., 9.])]
    """
    dtype = np.dtype(program.dtype)
    ints, floats, ws = encode(program, threads, block, stream)
    in_dtypes, out_dtypes = program.buffer_dtypes()
    xs = [np.ascontiguousarray(x, d) for x, d in zip(inputs, in_dtypes)]
    if outputs is None:
        outputs = [np.empty(program.output_shape, d) for d in out_dtypes]
    workspace = np.empty(max(ws, 1), np.uint8)
    status = K.call_kernel(kernel or kernel_name(dtype), xs + list(outputs) + [workspace],
                           ints, floats)
    if status:
        raise RuntimeError(f"fused kernel failed with status {status}")
    return list(outputs)


def _lower(node) -> Launch:
    ints, floats, workspace = encode(program_of(node))
    return Launch(ints, floats, workspace=workspace)


def implement(table) -> None:
    check_build(K, extra=STEPS)
    # dispatched by the first output's dtype (-1): the program's own, or int8 or uint8 for a
    # float32 program that quantizes it (the kernel module maps those to fused_f32)
    table.implement("fused_elementwise", kernel="fused",
                    dtypes=FLOAT_DTYPES + tuple(STORAGE.values()), lower=_lower,
                    dispatch_input=-1)
