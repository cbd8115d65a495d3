"""uint8, int8 and int16 as NumPy means them: the dtype rules, every cast (floats outside the
range as NumPy on x86: truncated to int32, INT_MIN for NaN and inf, then the low bits), the
integer elementwise ops wrapping, comparisons and where, the movement kernels, Python scalars
keeping the tensor's dtype, and a clear OpError from every op without small-integer kernels.
Each op runs unfused (optimize=0) and through the default pipeline (constant folding runs the
kernels at compile time too)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import GraphError, OpError
from mgegraph.ir.types import HALF_DTYPES, SUPPORTED, TensorType, as_dtype, dtype_code, result_type

SMALL = (np.uint8, np.int8, np.int16)
EVERY = tuple(d.type for d in SUPPORTED if d not in HALF_DTYPES)  # halves: test_half.py


def edge_values(dt) -> np.ndarray:
    """The limits, their neighbours and small values of an integer dtype."""
    info = np.iinfo(dt)
    vals = [info.min, info.min + 1, info.max - 1, info.max, 0, 1, 2, 7, 100]
    if info.min < 0:
        vals += [-1, -2, -7, -100]
    return np.array(sorted(set(vals)), dt)


def edge_pairs(dt):
    v = edge_values(dt)
    return np.repeat(v, len(v)), np.tile(v, len(v))


def run(outs, feeds, optimize):
    return mg.compile(outs, optimize=optimize).run(feeds)


def check(got, want, what):
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert np.array_equal(got, want), (what, got, want)


# -- the dtype rules ------------------------------------------------------------------------------
@pytest.mark.parametrize("dt, short, code", [(np.uint8, "u8", 5), (np.int8, "i8", 6),
                                             (np.int16, "i16", 7)])
def test_dtype_names_codes_and_text_form(dt, short, code):
    assert as_dtype(dt.__name__) == np.dtype(dt) and dtype_code(np.dtype(dt)) == code
    assert str(TensorType((2, 3), np.dtype(dt))) == f"{short}[2,3]"
    g = mg.Graph()
    x = g.input("frame", (2, 3), dtype=dt)
    assert f"{short}[2,3]" in str(g) and x.dtype == np.dtype(dt)


@pytest.mark.parametrize("a", EVERY)
@pytest.mark.parametrize("b", EVERY)
def test_promotion_is_numpys(a, b):
    assert result_type(np.dtype(a), np.dtype(b)) == np.result_type(a, b)


@pytest.mark.parametrize("dt", SMALL)
def test_python_scalars_keep_the_tensors_dtype(dt):
    g = mg.Graph()
    x = g.input("x", (3,), dtype=dt)
    assert (x + 1).dtype == np.dtype(dt) and (2 * x).dtype == np.dtype(dt)
    assert (x * 0.5).dtype == np.result_type(dt, 0.5)
    with pytest.raises(GraphError, match=f"Python integer 70000 does not fit {np.dtype(dt)}"):
        x + 70000


def test_a_python_int_outside_the_dtype_is_a_graph_error():
    # NumPy 2 raises OverflowError on each; mgegraph says which value and where (int32's too)
    g = mg.Graph()
    with pytest.raises(GraphError, match="300 out of bounds for uint8"):
        g.const(300, "uint8")
    with pytest.raises(GraphError, match="300 out of bounds for uint8"):
        mg.tensor([300], dtype="uint8")
    with pytest.raises(GraphError, match="does not fit int32"):
        g.input("x", (2,), dtype=np.int32) + 2 ** 40
    with pytest.raises(GraphError, match="-1 does not fit uint8"):
        g.input("u", (2,), dtype=np.uint8) - (-1)


# -- casts ----------------------------------------------------------------------------------------
def cast_sources(src) -> np.ndarray:
    """Values of ``src`` that reach every rule of a cast: limits, negatives, fractions, and for
    floats NaN, infinities and magnitudes past every integer dtype."""
    if np.dtype(src).kind == "f":
        vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.9, -1.9, 127.5, 128.0, -128.5,
                -129.0, 255.9, 256.0, 300.7, -300.7, 32767.0, 32768.0, -32769.0, 65535.5,
                70000.5, 3e9, -3e9, 1e10, 1e20, -1e20]
        return np.array(vals, src)
    if src is np.bool_:
        return np.array([True, False, True])
    info = np.iinfo(src)
    return np.array([info.min, info.min + 1, -129, -128, -1, 0, 1, 127, 128, 255, 256, 32767,
                     32768, 65535, 65536, info.max], np.int64).clip(info.min, info.max).astype(src)


def numpy_cast(x: np.ndarray, dst) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return x.astype(dst)


@pytest.mark.parametrize("src", EVERY)
@pytest.mark.parametrize("dst", EVERY)
def test_cast_between_every_pair_is_numpys(src, dst):
    if src not in SMALL and dst not in SMALL:
        pytest.skip("the core dtypes' casts are tested in test_elementwise")
    x = cast_sources(src)
    # odd sizes: a broadcast row and a transposed (strided) view take the other loop paths
    grid = np.broadcast_to(x, (3, x.size)).T.copy()
    g = mg.Graph()
    xv = g.input("x", grid.shape, dtype=src)
    outs = [xv.astype(dst), xv.T.astype(dst)]
    for optimize in (0, 2):
        got = run(outs, {"x": grid}, optimize)
        check(got[0], numpy_cast(grid, dst), (src, dst, optimize))
        check(got[1], numpy_cast(grid.T, dst), (src, dst, "strided", optimize))


@pytest.mark.parametrize("dst", SMALL)
def test_float_to_small_int_rule_by_example(dst):
    # the documented rule, spelled out: truncate to int32 (INT_MIN for NaN/inf/outside), then
    # keep the low bits
    x = np.array([np.nan, np.inf, -np.inf, 300.7, -1.5, 70000.5, 3e9], np.float32)
    want = {np.uint8: [0, 0, 0, 44, 255, 112, 0], np.int8: [0, 0, 0, 44, -1, 112, 0],
            np.int16: [0, 0, 0, 300, -1, 4464, 0]}[dst]
    g = mg.Graph()
    xv = g.input("x", x.shape)
    (got,) = run([xv.astype(dst)], {"x": x}, 0)
    assert got.tolist() == want


def test_casting_a_constant_folds_to_the_kernels_result():
    g = mg.Graph()
    c = g.const(np.array([np.nan, 300.7, -1.5], np.float64))
    (got,) = run([c.astype(np.uint8)], {}, 2)
    assert got.tolist() == [0, 44, 255]


# -- elementwise ----------------------------------------------------------------------------------
BINARY = {"add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
          "mul": (lambda a, b: a * b, np.multiply), "maximum": (F.maximum, np.maximum),
          "minimum": (F.minimum, np.minimum), "floor_div": (F.floor_div, np.floor_divide),
          "mod": (F.mod, np.mod)}
UNARY = {"neg": (lambda a: -a, np.negative), "abs": (F.abs, np.abs),
         "square": (F.square, np.square), "sign": (F.sign, np.sign),
         "relu": (F.relu, lambda a: np.maximum(a, 0))}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
           "less_equal": np.less_equal, "greater": np.greater,
           "greater_equal": np.greater_equal}


@pytest.mark.parametrize("dt", SMALL)
@pytest.mark.parametrize("optimize", [0, 2])
def test_integer_ops_on_every_pair_of_edge_values_wrap_as_numpy(dt, optimize):
    a, b = edge_pairs(dt)
    g = mg.Graph()
    x, y = g.input("x", a.shape, dtype=dt), g.input("y", b.shape, dtype=dt)
    names = list(BINARY) + list(UNARY) + list(COMPARE)
    outs = ([BINARY[n][0](x, y) for n in BINARY] + [UNARY[n][0](x) for n in UNARY]
            + [getattr(F, n)(x, y) for n in COMPARE])
    got = run(outs, {"x": a, "y": b}, optimize)
    with np.errstate(all="ignore"):
        want = ([BINARY[n][1](a, b) for n in BINARY] + [UNARY[n][1](a) for n in UNARY]
                + [COMPARE[n](a, b) for n in COMPARE])
    for name, gv, wv in zip(names, got, want):
        check(gv, wv, (dt, name, optimize))


@pytest.mark.parametrize("dt", SMALL)
def test_the_named_edges(dt):
    # 255 + 1 wraps to 0; -(-128) and abs(-128) stay -128; int16's limits wrap past each other
    info = np.iinfo(dt)
    a = np.array([info.max, info.min, info.min, info.max], dt)
    b = np.array([1, -1 if info.min else 1, 1, 2], dt)
    g = mg.Graph()
    x, y = g.input("x", a.shape, dtype=dt), g.input("y", b.shape, dtype=dt)
    got = run([x + y, -x, F.abs(x), x * y, F.floor_div(x, y)], {"x": a, "y": b}, 0)
    assert got[0][0] == info.min  # max + 1
    assert got[1][1] == (info.min if info.min else 0) and got[2][1] == info.min
    with np.errstate(all="ignore"):
        check(got[3], a * b, dt)
        check(got[4], np.floor_divide(a, b), dt)


@pytest.mark.parametrize("dt", SMALL)
def test_pow_wraps_and_refuses_negative_exponents(dt):
    a = np.array([2, 3, 7, 0, 1, 5, 2], dt)
    b = np.array([7, 5, 3, 0, 9, 4, 15], dt)
    g = mg.Graph()
    x, y = g.input("x", a.shape, dtype=dt), g.input("y", b.shape, dtype=dt)
    (got,) = run([F.pow(x, y)], {"x": a, "y": b}, 0)
    check(got, np.power(a, b), dt)
    if np.iinfo(dt).min < 0:
        with pytest.raises(mg.KernelError, match="pow"):
            run([F.pow(x, y)], {"x": a, "y": -b}, 0)


@pytest.mark.parametrize("dt", SMALL)
def test_broadcasting_operands_and_scalars(dt):
    rng = np.random.default_rng(3)
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (5, 7), endpoint=True).astype(dt)
    row = rng.integers(info.min, info.max, (7,), endpoint=True).astype(dt)
    g = mg.Graph()
    x, r = g.input("x", a.shape, dtype=dt), g.input("r", row.shape, dtype=dt)
    outs = [x + r, r * x, x - 3, 5 - x, F.maximum(x, r), x > r, x == 7]
    for optimize in (0, 2):
        got = run(outs, {"x": a, "r": row}, optimize)
        with np.errstate(all="ignore"):
            want = [a + row, row * a, a - 3, 5 - a, np.maximum(a, row), a > row, a == 7]
        for k, (gv, wv) in enumerate(zip(got, want)):
            check(gv, wv, (dt, k, optimize))


@pytest.mark.parametrize("dt", SMALL)
def test_where_and_mixed_dtypes_promote_as_numpy(dt):
    a = edge_values(dt)
    other = np.arange(a.size, dtype=np.int32)
    g = mg.Graph()
    x, o = g.input("x", a.shape, dtype=dt), g.input("o", other.shape, dtype=np.int32)
    outs = [F.where(x > 1, x, F.zeros_like(x)), x + o, x * 2.5, x.astype(np.float32) / 255]
    for optimize in (0, 2):
        got = run(outs, {"x": a, "o": other}, optimize)
        with np.errstate(all="ignore"):
            want = [np.where(a > 1, a, np.zeros_like(a)), a + other, a * 2.5,
                    a.astype(np.float32) / np.float32(255)]
        for k, (gv, wv) in enumerate(zip(got, want)):
            check(gv, wv, (dt, k, optimize))


@pytest.mark.parametrize("dt", SMALL)
def test_small_int_graphs_stay_unfused(dt):
    # the fused kernel computes floats only: the fusion pass leaves small-integer nodes to
    # their own kernels, and the float part after a cast still fuses
    g = mg.Graph()
    x = g.input("x", (4, 5), dtype=dt)
    ints = F.maximum(x * 3 + 1, x - 2)
    floats = F.relu(ints.astype(np.float32) * 0.5 + 1.0)
    plan = mg.compile([ints, floats])
    text = str(plan)
    assert "fused_elementwise" in text
    for line in text.splitlines():
        if "fused_elementwise" in line:
            assert np.dtype(dt).name not in line and f"{SUPPORTED[np.dtype(dt)][0]}[" not in line
    a = edge_values(dt)[:20].reshape(-1)[:20]
    a = np.resize(a, (4, 5))
    got = plan.run({"x": a})
    with np.errstate(all="ignore"):
        want_ints = np.maximum(a * dt(3) + dt(1), a - dt(2))
    check(got[0], want_ints, dt)
    check(got[1], np.maximum(want_ints.astype(np.float32) * np.float32(0.5) + 1, 0), dt)


# -- movement -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", SMALL)
@pytest.mark.parametrize("optimize", [0, 2])
def test_movement_ops_move_the_bits(dt, optimize):
    rng = np.random.default_rng(5)
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (3, 5, 7), endpoint=True).astype(dt)
    b = rng.integers(info.min, info.max, (3, 2, 7), endpoint=True).astype(dt)
    idx = rng.integers(0, 5, (3, 4, 7)).astype(np.int32)
    g = mg.Graph()
    x, y = g.input("x", a.shape, dtype=dt), g.input("y", b.shape, dtype=dt)
    i = g.input("i", idx.shape, dtype=np.int32)
    outs = [x.transpose((2, 0, 1)), F.broadcast_to(x[:, :1], (3, 4, 7)), x[1:, ::-2, 2:6],
            F.flip(x, 2), F.concat([x, y], axis=1), *F.split(x, [2], axis=1),
            F.pad(x, ((1, 0), (0, 2), (1, 1)), constant_value=9),
            F.pad(x, ((1, 1), (2, 0), (0, 1)), mode="reflect"),
            F.pad(x, ((0, 1), (1, 1), (2, 2)), mode="edge"),
            F.gather(x, 1, i), F.take(x, np.array([4, 0, 4, 2]), axis=1),
            x.reshape(7, 15), F.full((3, 4), 7, dt, graph=g), F.ones_like(x)]
    want = [a.transpose(2, 0, 1), np.broadcast_to(a[:, :1], (3, 4, 7)), a[1:, ::-2, 2:6],
            np.flip(a, 2), np.concatenate([a, b], 1), a[:, :2], a[:, 2:],
            np.pad(a, ((1, 0), (0, 2), (1, 1)), constant_values=9),
            np.pad(a, ((1, 1), (2, 0), (0, 1)), mode="reflect"),
            np.pad(a, ((0, 1), (1, 1), (2, 2)), mode="edge"),
            np.take_along_axis(a, idx, 1), np.take(a, [4, 0, 4, 2], axis=1),
            a.reshape(7, 15), np.full((3, 4), 7, dt), np.ones_like(a)]
    got = run(outs, {"x": a, "y": b, "i": idx}, optimize)
    for k, (gv, wv) in enumerate(zip(got, want)):
        check(gv, wv, (dt, k, optimize))


@pytest.mark.parametrize("dt", SMALL)
def test_fill_refuses_a_value_outside_the_dtype(dt):
    g = mg.Graph()
    with pytest.raises(OpError, match=f"fill value 70000 does not fit {np.dtype(dt)}"):
        F.full((2,), 70000, dt, graph=g)
    assert run([F.full((2,), np.iinfo(dt).min, dt, graph=g)], {}, 0)[0].tolist() == \
        [np.iinfo(dt).min] * 2


def test_fill_refuses_a_value_outside_int32_too():
    # the same rule for every integer dtype: 2**40 was stored wrapped to 0 before
    with pytest.raises(OpError, match="does not fit int32"):
        F.full((2,), 2 ** 40, "int32", graph=mg.Graph())


# -- ops without small-integer kernels ------------------------------------------------------------
REFUSING = {
    "matmul": lambda x: x @ x.T,
    "conv2d": lambda x: F.conv2d(x.reshape(1, 1, 3, 3), x.reshape(1, 1, 3, 3)),
    "exp": lambda x: F.exp(x), "softmax": lambda x: F.softmax(x, axis=1),
    "clip": lambda x: F.clip(x, 1, 3), "div": lambda x: F.div(x, x),
    "one_hot": lambda x: F.one_hot(x, 4), "arange": lambda x: F.arange(3, dtype=x.dtype,
                                                                      graph=x.graph),
}


@pytest.mark.parametrize("dt", SMALL)
@pytest.mark.parametrize("name", sorted(REFUSING))
def test_ops_without_kernels_refuse_naming_op_and_dtype(dt, name):
    g = mg.Graph()
    x = g.input("x", (3, 3), dtype=dt)
    try:
        out = REFUSING[name](x)
    except OpError as exc:
        assert str(np.dtype(dt)) in str(exc)
        return
    # ops that NumPy takes to floats (exp, div) compute the float result instead
    assert out.dtype.kind == "f", (name, out.dtype)
    a = np.arange(1, 10, dtype=dt).reshape(3, 3)
    (got,) = run([out], {"x": a}, 0)
    assert np.isfinite(got).all()


def test_a_refusal_names_the_op_and_the_users_line():
    g = mg.Graph()
    x = g.input("x", (3,), dtype=np.int8)
    with pytest.raises(OpError, match=r"sum\(i8\[3\]\): sum has no kernels for int8") as info:
        F.sum(x)
    assert "test_small_ints.py" in str(info.value)


# -- reductions: uint8 alone (read as bool is); sums and products are int64 ---------------------
REDUCTIONS = ("sum", "prod", "mean", "var", "max", "min", "argmax", "argmin")


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_uint8_reductions_are_numpys_with_int64_sums(axis):
    a = np.random.default_rng(4).integers(0, 256, (5, 7, 3)).astype(np.uint8)
    a[0, 0, 0], a[1, 2, 1] = 255, 0
    g = mg.Graph()
    x = g.input("x", a.shape, dtype=np.uint8)
    names = [n for n in REDUCTIONS if not (n.startswith("arg") and isinstance(axis, tuple))]
    outs = [getattr(F, n)(x, axis=axis) for n in names]
    for optimize in (0, 2):
        got = run(outs, {"x": a}, optimize)
        for name, gv in zip(names, got):
            want = getattr(np, name)(a, axis=axis)
            if name in ("sum", "prod"):  # NumPy's uint64, which mgegraph has not: int64
                want = want.astype(np.int64)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(gv, want, rtol=1e-12)
                assert gv.dtype == want.dtype
            else:
                check(gv, np.asarray(want), (name, axis, optimize))


@pytest.mark.parametrize("dt", [np.int8, np.int16])
@pytest.mark.parametrize("name", REDUCTIONS)
def test_signed_small_int_reductions_refuse(dt, name):
    x = mg.Graph().input("x", (3, 4), dtype=dt)
    with pytest.raises(OpError, match=f"{name} has no kernels for {np.dtype(dt)}"):
        getattr(F, name)(x, axis=1)


# -- against PyTorch (which wraps small integers as NumPy does) ----------------------------------
@pytest.mark.parametrize("dt", SMALL)
def test_integer_ops_and_in_range_casts_agree_with_torch(dt):
    torch = pytest.importorskip("torch")
    a, b = edge_pairs(dt)
    b = np.where(b == 0, 3, b).astype(dt)  # torch raises on an integer division by zero
    if np.iinfo(dt).min < 0:  # and computes MIN // -1 otherwise than NumPy
        b = np.where(b == -1, 5, b).astype(dt)
    g = mg.Graph()
    x, y = g.input("x", a.shape, dtype=dt), g.input("y", b.shape, dtype=dt)
    f = g.input("f", (7,), dtype=np.float32)
    outs = [x + y, x - y, x * y, F.maximum(x, y), F.minimum(x, y), F.floor_div(x, y), -x,
            F.abs(x), x < y, f.astype(dt)]
    floats = np.array([0.0, 1.9, 7.5, 100.2, 127.9, -0.9, 2.0], np.float32)
    if np.iinfo(dt).min < 0:
        floats[5] = -100.7
    got = run(outs, {"x": a, "y": b, "f": floats}, 0)
    ta, tb, tf = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(floats)
    want = [ta + tb, ta - tb, ta * tb, torch.maximum(ta, tb), torch.minimum(ta, tb),
            torch.floor_divide(ta, tb), -ta, torch.abs(ta), ta < tb, tf.to(ta.dtype)]
    for k, (gv, wv) in enumerate(zip(got, want)):
        check(gv, wv.numpy(), (dt, k))
