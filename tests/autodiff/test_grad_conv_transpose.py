"""Gradients of the transposed convolutions, conv1d and conv3d (compositions over conv2d's data
gradient, whose rule gives dx = conv2d(dy, w) and dw = conv2d_backward_filter with the roles of
input and gradient swapped) against finite differences and PyTorch."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.conv_api import transposed
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)

CASES = [
    # x shape, weight shape, stride, padding, output_padding, dilation, groups
    ((1, 2, 3, 4), (2, 3, 3, 3), 2, 1, 1, 1, 1),
    ((2, 4, 3, 3), (4, 1, 2, 3), (1, 2), (0, 1), (0, 1), (2, 1), 2),   # groups, dilation
    ((1, 3, 3, 2), (3, 1, 3, 3), 3, 2, 2, 1, 3),                       # depthwise, stride 3
    ((1, 2, 3, 3), (2, 2, 3, 3), 1, 1, 1, 2, 1),                       # output_padding >= stride
]


def _args(stride, padding, output_padding, dilation, groups):
    return {"stride": stride, "padding": padding, "output_padding": output_padding,
            "dilation": dilation, "groups": groups}


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation,groups", CASES)
def test_conv_transpose2d_grad(xs, ws, stride, padding, output_padding, dilation, groups):
    args = _args(stride, padding, output_padding, dilation, groups)
    x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
    b = RNG.standard_normal(ws[1] * groups)
    gradcheck(lambda v, k, c: F.conv_transpose2d(v, k, c, **args), x, w, b)


def test_asymmetric_padding_grad():
    x, w = RNG.standard_normal((1, 2, 3, 3)), RNG.standard_normal((2, 2, 3, 3))
    gradcheck(lambda v, k: transposed(v, k, None, (2, 2), ((0, 2), (1, 0)), (6, 9), (1, 1), 1),
              x, w)


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation,groups", CASES)
def test_conv_transpose2d_grad_matches_torch(xs, ws, stride, padding, output_padding, dilation,
                                             groups):
    torch = pytest.importorskip("torch")
    args = _args(stride, padding, output_padding, dilation, groups)
    x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
    b = RNG.standard_normal(ws[1] * groups)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv_transpose2d(tx, tw, tb, **args)
    dy = RNG.standard_normal(tuple(ty.shape))
    ty.backward(torch.from_numpy(dy))

    g = mg.Graph()
    vx, vw, vb = (g.input(n, a.shape, a.dtype) for n, a in (("x", x), ("w", w), ("b", b)))
    loss = F.sum(F.conv_transpose2d(vx, vw, vb, **args) * g.const(dy))
    grads = mg.compile(mg.grad(loss, [vx, vw, vb])).run({"x": x, "w": w, "b": b})
    for got, want in zip(grads, (tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-10)


def test_conv_transpose2d_grad_is_conv2d_and_filter_gradient():
    g = mg.Graph()
    x, w = g.input("x", (1, 4, 5, 5), "float64"), g.input("w", (4, 2, 3, 3), "float64")
    loss = F.sum(F.conv_transpose2d(x, w, stride=2, padding=1))
    before = len(g.nodes)
    mg.grad(loss, [x, w])
    ops = {n.op.name for n in g.nodes[before:]}
    assert {"conv2d", "conv2d_backward_filter"} <= ops


def test_conv1d_and_conv_transpose1d_grad():
    x, w, b = RNG.standard_normal((2, 4, 7)), RNG.standard_normal((4, 3, 3)), \
        RNG.standard_normal(6)
    gradcheck(lambda v, k, c: F.conv_transpose1d(v, k, c, stride=2, padding=1, output_padding=1,
                                                 groups=2), x, w, b)
    gradcheck(lambda v, k: F.conv1d(v, k, stride=2, padding=1, dilation=2), x,
              RNG.standard_normal((5, 4, 3)))


def test_conv3d_grad():
    x, w, b = RNG.standard_normal((1, 4, 4, 3, 4)), RNG.standard_normal((2, 2, 2, 2, 3)), \
        RNG.standard_normal(2)
    gradcheck(lambda v, k, c: F.conv3d(v, k, c, stride=(2, 1, 1), padding=1, groups=2), x, w, b)


def test_conv_transpose2d_second_order():
    # the data gradient's own rule, through the walker: grad of grad against finite differences
    x, w = RNG.standard_normal((1, 2, 3, 3)), RNG.standard_normal((2, 2, 2, 2))

    def fn(v, k):
        g = v.graph
        y = F.conv_transpose2d(v, k, stride=2)
        (dv,) = mg.grad(F.sum(y * y), [v])
        return dv * g.const(np.ones(v.shape))
    gradcheck(fn, x, w)
