"""A fused elementwise instruction as a C function of its own: its program as one loop nest over
the output's shape, each input read at its broadcast strides, every value in a C variable.

Each step calls the op's function rendered from the elementwise table's C expression
(``ops/elementwise_table.py``), as the CPU build renders it into ``ew_ops.pxd``, over the
helpers of ``_kernels/scalar.h``, the header the Python kernels include too. The export builds
with ``-ffp-contract=off`` as the fused kernels are built (``_kernels/build_flags.py``), so each
number comes out bitwise as the Python executor gives it (libm's functions, sin or pow, as the
machine's libm gives them). Quantized values at a group's boundary load and store int8 or uint8
and quantize and dequantize as the fused kernel's quantized steps do (``fused_body.pxi``: the
integers of ``quantize.pyx``). A step the loops cannot take refuses the export (``unsupported``).
"""
from __future__ import annotations

import numpy as np

from ..kernel_abi.status import CODES
from ..ops import elementwise_table as TABLE
from ..ops.fused_program import (
    BINARY,
    QUANT_STEPS,
    QUANTIZE,
    STORAGE,
    UNARY,
    Program,
    constants,
    steps,
)
from .blob import DTYPES

# dtype -> (C type, the suffix of scalar.h's functions of that type): the floats every step
# takes, then the integers and bool the unfused table ops, comparisons and casts run on (bool is
# uint8_t, as the Python kernels hold it)
C_TYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64"),
           np.dtype(np.int32): ("int32_t", "i32"), np.dtype(np.int64): ("int64_t", "i64"),
           np.dtype(np.uint8): ("uint8_t", "u8"), np.dtype(np.int8): ("int8_t", "i8"),
           np.dtype(np.int16): ("int16_t", "i16"), np.dtype(np.bool_): ("uint8_t", "u8")}
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# the C types of the integers a load or store step names (its storage code)
STORAGE_C_TYPES = {np.dtype(np.int8): "int8_t", np.dtype(np.uint8): "uint8_t"}
SHARED_HEADER = "scalar.h"  # _kernels' header every generated loop includes
NEGATIVE_POWER = CODES["NEGATIVE_POWER"]  # an integer to a negative power, as NumPy refuses


def unsupported(attrs: dict, dtype) -> list[str]:
    """The steps of a fused program the C runtime lacks (empty when it runs them all)."""
    missing = [] if np.dtype(dtype) in C_TYPES else [f"dtype {np.dtype(dtype)}"]
    for op, _, _, b, _ in steps(attrs["code"]):
        if op in ("load", "store") and b and b not in STORAGE:
            missing.append(f"{op} of storage {b}")
        elif (op not in ("load", "store", "const", "where") and op not in UNARY | BINARY
              and op not in QUANT_STEPS):
            missing.append(op)
    return sorted(set(missing))


def program(ins, types) -> dict:
    """The fused program (attrs as a fused_elementwise node has them: code, constants, shape,
    dtype) that instruction ``ins`` runs, ``types`` its inputs' and outputs' types: its own for a
    fused group; one step for an unfused table op (kernels unary, binary and compare), a unary
    op's parameters its constants 0 and 1, so that it is generated as a loop too and computes
    what the op's scalar function computes; a load and a converting store for a cast. A
    comparison and a cast compute in their input's dtype and store ``out_dtype``."""
    if ins.kernel.startswith("fused_"):
        return dict(ins.attrs)
    n = len(ins.inputs)
    if ins.kernel.startswith("cast_"):
        code = (("load", 0, 0), ("store", 0, 0))
    elif n == 1:  # (a state update, assign, is a copy into its param: the lowering's op code)
        op = TABLE.OPS[ins.ints[0]].name if ins.op == "assign" else ins.op
        code = (("load", 0, 0), (op, 1, 0, 0, 1), ("store", 0, 1))
    else:
        code = (("load", 0, 0), ("load", 1, 1), (ins.op, 2, 0, 1), ("store", 0, 2))
    # the loop's shape and each input's element strides as the lowering laid them out
    # (kernel_abi/layout.py elementwise_params: opcode, ndim, shape, strides per input, threads)
    ndim = ins.ints[1]
    shape = tuple(ins.ints[2:2 + ndim])
    strides = [tuple(ins.ints[2 + ndim * (1 + i):2 + ndim * (2 + i)]) for i in range(n)]
    return {"code": code, "constants": tuple(ins.floats), "shape": shape, "strides": strides,
            "dtype": np.dtype(types[0].dtype), "out_dtype": np.dtype(types[-1].dtype),
            "n_outputs": 1}


