"""Gradient rules of the activations (elu, selu, celu, softsign, hardsigmoid, hardtanh, mish,
logsigmoid, thresholded_relu, the shrinks, prelu): against finite differences away from their
kinks, and against PyTorch's autograd on every piece, kinks included."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.testing import gradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(0)

# name -> (mgegraph function, PyTorch function, the kinks finite differences stay clear of)
CASES = {
    "elu": (lambda x: F.elu(x, 0.7), lambda t: TF.elu(t, 0.7), [0.0]),
    "selu": (F.selu, TF.selu, [0.0]),
    "celu": (lambda x: F.celu(x, 1.3), lambda t: TF.celu(t, 1.3), [0.0]),
    "softsign": (F.softsign, TF.softsign, [0.0]),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid, [-3.0, 3.0]),
    "hardsigmoid onnx": (lambda x: F.hardsigmoid(x, 0.2, 0.5),
                         lambda t: torch.clamp(0.2 * t + 0.5, 0, 1), [-2.5, 2.5]),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 1.5), lambda t: TF.hardtanh(t, -0.5, 1.5),
                 [-0.5, 1.5]),
    "mish": (F.mish, TF.mish, []),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid, []),
    "thresholded_relu": (lambda x: F.thresholded_relu(x, 0.4),
                         lambda t: TF.threshold(t, 0.4, 0.0), [0.4]),
    "softshrink": (lambda x: F.softshrink(x, 0.6), lambda t: TF.softshrink(t, 0.6),
                   [-0.6, 0.6]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.6), lambda t: TF.hardshrink(t, 0.6),
                   [-0.6, 0.6]),
}


def away_from(kinks, shape, low=-4.0, high=4.0):
    x = RNG.uniform(low, high, shape)
    for k in kinks:
        x = np.where(np.abs(x - k) < 0.05, k + 0.3, x)
    return x


@pytest.mark.parametrize("name", CASES)
def test_matches_finite_differences(name):
    fn, _, kinks = CASES[name]
    gradcheck(fn, away_from(kinks, (4, 7)))


def mg_grads(fn, arrays, weights):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    loss = F.sum(fn(*xs) * g.const(weights))
    return mg.compile(mg.grad(loss, xs)).run({f"x{i}": a for i, a in enumerate(arrays)})


def torch_grads(fn, arrays, weights):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    (fn(*ts) * torch.from_numpy(weights)).sum().backward()
    return [t.grad.numpy() for t in ts]


# Where the reference's rule at a kink is not the op's: hardtanh is clip, whose gradient at a
# bound passes g (PyTorch's clamp), where PyTorch's hardtanh gives 0; clamp, the reference of
# ONNX's hardsigmoid, passes g at 0 and 1, where hardsigmoid gives 0 (PyTorch's hardsigmoid)
OTHER_RULE_AT_KINKS = {"hardtanh", "hardsigmoid onnx"}
# PyTorch's float64 gradients of these compute a constant in float32 (1 / alpha, 1 / 6)
FLOAT32_CONSTANTS = {"celu", "hardsigmoid"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CASES)
def test_matches_torch_kinks_included(name, dtype):
    fn, reference, kinks = CASES[name]
    kinks = [] if name in OTHER_RULE_AT_KINKS else kinks
    x = np.concatenate([RNG.uniform(-5, 5, 50), kinks, [-1e-3, 1e-3, 6.0, -6.0]]).astype(dtype)
    weights = RNG.standard_normal(x.shape).astype(dtype)
    (got,) = mg_grads(fn, [x], weights)
    (want,) = torch_grads(reference, [x], weights)
    tol = 1e-5 if dtype == np.float32 or name in FLOAT32_CONSTANTS else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_prelu_gradients_for_both_inputs_with_a_per_channel_slope():
    x = away_from([0.0], (2, 3, 4, 5))
    w = RNG.uniform(-0.5, 0.5, (3, 1, 1))
    gradcheck(F.prelu, x, w)
    weights = RNG.standard_normal(x.shape)
    got = mg_grads(F.prelu, [x, w], weights)
    want = torch_grads(lambda a, b: TF.prelu(a, b.reshape(3)), [x, w], weights)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert got[1].shape == (3, 1, 1)


def test_prelu_gradient_of_one_shared_slope():
    x = away_from([0.0], (6, 5))
    gradcheck(F.prelu, x, np.array([0.25]))
