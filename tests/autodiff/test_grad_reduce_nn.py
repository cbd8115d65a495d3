"""Gradient rules of the reductions and NN ops against central finite differences in float64.

Inputs stay small (gradcheck runs the graph twice per input element). Second-order checks
gradcheck a Hessian-vector product, which also checks the rules of the ops the first backward
pass is made of (the dedicated backward ops of cross entropy and the norms included).
"""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply_multi
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape)


def hvp(f):
    """v . H(x) for sum(f(x)), as a function of (x, v)."""
    return lambda x, v: F.sum(mg.grad(F.sum(f(x)), [x])[0] * v)


def const(x, value):
    return x.graph.const(np.asarray(value))


# -- reductions ------------------------------------------------------------------------------
REDUCE_CASES = [((3, 4), None, False), ((3, 4), 1, True), ((2, 3, 4), (0, -1), False),
                ((2, 3, 4), -2, True), ((3, 1, 4), 1, False), ((3, 1, 4), (0, 1), True),
                ((5,), 0, False), ((), None, False), ((2, 3), (), False)]


@pytest.mark.parametrize("shape, axis, keepdims", REDUCE_CASES)
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min", "var"])
def test_reductions(name, shape, axis, keepdims):
    x = rand(*shape)
    gradcheck(lambda a: getattr(F, name)(a, axis=axis, keepdims=keepdims), x)


def test_reduction_gradient_broadcasts_back_through_a_broadcast_input():
    gradcheck(lambda a, b: F.mean(a * b, axis=0) + F.max(a + b, axis=1, keepdims=True),
              rand(3, 4), rand(4))


@pytest.mark.parametrize("zeros", [[(0, 1)], [(0, 1), (2, 3)], [(1, 0), (1, 2)],
                                   [(0, 0), (1, 1), (2, 2), (2, 0)]])
def test_prod_at_zeros_is_the_product_of_the_others(zeros):
    x = rand(3, 4)
    for index in zeros:
        x[index] = 0.0
    for axis in (0, 1, None):
        gradcheck(lambda a: F.prod(a, axis=axis), x)


def test_prod_second_order_with_one_zero_per_group():
    x = rand(3, 4)
    x[0, 2] = x[2, 0] = 0.0
    gradcheck(hvp(lambda a: F.prod(a, axis=1)), x, rand(3, 4))
    gradcheck(hvp(lambda a: F.prod(a, axis=0, keepdims=True)), rand(3, 4), rand(3, 4))


def _grad_of(fn, x):
    g = mg.Graph()
    xv = g.input("x", x.shape, x.dtype)
    return mg.compile(mg.grad(fn(xv), [xv])).run({"x": x})[0]


@pytest.mark.parametrize("name", ["max", "min"])
def test_ties_split_the_gradient_evenly(name):
    # Finite differences are not defined at a tie; JAX's convention is the reference.
    x = np.array([[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 2.0, 2.0]]) * (1 if name == "max" else -1)
    got = _grad_of(lambda v: F.sum(getattr(F, name)(v, axis=1) * const(v, [1.0, 6.0])), x)
    np.testing.assert_allclose(got, [[0, 0.5, 0.5, 0], [1.5, 1.5, 1.5, 1.5]])


def test_reductions_of_integers_and_arg_reductions_get_no_gradient():
    g = mg.Graph()
    i = g.input("i", (3, 4), "int32")
    x = g.input("x", (3, 4), "float64")
    for y in (F.sum(i, axis=1), F.prod(i), F.max(i, 0), F.mean(i), F.argmax(x, 1),
              F.argmin(x)):
        assert y.node.op.grad(y.node, (F.ones_like(y),)) == (None,)
    # argmax's integer output only feeds the loss as a constant factor
    xv = rand(3, 4)
    got = _grad_of(lambda v: F.sum(v * F.astype(F.argmax(v, 1, keepdims=True), "float64")), xv)
    np.testing.assert_array_equal(got, np.broadcast_to(xv.argmax(1)[:, None], (3, 4)))


@pytest.mark.parametrize("f", [
    lambda a: F.square(F.sum(a, axis=0)) * F.sum(a * a),
    lambda a: F.square(F.mean(a, axis=(0, -1), keepdims=True)),
    lambda a: F.max(a * a, axis=1) * F.min(a, axis=1),
    lambda a: F.square(F.var(a, axis=-1)),
], ids=["sum", "mean", "max_min", "var"])
def test_reduction_second_order(f):
    gradcheck(hvp(f), rand(3, 4), rand(3, 4))


# -- softmax ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, axis", [((3, 4), 0), ((3, 4), -1), ((2, 3, 2), 1), ((1, 5), 0),
                                         ((5,), None), ((), None)])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(name, shape, axis):
    gradcheck(lambda a: getattr(F, name)(a, axis=axis), rand(*shape))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_second_order(name):
    gradcheck(hvp(lambda a: getattr(F, name)(a, axis=1) * a), rand(3, 4), rand(3, 4))
    gradcheck(hvp(lambda a: F.square(getattr(F, name)(a, axis=0))), rand(3, 4), rand(3, 4))


