"""Render: CUDA C source text for the elementwise table's ops and for fused programs.

Pure functions, text in and text out (testable without a GPU): the table's expressions
(mgegraph/ops/elementwise_table.py) become one ``ew_<op>`` device function per op and C type,
as the CPU build renders them into ew_ops.pxd, over the helpers of csrc_cuda/scalar.cuh (the
CPU's scalar.pxd, same semantics); a kernel per (op, dtype) calls them through the loops of
csrc_cuda/elementwise.cuh; a fused_elementwise node's SSA program becomes one kernel whose
body is the program's steps over scalars, with the shape and strides baked in.

Every kernel's text starts with a ``// mg-op:`` line naming what produced it, which a
CompileError quotes beside the failing line (mgegraph/cuda/nvrtc.py).

>>> entry, text = unary_kernel("relu", "float32")
>>> entry
'mg_unary_relu_f32'
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from ..ir.types import short_name
from ..kernel_abi.layout import broadcast_strides, collapse, contiguous_strides
from ..ops import elementwise_table as TABLE
from ..ops.fused_program import BINARY, QUANTIZE, STORAGE, UNARY, Program, constants, to_ssa

CTYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "mg_i64",
          "bool": "mg_bool", "uint8": "mg_u8", "int8": "mg_i8", "int16": "mg_i16"}
# casts to these take MgCastSmall (csrc_cuda/elementwise.cuh): uint8 is bool's C type
SMALL_INTS = ("uint8", "int8", "int16")
# the half types are storage: cast, where and assign's copy have kernels for them, no table op
HALF_CTYPES = {"float16": "mg_f16", "bfloat16": "mg_bf16"}
PRELUDE = '#include "elementwise.cuh"\n'


def ctype(dtype) -> str:
    """The C type of a dtype in the rendered source (``ctype("int64")`` is ``"mg_i64"``)."""
    name = np.dtype(dtype).name
    return HALF_CTYPES[name] if name in HALF_CTYPES else CTYPES[name]


def literal(value: float, c: str) -> str:
    """An exact literal of ``value`` in C type ``c``: hex for finite floats, bit patterns for
    inf and NaN (no decimal rounding anywhere).

    >>> literal(0.1, "float"), literal(float("inf"), "double")
    ('((float)0x1.999999999999ap-4)', '__longlong_as_double(0x7ff0000000000000LL)')
    """
    value = float(value)
    if math.isfinite(value):
        return f"(({c}){value.hex()})"
    bits = int(np.array(value, np.float64).view(np.int64)) & (2 ** 64 - 1)
    wide = f"__longlong_as_double(0x{bits:016x}LL)"
    return wide if c == "double" else f"(({c}){wide})"


# -- the table's ops as device functions ----------------------------------------------------------
def _expression(expr: str, c: str) -> str:
    def call(name, args):
        prefix = "ew_" if name in TABLE.BY_NAME else ""
        return f"{prefix}{name}({', '.join(args)})"
    return TABLE.render(TABLE.parse(expr), lambda text: f"(({c}){text})", call)


def _arguments(op) -> tuple[str, ...]:
    return ("x",) + ("p", "q")[:len(op.params)] if op.kind == "unary" else ("x", "y")


def ew_function(op, dtype) -> str:
    """``ew_<op>`` for one dtype: the table's expression (``int_expr`` for integers)."""
    c = ctype(dtype)
    expr = op.int_expr if op.int_expr is not None and np.dtype(dtype).kind != "f" else op.expr
    result = "bool" if op.kind == "compare" else c
    args = ", ".join(f"{c} {a}" for a in _arguments(op))
    return f"MG_HD {result} ew_{op.name}({args}) {{ return {_expression(expr, c)}; }}"


def ew_functions() -> str:
    """Every op of the table for every dtype it has, in table order (a callee comes first)."""
    lines = ["// the elementwise table (mgegraph/ops/elementwise_table.py), rendered"]
    for op in TABLE.OPS:
        # bool and uint8 are one C type (unsigned char): a comparison of both is one function
        one_each = {"bool" if d == np.uint8 else d.name: d for d in map(np.dtype, op.dtypes)}
        lines += [ew_function(op, d) for d in one_each.values()]
    return "\n".join(lines) + "\n"


