"""Integer kernels are defined on every input, as NumPy computes them: x // 0 and x % 0 are 0,
INT_MIN // -1 and -INT_MIN and abs(INT_MIN) wrap to INT_MIN, overflow wraps, floats outside an
integer's range (NaN, inf) cast to INT_MIN; integer pow with a negative exponent is a
KernelError naming pow and the user's line. Each check runs in a subprocess, so a SIGFPE (C's
INT_MIN / -1 traps) fails the test instead of killing pytest; both the unfused kernels
(optimize=0) and constant folding (compile of consts, which runs the kernels at compile time)."""
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import numpy as np, mgegraph as mg, mgegraph.functional as F

def edge_pairs(dt):
    info = np.iinfo(dt)
    vals = np.array([info.min, info.min + 1, info.max, -1, 0, 1, 2, -7, 7], dt)
    return np.repeat(vals, len(vals)), np.tile(vals, len(vals))

BINARY = {"floor_div": (F.floor_div, np.floor_divide), "mod": (F.mod, np.mod),
          "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
          "mul": (lambda a, b: a * b, np.multiply)}
UNARY = {"neg": (lambda a: -a, np.negative), "abs": (F.abs, np.abs),
         "square": (F.square, np.square)}

def check(got, want, what):
    assert got.dtype == want.dtype and np.array_equal(got, want), (what, got, want)
"""


def run_isolated(body: str) -> None:
    """Run ``body`` after PRELUDE in a fresh interpreter; fail with its output (or the signal
    that killed it)."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (f"exit {proc.returncode} (negative: killed by signal)\n"
                                  f"{proc.stdout}\n{proc.stderr}")


def test_division_modulo_negation_and_overflow_at_run_time():
    run_isolated("""
    for dt in (np.int32, np.int64):
        a, b = edge_pairs(dt)
        g = mg.Graph()
        x, y = g.input("x", a.shape, dtype=dt), g.input("y", b.shape, dtype=dt)
        names = list(BINARY) + list(UNARY)
        outs = [BINARY[n][0](x, y) for n in BINARY] + [UNARY[n][0](x) for n in UNARY]
        got = mg.compile(outs, optimize=0).run({"x": a, "y": b})
        with np.errstate(all="ignore"):
            want = [BINARY[n][1](a, b) for n in BINARY] + [UNARY[n][1](a) for n in UNARY]
        for n, gv, wv in zip(names, got, want):
            check(gv, wv, (dt.__name__, n))
    """)


def test_constant_folding_of_the_edge_cases():
    run_isolated("""
    for dt in (np.int32, np.int64):
        a, b = edge_pairs(dt)
        g = mg.Graph()
        x = g.input("x", (), dtype=dt)
        ca, cb = g.const(a), g.const(b)
        outs = ([x + BINARY[n][0](ca, cb) for n in BINARY]
                + [x + UNARY[n][0](ca) for n in UNARY])
        plan = mg.compile(outs)                         # fold evaluates them at compile time
        got = plan.run({"x": np.zeros((), dt)})
        with np.errstate(all="ignore"):
            want = [BINARY[n][1](a, b) for n in BINARY] + [UNARY[n][1](a) for n in UNARY]
        for n, gv, wv in zip(list(BINARY) + list(UNARY), got, want):
            check(gv, wv, (dt.__name__, n, "folded"))
    """)


def test_casts_of_nan_inf_and_out_of_range_floats_give_int_min():
    run_isolated("""
    f = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, -1e19, 9.3e18, 2.5, -2.5, -0.0,
                  2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0], np.float64)
    for optimize in (0, 1):
        g = mg.Graph()
        x = g.input("x", f.shape, dtype=np.float64)
        c = g.const(f)
        casts = [(x, np.int32), (x, np.int64), (F.cast(x, np.float32), np.int32),
                 (F.cast(x, np.float32), np.int64)]
        outs = [F.cast(v, d) for v, d in casts]
        outs += [F.cast(c, np.int32) + F.cast(x, np.int32) * 0]   # folded at compile time
        got = mg.compile(outs, optimize=optimize).run({"x": f})
        with np.errstate(all="ignore"):
            want = [f.astype(np.int32), f.astype(np.int64),
                    f.astype(np.float32).astype(np.int32), f.astype(np.float32).astype(np.int64),
                    f.astype(np.int32)]
        for k, (gv, wv) in enumerate(zip(got, want)):
            check(gv, wv, ("cast", k, optimize))
    """)


def test_integer_pow_wraps_like_numpy():
    run_isolated("""
    for dt in (np.int32, np.int64):
        base = np.array([2, 3, -3, 0, 1, -1, np.iinfo(dt).min, 7], dt)
        exp = np.array([62, 40, 41, 0, 100, 101, 2, 0], dt)
        g = mg.Graph()
        x, y = g.input("x", base.shape, dtype=dt), g.input("y", exp.shape, dtype=dt)
        (got,) = mg.compile([F.pow(x, y)], optimize=0).run({"x": base, "y": exp})
        with np.errstate(all="ignore"):
            check(got, np.power(base, exp), dt.__name__)
    """)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_pow_with_a_negative_exponent_is_a_kernel_error(dtype):
    import numpy as np

    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph.ir.errors import KernelError

    g = mg.Graph()
    x = g.input("x", (3,), dtype=dtype)
    y = g.input("y", (3,), dtype=dtype)
    plan = mg.compile([F.pow(x, y)], optimize=0)
    with pytest.raises(KernelError) as info:
        plan.run({"x": np.array([2, 3, 4], dtype), "y": np.array([1, -1, 2], dtype)})
    assert info.type is KernelError and "pow" in str(info.value)
    assert __file__ in str(info.value)          # the user's line
    # a broadcast exponent is checked too, and a non-negative one still runs
    (ok,) = plan.run({"x": np.array([2, 3, 4], dtype), "y": np.array([0, 1, 2], dtype)})
    assert ok.tolist() == [1, 3, 16]
    g = mg.Graph()
    x = g.input("x", (3,), dtype=dtype)
    s = g.input("s", (), dtype=dtype)
    with pytest.raises(KernelError, match="pow"):
        mg.compile([F.pow(x, s)], optimize=0).run({"x": np.array([2, 3, 4], dtype),
                                                    "s": np.array(-2, dtype)})
    with np.errstate(all="ignore"), pytest.raises(ValueError):
        np.power(np.array([2], dtype), np.array([-1], dtype))   # what NumPy does


def test_folding_a_negative_integer_pow_leaves_the_error_to_the_run():
    import numpy as np

    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph.ir.errors import KernelError

    g = mg.Graph()
    x = g.input("x", (2,), dtype="int64")
    bad = F.pow(g.const(np.array([2, 2], np.int64)), g.const(np.array([1, -1], np.int64)))
    plan = mg.compile([x + bad])              # compile does not fail inside the fold pass
    with pytest.raises(KernelError, match="pow") as info:
        plan.run({"x": np.zeros(2, np.int64)})
    assert __file__ in str(info.value)
