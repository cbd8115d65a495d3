"""The fused elementwise kernel (_kernels/fused_body.pxi) against NumPy, and its vector math."""
import numpy as np
import pytest

from mgegraph._kernels import fused as K
from mgegraph._kernels.lowering.fused import allocate_registers, encode, kernel_name, run
from mgegraph.ops import elementwise_table as TABLE
from mgegraph.ops.fused_program import BINARY, UNARY, Program, evaluate_numpy

RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.float64]
POSITIVE = {"log", "log1p", "sqrt", "rsqrt", "reciprocal"}


def tol(dtype):
    return {"rtol": 2e-6, "atol": 2e-6} if dtype == np.float32 else {"rtol": 1e-13, "atol": 1e-14}


def check(program, inputs, **kw):
    got = run(program, inputs, **kw)
    want = evaluate_numpy(program, inputs)
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(program.dtype) and g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol(program.dtype))
    return got


# a unary op's parameters, constants 0 and 1 of its program: these values, else its defaults
CONSTANTS = {"leaky_relu": [0.1], "clip": [-0.5, 1.5], "hardsigmoid": [0.2, 0.5],
             "celu": [0.7], "shrink": [1.5, 0.25]}


def constants_of(name) -> list:
    if name in CONSTANTS:
        return CONSTANTS[name]
    entry = TABLE.BY_NAME[name]
    return [entry.defaults[p] for p in entry.params]


def unary_program(name, shape, dtype, constants=()):
    b, c = (0, 1) if TABLE.BY_NAME[name].params else (0, 0)
    code = [("load", 0, 0), (name, 1, 0, b, c), ("store", 0, 1)]
    return Program([shape], shape, dtype, code, list(constants))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_opcode_matches_numpy(name, dtype):
    x = (RNG.standard_normal(3001) * 3).astype(dtype)
    if name in POSITIVE:
        x = np.abs(x) + np.asarray(0.01, dtype)
    check(unary_program(name, x.shape, dtype, constants_of(name)), [x])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_opcode_matches_numpy(name, dtype):
    x, y = (RNG.standard_normal((2, 2500)) * 2).astype(dtype)
    y[::7] = x[::7]  # ties, for the comparisons
    if name == "pow":
        x = np.abs(x) + np.asarray(0.1, dtype)
    code = [("load", 0, 0), ("load", 1, 1), (name, 2, 0, 1), ("store", 0, 2)]
    check(Program([x.shape, y.shape], x.shape, dtype, code), [x, y])