# -- unfused kernels: one per (op, dtype) ----------------------------------------------------------
def _kernel(entry: str, what: str, body: str) -> str:
    return (f"// mg-op: {what}\nextern \"C\" __global__ void {entry}(const __grid_constant__ "
            f"MgArgs a) {{\n{body}\n}}\n")


def unary_kernel(op: str, dtype) -> tuple[str, str]:
    """(entry, text) of the kernel of unary table op ``op``; its parameters are floats[0..1],
    cast to the dtype as the CPU kernel casts them."""
    entry, c = f"mg_unary_{op}_{short_name(np.dtype(dtype))}", ctype(dtype)
    params = TABLE.BY_NAME[op].params
    names = ("p", "q")[:len(params)]
    lines = [f"    const {c} {n} = ({c})a.floats[{i}];" for i, n in enumerate(names)]
    args = ", ".join(("v",) + ("p", "q")[:len(params)])
    lines.append(f"    mg_map1<{c}, {c}>(a, [&]({c} v) {{ return ew_{op}({args}); }});")
    return entry, _kernel(entry, f"{op} {np.dtype(dtype).name}", "\n".join(lines))


def _negative_power_check(op: str, dtype, exponent: str) -> str:
    """The statement that fails the run (the CPU's KERNEL_NEGATIVE_POWER, as NumPy raises) on
    an integer ``pow`` by a negative exponent; nothing for other ops and for floats."""
    if op != "pow" or np.dtype(dtype).kind != "i":  # (an unsigned exponent is never negative)
        return ""
    return f"if ({exponent} < 0) mg_fail(a, MG_STATUS_NEGATIVE_POWER); "


def binary_kernel(op: str, dtype) -> tuple[str, str]:
    """(entry, text) of binary table op ``op`` (or a comparison, whose output is bool); an
    integer ``pow`` by a negative exponent gives 0 and fails the run (mg_fail)."""
    entry, c = f"mg_binary_{op}_{short_name(np.dtype(dtype))}", ctype(dtype)
    out = "mg_bool" if TABLE.BY_NAME[op].kind == "compare" else c
    check = _negative_power_check(op, dtype, "y")
    body = (f"    mg_map2<{c}, {out}>(a, [&]({c} x, {c} y) {{ {check}return ({out})ew_{op}(x, y);"
            " });")
    return entry, _kernel(entry, f"{op} {np.dtype(dtype).name}", body)


def where_kernel(dtype) -> tuple[str, str]:
    entry = f"mg_where_{short_name(np.dtype(dtype))}"
    return entry, _kernel(entry, f"where {np.dtype(dtype).name}",
                          f"    mg_where<{ctype(dtype)}>(a);")


def cast_kernel(src, dst) -> tuple[str, str]:
    """(entry, text) of the cast from ``src`` to ``dst`` (float to int: INT_MIN when out of
    range, to a small integer: that int32's low bits; anything to bool: != 0; to a half type:
    rounded once from the double; from one: its float, exactly, cast as a float is)."""
    s, d = np.dtype(src), np.dtype(dst)
    entry = f"mg_cast_{short_name(s)}_{short_name(d)}"
    cast = "MgCastSmall" if d.name in SMALL_INTS else "MgCast"
    value = "mg_widen(v)" if s.name in HALF_CTYPES else "v"
    body = (f"    mg_map1<{ctype(s)}, {ctype(d)}>(a, []({ctype(s)} v) "
            f"{{ return {cast}<{ctype(d)}>::from({value}); }});")
    return entry, _kernel(entry, f"cast {s.name} -> {d.name}", body)


def copy_kernel(dtype) -> tuple[str, str]:
    """(entry, text) of a half type's one unary kernel: assign's copy (the elementwise table
    has no op on the half types, which compute in float32)."""
    d = np.dtype(dtype)
    entry, c = f"mg_unary_copy_{short_name(d)}", ctype(d)
    body = f"    mg_map1<{c}, {c}>(a, []({c} v) {{ return v; }});"
    return entry, _kernel(entry, f"copy {d.name}", body)


def elementwise_kernels() -> dict[str, str]:
    """Every unfused elementwise kernel (entry -> text): the test that all compile uses it."""
    kernels = {}
    for op in TABLE.OPS:
        make = unary_kernel if op.kind == "unary" else binary_kernel
        kernels.update(make(op.name, d) for d in op.dtypes)
    dtypes = list(CTYPES) + list(HALF_CTYPES)
    kernels.update(copy_kernel(d) for d in HALF_CTYPES)
    kernels.update(where_kernel(d) for d in dtypes)
    kernels.update(cast_kernel(s, d) for s in dtypes for d in dtypes)
    return kernels


