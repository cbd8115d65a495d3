"""Gradient rules of deform_im2col (through deformable_conv2d) and correlation against finite
differences (float64): every input's gradient, odd sizes, points near and past the edges."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import GraphError
from mgegraph.ops.builder import apply
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def offsets(shape, spread):
    """Offsets whose points stay off the integer grid, where bilinear reads have kinks that a
    finite difference would straddle."""
    values = RNG.uniform(-spread, spread, shape)
    frac = values - np.floor(values)
    return np.where(np.abs(frac - 0.5) > 0.45, values + 0.2, values)


@pytest.mark.parametrize("n, c, hw, oc, k, groups, dg, stride, padding, dilation", [
    (1, 2, (5, 4), 3, (3, 3), 1, 1, (1, 1), (1, 1), (1, 1)),
    (2, 4, (6, 5), 4, (2, 3), 2, 2, (2, 1), (0, 1), (1, 2)),
    (1, 3, (4, 4), 2, (1, 1), 1, 3, (1, 1), (0, 0), (1, 1)),
])
def test_deformable_conv2d_grad(n, c, hw, oc, k, groups, dg, stride, padding, dilation):
    h, w = hw
    oh = (h + 2 * padding[0] - dilation[0] * (k[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (k[1] - 1) - 1) // stride[1] + 1
    taps = k[0] * k[1]
    arrays = (RNG.standard_normal((n, c, h, w)), RNG.standard_normal((oc, c // groups, *k)),
              offsets((n, 2 * dg * taps, oh, ow), 2.5), RNG.uniform(0, 1, (n, dg * taps, oh, ow)),
              RNG.standard_normal(oc))
    gradcheck(lambda *a: F.vision.deformable_conv2d(*a, stride=stride, padding=padding,
                                                    dilation=dilation, groups=groups), *arrays)


def test_points_past_the_edges_get_no_offset_gradient():
    """A point at or past -1 or the far side reads 0 whatever its offset: its offset and mask
    get 0, as torchvision's do."""
    x = RNG.standard_normal((1, 2, 4, 4))
    off = np.zeros((1, 2, 4, 4))
    off[0, 0] = -7.5  # every point above the image
    g = mg.Graph()
    xs = [g.input("x", x.shape, x.dtype), g.input("o", off.shape, off.dtype),
          g.input("m", (1, 1, 4, 4), x.dtype)]
    cols = apply("deform_im2col", tuple(xs), kernel_size=(1, 1))
    grads = mg.compile(mg.grad(F.sum(cols * cols + cols), xs)).run(
        {"x": x, "o": off, "m": np.ones((1, 1, 4, 4))})
    for grad in grads:
        np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("kernel_size, max_displacement, stride1, stride2, pad_size", [
    (1, 1, 1, 1, 0), (3, 2, 1, 2, 2), (3, 1, 2, 1, 1), (5, 2, 1, 1, 3),
])
@pytest.mark.parametrize("is_multiply", [True, False])
def test_correlation_grad(kernel_size, max_displacement, stride1, stride2, pad_size,
                          is_multiply):
    a = RNG.standard_normal((2, 3, 7, 6))
    # absolute differences: keep |a - b| away from 0, where the derivative jumps
    b = RNG.standard_normal((2, 3, 7, 6)) if is_multiply else a + RNG.choice([-1, 1], a.shape)
    gradcheck(lambda p, q: F.vision.correlation(p, q, kernel_size, max_displacement, stride1,
                                                stride2, pad_size, is_multiply), a, b)


def test_backward_ops_have_no_second_derivative():
    g = mg.Graph()
    x = g.input("x", (1, 1, 3, 3), "float64")
    y = F.vision.correlation(x, x * 2.0)
    (dx,) = mg.grad(F.sum(y * y), [x])
    with pytest.raises(GraphError, match="correlation_backward"):
        mg.grad(F.sum(dx), [x])
