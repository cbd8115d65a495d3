"""Gradients of max_pool2d and avg_pool2d with dilation, ceil_mode, padding that differs at the
two ends and count_include_pad: against finite differences (float64), against PyTorch, and
through the backward ops' own rules (second order)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(5)

# x shape, kernel, stride, padding (int, pair, or pairs of (begin, end)), dilation, ceil_mode
CASES = [
    ((1, 2, 5, 6), 3, 2, 1, 1, True),
    ((1, 1, 7, 7), 2, 2, 0, 1, True),                 # an overhanging last window
    ((2, 1, 6, 5), 3, 2, ((0, 2), (1, 0)), 1, False),  # asymmetric padding
    ((1, 2, 7, 8), (3, 2), (1, 2), (2, 1), (2, 3), True),  # dilated
    ((1, 1, 6, 6), 2, 1, ((1, 0), (0, 1)), 2, True),
]


def distinct(xs):
    # values far apart, so no finite-difference step changes a window's argmax
    return RNG.permutation(np.prod(xs)).reshape(xs) * 0.1


@pytest.mark.parametrize("xs,kernel,stride,padding,dilation,ceil", CASES)
def test_max_pool2d_grad(xs, kernel, stride, padding, dilation, ceil):
    gradcheck(lambda v: F.max_pool2d(v, kernel, stride, padding, dilation, ceil), distinct(xs))


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("xs,kernel,stride,padding,dilation,ceil", CASES)
def test_avg_pool2d_grad(xs, kernel, stride, padding, dilation, ceil, include):
    gradcheck(lambda v: F.avg_pool2d(v, kernel, stride, padding, ceil_mode=ceil,
                                     count_include_pad=include, dilation=dilation),
              RNG.standard_normal(xs))


@pytest.mark.parametrize("xs,kernel,stride,padding,dilation,ceil", CASES)
def test_backward_ops_second_order(xs, kernel, stride, padding, dilation, ceil):
    def hvp(x, v):
        y = F.max_pool2d(x, kernel, stride, padding, dilation, ceil)
        z = F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil, dilation=dilation,
                         count_include_pad=True)
        (dx,) = mg.grad(F.sum(F.tanh(y) ** 2) + F.sum(F.tanh(z) ** 2), [x])
        return F.sum(dx * v)
    gradcheck(hvp, distinct(xs), RNG.standard_normal(xs), rtol=1e-5, atol=1e-6)


def test_select_grad_with_modes():
    attrs = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 0), "padding_end": (0, 2),
             "dilation": (1, 2), "ceil_mode": True}
    x = distinct((1, 2, 6, 7))
    gradcheck(lambda v, h: apply("max_pool2d_select", (v, h), **attrs), x,
              RNG.standard_normal(x.shape), wrt=[1])


def _grads(fn, x):
    g = mg.Graph()
    v = g.input("x", x.shape, x.dtype)
    y = fn(v)
    w = RNG.standard_normal(y.shape)
    (dx,) = mg.compile(mg.grad(F.sum(y * g.const(w)), [v])).run({"x": x})
    return dx, w


TORCH_CASES = [(7, 3, 2, 1, 1, True), (8, 2, 2, 0, 1, True), (9, 3, 1, 1, 2, False),
               (10, 3, 3, 1, 2, True), (6, 2, 1, 1, 3, True)]


@pytest.mark.parametrize("size,k,s,p,d,ceil", TORCH_CASES)
def test_max_pool2d_grad_against_torch(size, k, s, p, d, ceil):
    torch = pytest.importorskip("torch")
    x = distinct((2, 2, size, size + 1))
    dx, w = _grads(lambda v: F.max_pool2d(v, k, s, p, d, ceil), x)
    t = torch.from_numpy(x).requires_grad_()
    torch.nn.functional.max_pool2d(t, k, s, p, d, ceil_mode=ceil).backward(torch.from_numpy(w))
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("size,k,s,p,d,ceil", TORCH_CASES)
def test_avg_pool2d_grad_against_torch(size, k, s, p, d, ceil, include):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 2, size + 1, size))
    dx, w = _grads(lambda v: F.avg_pool2d(v, k, s, p, ceil_mode=ceil,
                                          count_include_pad=include), x)
    t = torch.from_numpy(x).requires_grad_()
    torch.nn.functional.avg_pool2d(t, k, s, p, ceil_mode=ceil,
                                   count_include_pad=include).backward(torch.from_numpy(w))
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-12, atol=1e-12)
