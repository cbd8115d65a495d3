"""resize's gradient (resize_backward, the scatter of each output's gradient onto its taps)
against finite differences (float64) and PyTorch's autograd, and resize_backward's own rule."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(3)


def rand(*shape):
    return RNG.standard_normal(shape)


@pytest.mark.parametrize(("mode", "align"), [("nearest", None), ("bilinear", False),
                                             ("bilinear", True), ("bicubic", False),
                                             ("bicubic", True)])
@pytest.mark.parametrize("size", [(7, 9), (2, 3), (1, 5)])   # up, down (taps shared), one row
def test_interpolate_grad(mode, align, size):
    gradcheck(lambda v: F.vision.interpolate(v, size=size, mode=mode, align_corners=align),
              rand(2, 2, 4, 5))


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners",
                                   "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize(("mode", "exclude"), [("linear", False), ("cubic", True),
                                               ("cubic", False), ("nearest", False)])
def test_resize_grad_over_one_and_three_axes(coord, mode, exclude):
    attrs = {"mode": mode, "coord": coord, "exclude_outside": exclude,
             "nearest_mode": "round_prefer_ceil"}
    gradcheck(lambda v: apply("resize", (v,), size=(8,), **attrs), rand(3, 5))
    gradcheck(lambda v: apply("resize", (v,), size=(2, 6, 2), scale=(0.7, 1.6, 1.0), **attrs),
              rand(1, 3, 4, 2))


@pytest.mark.parametrize(("mode", "align"), [("bilinear", False), ("bicubic", True),
                                             ("nearest", None), ("trilinear", False)])
def test_interpolate_grad_matches_torch(mode, align):
    torch = pytest.importorskip("torch")
    shape = (2, 3, 3, 4, 5) if mode == "trilinear" else (2, 3, 6, 5)
    size = (5, 7, 2) if mode == "trilinear" else (11, 3)
    x, dy = rand(*shape), rand(*shape[:2], *size)
    g = mg.Graph()
    v = g.input("x", x.shape, "float64")
    y = F.vision.interpolate(v, size=size, mode=mode, align_corners=align)
    (dx,) = mg.compile(mg.grad(F.sum(y * g.const(dy)), [v])).run({"x": x})
    t = torch.from_numpy(x).requires_grad_()
    torch.nn.functional.interpolate(t, size=size, mode=mode, align_corners=align).backward(
        torch.from_numpy(dy))
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_resize_backward_grad_is_resize():
    attrs = {"size": (6, 7), "mode": "cubic", "input_size": (4, 3)}
    gradcheck(lambda d: apply("resize_backward", (d,), **attrs), rand(1, 2, 6, 7))
    g = mg.Graph()
    out = apply("resize_backward", (g.input("d", (1, 2, 6, 7), "float64"),), **attrs)
    assert [n.op.name for n in g.nodes] == ["input", "resize_backward"]
    (dd,) = mg.grad(F.sum(out), [out.node.inputs[0]])
    assert dd.node.op.name == "resize"


def test_resize_hessian_vector_product():
    def hvp(x, v):
        (dx,) = mg.grad(F.sum(F.tanh(F.vision.interpolate(x, size=(5, 3),
                                                          mode="bicubic")) ** 2), [x])
        return F.sum(dx * v)
    gradcheck(hvp, rand(1, 2, 3, 4), rand(1, 2, 3, 4), rtol=1e-5, atol=1e-6)


def test_eager_grad_through_upsampling():
    x = mg.Tensor(rand(1, 1, 2, 2).astype(np.float32))
    gm = mg.GradManager().attach([x])
    with gm:
        y = F.vision.interpolate(x, scale_factor=2, mode="nearest")
        gm.backward(F.sum(y))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((1, 1, 2, 2), 4, np.float32))
