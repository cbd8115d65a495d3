"""The elementwise table: well formed, its expressions valid C as well as Cython, and the build
that renders it (ew_ops.pxd) in step with it."""
import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

from mgegraph._kernels import elementwise, ew_codegen, fused
from mgegraph._kernels.lowering.elementwise import check_build
from mgegraph._kernels.lowering.fused import STEPS as FUSED_STEPS
from mgegraph.ops import elementwise_table as TABLE

KERNELS = Path(ew_codegen.__file__).parent


def test_the_table_is_well_formed():
    TABLE.check_table()
    assert set(TABLE.UNARY) | set(TABLE.BINARY) | set(TABLE.COMPARE) == set(TABLE.BY_NAME)


def test_the_tables_dtype_sets_are_the_registrys():
    # the table keeps its own (it is loaded alone by setup.py, importing only NumPy): the same
    # sets the IR and the registry use everywhere else
    from mgegraph.ir.types import FLOAT_DTYPES
    from mgegraph.ops.registry import ALL_DTYPES, NUMERIC_DTYPES

    assert (TABLE.FLOAT, TABLE.NUMERIC, TABLE.ALL) == (FLOAT_DTYPES, NUMERIC_DTYPES, ALL_DTYPES)


def entry(expr, **kw):
    return TABLE.Elementwise("probe", kw.pop("kind", "unary"), expr, np.negative, **kw)


@pytest.mark.parametrize("bad,message", [
    (entry("x if x > 0 else 0"), "outside the expression subset"),
    (entry("x ** 2"), "outside the expression subset"),
    (entry("0 < x < 1"), "outside the expression subset"),
    (entry("m_exp(x, base=2)"), "outside the expression subset"),
    (entry("x * z"), "reads 'z'"),
    (entry("x * p"), "reads 'p'"),                      # p without a parameter
    (entry("m_nope(x)"), "neither a helper nor an op"),
    (entry("relu(x, x)"), "2 arguments"),
    (entry("less(x, x)"), "gives a value"),
    (entry("x / 2", dtypes=TABLE.NUMERIC), "divides"),
    (entry("exp(x)", dtypes=TABLE.NUMERIC), "not defined for all its dtypes"),
    (entry("x", kind="binary", params=("a",)), "at most 0 parameters"),
])
def test_check_table_refuses_what_c_and_cython_would_read_differently(bad, message):
    with pytest.raises(ValueError, match=message):
        TABLE.check_table(TABLE.OPS + (bad,))


def test_an_op_may_call_only_ops_above_it():
    late = entry("x")
    early = TABLE.Elementwise("early", "unary", "probe(x)", np.negative)
    with pytest.raises(ValueError, match="defined above"):
        TABLE.check_table((early, late))


def c_source() -> str:
    """Every op's expression rendered as C over a type T (the way a C or CUDA renderer would):
    helpers declared, each op a function."""
    lines = ["typedef double T;"]
    lines += [f"T {name}();" for name in TABLE.HELPERS]  # arguments unchecked (C11)
    for op in TABLE.OPS:
        args = ["T x"] + [f"T {v}" for v in ("p", "q")[:len(op.params)]] \
            if op.kind == "unary" else ["T x", "T y"]
        for suffix, expr in (("", op.expr), ("_int", op.int_expr)):
            if expr is None:
                continue
            body = TABLE.render(TABLE.parse(expr), lambda t: f"((T){t})",
                                lambda n, a: f"{'ew_' if n in TABLE.BY_NAME else ''}{n}"
                                             f"({', '.join(a)})")
            lines.append(f"T ew_{op.name}{suffix}({', '.join(args)}) {{ return {body}; }}")
    return "\n".join(lines) + "\n"


def test_the_expressions_are_c():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    done = subprocess.run([cc, "-std=c11", "-fsyntax-only", "-Werror", "-x", "c", "-"],
                          input=c_source(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_built_kernels_follow_the_table():
    # ew_ops.pxd as built is what the table renders to now, and both kernel modules carry its
    # op codes (a stale build is refused when the backend loads)
    rendered = ew_codegen.render(TABLE, (KERNELS / "scalar.pxd").read_text())
    assert (KERNELS / "ew_ops.pxd").read_text() == rendered, "the table changed: rebuild"
    check_build(elementwise)
    check_build(fused, extra=FUSED_STEPS)


def test_a_stale_build_is_refused():
    stale = types.SimpleNamespace(__name__="stale", OPCODES={
        **elementwise.OPCODES, "exp": elementwise.OPCODES["log"]})
    with pytest.raises(ImportError, match="another elementwise table"):
        check_build(stale)
