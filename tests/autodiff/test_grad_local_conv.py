"""Gradient rules of local_conv2d and region_restricted_conv (ops/local_conv.py) against finite
differences (float64) and PyTorch's autograd of unfold + einsum: the input's and the weight's
gradients, groups, strides, padding, dilation; the region ids get none."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)
CASES = [  # (n, c, oc, (h, w), (kh, kw), groups, stride, padding, dilation)
    (1, 2, 3, (5, 4), (3, 3), 1, (1, 1), (1, 1), (1, 1)),
    (2, 4, 2, (6, 5), (2, 3), 2, (2, 1), (0, 1), (1, 2)),
    (1, 3, 3, (4, 4), (1, 1), 3, (1, 1), (0, 0), (1, 1)),
]


def _cells(hw, k, stride, padding, dilation):
    return tuple((hw[a] + 2 * padding[a] - dilation[a] * (k[a] - 1) - 1) // stride[a] + 1
                 for a in range(2))


def local_arrays(n, c, oc, hw, k, groups, stride, padding, dilation):
    oh, ow = _cells(hw, k, stride, padding, dilation)
    return (RNG.standard_normal((n, c, *hw)),
            RNG.standard_normal((groups, oh, ow, c // groups, *k, oc // groups)))


def region_arrays(n, c, oc, hw, k, groups, stride, padding, dilation):
    oh, ow = _cells(hw, k, stride, padding, dilation)
    return (RNG.standard_normal((n, c, *hw)), RNG.standard_normal((groups, oc // groups,
                                                                    c // groups, *k)),
            RNG.integers(0, 2, (n, *hw)).astype(np.int32),
            RNG.integers(0, 2, (n, oh, ow)).astype(np.int32))


@pytest.mark.parametrize("case", CASES)
def test_local_conv2d_grad(case):
    *_, stride, padding, dilation = case
    gradcheck(lambda x, w: F.local_conv2d(x, w, stride=stride, padding=padding,
                                          dilation=dilation), *local_arrays(*case))


@pytest.mark.parametrize("case", CASES)
def test_region_restricted_conv_grad(case):
    _, _, _, _, _, groups, stride, padding, dilation = case
    gradcheck(lambda x, w, rin, rout: F.region_restricted_conv(
        x, w, rin, rout, stride=stride, padding=padding, dilation=dilation, groups=groups),
        *region_arrays(*case))


def test_megengine_example_gradients():
    """MegEngine's numbers: one region, a ones output gradient, so each input pixel's gradient
    is its filter tap and each tap's is its pixel."""
    src = mg.tensor(np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2))
    flt = mg.tensor(np.arange(8, dtype=np.float32).reshape(2, 1, 1, 2, 2))
    gm = mg.autodiff.GradManager().attach([src, flt])
    with gm:
        y = F.region_restricted_conv(src, flt, mg.tensor(np.ones((1, 2, 2), np.int32)),
                                     mg.tensor(np.ones((1, 1, 1), np.int32)), groups=2)
        gm.backward(y, mg.tensor(np.ones((1, 2, 1, 1), np.float32)))
    np.testing.assert_array_equal(src.grad.numpy().ravel(), np.arange(8))
    np.testing.assert_array_equal(flt.grad.numpy().ravel(), np.arange(8))


def _graph_grads(fn, arrays, dy):
    g = mg.Graph()
    xs = [g.input(f"a{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    y = fn(*xs)
    loss = F.sum(y * g.const(dy))
    return mg.compile(mg.grad(loss, xs[:2])).run({f"a{i}": a for i, a in enumerate(arrays)})


@pytest.mark.parametrize("case", CASES)
def test_against_pytorch_autograd(case):
    torch = pytest.importorskip("torch")
    n, c, oc, hw, k, groups, stride, padding, dilation = case
    attrs = {"stride": stride, "padding": padding, "dilation": dilation}
    x, wl = local_arrays(*case)
    _, wr, rin, rout = region_arrays(*case)
    oh, ow = _cells(hw, k, stride, padding, dilation)
    dy = RNG.standard_normal((n, oc, oh, ow))
    tx, twl, twr = (torch.tensor(a, requires_grad=True) for a in (x, wl, wr))
    cols = torch.nn.functional.unfold(tx, k, **attrs).reshape(n, groups, c // groups,
                                                              k[0] * k[1], oh * ow)
    ids = torch.nn.functional.unfold(torch.tensor(rin[:, None], dtype=torch.float64), k, **attrs)
    inside = torch.nn.functional.unfold(torch.ones(1, 1, *hw, dtype=torch.float64), k, **attrs)
    same = (ids == torch.tensor(rout, dtype=torch.float64).reshape(n, 1, -1)) & (inside > 0)
    local = torch.einsum("ngitl,glito->ngol", cols,
                         twl.reshape(groups, oh * ow, c // groups, k[0] * k[1], -1))
    region = torch.einsum("ngitl,ntl,goit->ngol", cols, same.double(),
                          twr.reshape(groups, -1, c // groups, k[0] * k[1]))
    t_dy = torch.tensor(dy).reshape(n, groups, -1, oh * ow)
    (local * t_dy).sum().backward()
    want_local = (tx.grad.numpy().copy(), twl.grad.numpy())
    tx.grad = None
    (region * t_dy).sum().backward()
    want_region = (tx.grad.numpy(), twr.grad.numpy())
    got_local = _graph_grads(lambda x, w: F.local_conv2d(x, w, **attrs), (x, wl), dy)
    got_region = _graph_grads(lambda x, w, a, b: F.region_restricted_conv(
        x, w, a, b, groups=groups, **attrs), (x, wr, rin, rout), dy)
    for got, want in zip((*got_local, *got_region), (*want_local, *want_region)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
