"""Renders the elementwise table (mgegraph/ops/elementwise_table.py) into ew_ops.pxd, the CPU's
one definition of every elementwise op: the op codes (one enum), a scalar function per op, and
the loops that apply one op over a row, which the unfused kernels (elementwise.pyx) and the
fused evaluator (fused_body.pxi) share; the GEMM epilogues call ew_relu.

setup.py runs this at build time, loading this file and the table by path (the package is not
importable before it is built), so it imports nothing of mgegraph. The output is git-ignored,
like the .c files.

Design: each op's loops are written out per op with the scalar function named, not inlined
from one loop over a run-time op code: the compiler then sees a plain loop over one inline
expression, which it vectorises (selects become blends, no call is left), and nothing depends on
it folding a chain of op-code tests.

>>> write(elementwise_table, Path("mgegraph/_kernels"))  # doctest: +SKIP
True
"""
from __future__ import annotations

import re
from pathlib import Path

HEADER = """\
# cython: cdivision=True
# Generated from mgegraph/ops/elementwise_table.py by mgegraph/_kernels/ew_codegen.py (setup.py
# runs it at build time): edit the table, not this file. cdivision: x / 0 is IEEE's inf or NaN.
"""

# Cython spelling of the element type of an op's scalar function, by the dtypes it has: every
# op defined on integers is compiled for the small integers too (dtypes.pxd; bool is uint8_t),
# whether or not the table lists them for it
_TYPES = {"float": "floating", "numeric": "ew_num_t", "all": "ew_num_t"}


def op_type(op) -> str:
    kinds = {d.kind for d in op.dtypes}
    if kinds == {"f"}:
        return _TYPES["float"]
    return _TYPES["all"] if "b" in kinds else _TYPES["numeric"]


def enum_name(name: str) -> str:
    return f"EW_{name.upper()}"


def cython_expression(table, op, expr: str, ctype: str) -> str:
    """``expr`` as Cython inside op's scalar function over ``ctype``: literals cast to it, table
    ops called as their scalar functions."""
    def call(name, args):
        prefix = "ew_" if name in table.BY_NAME else ""
        return f"{prefix}{name}({', '.join(args)})"
    return table.render(table.parse(expr), lambda text: f"<{ctype}>{text}", call)


def _arguments(op) -> tuple[str, ...]:
    """The scalar function's arguments: its operands, then a unary op's parameters."""
    return ("x",) + ("p", "q")[:len(op.params)] if op.kind == "unary" else ("x", "y")


def _scalar_function(table, op) -> list[str]:
    ctype = op_type(op)
    result = "bint" if op.kind == "compare" else ctype
    args = ", ".join(f"{ctype} {a}" for a in _arguments(op))
    lines = [f"cdef inline {result} ew_{op.name}({args}) noexcept nogil:"]
    if op.int_expr is None:
        return lines + [f"    return {cython_expression(table, op, op.expr, ctype)}", ""]
    return lines + [
        f"    if {ctype} is float or {ctype} is double:",
        f"        return {cython_expression(table, op, op.expr, ctype)}",
        "    else:",
        f"        return {cython_expression(table, op, op.int_expr, ctype)}", ""]


def _wrap(items, indent=4, end=",") -> list[str]:
    """``items`` comma-separated on lines of at most 100 columns, ``end`` after the last."""
    lines, line = [], " " * (indent - 1)
    for k, item in enumerate(items):
        text = f" {item}" + ("," if k < len(items) - 1 else end)
        if len(line) + len(text) > 100:
            lines.append(line)
            line = " " * (indent - 1)
        line += text
    return lines + [line]


def _loop(indent: str, target: str, call: str) -> list[str]:
    return [f"{indent}for e in range(n):", f"{indent}    {target} = {call}"]


def _unary_case(op) -> list[str]:
    call = f"ew_{op.name}({', '.join(('a[e{}]',) + _arguments(op)[1:])})"
    return ([f"    if op == {enum_name(op.name)}:", "        if sa == 1:"]
            + _loop(" " * 12, "d[e]", call.format(""))
            + ["        else:"] + _loop(" " * 12, "d[e]", call.format(" * sa"))
            + ["        return True"])


def _binary_case(op, target="d[e]") -> list[str]:
    fn = f"ew_{op.name}"
    return ([f"    if op == {enum_name(op.name)}:", "        if sa == 1 and sb == 1:"]
            + _loop(" " * 12, target, f"{fn}(a[e], b[e])")
            + ["        elif sa == 1 and sb == 0:", "            v = b[0]"]
            + _loop(" " * 12, target, f"{fn}(a[e], v)")
            + ["        elif sa == 0 and sb == 1:", "            v = a[0]"]
            + _loop(" " * 12, target, f"{fn}(v, b[e])")
            + ["        else:"] + _loop(" " * 12, target, f"{fn}(a[e * sa], b[e * sb])")
            + ["        return True"])


