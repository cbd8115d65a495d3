"""Elementwise ops against NumPy: unary, binary with broadcasting, comparisons, where, cast."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mgegraph as mg
import mgegraph.functional as F

RNG = np.random.default_rng(0)


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def tol(dtype):
    return {"rtol": 2e-6, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-13}


def _erf(x):
    from scipy.special import erf
    return erf(x.astype(np.float64))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


UNARY_REF = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "square": np.square, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x), "softplus": lambda x: np.logaddexp(x, 0),
    "floor": np.floor, "erf": _erf, "ceil": np.ceil, "sign": np.sign, "reciprocal": lambda x: 1 / x,
}
POSITIVE = {"log", "sqrt", "rsqrt", "log1p", "reciprocal"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(UNARY_REF))
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 0, 3), (1,), ()])
def test_unary_matches_numpy(name, dtype, shape):
    x = RNG.standard_normal(shape).astype(dtype) * 3
    if name in POSITIVE:
        x = np.abs(x) + 0.1
    expected = UNARY_REF[name](x.astype(np.float64)).astype(dtype)
    out = run(getattr(F, name), x)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(out, expected, **tol(dtype))


def _hardswish(x):
    with np.errstate(invalid="ignore"):  # -inf * 0 is NaN: the formula's value at -inf
        return x * np.clip(x + 3, 0, 6) / 6


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimize", [0, 1])
def test_hardswish_matches_numpy_fused_and_unfused(dtype, optimize):
    # the table's worked example: x * relu6(x + 3) / 6, PyTorch's order of operations; with
    # optimize=1 it runs inside a fused group (the * 2 joins it)
    x = np.concatenate([np.linspace(-5, 5, 101), [-3, 3, -0.0, np.inf, -np.inf]]).astype(dtype)
    g = mg.Graph()
    v = g.input("x", x.shape, dtype)
    plan = mg.compile([F.hardswish(v) * 2, F.hswish(v)], optimize=optimize)
    doubled, alias = plan.run({"x": x})
    want = _hardswish(x.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(doubled, 2 * want, **tol(dtype))
    np.testing.assert_allclose(alias, want, **tol(dtype))
    assert ("fused_elementwise" in str(plan)) == (optimize == 1)


def test_unary_extremes_do_not_overflow():
    x = np.array([-1000, -80, 0, 80, 1000], np.float32)
    np.testing.assert_allclose(run(F.sigmoid, x), _sigmoid(x.astype(np.float64)), atol=1e-7)
    np.testing.assert_allclose(run(F.softplus, x), np.logaddexp(x.astype(np.float64), 0),
                               rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_forms(dtype):
    x = np.linspace(-5, 5, 101).astype(dtype)
    exact = 0.5 * x * (1 + _erf(x / np.sqrt(2)))
    t = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    np.testing.assert_allclose(run(F.gelu, x), exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(lambda v: F.gelu(v, approximate="tanh"), x), t,
                               rtol=1e-5, atol=1e-6)


def test_leaky_relu_and_clip():
    x = np.linspace(-3, 3, 13).astype(np.float32)
    np.testing.assert_array_equal(run(lambda v: F.leaky_relu(v, 0.2), x),
                                  np.where(x > 0, x, x * np.float32(0.2)))
    np.testing.assert_array_equal(run(lambda v: F.clip(v, -1, 2), x), np.clip(x, -1, 2))
    np.testing.assert_array_equal(run(lambda v: F.clip(v, upper=0.5), x), np.minimum(x, 0.5))
    xi = np.arange(-5, 5, dtype=np.int32)
    np.testing.assert_array_equal(run(lambda v: F.clip(v, -2, 3), xi), np.clip(xi, -2, 3))


@pytest.mark.parametrize("optimize", [0, 2])
def test_clip_with_lower_above_upper_is_numpys_upper(optimize):
    """np.clip is minimum(maximum(x, lo), hi): every element is hi when lo > hi (ONNX's Clip
    node case clip_min_greater_than_max), in the unfused kernel and inside a fused body."""
    x = np.array([-3, 0, 1.5, 2, 4, np.nan], np.float32)
    g = mg.Graph()
    v = g.input("x", x.shape)
    (got,) = mg.compile([F.clip(v * 1.0, 2, 1) + 0.0], optimize=optimize).run({"x": x})
    np.testing.assert_array_equal(got, np.clip(x, 2, 1))
    xi = np.arange(-4, 4, dtype=np.int64)
    np.testing.assert_array_equal(run(lambda u: F.clip(u, 3, -1), xi), np.clip(xi, 3, -1))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_unary(dtype):
    x = np.arange(-6, 6, dtype=dtype).reshape(3, 4)
    for name in ("neg", "abs", "square", "relu", "sign"):
        np.testing.assert_array_equal(run(getattr(F, name), x), UNARY_REF[name](x))
    assert run(F.exp, x).dtype == (np.float64 if dtype == np.int64 else np.float32)


BINARY_REF = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
              "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
              "floor_div": np.floor_divide, "mod": np.mod}
SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 1, 5), (3, 1)),
               ((), (2, 3)), ((4, 0), (1,)), ((1,), (1,)), ((2, 3, 4, 5), (3, 1, 5))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(BINARY_REF))
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_binary_broadcasting(name, dtype, shapes):
    a = RNG.standard_normal(shapes[0]).astype(dtype)
    b = RNG.standard_normal(shapes[1]).astype(dtype)
    if name == "pow":
        a = np.abs(a) + 0.5
    if name in ("div", "floor_div", "mod"):
        b = np.where(np.abs(b) < 0.1, 1, b).astype(dtype)
    out = run(getattr(F, name), a, b)
    expected = BINARY_REF[name](a, b)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_binary(dtype):
    a = np.arange(-7, 8, dtype=dtype).reshape(3, 5)
    b = np.array([3, -2, 5, 1, -4], dtype)
    for name in ("add", "sub", "mul", "maximum", "minimum", "floor_div", "mod"):
        np.testing.assert_array_equal(run(getattr(F, name), a, b), BINARY_REF[name](a, b))
    np.testing.assert_array_equal(run(F.pow, a, np.abs(b)), np.power(a, np.abs(b)))
    out = run(F.div, a, b)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, a / b)


def test_maximum_propagates_nan():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    b = np.array([np.nan, 2.0, 1.0], np.float32)
    np.testing.assert_array_equal(run(F.maximum, a, b), np.maximum(a, b))
    np.testing.assert_array_equal(run(F.minimum, a, b), np.minimum(a, b))


def test_python_operators_and_scalar_promotion():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    i = g.input("i", (2, 3), "int32")
    outs = [x + 1, 2 * x, x - 0.5, 1.0 / (x + 3), x ** 2, -x, abs(x), i + 1, i * 2.5,
            x + i, x[0] if hasattr(F, "subscript") else x]
    xv = RNG.standard_normal((2, 3)).astype(np.float32)
    iv = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = mg.compile(outs).run({"x": xv, "i": iv})
    want = [xv + 1, 2 * xv, xv - 0.5, 1.0 / (xv + 3), xv ** 2, -xv, abs(xv), iv + 1, iv * 2.5,
            xv + iv, xv[0] if hasattr(F, "subscript") else xv]
    for o, w in zip(got, want):
        assert o.dtype == w.dtype, (o.dtype, w.dtype)
        np.testing.assert_allclose(o, w, rtol=1e-6)


def test_array_on_the_left_defers_to_var():
    g = mg.Graph()
    x = g.input("x", (3,), "float32")
    y = np.ones(3, np.float32) + x
    assert isinstance(y, mg.Var)


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater",
                                  "greater_equal"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_comparisons(name, dtype):
    a = RNG.integers(0, 3, (4, 5)).astype(dtype)
    b = RNG.integers(0, 3, (5,)).astype(dtype)
    out = run(getattr(F, name), a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, getattr(np, name)(a, b))


def test_where_broadcasts_all_three():
    c = RNG.random((3, 1, 4)) > 0.5
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    y = RNG.standard_normal((3, 2, 1)).astype(np.float32)
    np.testing.assert_array_equal(run(F.where, c, x, y), np.where(c, x, y))
    np.testing.assert_array_equal(run(lambda c_, x_: F.where(c_, x_, 0.0), c, x),
                                  np.where(c, x, np.float32(0)))


DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_cast_matrix(src, dst):
    x = (RNG.standard_normal((3, 4)) * 5).astype(src)
    out = run(lambda v: F.astype(v, dst), x)
    np.testing.assert_array_equal(out, x.astype(dst))


def test_type_errors_name_op_types_and_line():
    g = mg.Graph()
    x = g.input("x", (3, 4), "float32")
    y = g.input("y", (5,), "float32")
    with pytest.raises(mg.OpError) as info:
        x + y  # line of the user's node
    message = str(info.value)
    assert "add(f32[3,4], f32[5])" in message and "do not broadcast" in message
    assert "test_elementwise.py:" in message
    with pytest.raises(mg.OpError, match=r"where\(i64\[3\], f32\[3,4\], f32\[3,4\]\).*bool"):
        g.add_node("where", (g.const(np.arange(3)), x, x), {})


def test_var_from_another_graph_is_refused():
    g1, g2 = mg.Graph(), mg.Graph()
    a, b = g1.input("a", (2,)), g2.input("b", (2,))
    with pytest.raises(mg.OpError, match="another graph"):
        a + b


array_pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4)


@settings(max_examples=60, deadline=None)
@given(shapes=array_pairs, data=st.data())
def test_broadcasting_property(shapes, data):
    a = data.draw(hnp.arrays(np.float64, shapes.input_shapes[0],
                             elements=st.floats(-10, 10, allow_nan=False)))
    b = data.draw(hnp.arrays(np.float64, shapes.input_shapes[1],
                             elements=st.floats(-10, 10, allow_nan=False)))
    np.testing.assert_array_equal(run(lambda x, y: x * y - x, a, b), a * b - a)