@pytest.mark.parametrize("dtype", DTYPES)
def test_where_and_const(dtype):
    x, y = RNG.standard_normal((2, 1500)).astype(dtype)
    code = [("load", 0, 0), ("load", 1, 1), ("greater", 2, 0, 1), ("const", 3, 0),
            ("where", 4, 2, 0, 3), ("store", 0, 4)]
    (out,) = check(Program([x.shape, y.shape], x.shape, dtype, code, [7.5]), [x, y])
    np.testing.assert_array_equal(out, np.where(x > y, x, dtype(7.5)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_propagates_through_min_max_and_relu(dtype):
    x = np.array([np.nan, 1, np.nan, -1], dtype)
    y = np.array([0, np.nan, np.nan, 0], dtype)
    for name in ("maximum", "minimum"):
        code = [("load", 0, 0), ("load", 1, 1), (name, 2, 0, 1), ("store", 0, 2)]
        (out,) = run(Program([x.shape] * 2, x.shape, dtype, code), [x, y])
        np.testing.assert_array_equal(out, getattr(np, name)(x, y))
    (out,) = run(unary_program("relu", x.shape, dtype), [x])
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def chain_program(shapes, out_shape, dtype):
    # relu(x * a + b) * c - tanh(x) / (1 + exp(-x))
    code = [("load", 0, 0), ("load", 1, 1), ("mul", 2, 0, 1), ("load", 3, 2), ("add", 4, 2, 3),
            ("relu", 5, 4), ("load", 6, 3), ("mul", 7, 5, 6), ("tanh", 8, 0), ("neg", 9, 0),
            ("exp", 10, 9), ("const", 11, 0), ("add", 12, 11, 10), ("div", 13, 8, 12),
            ("sub", 14, 7, 13), ("store", 0, 14)]
    return Program(shapes, out_shape, dtype, code, [1.0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,out", [
    ([(5000,)] * 4, (5000,)),                                     # not a multiple of the block
    ([(37, 53), (), (53,), (37, 1)], (37, 53)),                   # scalar, row, column
    ([(2, 3, 4, 5), (3, 1, 5), (2, 1, 4, 1), (1,)], (2, 3, 4, 5)),  # 4-D
    ([(1,)] * 4, (1,)), ([(0, 3)] * 4, (0, 3)), ([()] * 4, ()),
])
def test_fusion_chain_broadcasts(shapes, out, dtype):
    inputs = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    check(chain_program(shapes, out, dtype), inputs)


@pytest.mark.parametrize("block", [1, 7, 256])
def test_blocks_cut_broadcast_rows_anywhere(block):
    x = RNG.standard_normal((3, 1, 7)).astype(np.float32)
    y = RNG.standard_normal((5, 1)).astype(np.float32)
    code = [("load", 0, 0), ("load", 1, 1), ("sub", 2, 0, 1), ("store", 0, 2)]
    (out,) = run(Program([x.shape, y.shape], (3, 5, 7), np.float32, code), [x, y], block=block)
    np.testing.assert_array_equal(out, x - y)


def test_transposed_input_is_gathered():
    x = RNG.standard_normal((40, 30))
    code = [("load", 0, 0), ("sqrt", 1, 0), ("store", 0, 1)]
    ints, floats, ws = encode(Program([x.shape], x.shape, np.float64, code))
    assert ints[:5] == (1, 1, 1, 1200, 1)  # collapsed to one dimension
    ints = (1, 1, 2, 30, 40, 1, 30) + ints[5:]  # read x as its transpose: strides (1, 30)
    out, y = np.empty((30, 40)), np.abs(x)
    assert K.call_kernel("fused_f64", [y, out, np.empty(ws, np.uint8)], ints, floats) == 0
    np.testing.assert_allclose(out, np.sqrt(y.T), rtol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES)
def test_several_outputs(dtype):
    x, y = RNG.standard_normal((2, 3, 700)).astype(dtype)
    code = [("load", 0, 0), ("load", 1, 1), ("add", 2, 0, 1), ("store", 1, 2),
            ("exp", 3, 2), ("store", 0, 3), ("mul", 4, 3, 0), ("store", 2, 4)]
    outs = check(Program([x.shape, y.shape], x.shape, dtype, code), [x, y])
    assert len(outs) == 3


def test_threads_give_identical_results():
    shapes = [(300, 1000), (1000,), (300, 1), ()]
    inputs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    program = chain_program(shapes, (300, 1000), np.float32)
    (one,) = run(program, inputs, threads=1)
    (two,) = run(program, inputs, threads=2)
    np.testing.assert_array_equal(one, two)
    assert encode(program)[0][3 + 2 + 4 * 2 + 1] == K.max_threads()  # 300k elements: threads


def test_register_allocation_reuses_registers():
    code, n_regs = allocate_registers(chain_program([(4,)] * 4, (4,), np.float32).code)
    assert n_regs <= 5  # 4 live at most, and a step never writes a register it reads
    for op, dst, a, b, c in code:
        if op in BINARY:
            assert dst not in (a, b)  # no loop writes a register it reads
    renamed = [("load", "x", 0), ("exp", "x", "x"), ("exp", "x", "x"), ("store", 0, "x")]
    assert allocate_registers(renamed) == ([("load", 0, 0, 0, 0), ("exp", 1, 0, 0, 0),
                                            ("exp", 0, 1, 0, 0), ("store", 0, 0, 0, 0)], 2)


def test_bad_programs_are_refused():
    with pytest.raises(ValueError, match="before it is defined"):
        allocate_registers([("exp", 1, 0), ("store", 0, 1)])
    ints, floats, ws = encode(unary_program("exp", (4,), np.float32))
    ints = list(ints)
    ints[-5:] = [999, 0, 0, 0, 0]
    x = np.ones(4, np.float32)
    assert K.call_kernel("fused_f32", [x, x.copy(), np.empty(ws, np.uint8)], ints, floats) != 0


# -- vector math over wide ranges ---------------------------------------------------------------
def wide(dtype, lo, hi, n=200_001):
    finfo = np.finfo(dtype)
    lo = finfo.smallest_subnormal if lo is None else lo
    mag = np.exp(np.linspace(np.log(lo), np.log(hi), n))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, finfo.smallest_subnormal, finfo.tiny,
               finfo.tiny / 3, finfo.max, 1.0, -1.0]
    return np.concatenate([mag, -mag, special]).astype(dtype)


def kernel(name, x):
    return run(unary_program(name, x.shape, x.dtype), [x])[0]


def relative_error(got, want, dtype):
    """The largest relative error over normal results; the others must match exactly, or
    (denormal results) within one denormal step."""
    want = np.asarray(want, np.float64)
    finfo = np.finfo(dtype)
    normal = (np.abs(want) >= finfo.tiny) & (np.abs(want) <= finfo.max)
    denormal = (want != 0) & (np.abs(want) < finfo.tiny)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    exact = ~normal & ~denormal & ~np.isnan(want)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[exact], want[exact].astype(dtype))
    ulp = np.finfo(dtype).smallest_subnormal
    assert np.all(np.abs(got[denormal] - want[denormal]) <= ulp)  # rounded, not flushed
    return np.max(np.abs(got[normal] - want[normal]) / np.abs(want[normal]))