def module(kernels) -> str:
    """One compilable source: the prelude, the table's functions, then ``kernels`` (texts)."""
    return PRELUDE + ew_functions() + "\n" + "\n".join(kernels)


# -- fused programs: one kernel per group ----------------------------------------------------------
def fused_layout(program: Program):
    """(collapsed shape, per-input element strides) of a program's inputs read as its output:
    the CPU's layout (mgegraph/_kernels/lowering/fused.py), so both walk the same dims."""
    out = tuple(program.output_shape) or (1,)
    strides = [broadcast_strides(tuple(s), out) for s in program.input_shapes]
    shape, merged = collapse(out, [contiguous_strides(out)] + strides)
    return shape, merged[1:], merged[0]


def _input_kind(strides, contiguous) -> str:
    if tuple(strides) == tuple(contiguous):
        return "flat"
    return "scalar" if not any(strides) else "strided"


def _offset(shape, strides, wide: bool) -> str:
    """The input offset of flat output index ``i`` as baked constants (divisions by constants
    become multiplications), in 32-bit unsigned arithmetic unless the output is ``wide`` (2^31
    elements or more): a 64-bit division is a long instruction sequence on a GPU, and every
    offset is below the input's size, which is at most the output's."""
    i, suffix = ("i", "LL") if wide else ("(unsigned)i", "u")
    terms, inner = [], 1
    for size, stride in reversed(list(zip(shape, strides))):
        if stride:
            index = i if inner == 1 else f"({i} / {inner}{suffix})"
            terms.append(f"({index} % {size}{suffix}) * {stride}{suffix}")
        inner *= size
    return " + ".join(terms) or "0"


def _quantize(dst, a, b, c, consts, t, storage) -> str:
    # the CPU's quantize (csrc_cuda/quantize.cu): divide in the dtype, then round, shift and
    # saturate in double; a NaN fails the run
    info = np.iinfo(STORAGE[storage])
    return (f"double d{dst} = (double)(v{a} / {consts[b]}); "
            f"if (d{dst} != d{dst}) {{ mg_fail(a, MG_STATUS_NOT_A_NUMBER); d{dst} = 0; }} "
            f"d{dst} = rint(d{dst}) + {consts[c]}; "
            f"const {t} v{dst} = ({t})(d{dst} < {info.min}.0 ? {info.min}.0 : "
            f"(d{dst} > {info.max}.0 ? {info.max}.0 : d{dst}));")


def _step(op, dst, a, b, c, k, consts, t, dtype=None) -> str:
    if op == "load":
        return f"const {t} v{dst} = ({t})x{a};"
    if op == "const":
        return f"const {t} v{dst} = {consts[a]};"
    if op == "store":  # a quantized output's value is an integer in its range: exact
        return f"o{dst} = ({ctype(STORAGE[b])})v{a};" if b else f"o{dst} = v{a};"
    if op == "dequantize":  # (q - zero_point) * scale, in the dtype (one rounding)
        return f"const {t} v{dst} = (v{a} - {consts[c]}) * {consts[b]};"
    if op in QUANTIZE:
        return _quantize(dst, a, b, c, consts, t, QUANTIZE[op])
    if op == "where":
        return f"const {t} v{dst} = v{a} != 0 ? v{b} : v{c};"
    if op in UNARY:
        params = [consts[i] for i in constants(op, a, b, c)]
        return f"const {t} v{dst} = ew_{op}({', '.join([f'v{a}', *params])});"
    if op in BINARY:  # comparisons give 1 or 0 in the program's dtype
        check = _negative_power_check(op, dtype, f"v{b}") if dtype is not None else ""
        return f"{check}const {t} v{dst} = ({t})ew_{op}(v{a}, v{b});"
    raise ValueError(f"step {k}: op {op!r} cannot be fused")


def _fused_body(program: Program, t: str, name: str) -> str:
    consts = [literal(v, t) for v in program.constants]
    ins, outs = program.buffer_dtypes()
    params = [f"const {ctype(d)} x{i}" for i, d in enumerate(ins)]
    params += [f"{ctype(d)}& o{j}" for j, d in enumerate(outs)]
    # the MgArgs too, for mg_fail (an integer pow by a negative exponent fails the run)
    lines = [f"MG_HD void {name}_body({', '.join(['const MgArgs& a', *params])}) {{"]
    lines += [f"    {_step(*s, k, consts, t, program.dtype)}  // step {k}: {s[0]}"
              for k, s in enumerate(to_ssa(program.code))]
    return "\n".join(lines + ["}"])


