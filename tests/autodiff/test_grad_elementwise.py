"""Gradient rules of elementwise ops and the walker itself, against finite differences."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape)


UNARY_DOMAIN = {"log": (0.2, 3), "sqrt": (0.2, 3), "rsqrt": (0.2, 3), "log1p": (-0.5, 3),
                "reciprocal": (0.3, 3)}
SMOOTH_UNARY = ["neg", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sin", "cos", "tanh",
                "sigmoid", "silu", "softplus", "reciprocal", "erf"]


@pytest.mark.parametrize("name", SMOOTH_UNARY)
def test_smooth_unary(name):
    low, high = UNARY_DOMAIN.get(name, (-2, 2))
    gradcheck(getattr(F, name), rand(3, 4, low=low, high=high))


@pytest.mark.parametrize("fn", [F.relu, F.abs, lambda x: F.leaky_relu(x, 0.2),
                                lambda x: F.clip(x, -0.5, 0.7), F.gelu,
                                lambda x: F.gelu(x, approximate="tanh")])
def test_piecewise_unary_away_from_kinks(fn):
    x = rand(4, 5)
    x = np.where(np.abs(x) < 0.05, 0.3, x)
    x = np.where(np.abs(x + 0.5) < 0.05, 0.3, x)
    x = np.where(np.abs(x - 0.7) < 0.05, 0.3, x)
    gradcheck(fn, x)


def test_hardswish_on_each_piece():
    # zero below -3, (2x + 3) / 6 between -3 and 3, one above; finite differences stay clear of
    # the kinks at -3 and 3
    x = np.concatenate([rand(6, low=-6, high=-3.1), rand(6, low=-2.9, high=2.9),
                        rand(6, low=3.1, high=6)])
    (dx,) = gradcheck(F.hardswish, x)
    assert np.all(dx[:6] == 0)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1)),
                                    ((), (2, 3)), ((1,), (3, 1))])
def test_binary_with_broadcasting(name, shapes):
    a, b = rand(*shapes[0], low=0.5, high=2), rand(*shapes[1], low=0.5, high=2)
    if name in ("maximum", "minimum"):
        b = b + 0.01  # no ties
    gradcheck(getattr(F, name), a, b)


def test_where_and_cast():
    x, y = rand(3, 4), rand(4)
    gradcheck(lambda a, b: F.where(a > 0, a * b, b), x, y)
    # through float32 the finite differences need a wide step to rise above the rounding
    gradcheck(lambda a: F.astype(F.astype(a, "float32"), "float64") * a, x, eps=1e-3,
              rtol=1e-3, atol=1e-4)


def test_gradients_accumulate_over_uses():
    gradcheck(lambda x: x * x + F.exp(x) * x - x, rand(5))


def test_hessian_vector_product():
    def hvp(x, v):
        (dx,) = mg.grad(F.sum(F.tanh(x) * x * x), [x])
        return F.sum(dx * v)

    x, v = rand(6), rand(6)
    (got,) = gradcheck(hvp, x, v, wrt=[0])
    t = np.tanh(x)
    d2 = 2 * t + 4 * x * (1 - t * t) - 2 * x * x * t * (1 - t * t)
    weights = np.random.default_rng(0).standard_normal(())
    np.testing.assert_allclose(got, d2 * v * weights, rtol=1e-8)


def test_unused_wrt_gets_zeros_and_integers_are_refused():
    g = mg.Graph()
    x = g.input("x", (3,), "float32")
    unused = g.input("u", (2,), "float32")
    labels = g.input("labels", (3,), "int64")
    loss = F.sum(x * F.astype(labels, "float32"))
    dx, du = mg.grad(loss, [x, unused])
    xv, lv = np.ones(3, np.float32), np.array([1, 2, 3])
    out = mg.compile([dx, du]).run({"x": xv, "u": np.ones(2, np.float32), "labels": lv})
    np.testing.assert_array_equal(out[0], lv.astype(np.float32))
    np.testing.assert_array_equal(out[1], 0)
    with pytest.raises(mg.GraphError, match="not differentiable"):
        mg.grad(loss, [labels])


def test_loss_must_be_a_float_scalar():
    g = mg.Graph()
    x = g.input("x", (3,), "float32")
    with pytest.raises(mg.GraphError, match="scalar"):
        mg.grad(x * 2, [x])
    with pytest.raises(mg.GraphError, match="floating point"):
        mg.grad(F.sum(F.astype(x, "int32")), [x])


def test_backward_is_an_ordinary_graph():
    g = mg.Graph()
    x = g.input("x", (2,), "float32")
    n = len(g.nodes)
    mg.grad(F.sum(F.exp(x)), [x])
    assert len(g.nodes) > n and "exp" in str(g).split("\n", n)[-1]


def test_op_without_rule_is_named():
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    loss = F.sum(F.astype(F.floor_div(x, 2.0), "float32") * x)
    mg.grad(loss, [x])  # floor_div has a rule (zero gradient), so this works
    idx = F.argmax(x)
    with pytest.raises(mg.GraphError, match="not differentiable"):
        mg.grad(F.sum(x), [idx])
