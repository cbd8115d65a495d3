"""csrc_cuda/deform.cu and mgegraph/cuda/kernels/deform.py: NVRTC compiles, no shared memory or
atomics, and the plain host emulation (host_emu.h) of deform_im2col, correlation and their
backward ops against the CPU kernels, bitwise; (marker cuda) the ops on a device."""
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
from mgegraph.cuda.kernels import deform as family

FLOATS = (np.float32, np.float64)
IM2COL = [  # (x shape, kernel, deformable groups, stride, padding, dilation)
    ((2, 4, 6, 5), (3, 3), 2, (1, 1), (1, 1), (1, 1)),
    ((1, 3, 7, 6), (2, 3), 3, (2, 1), (0, 2), (2, 1)),
    ((1, 1, 3, 3), (1, 1), 1, (1, 1), (0, 0), (1, 1)),
]
CORRELATIONS = [  # kernel_size, max_displacement, stride1, stride2, pad_size, is_multiply
    (1, 1, 1, 1, 0, True), (3, 2, 1, 2, 2, False), (3, 1, 2, 1, 1, True),
]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("deform.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_no_shared_memory_or_atomics(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    assert ".shared" not in ptx and "atom." not in ptx and "bar.sync" not in ptx


def _rand(dtype, shape, seed, low=None, high=None):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return values.astype(dtype)


def _same(node, arrays):
    for g, w in zip(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


def _im2col_inputs(dtype, shape, kernel, dg, stride, padding, dilation):
    n, _, h, w = shape
    oh = (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    taps = kernel[0] * kernel[1]
    return [_rand(dtype, shape, 0), _rand(dtype, (n, 2 * dg * taps, oh, ow), 1, -3, 3),
            _rand(dtype, (n, dg * taps, oh, ow), 2, 0, 1)]


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "kernel", "dg", "stride", "padding", "dilation"), IM2COL)
def test_deform_im2col_and_its_gradient_are_bitwise(dtype, shape, kernel, dg, stride, padding,
                                                    dilation):
    arrays = _im2col_inputs(dtype, shape, kernel, dg, stride, padding, dilation)
    attrs = {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    fwd = node_of("deform_im2col", arrays, **attrs)
    _same(fwd, arrays)
    dcols = _rand(dtype, fwd.outputs[0].shape, 3)
    _same(node_of("deform_im2col_backward", [*arrays, dcols], **attrs), [*arrays, dcols])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("params", CORRELATIONS)
def test_correlation_and_its_gradient_are_bitwise(dtype, params):
    names = ("kernel_size", "max_displacement", "stride1", "stride2", "pad_size", "is_multiply")
    attrs = dict(zip(names, params))
    arrays = [_rand(dtype, (2, 3, 7, 6), 0), _rand(dtype, (2, 3, 7, 6), 1)]
    fwd = node_of("correlation", arrays, **attrs)
    _same(fwd, arrays)
    dy = _rand(dtype, fwd.outputs[0].shape, 2)
    _same(node_of("correlation_backward", [*arrays, dy], **attrs), [*arrays, dy])


def test_steps():
    arrays = _im2col_inputs(np.float32, (2, 8, 16, 16), (3, 3), 2, (1, 1), (1, 1), (1, 1))
    _, _, (s,) = cuda_launch(family, node_of("deform_im2col", arrays, kernel_size=(3, 3),
                                             padding=(1, 1)))
    assert s.entry == "mg_deform_im2col_f32" and s.grid == (2 * 8 * 9 * 256 // 256, 1, 1)
    dcols = np.zeros((2, 72, 16, 16), np.float32)
    _, _, (data, points) = cuda_launch(family, node_of("deform_im2col_backward",
                                                       [*arrays, dcols], kernel_size=(3, 3),
                                                       padding=(1, 1)))
    assert data.entry == "mg_deform_im2col_backward_f32_data" and data.grid == (1, 1, 1)
    assert points.entry == "mg_deform_im2col_backward_f32_points"
    assert points.grid == (2 * 2 * 9 * 256 // 256, 1, 1)


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-deform-plan", lambda: CudaBackend(device=None))
    yield "cuda-deform-plan"
    unregister_backend("cuda-deform-plan")


def _training_step():
    """A deformable convolution and two correlations, and every input's gradient."""
    arrays = _im2col_inputs(np.float32, (2, 4, 6, 5), (3, 3), 2, (1, 1), (1, 1), (1, 1))
    feeds = {"x": arrays[0], "w": _rand(np.float32, (6, 2, 3, 3), 4), "o": arrays[1],
             "m": arrays[2], "a": _rand(np.float32, (2, 3, 7, 6), 5),
             "b": _rand(np.float32, (2, 3, 7, 6), 6)}
    g = mg.Graph()
    x, w, o, m, a, b = (g.input(k, v.shape, v.dtype) for k, v in feeds.items())
    y = F.vision.deformable_conv2d(x, w, o, m, padding=1, groups=2)
    loss = F.sum(y * y) + F.sum(F.vision.correlation(a, b, 3, 2, 1, 1, 2) ** 2) \
        + F.sum(F.vision.correlation(a, b, 1, 2, 2, 2, 2, False) ** 2)
    return [loss, *mg.grad(loss, [x, w, o, m, a, b])], feeds


@pytest.mark.nvrtc
def test_a_training_step_plan_emulated_like_cpu(planner):
    outputs, feeds = _training_step()
    cpu = mg.compile(outputs, optimize=0).run(feeds)
    plan = mg.compile(outputs, device=planner, optimize=0)  # no fold: it runs on the device
    kernels = {ins.kernel.rsplit("_", 1)[0] for ins in plan.instructions}
    assert {"deform_im2col", "deform_im2col_backward", "correlation",
            "correlation_backward"} <= kernels
    for got, want in zip(run_plan_emulated(plan, mg.backend.get_backend(planner), feeds), cpu):
        assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_deform_ops_on_device(dtype):
    arrays = _im2col_inputs(dtype, (4, 16, 20, 18), (3, 3), 2, (1, 1), (1, 1), (1, 1))
    attrs = {"kernel_size": (3, 3), "padding": (1, 1)}
    close = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    # hand-written modules compile with FMA contraction on: close to the CPU's, not bitwise
    fwd = node_of("deform_im2col", arrays, **attrs)
    np.testing.assert_allclose(run_on_device(fwd, arrays)[0], cpu_result(fwd, arrays)[0], **close)
    dcols = _rand(dtype, fwd.outputs[0].shape, 3)
    back = node_of("deform_im2col_backward", [*arrays, dcols], **attrs)
    for g, w in zip(run_on_device(back, [*arrays, dcols]), cpu_result(back, [*arrays, dcols])):
        np.testing.assert_allclose(g, w, **close)
    data = [_rand(dtype, (2, 8, 24, 20), 4), _rand(dtype, (2, 8, 24, 20), 5)]
    corr = node_of("correlation", data, kernel_size=3, max_displacement=4, stride2=2,
                   pad_size=4)
    np.testing.assert_allclose(run_on_device(corr, data)[0], cpu_result(corr, data)[0],
                               rtol=1e-5, atol=1e-6)
    dy = _rand(dtype, corr.outputs[0].shape, 6)
    back = node_of("correlation_backward", [*data, dy], kernel_size=3, max_displacement=4,
                   stride2=2, pad_size=4)
    for g, w in zip(run_on_device(back, [*data, dy]), cpu_result(back, [*data, dy])):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