def _fused_loops(program, t, name, shape, strides, contiguous) -> list[str]:
    n_in, n_out = len(program.input_shapes), program.n_outputs
    kinds = [_input_kind(s, contiguous) for s in strides]
    n = math.prod(program.output_shape)
    wide = n >= 2 ** 31
    ins = [f"in{i}[{'i' if k == 'flat' else _offset(shape, strides[i], wide)}]"
           for i, k in enumerate(kinds)]
    outs = ", ".join(f"out{j}[i]" for j in range(n_out))
    in_types, out_types = (list(map(ctype, d)) for d in program.buffer_dtypes())
    lines = [f"    const {c}* __restrict__ in{i} = (const {c}*)a.bufs[{i}];"
             for i, c in enumerate(in_types)]
    lines += [f"    {c}* __restrict__ out{j} = ({c}*)a.bufs[{n_in + j}];"
              for j, c in enumerate(out_types)]
    lines += [f"    const mg_i64 n = {n}LL, step = mg_nthreads();", "    mg_i64 start = mg_tid();"]
    # the vector loop packs one dtype: a program moving integers too takes the scalar loop
    if "strided" not in kinds and set(in_types + out_types) <= {t}:
        lines += _vector_loop(t, name, kinds, n_out)
    lines += ["    for (mg_i64 i = start; i < n; i += step)",
              f"        {name}_body({', '.join(['a', *ins, outs])});"]
    return lines


def _vector_loop(t, name, kinds, n_out) -> list[str]:
    """16-byte loads and stores where every array operand is contiguous and aligned; a
    broadcast scalar is read once."""
    flat = [f"in{i}" for i, k in enumerate(kinds) if k == "flat"]
    flat += [f"out{j}" for j in range(n_out)]
    aligned = " && ".join(f"mg_aligned16({p})" for p in flat)
    lines = [f"    if ({aligned}) {{", f"        const int V = 16 / sizeof({t});"]
    lines += [f"        const {t} s{i} = in{i}[0];" for i, k in enumerate(kinds) if k == "scalar"]
    lines += ["        for (mg_i64 i = start; i < n / V; i += step) {"]
    lines += [f"            const MgPack<{t}> p{i} = ((const MgPack<{t}>*)in{i})[i];"
              for i, k in enumerate(kinds) if k == "flat"]
    lines += [f"            MgPack<{t}> q{j};" for j in range(n_out)]
    args = ["a"] + [f"p{i}.v[j]" if k == "flat" else f"s{i}" for i, k in enumerate(kinds)]
    args += [f"q{j}.v[j]" for j in range(n_out)]
    lines += ["#pragma unroll", "            for (int j = 0; j < V; ++j)",
              f"                {name}_body({', '.join(args)});"]
    lines += [f"            ((MgPack<{t}>*)out{j})[i] = q{j};" for j in range(n_out)]
    return lines + ["        }", "        start = n / V * V + mg_tid();", "    }"]


def fused_kernel(program: Program, what: str = "fused_elementwise") -> tuple[str, str]:
    """(entry, text) of one fused group: its steps as scalar code (the table's ``ew_`` functions,
    so each op computes what its unfused kernel computes), inside a grid-stride loop over the
    output with the layout baked in. ``what`` names the node for compile errors (and is part
    of the text); the entry's name is a hash of the text.

    >>> p = Program([(8,)], (8,), "float32", [("load", 0, 0), ("exp", 1, 0), ("store", 0, 1)])
    >>> fused_kernel(p)[0].startswith("mg_fused_f32_")
    True
    """
    t = ctype(program.dtype)
    shape, strides, contiguous = fused_layout(program)
    name = "MG_FUSED"
    body = _fused_body(program, t, name)
    loops = _fused_loops(program, t, name, shape, strides, contiguous)
    text = (f"// mg-op: {what}\n{body}\nextern \"C\" __global__ void {name}(const "
            f"__grid_constant__ MgArgs a) {{\n" + "\n".join(loops) + "\n}\n")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    entry = f"mg_fused_{short_name(np.dtype(program.dtype))}_{digest}"
    return entry, text.replace(name, entry)