# -- the table's ops as C functions ----------------------------------------------------------
def _expr_of(op, dtype) -> str:
    """The op's C expression for ``dtype``: its integer one where it has one (NumPy's
    wrapping and division, scalar.h's ``m_*_int``), as ew_codegen.py renders it."""
    return op.int_expr if op.int_expr and np.dtype(dtype) not in FLOATS else op.expr


def table_ops(code, dtype) -> set[str]:
    """The table ops a program's steps call, with every table op their expressions call."""
    todo = [op for op, *_ in steps(code) if op in TABLE.BY_NAME]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += [n for n in TABLE.calls(_expr_of(TABLE.BY_NAME[name], dtype))
                     if n in TABLE.BY_NAME]
    return found


def _expression(expr: str, ctype: str, suffix: str) -> str:
    def call(name, args):
        return f"{'ew_' if name in TABLE.BY_NAME else ''}{name}_{suffix}({', '.join(args)})"
    return TABLE.render(TABLE.parse(expr), lambda text: f"(({ctype}){text})", call)


def ew_functions(ops, dtype) -> list[str]:
    """``static inline`` C functions ``ew_<op>_<suffix>`` of the table ops named, in table order
    (a callee before its callers), for one dtype."""
    ctype, suffix = C_TYPES[np.dtype(dtype)]
    lines = []
    for op in TABLE.OPS:
        if op.name not in ops:
            continue
        args = ("x",) + ("p", "q")[:len(op.params)] if op.kind == "unary" else ("x", "y")
        result = "int" if op.kind == "compare" else ctype
        params = ", ".join(f"{ctype} {a}" for a in args)
        lines.append(f"static inline {result} ew_{op.name}_{suffix}({params}) "
                     f"{{ return {_expression(_expr_of(op, dtype), ctype, suffix)}; }}")
    return lines


