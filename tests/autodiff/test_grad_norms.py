"""Gradients of group, instance, local response, Lp and mean-variance normalisation against
central finite differences (float64) and against PyTorch's autograd (float32)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.functional.norms import lrn
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape, shift=0.0):
    return RNG.standard_normal(shape) + shift


@pytest.mark.parametrize("shape, groups", [((2, 4, 3, 2), 2), ((3, 6), 3), ((1, 3, 5), 1)])
def test_group_norm(shape, groups):
    c = shape[1]
    gradcheck(lambda a, w, b: F.nn.group_norm(a, groups, True, w, b, eps=1e-3),
              rand(*shape, shift=1.0), rand(c), rand(c))
    gradcheck(lambda a: F.nn.group_norm(a, groups, affine=False), rand(*shape))


def test_instance_norm():
    gradcheck(lambda a, w, b: F.nn.instance_norm(a, True, w, b, eps=1e-3),
              rand(2, 3, 4), rand(3), rand(3))


@pytest.mark.parametrize("size, before", [(3, 1), (2, 1), (4, 1), (1, 0)])
def test_lrn(size, before):
    gradcheck(lambda a: lrn(a, size, 0.3, 0.75, 1.0, before), rand(2, 5, 3))
    gradcheck(lambda a: F.nn.local_response_norm(a, 3, k=2.0, alpha=0.1, beta=0.6),
              rand(2, 4, 2, 2))


@pytest.mark.parametrize("ord, axis", [(2, 1), (1, None), (3, (0, 1)), (np.inf, 1)])
def test_normalize(ord, axis):
    # away from zero, where |x| and the max have no kink
    x = rand(3, 4)
    x += np.sign(x) * 0.5
    gradcheck(lambda a: F.normalize(a, ord=ord, axis=axis), x)


def test_mean_variance_normalization():
    gradcheck(lambda a: F.nn.mean_variance_normalization(a, (0, 2)), rand(3, 2, 4))


def _torch_grads(torch_fn, arrays, dy):
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    torch_fn(*ts).backward(torch.from_numpy(dy))
    return [t.grad.numpy() for t in ts]


def _eager_grads(fn, arrays, dy):
    ts = [mg.tensor(a) for a in arrays]
    with mg.GradManager().attach(ts) as gm:
        gm.backward(F.sum(fn(*ts) * mg.tensor(dy)))
    return [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("case", ["group_norm", "instance_norm", "lrn", "normalize"])
def test_gradients_match_torch(case):
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = (RNG.standard_normal((3, 6, 5, 4)) + 0.5).astype(np.float32)
    w, b = RNG.standard_normal((2, 6)).astype(np.float32)
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    ours, theirs, arrays = {
        "group_norm": (lambda a, c, d: F.nn.group_norm(a, 3, True, c, d),
                       lambda a, c, d: tf.group_norm(a, 3, c, d), (x, w, b)),
        "instance_norm": (lambda a, c, d: F.nn.instance_norm(a, True, c, d),
                          lambda a, c, d: tf.instance_norm(a, weight=c, bias=d), (x, w, b)),
        "lrn": (lambda a: lrn(a, 4, 0.2, 0.75, 1.0, 2),
                lambda a: tf.local_response_norm(a, 4, 0.2, 0.75, 1.0), (x,)),
        "normalize": (lambda a: F.normalize(a, 2, axis=1), lambda a: tf.normalize(a, 2.0, 1),
                      (x,)),
    }[case]
    for got, want in zip(_eager_grads(ours, arrays, dy), _torch_grads(theirs, arrays, dy)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_norm_second_order():
    # group_norm_backward's own gradients (grad of grad) w.r.t. x, the weight and dy
    def grad_then_loss(x, w, v):
        dx, dw = mg.grad(F.sum(F.square(F.nn.group_norm(x, 2, True, w) * x)), [x, w])
        return F.sum(dx * v) + F.sum(dw * dw)
    gradcheck(grad_then_loss, rand(2, 4, 3, shift=0.5), rand(4), rand(2, 4, 3))
