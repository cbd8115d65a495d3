"""Gradient rules of the vision ops against finite differences (float64) and grid_sample's
against PyTorch's; the backward ops have no gradient of their own, which says so."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.ir.errors import GraphError
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape)


def points(*shape, low=-1.3, high=1.3):
    return RNG.uniform(low, high, shape)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("aligned", [False, True])
def test_grid_sample_grad(mode, padding, aligned):
    gradcheck(lambda x, g: F.vision.grid_sample(x, g, mode, padding, aligned),
              rand(2, 2, 4, 5), points(2, 3, 4, 2))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_grad_matches_pytorch(mode, padding):
    torch = pytest.importorskip("torch")
    x, grid, dy = rand(2, 3, 5, 6), points(2, 4, 3, 2), rand(2, 3, 4, 3)
    g = mg.Graph()
    xv, gv = g.input("x", x.shape, "float64"), g.input("g", grid.shape, "float64")
    loss = F.sum(F.vision.grid_sample(xv, gv, mode, padding) * g.const(dy))
    got = mg.compile(mg.grad(loss, [xv, gv])).run({"x": x, "g": grid})
    xt, gt = (torch.tensor(a, requires_grad=True) for a in (x, grid))
    (torch.nn.functional.grid_sample(xt, gt, mode=mode, padding_mode=padding,
                                     align_corners=False) * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(got[0], xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], gt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("border", ["replicate", "reflect", "reflect_101", "wrap", "constant"])
def test_remap_grad(border):
    gradcheck(lambda x, m: F.vision.remap(x, m, border, scalar=0.7),
              rand(1, 2, 4, 5), points(1, 3, 3, 2, low=-3, high=7))


def test_warp_perspective_grad_reaches_the_image_and_the_matrix():
    mat = np.eye(3) + RNG.uniform(-0.05, 0.05, (2, 3, 3))
    mat[:, :2, 2] = [[0.3, -0.6], [1.2, 0.4]]
    gradcheck(lambda x, m: F.vision.warp_perspective(x, m, (3, 4), border_mode="reflect"),
              rand(2, 2, 5, 5), mat)


@pytest.mark.parametrize("mode", ["average", "max"])
@pytest.mark.parametrize("aligned", [True, False])
def test_roi_align_grad(mode, aligned):
    rois = np.array([[0, 0.3, 0.6, 5.2, 4.1], [1, -1.5, 2.2, 3.3, 7.9], [1, 2.1, 1.4, 2.6, 1.9]])
    gradcheck(lambda x, r: F.vision.roi_align(x, r, (2, 3), mode, 0.9, (2, 2), aligned),
              rand(2, 3, 6, 7), rois, wrt=[0])


def test_roi_align_onnx_convention_grad():
    rois = np.array([[0, -0.8, 0.6, 5.2, 6.5], [1, 1.5, 2.2, 7.3, 7.9], [1, 2.1, 1.4, 2.6, 1.9]])
    gradcheck(lambda x, r: F.vision.roi_align(x, r, (2, 3), "average", 0.9, 0, False,
                                              convention="onnx"),
              rand(2, 3, 6, 7), rois, wrt=[0])


def test_onnx_max_roi_align_has_no_gradient():
    g = mg.Graph()
    x, r = g.input("x", (1, 1, 4, 4), "float64"), g.input("r", (1, 5), "float64")
    y = F.vision.roi_align(x, r, 2, "max", convention="onnx")
    with pytest.raises(mg.OpError, match="roi_align_backward.*max mode.*has no gradient"):
        mg.grad(F.sum(y), [x])


@pytest.mark.parametrize("mode", ["max", "average"])
def test_roi_pooling_grad(mode):
    rois = np.array([[0, 0.2, 0.6, 5.2, 4.1], [1, 1.5, 2.2, 3.3, 7.9], [0, 9, 9, 12, 12]])
    gradcheck(lambda x, r: F.vision.roi_pooling(x, r, (2, 3), mode), rand(2, 3, 6, 7), rois,
              wrt=[0])


def test_roi_pooling_boxes_get_a_zero_gradient():
    # rounded to pixels, the output is piecewise constant in the boxes: zero is exact there
    g = mg.Graph()
    x, r = g.input("x", (1, 1, 4, 4), "float64"), g.input("r", (1, 5), "float64")
    _, dr = mg.grad(F.sum(F.vision.roi_pooling(x, r, 2)), [x, r])
    assert dr.node.op.name == "fill"


def test_second_order_through_a_sampler_is_refused_by_name():
    g = mg.Graph()
    x, grid = g.input("x", (1, 1, 3, 3), "float64"), g.input("g", (1, 2, 2, 2), "float64")
    (dgrid,) = mg.grad(F.sum(F.vision.grid_sample(x, grid)), [grid])
    with pytest.raises(GraphError, match="grid_sample_backward_grid.*no gradient rule"):
        mg.grad(F.sum(dgrid), [x])


@pytest.mark.parametrize("mode", ["average", "max"])
@pytest.mark.parametrize("convention, aligned, samples", [
    ("megengine", True, (2, 2)), ("megengine", False, (1, 3)), ("megengine", True, 0),
    ("onnx", False, (2, 2)), ("onnx", True, (2, 1))])
def test_roi_align_grad_in_its_boxes(mode, convention, aligned, samples):
    if convention == "onnx" and mode == "max":
        pytest.skip("ONNX's max mode has no gradient")
    # a box reaching past the image, one inside, one thinner than a pixel (clamped sides)
    corners = np.array([[-0.8, 0.6, 5.2, 6.5], [1.5, 2.2, 4.3, 5.1], [2.1, 1.4, 2.6, 1.9]])

    def pooled(x, c):  # the batch indices fixed, the corners differentiated
        rois = F.concat([c.graph.const(np.array([[0.0], [1.0], [1.0]])), c], axis=1)
        return F.vision.roi_align(x, rois, (2, 3), mode, 0.9, samples, aligned,
                                  convention=convention)
    gradcheck(pooled, rand(2, 3, 6, 7), corners)


def test_eager_gradients_equal_the_graphs_bitwise():
    """A GradManager tape runs the same rules and kernels as mg.grad on a graph."""
    x, grid = rand(2, 3, 5, 6).astype(np.float32), points(2, 4, 4, 2).astype(np.float32)
    rois = np.array([[0, 0.5, 0.2, 4.1, 3.3], [1, 1.0, 1.5, 5.5, 4.0]], np.float32)

    def loss_of(xv, gv, rv):
        sampled = F.vision.grid_sample(xv, gv, "bicubic", "reflection")
        return F.sum(F.vision.roi_align(sampled, rv, 2, "max") ** 2)

    g = mg.Graph()
    vs = [g.input(n, a.shape, "float32") for n, a in (("x", x), ("g", grid), ("r", rois))]
    want = mg.compile(mg.grad(loss_of(*vs), vs)).run({"x": x, "g": grid, "r": rois})
    params = [nn.Parameter(a) for a in (x, grid, rois)]
    gm = mg.GradManager().attach(params)
    with gm:
        gm.backward(loss_of(*params))
    for p, w in zip(params, want):
        np.testing.assert_array_equal(p.grad.numpy(), w)