# -- one program's loop ----------------------------------------------------------------------
def _strides(shape, out_shape) -> list[int]:
    """An input's element strides over the output's dims (0 where it broadcasts)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
        step *= shape[d]
    return strides


def _literal(value, ctype: str) -> str:
    """``value`` rounded once to ``ctype`` (as the fused kernel casts its double constants)."""
    rounded = np.float32(value) if ctype == "float" else np.float64(value)
    if np.isnan(rounded):
        return f"(({ctype})NAN)"
    if np.isinf(rounded):
        return f"(({ctype})({'-' if rounded < 0 else ''}INFINITY))"
    return f"(({ctype}){float(rounded).hex()})"


def _step(op, a, b, c, consts, ctype, suffix) -> str:
    """The C expression of one computing step over the values v<a>, v<b>, v<c>."""
    if op == "const":
        return _literal(consts[a], ctype)
    if op == "where":  # both operands are values already: a select
        return f"(v{a} != 0 ? v{b} : v{c})"
    if op in BINARY:
        call = f"ew_{op}_{suffix}(v{a}, v{b})"
        return f"({ctype}){call}" if TABLE.BY_NAME[op].kind == "compare" else call
    params = [_literal(consts[k], ctype) for k in constants(op, a, b, c)]
    return f"ew_{op}_{suffix}({', '.join([f'v{a}', *params])})"


def _quantize(op, dst, a, b, c, consts, ctype) -> list[str]:
    """A quantize step as fused_body.pxi's run_quantize: x divided by the scale in the program's
    dtype, rint and the zero point in double, saturated; a NaN stops the loop (NOT_A_NUMBER)."""
    info = np.iinfo(STORAGE[QUANTIZE[op]])
    return [f"double q{dst} = (double)(v{a} / {_literal(consts[b], ctype)});",
            f"if (q{dst} != q{dst}) return 5; /* a NaN has no integer */",
            f"q{dst} = rint(q{dst}) + {_literal(consts[c], 'double')};",
            f"T v{dst} = (T)(q{dst} < {info.min}.0 ? {info.min}.0 : "
            f"q{dst} > {info.max}.0 ? {info.max}.0 : q{dst});"]


def _converted(value: str, src, dst) -> str:
    """``value`` of dtype ``src`` as ``dst``, as the cast kernel's ``put`` converts it: bool is
    ``!= 0``; a float to an integer through scalar.h's ``float_to_i32``/``_i64`` (NumPy's on x86:
    INT_MIN for NaN, inf and out of range; a small integer the low bits of the int32); else C's
    conversion (wrapping to a narrower integer, as GCC and Clang define it)."""
    ctype = C_TYPES[dst][0]
    if dst == np.dtype(np.bool_):
        return f"(uint8_t)({value} != 0)"
    if src in FLOATS and dst.kind in "iu":
        return f"({ctype})float_to_{'i64' if dst.itemsize == 8 else 'i32'}({value})"
    return f"({ctype}){value}"


def _body(code, consts, dtype, out_dtype) -> list[str]:
    ctype, suffix = C_TYPES[dtype]
    lines = []
    for op, dst, a, b, c in steps(code):
        if op == "load":
            lines.append(f"T v{dst} = (T)in{a}[o{a}];")
        elif op == "store" and out_dtype != dtype:  # a comparison's bool, a cast's dtype
            lines.append(f"out{dst}[e] = {_converted(f'v{a}', dtype, out_dtype)};")
        elif op == "store":
            cast = f"({STORAGE_C_TYPES[STORAGE[b]]})" if b else ""
            lines.append(f"out{dst}[e] = {cast}v{a};")
        elif op == "dequantize":  # (q - zp) * scale in the program's dtype, as run_dequantize
            lines.append(f"T v{dst} = (v{a} - {_literal(consts[c], ctype)}) * "
                         f"{_literal(consts[b], ctype)};")
        elif op in QUANTIZE:
            lines += _quantize(op, dst, a, b, c, consts, ctype)
        else:
            if op == "pow" and dtype not in FLOATS:  # as the binary kernel refuses, NumPy raises
                lines.append(f"if (v{b} < 0) return {NEGATIVE_POWER};")
            lines.append(f"T v{dst} = {_step(op, a, b, c, consts, ctype, suffix)};")
    return lines


def render(name: str, attrs: dict, input_shapes, dtype) -> tuple[str, list[int]]:
    """The C source of kernel ``name`` (``mgr_<name>`` and its check) for the fused program of
    ``attrs`` over inputs of ``input_shapes``, and the bytes of each buffer it reads and writes
    (inputs, then outputs), which its check requires. It calls ``ew_functions`` of
    ``table_ops(attrs["code"], dtype)`` and the driver ``DRIVER``, which the including file
    defines once for all its loops."""
    dtype = np.dtype(dtype)
    out_shape = tuple(attrs["shape"]) or (1,)
    strides = attrs.get("strides") or [_strides(s, out_shape) for s in input_shapes]
    in_dtypes, out_dtypes = Program(list(input_shapes), out_shape, dtype,
                                    list(attrs["code"])).buffer_dtypes()
    out_dtype = np.dtype(attrs.get("out_dtype", dtype))
    if out_dtype != dtype:
        out_dtypes = [out_dtype]
    body = _body(attrs["code"], attrs.get("constants", ()), dtype, out_dtype)
    in_bytes = [int(np.prod(s, dtype=np.int64)) * dt.itemsize
                for s, dt in zip(input_shapes, in_dtypes)]
    out_bytes = [int(np.prod(out_shape, dtype=np.int64)) * dt.itemsize for dt in out_dtypes]
    nbytes = in_bytes + out_bytes
    shape, steps_ = _collapsed(out_shape, [list(s) for s in strides])
    lines = _rows_function(name, dtype, in_dtypes, out_dtypes, shape, steps_, body)
    work = int(np.prod(out_shape, dtype=np.int64)) * sum(
        TABLE.BY_NAME[op].flops if op in TABLE.BY_NAME else 1.0 for op, *_ in attrs["code"])
    lines += _entry_points(name, shape, work >= PARALLEL_WORK)
    return "\n".join(lines) + _check(name, nbytes, in_dtypes + out_dtypes), nbytes


# -- the loop nest, vectorisable and split over threads ----------------------------------------
# Design: the nest's dims merge where every input steps through them as one, so the innermost
# loop is as long as the layout allows (a contiguous tensor and its broadcast bias rows: one
# loop over each plane); its iterations are independent (an output never overlaps an input
# except as the same elements, in place), which `ivdep` tells the compiler where it cannot
# prove it, so the loop vectorises without a run-time overlap check (that fails in place). Each
# element is the same expression as before at any width: no FP contraction (the Makefile), no
# reassociation. A run of rows (an outer index, and a chunk of the innermost loop where it is
# long) is a unit of mgr_parallel_for above PARALLEL_WORK (elements x the table's flops per
# element of each step, one per other step): the fused kernel's threshold where idle threads
# sleep (_kernels/lowering/fused.py, measured on the 2-core AMD EPYC), as the C runtime's do;
# each function is compiled for the baseline and for AVX2 (the driver picks).
CHUNK = 4096  # elements of a unit cut from an innermost loop of more than 2 CHUNKs
PARALLEL_WORK = 2_500_000

DRIVER = """\
/* the generated loops' driver: rows [0, n) of a loop nest by mgr_parallel_for where the loop
 * moves enough bytes to pay for waking threads, else in this thread; the AVX2 build of its rows
 * where the CPU runs it; a row's nonzero status is the kernel's */