def _run_function(name: str, args: str, doc: str, ops, case, ctype: str) -> list[str]:
    lines = [f"cdef inline bint {name}(",
             *_wrap(args.split(", "), indent=8, end=") noexcept nogil:"),
             f"    # {doc}", "    cdef Py_ssize_t e"]
    if case is _binary_case:
        lines.append(f"    cdef {ctype} v  # the broadcast operand")
    general = [op for op in ops if op_type(op) != "floating"]
    floats = [op for op in ops if op_type(op) == "floating"]
    for op in general:
        lines += case(op)
    if floats:
        lines.append(f"    if {ctype} is float or {ctype} is double:")
        for op in floats:
            lines += ["    " + line for line in case(op)]
    return lines + ["    return False", ""]


def _enum(table) -> list[str]:
    lines = ["cdef enum EwOp:"]
    lines += [f"    {enum_name(op.name)} = {i}" for i, op in enumerate(table.OPS)]
    first_binary = len(table.UNARY)
    first_compare = first_binary + len(table.BINARY)
    return lines + ["", "cdef enum:",
                    f"    EW_FIRST_BINARY = {first_binary}  # op codes: unary, binary, compare",
                    f"    EW_FIRST_COMPARE = {first_compare}",
                    f"    EW_COUNT = {len(table.OPS)}", ""]


def _n_params(table) -> list[str]:
    lines = ["cdef inline int ew_n_params(int op) noexcept nogil:",
             "    # how many of p and q the unary op reads (its attributes, in order)"]
    for op in table.OPS:
        if op.params:
            lines += [f"    if op == {enum_name(op.name)}:", f"        return {len(op.params)}"]
    return lines + ["    return 0", ""]


def _opcodes(table) -> list[str]:
    items = [f'"{op.name}": {enum_name(op.name)}' for op in table.OPS]
    return ["cdef inline dict ew_opcodes():",
            "    # name -> op code, which the modules export as OPCODES for their lowerings",
            "    return {", *_wrap(items, indent=8), "    }", ""]


def helpers_defined(scalar_pxd: str) -> set[str]:
    """The m_* functions scalar.pxd defines."""
    return set(re.findall(r"^cdef inline \w+ (m_\w+)\(", scalar_pxd, re.MULTILINE))


def render(table, scalar_pxd: str) -> str:
    """The text of ew_ops.pxd for ``table`` (the elementwise_table module); ``scalar_pxd`` is
    the text of scalar.pxd, which must define every helper the table lists."""
    table.check_table()
    missing = set(table.HELPERS) - helpers_defined(scalar_pxd)
    if missing:
        raise ValueError(f"scalar.pxd lacks the helpers {sorted(missing)} the table lists")
    used = sorted({name for op in table.OPS for expr in (op.expr, op.int_expr) if expr
                   for name in table.calls(expr) if name in table.HELPERS})
    unary = [table.BY_NAME[n] for n in table.UNARY]
    binary = [table.BY_NAME[n] for n in table.BINARY + table.COMPARE]
    compare = [table.BY_NAME[n] for n in table.COMPARE]
    lines = [HEADER, "from libc.stdint cimport uint8_t", "from cython cimport floating", "",
             "from .dtypes cimport ew_num_t",
             "from .scalar cimport (", *_wrap(used), ")", ""]
    lines += _enum(table) + _n_params(table) + _opcodes(table)
    lines += ["", "# -- one scalar function per op " + "-" * 68]
    for op in table.OPS:
        lines += _scalar_function(table, op)
    lines += ["", "# -- one op over a row: d[e] = op(a[e * sa], ...); False for an unknown op"]
    lines += _run_function(
        "ew_unary_run", "int op, ew_num_t* d, const ew_num_t* a, Py_ssize_t sa, ew_num_t p, "
        "ew_num_t q, Py_ssize_t n", "unary ops; p and q are the op's parameters", unary,
        _unary_case, "ew_num_t")
    lines += _run_function(
        "ew_binary_run", "int op, ew_num_t* d, const ew_num_t* a, Py_ssize_t sa, "
        "const ew_num_t* b, Py_ssize_t sb, Py_ssize_t n",
        "binary ops and comparisons (1 or 0); a stride 0 broadcasts one value", binary,
        _binary_case, "ew_num_t")
    lines += _run_function(
        "ew_compare_run", "int op, uint8_t* d, const ew_num_t* a, Py_ssize_t sa, "
        "const ew_num_t* b, Py_ssize_t sb, Py_ssize_t n", "comparisons into bools", compare,
        _binary_case, "ew_num_t")
    return "\n".join(lines).rstrip() + "\n"


def write(table, kernels_dir: Path) -> bool:
    """Render ew_ops.pxd into ``kernels_dir``; rewrites it only when the text changed (so the
    modules that cimport it rebuild only then). Returns whether it wrote."""
    kernels_dir = Path(kernels_dir)
    text = render(table, (kernels_dir / "scalar.pxd").read_text())
    out = kernels_dir / "ew_ops.pxd"
    if out.exists() and out.read_text() == text:
        return False
    out.write_text(text)
    return True