@pytest.mark.parametrize("dtype,bound", [(np.float32, 4e-7), (np.float64, 1e-14)])
def test_exp_accuracy(dtype, bound):
    x = wide(dtype, None, 800.0)
    got = kernel("exp", x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    assert relative_error(got, want, dtype) <= bound


def test_float32_exp_and_tanh_edges_bit_for_bit():
    # exp has no select of its own below -104 and tanh none for NaN (scalar.pxd): the clamp
    # and the small-|x| select give these bits
    x = np.array([-104.0, -104.5, -1e30, -np.inf, -103.9, -0.0, 1e-30, -1e-30, 3e-4, np.nan,
                  88.72283935546875, np.inf], np.float32)
    bits = kernel("exp", x).view(np.uint32)
    assert (bits[:4] == 0).all() and 0 < bits[4] < 0x00800000  # +0.0, then a denormal
    assert np.isnan(kernel("exp", x)[9]) and np.isposinf(kernel("exp", x)[10:]).all()
    t = kernel("tanh", x)
    np.testing.assert_array_equal(t[5:9].view(np.uint32), x[5:9].view(np.uint32))
    assert np.isnan(t[9]) and t[11] == 1.0 and t[3] == -1.0


@pytest.mark.parametrize("dtype,bound", [(np.float32, 4e-7), (np.float64, 1e-14)])
def test_log_accuracy(dtype, bound):
    x = wide(dtype, None, np.finfo(dtype).max)
    got = kernel("log", x)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.log(x.astype(np.float64))
    assert relative_error(got, want, dtype) <= bound


@pytest.mark.parametrize("dtype,bound", [(np.float32, 4e-7), (np.float64, 1e-14)])
def test_tanh_accuracy(dtype, bound):
    x = wide(dtype, None, 1e4)
    got = kernel("tanh", x)
    want = np.tanh(x.astype(np.float64))
    finite = np.isfinite(x)
    err = np.abs(got[finite] - want[finite])
    near_zero = np.abs(want[finite]) < 1e-3
    assert np.max(err[~near_zero] / np.abs(want[finite][~near_zero])) <= bound
    assert np.max(err[near_zero]) <= (1e-6 if dtype == np.float32 else 1e-17)
    assert relative_error(got, want, dtype) <= (1e-6 if dtype == np.float32 else bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sigmoid", "erf"])
def test_sigmoid_and_erf_absolute_accuracy(name, dtype):
    x = wide(dtype, None, 1e4)
    got = kernel(name, x)
    want = evaluate_numpy(unary_program(name, x.shape, np.float64), [x.astype(np.float64)])[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.max(np.abs(got[ok] - want[ok])) <= (1e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["log1p", "softplus", "silu", "gelu", "gelu_tanh"])
def test_composite_functions_over_wide_ranges(name, dtype):
    x = wide(dtype, 1e-30, 1e3, n=20_001)
    if name == "log1p":
        x = x[x > -1]
    got = kernel(name, x)
    want = evaluate_numpy(unary_program(name, x.shape, np.float64), [x.astype(np.float64)])[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = np.isfinite(want)
    np.testing.assert_array_equal(got[~ok], want[~ok])
    floor = 1.0 if name != "log1p" else np.finfo(dtype).tiny
    scale = np.maximum(np.abs(want[ok]), floor)
    assert np.max(np.abs(got[ok] - want[ok]) / scale) <= (2e-6 if dtype == np.float32 else 1e-13)


# -- the builds for wider vectors ----------------------------------------------------------------
def builds():
    # the CPU is asked (through the baseline build) before a wider build is imported: a module
    # built for AVX-512 may use its instructions as it loads (SIGILL on an AVX2-only CPU)
    import importlib
    baseline = importlib.import_module("mgegraph._kernels.fused")
    found = []
    for name in ("fused", "fused_avx2", "fused_avx512"):
        if not baseline.cpu_has(name.partition("_")[2] or "baseline"):
            continue
        try:
            found.append(importlib.import_module(f"mgegraph._kernels.{name}"))
        except ImportError:
            continue
    return found


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_build_gives_bitwise_the_same_results(dtype):
    # no FP contraction and no reassociation in any build, so vector width changes nothing
    names = sorted(UNARY - {"sin", "cos"}) + sorted(BINARY)
    x = np.concatenate([RNG.standard_normal(4099) * 4, [0.0, -0.0, np.inf, -np.inf, np.nan]])
    x, y = x.astype(dtype), np.abs(x[::-1]).astype(dtype) + dtype(0.5)
    results = []
    for module in builds():
        got = []
        for name in names:
            if name in BINARY:
                program = Program([x.shape, y.shape], x.shape, dtype,
                                  [("load", 0, 0), ("load", 1, 1), (name, 2, 0, 1),
                                   ("store", 0, 2)])
                arrays = [x, y]
            else:
                program = unary_program(name, x.shape, dtype, constants_of(name))
                arrays = [x]
            ints, floats, ws = encode(program)
            out = np.empty_like(x)
            with np.errstate(all="ignore"):
                workspace = np.empty(ws, np.uint8)
                status = module.call_kernel(kernel_name(dtype), arrays + [out, workspace], ints,
                                            floats)
                assert status == 0
            got.append(out)
        results.append(got)
    assert results, "no build of the fused kernel runs here"
    bits = np.uint32 if dtype == np.float32 else np.uint64
    for other in results[1:]:
        for name, a, b in zip(names, results[0], other):
            # a NaN's sign and payload may differ; every other result equals bit for bit
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
            np.testing.assert_array_equal(a.view(bits)[~np.isnan(a)], b.view(bits)[~np.isnan(b)],
                                          err_msg=name)
