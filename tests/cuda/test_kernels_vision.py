"""csrc_cuda/vision.cu and mgegraph/cuda/kernels/vision.py: NVRTC compiles, and, since these
kernels use no shared memory, barriers or atomics, the plain host emulation (host_emu.h) of every
op against the CPU kernels, bitwise; failures report the CPU's status codes; (marker cuda) the
ops on a device."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    assert_close,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
    run_plan_emulated,
)

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import unregister_backend
from mgegraph.cuda.backend import CudaBackend
from mgegraph.cuda.kernels import vision as family
from mgegraph.kernel_abi.status import CODES

FLOATS = (np.float32, np.float64)
RNG = np.random.default_rng(0)
GRID = [{"mode": m, "padding_mode": p, "align_corners": a}
        for m, p, a in (("bilinear", "zeros", False), ("nearest", "border", True),
                        ("bicubic", "reflection", False), ("bicubic", "reflection", True),
                        ("bilinear", "reflection", True), ("bicubic", "zeros", True))]
REMAP = [{"border_mode": b, "scalar": 0.5, "interp_mode": i}
         for b, i in (("replicate", "linear"), ("reflect", "linear"), ("reflect_101", "nearest"),
                      ("wrap", "linear"), ("constant", "linear"))]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("vision.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles_without_shared_memory_or_atomics(compiled):
    for result, log, _ in compiled.values():
        assert result == 0, log
    ptx = ptx_of(compiled["sm_90"][2])
    atomics = {line.split()[0] for line in ptx.splitlines() if "atom." in line}
    assert ".shared" not in ptx and "bar.sync" not in ptx
    assert atomics == {"atom.global.cas.b64"}  # the status word's (mg_fail), nothing else


def _same(node, arrays):
    got = emulate(family, node, arrays, fibers=False)
    for g, w in zip(got, cpu_result(node, arrays)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _points(dtype, shape, low, high):
    grid = RNG.uniform(low, high, shape).astype(dtype)
    grid[0, 0, 0] = (np.nan, 0.2)  # a point that is not finite
    return grid


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("attrs", GRID)
def test_grid_sample_and_gradients_are_bitwise(dtype, attrs):
    x = RNG.standard_normal((2, 3, 5, 6)).astype(dtype)
    grid = _points(dtype, (2, 4, 3, 2), -1.4, 1.4)
    dy = RNG.standard_normal((2, 3, 4, 3)).astype(dtype)
    _same(node_of("grid_sample", [x, grid], **attrs), [x, grid])
    _same(node_of("grid_sample_backward_data", [grid, dy], input_hw=(5, 6), **attrs), [grid, dy])
    _same(node_of("grid_sample_backward_grid", [x, grid, dy], **attrs), [x, grid, dy])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("attrs", REMAP)
def test_remap_and_gradients_are_bitwise(dtype, attrs):
    x = RNG.standard_normal((1, 2, 4, 5)).astype(dtype)
    xy = _points(dtype, (1, 3, 4, 2), -7, 11)
    dy = RNG.standard_normal((1, 2, 3, 4)).astype(dtype)
    _same(node_of("remap", [x, xy], **attrs), [x, xy])
    _same(node_of("remap_backward_data", [xy, dy], input_hw=(4, 5), **attrs), [xy, dy])
    _same(node_of("remap_backward_map", [x, xy, dy], **attrs), [x, xy, dy])


def _rois(dtype, k=5, n=2, size=9):
    corners = np.sort(RNG.uniform(-2, size + 2, (k, 2, 2)), axis=1)
    return np.column_stack([RNG.integers(0, n, k), corners[:, 0, 0], corners[:, 1, 0],
                            corners[:, 0, 1], corners[:, 1, 1]]).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op, attrs", [
    ("roi_align", {"mode": "average", "aligned": True, "spatial_scale": 0.7}),
    ("roi_align", {"mode": "max", "aligned": False, "sample_points": (3, 2)}),
    ("roi_align", {"mode": "average", "sample_points": (0, 0), "convention": "onnx"}),
    ("roi_align", {"mode": "max", "sample_points": (0, 0)}),
    ("roi_pooling", {"mode": "max", "scale": 0.8}),
    ("roi_pooling", {"mode": "average"}),
])
def test_region_pooling_and_gradient_are_bitwise(dtype, op, attrs):
    x = RNG.standard_normal((2, 3, 7, 8)).astype(dtype)
    rois = _rois(dtype)
    dy = RNG.standard_normal((5, 3, 2, 3)).astype(dtype)
    _same(node_of(op, [x, rois], output_shape=(2, 3), **attrs), [x, rois])
    _same(node_of(f"{op}_backward", [x, rois, dy], output_shape=(2, 3), **attrs), [x, rois, dy])
    if op == "roi_align":
        _same(node_of("roi_align_backward_rois", [x, rois, dy], output_shape=(2, 3), **attrs),
              [x, rois, dy])


@pytest.mark.parametrize("dtype", FLOATS)
def test_onnx_max_roi_align_is_bitwise(dtype):  # forward only: it has no gradient
    x, rois = RNG.standard_normal((2, 3, 7, 8)).astype(dtype), _rois(dtype)
    _same(node_of("roi_align", [x, rois], output_shape=(2, 3), mode="max", aligned=False,
                  convention="onnx"), [x, rois])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n, keep", [(1, 1), (23, 23), (40, 6)])
def test_nms_is_the_cpus(dtype, n, keep):
    xy = RNG.uniform(0, 20, (n, 2))
    boxes = np.column_stack([xy, xy + RNG.uniform(1, 10, (n, 2))]).astype(dtype)
    scores = RNG.uniform(size=n).astype(dtype)
    scores[n // 2] = scores[0]  # a tie
    _same(node_of("nms", [boxes, scores], iou_thresh=0.4, max_output=keep), [boxes, scores])


def test_failures_record_the_cpus_codes():
    x = np.zeros((2, 1, 4, 4), np.float32)
    rois = np.array([[0, 0, 0, 2, 2], [2, 0, 0, 2, 2]], np.float32)  # image 2 of 2
    _, word = emulate(family, node_of("roi_align", [x, rois], output_shape=(2, 2)), [x, rois],
                      fibers=False, status=True)
    assert word == (1 << 8) | CODES["INDEX_OUT_OF_RANGE"]
    boxes, scores = np.zeros((2, 4), np.float32), np.array([0.5, np.nan], np.float32)
    _, word = emulate(family, node_of("nms", [boxes, scores], iou_thresh=0.5, max_output=2),
                      [boxes, scores], fibers=False, status=True)
    assert word == (1 << 8) | CODES["BAD_VALUE"]


def test_steps():
    x, grid = np.zeros((4, 8, 32, 32), np.float32), np.zeros((4, 16, 16, 2), np.float32)
    _, _, (s,) = cuda_launch(family, node_of("grid_sample", [x, grid]))
    assert s.entry == "mg_sample_f32" and s.grid == (4 * 16 * 16 // 256, 1, 1)
    dy = np.zeros((4, 8, 16, 16), np.float32)
    _, _, (s,) = cuda_launch(family, node_of("grid_sample_backward_data", [grid, dy],
                                             input_hw=(32, 32)))
    assert s.grid == (1, 1, 1)  # a thread per plane of dx: 32 planes
    boxes, scores = np.zeros((9, 4), np.float64), np.zeros((9,), np.float64)
    launch, _, (s,) = cuda_launch(family, node_of("nms", [boxes, scores], iou_thresh=0.5,
                                                  max_output=3))
    assert s.entry == "mg_nms_f64" and (s.grid, s.block) == ((1, 1, 1), (1, 1, 1))
    assert launch.workspace == 9 * 17


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_vision_ops_on_device(dtype):
    x = RNG.standard_normal((4, 16, 24, 24)).astype(dtype)
    grid = RNG.uniform(-1.1, 1.1, (4, 12, 12, 2)).astype(dtype)
    rois = _rois(dtype, k=32, n=4, size=24)
    for node, arrays in ((node_of("grid_sample", [x, grid], mode="bicubic"), [x, grid]),
                         (node_of("roi_align", [x, rois], output_shape=(7, 7)), [x, rois])):
        np.testing.assert_allclose(run_on_device(node, arrays)[0], cpu_result(node, arrays)[0],
                                   rtol=1e-5, atol=1e-6)
    boxes = np.column_stack([grid[0, :, :, 0].ravel(), grid[0, :, :, 1].ravel()])
    boxes = np.column_stack([boxes, boxes + 0.3]).astype(dtype)
    scores = RNG.uniform(size=len(boxes)).astype(dtype)
    node = node_of("nms", [boxes, scores], iou_thresh=0.3, max_output=50)
    np.testing.assert_array_equal(run_on_device(node, [boxes, scores])[0],
                                  cpu_result(node, [boxes, scores])[0])


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-vision-plan", lambda: CudaBackend(device=None))
    yield "cuda-vision-plan"
    unregister_backend("cuda-vision-plan")


def test_a_detection_plan_emulated_is_the_cpus(planner):
    """grid_sample, roi_align and nms with the gradients of the sampled image and the boxes,
    planned by the CUDA backend (nms's workspace at its offset) and run by the host emulation
    at the planned offsets, against the CPU plan."""
    g = mg.Graph()
    x, grid = g.input("x", (2, 4, 9, 9), "float32"), g.input("grid", (2, 6, 6, 2), "float32")
    rois = g.input("rois", (5, 5), "float32")
    feat = F.relu(F.vision.grid_sample(x, grid, "bicubic", "border"))
    pooled = F.vision.roi_align(feat, rois, (2, 2), spatial_scale=0.5)
    scores = F.sum(pooled, axis=(1, 2, 3))
    keep = F.vision.nms(rois[:, 1:], scores, 0.3, max_output=4)
    loss = F.sum(pooled * pooled)
    outputs = [loss, keep, *mg.grad(loss, [x, grid, rois])]
    corners = np.sort(RNG.uniform(0, 12, (5, 2, 2)), axis=1)
    feeds = {"x": RNG.standard_normal((2, 4, 9, 9)).astype(np.float32),
             "grid": RNG.uniform(-1, 1, (2, 6, 6, 2)).astype(np.float32),
             "rois": np.column_stack([[0, 1, 1, 0, 1], corners[:, 0, 0], corners[:, 1, 0],
                                      corners[:, 0, 1], corners[:, 1, 1]]).astype(np.float32)}
    # unoptimised: this graph's gradient has constants, which folding evaluates on a device
    cpu = mg.compile(outputs, optimize=0).run(feeds)
    plan = mg.compile(outputs, device=planner, optimize=0)
    got = run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)
    for a, b in zip(got, cpu):
        assert_close(a, b, rtol=1e-5, atol=1e-6)