# -- cross entropy ---------------------------------------------------------------------------
@pytest.mark.parametrize("label_smooth", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape, axis", [((4, 3), 1), ((2, 3, 4), -1), ((2, 3, 2), 1), ((3, 1), 1)])
def test_cross_entropy_with_logits(shape, axis, reduction, label_smooth):
    a = axis % len(shape)
    label = RNG.integers(0, shape[a], shape[:a] + shape[a + 1:]).astype(np.int32)
    gradcheck(lambda p, y: F.cross_entropy(p, y, axis=axis, label_smooth=label_smooth,
                                           reduction=reduction), rand(*shape), label)


@pytest.mark.parametrize("label_smooth", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_with_probabilities(reduction, label_smooth):
    prob = RNG.random((4, 3)) + 0.2
    prob /= prob.sum(1, keepdims=True)  # any positive values work; these look like the real ones
    label = np.array([2, 0, 1, 1], np.int64)
    gradcheck(lambda p, y: F.cross_entropy(p, y, with_logits=False, label_smooth=label_smooth,
                                           reduction=reduction), prob, label)


def test_cross_entropy_labels_get_no_gradient():
    g = mg.Graph()
    loss = F.cross_entropy(g.input("p", (4, 3), "float64"), g.input("y", (4,), "int64"))
    assert loss.node.op.grad(loss.node, (F.ones_like(loss),))[1] is None
    with pytest.raises(mg.GraphError, match="not differentiable"):
        mg.grad(loss, [loss.node.inputs[1]])


@pytest.mark.parametrize("with_logits", [True, False])
def test_cross_entropy_second_order(with_logits):
    label = np.array([2, 0, 1, 1], np.int64)
    x = rand(4, 3) if with_logits else RNG.random((4, 3)) + 0.2

    def f(a):
        return F.cross_entropy(a, const(a, label), with_logits=with_logits, label_smooth=0.1,
                               reduction="none") * F.sum(a, axis=1)
    gradcheck(hvp(f), x, rand(4, 3))


# -- layer norm ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, norm", [((3, 4), (4,)), ((2, 3, 2), (3, 2)), ((2, 1, 3), (3,)),
                                         ((4, 1), (1,)), ((5,), (5,))])
def test_layer_norm(shape, norm):
    w, b = rand(*norm), rand(*norm)
    gradcheck(lambda a, wv, bv: F.layer_norm(a, norm, weight=wv, bias=bv, eps=1e-3),
              rand(*shape), w, b)
    gradcheck(lambda a: F.layer_norm(a, norm, affine=False), rand(*shape))


def test_layer_norm_second_order():
    gradcheck(hvp(lambda a: F.layer_norm(a, (4,)) * a), rand(3, 4), rand(3, 4))

    def weight_and_input(x, w, v):  # dweight's own gradients, and dx's w.r.t. the weight
        dx, dw = mg.grad(F.sum(F.square(F.layer_norm(x, (4,), weight=w) * x)), [x, w])
        return F.sum(dx * v) + F.sum(dw * dw)
    gradcheck(weight_and_input, rand(3, 4), rand(4), rand(3, 4))


# -- batch norm ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, param_shape", [((3, 2, 2, 2), (2,)), ((4, 3), (3,)),
                                                ((3, 2, 3), (1, 2, 1)), ((2, 1, 2, 2), (1,))])
def test_batch_norm_training(shape, param_shape):
    gradcheck(lambda a, w, b: F.batch_norm(a, weight=w, bias=b, training=True, eps=1e-3),
              rand(*shape), rand(*param_shape), rand(shape[1]))


def test_batch_norm_training_statistics_outputs():
    def f(a, w):
        y, mean, var = apply_multi("batch_norm", (a, w, const(a, np.zeros(2))), training=True,
                                   eps=1e-5)
        return F.sum(y * a) + F.sum(F.square(mean)) + F.sum(var * const(a, [1.0, -2.0]))
    gradcheck(f, rand(3, 2, 2), rand(2))
    gradcheck(lambda a: F.sum(F.square(apply_multi("batch_norm", (
        a, const(a, np.ones(2)), const(a, np.zeros(2))), training=True)[2])), rand(3, 2, 2))


def test_batch_norm_inference():
    rm, rv = rand(2), RNG.random(2) + 0.5
    gradcheck(lambda a, w, b: F.batch_norm(a, rm, rv, weight=w, bias=b), rand(3, 2, 2),
              rand(1, 2, 1), rand(2))
    g = mg.Graph()
    x, m, v = (g.input(n, s, "float64") for n, s in (("x", (3, 2)), ("m", (2,)), ("v", (2,))))
    y = F.batch_norm(x, m, v)
    assert y.node.op.grad(y.node, (F.ones_like(y),))[3:] == (None, None)


def test_batch_norm_second_order():
    gradcheck(hvp(lambda a: F.batch_norm(a, training=True) * a), rand(3, 2, 2), rand(3, 2, 2))

    def weight_and_input(x, w, v):
        dx, dw = mg.grad(F.sum(F.square(F.batch_norm(x, weight=w, training=True)) * x), [x, w])
        return F.sum(dx * v) + F.sum(dw * dw)
    gradcheck(weight_and_input, rand(4, 2), rand(2), rand(4, 2))


# -- dropout ---------------------------------------------------------------------------------
def test_dropout_applies_the_forward_mask_to_the_gradient():
    x = rand(6, 5)
    gradcheck(lambda a: F.dropout(a, 0.4, seed=3) * a, x)
    c = rand(6, 5)
    g = mg.Graph()
    xv = g.input("x", x.shape, x.dtype)
    y = F.dropout(xv, 0.4, seed=3)
    dx, kept = mg.compile([mg.grad(F.sum(y * g.const(c)), [xv])[0], y]).run({"x": x})
    np.testing.assert_array_equal(dx != 0, kept != 0)
    np.testing.assert_allclose(dx[kept != 0], c[kept != 0] / 0.6)
    gradcheck(hvp(lambda a: F.square(F.dropout(a, 0.4, seed=3))), x, rand(6, 5))