typedef struct {
    char** bufs;
    int status;
} mgr_ew_job;

static void mgr_ew_failed(mgr_ew_job* job, int status) {
    if (status) __atomic_store_n(&job->status, status, __ATOMIC_RELAXED);
}

static int mgr_ew_run(char** bufs, int64_t rows, int parallel, mgr_part_fn base,
                      mgr_part_fn avx2) {
    mgr_ew_job job = {bufs, 0};
    mgr_part_fn part = base;
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) part = avx2;
#else
    (void)avx2;
#endif
    if (parallel) mgr_parallel_for(rows, part, &job);
    else if (rows > 0) part(&job, 0, rows);
    return job.status;
}

#if defined(__GNUC__) && !defined(__clang__)
#define MGR_EW_IVDEP _Pragma("GCC ivdep")
#elif defined(__clang__)
#define MGR_EW_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define MGR_EW_IVDEP
#endif
"""


def _collapsed(shape, strides) -> tuple[tuple[int, ...], list[list[int]]]:
    """The loop nest over ``shape`` with each input's element ``strides``, its dims of one
    dropped and each dim merged into the one before where every input steps through the two as
    one (the outer's stride the inner's times its size): the same elements in the same order."""
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1] or \
        [(1, [0] * len(strides))]
    merged = [dims[0]]
    for n, inner in dims[1:]:
        size, outer = merged[-1]
        if all(a == b * n for a, b in zip(outer, inner)):
            merged[-1] = (size * n, inner)
        else:
            merged.append((n, inner))
    return tuple(n for n, _ in merged), [[s[i] for _, s in merged] for i in range(len(strides))]


def _units(shape) -> tuple[int, int, int]:
    """(rows: the nest's units, chunks: of the innermost loop per outer index, its length)"""
    inner = shape[-1]
    chunks = -(-inner // CHUNK) if inner > 2 * CHUNK else 1
    return int(np.prod(shape[:-1], dtype=np.int64)) * chunks, chunks, inner


def _offset(base: str, stride: int) -> str:
    return base if stride == 0 else f"{base} + j" if stride == 1 else f"{base} + j * {stride}"


def _rows_function(name, dtype, in_dtypes, out_dtypes, shape, steps_, body) -> list[str]:
    """``<name>_rows(bufs, lo, hi)``: the units [lo, hi) of the nest, inlined into each build."""
    ctype = C_TYPES[dtype][0]
    c_type = lambda dt: "T" if dt == dtype else C_TYPES[dt][0]  # noqa: E731
    rows, chunks, inner = _units(shape)
    lines = [f"static inline __attribute__((always_inline)) int {name}_rows(char** bufs, "
             "int64_t lo, int64_t hi) {", f"    typedef {ctype} T;"]
    lines += [f"    const {c_type(dt)}* in{i} = (const {c_type(dt)}*)bufs[{i}];"
              for i, dt in enumerate(in_dtypes)]
    lines += [f"    {c_type(dt)}* out{k} = ({c_type(dt)}*)bufs[{len(in_dtypes) + k}];"
              for k, dt in enumerate(out_dtypes)]
    lines.append("    for (int64_t r = lo; r < hi; r++) {")
    if chunks > 1:  # unit r: chunk r % chunks of outer index r / chunks
        lines += [f"        int64_t row = r / {chunks}, j0 = r % {chunks} * {CHUNK};",
                  f"        int64_t j1 = j0 + {CHUNK} < {inner} ? j0 + {CHUNK} : {inner};"]
    else:
        lines += [f"        int64_t row = r, j0 = 0, j1 = {inner};"]
    lines.append("        int64_t rest = row;")
    index = []  # the outer dims' indices, innermost first taken from rest
    for d in range(len(shape) - 2, -1, -1):
        last = d == 0
        lines.append(f"        int64_t i{d} = rest{'' if last else f' % {shape[d]}'};")
        if not last:
            lines.append(f"        rest /= {shape[d]};")
        index.append(d)
    lines.append("        (void)rest;")
    for i, s in enumerate(steps_):
        terms = [f"i{d} * {s[d]}" for d in sorted(index) if s[d]]
        lines.append(f"        int64_t b{i} = {' + '.join(terms) or '0'};")
    lines += [f"        int64_t e0 = row * {inner};",
              "        MGR_EW_IVDEP",
              "        for (int64_t j = j0; j < j1; j++) {",
              "            int64_t e = e0 + j;"]
    lines += [f"            int64_t o{i} = {_offset(f'b{i}', s[-1])};"
              for i, s in enumerate(steps_)]
    lines += ["            " + line for line in body]
    lines += ["        }", "    }", "    return MGR_KERNEL_OK;", "}", ""]
    return lines


def _entry_points(name, shape, parallel: bool) -> list[str]:
    """``mgr_<name>``: its rows through the driver, built for the baseline and for AVX2."""
    rows = _units(shape)[0]
    part = ("(void* job, int64_t lo, int64_t hi) {\n"
            f"    mgr_ew_failed((mgr_ew_job*)job, {name}_rows(((mgr_ew_job*)job)->bufs, lo, hi));"
            "\n}")
    return [f"static void {name}_base{part}",
            "#if defined(__GNUC__) && defined(__x86_64__)",
            f'__attribute__((target("avx2"))) static void {name}_avx2{part}',
            "#else",
            f"#define {name}_avx2 NULL",
            "#endif",
            f"static int mgr_{name}(const mgr_call* call) {{",
            f"    return mgr_ew_run(call->bufs, {rows}, {int(parallel)}, "
            f"{name}_base, {name}_avx2);",
            "}", ""]


def _check(name: str, nbytes: list[int], dtypes) -> str:
    """The C check of a generated kernel: exactly the buffers it was generated for."""
    sizes = ", ".join(map(str, nbytes))
    codes = ", ".join(str(DTYPES[np.dtype(d)]) for d in dtypes)
    return "\n".join([
        f"static const char* mgr_{name}_check(const mgr_check_args* x) {{",
        f"    static const int64_t bytes[] = {{{sizes}}}, dtypes[] = {{{codes}}};",
        f"    if (x->n_bufs != {len(nbytes)} || x->n_ints != 0 || x->n_floats != 0)",
        f'        return "wants {len(nbytes)} buffers and no parameters";',
        f"    for (size_t b = 0; b < {len(nbytes)}; b++)",
        "        if (x->buf_bytes[b] != bytes[b] || x->buf_dtypes[b] != dtypes[b])",
        '            return "a buffer is not of the size and dtype the loop was generated for";',
        "    return NULL;",
        "}",
        ""])
