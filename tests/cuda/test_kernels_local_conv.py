"""csrc_cuda/local_conv.cu and mgegraph/cuda/kernels/local_conv.py: NVRTC compiles, no shared
memory or atomics, and the plain host emulation (host_emu.h) of local_conv2d,
region_restricted_conv and their backward ops against the CPU kernels, bitwise; (marker cuda)
a training step on a device."""
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
from mgegraph.cuda.kernels import local_conv as family

FLOATS = (np.float32, np.float64)
WINDOWS = [  # (x shape, kernel, groups, out channels, stride, padding, dilation)
    ((2, 4, 6, 5), (3, 3), 2, 6, (1, 1), (1, 1), (1, 1)),
    ((1, 3, 7, 6), (2, 3), 3, 3, (2, 1), (0, 2), (2, 1)),
    ((1, 1, 3, 3), (1, 1), 1, 2, (1, 1), (0, 0), (1, 1)),
    ((1, 2, 4, 3), (2, 2), 1, 70, (1, 1), (1, 0), (1, 1)),  # the CPU's blocks of 32 outputs
    ((1, 70, 4, 3), (2, 2), 1, 2, (1, 1), (1, 0), (1, 1)),  # and of 32 inputs (dx)
]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("local_conv.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_no_shared_memory_or_atomics(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    assert ".shared" not in ptx and "atom." not in ptx and "bar.sync" not in ptx


def _same(node, arrays):
    for g, w in zip(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


def _cells(shape, kernel, stride, padding, dilation):
    return tuple((shape[2 + a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1)
                 // stride[a] + 1 for a in range(2))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "kernel", "groups", "oc", "stride", "padding", "dilation"),
                         WINDOWS)
@pytest.mark.parametrize("op", ["local_conv2d", "region_restricted_conv"])
def test_forward_and_gradient_are_bitwise(op, dtype, shape, kernel, groups, oc, stride, padding,
                                          dilation):
    arrays, attrs = _inputs(op, dtype, shape, kernel, groups, oc, stride, padding, dilation)
    fwd = node_of(op, arrays, **attrs)
    _same(fwd, arrays)
    dy = np.random.default_rng(1).standard_normal(fwd.outputs[0].shape).astype(dtype)
    _same(node_of(f"{op}_backward", [*arrays, dy], **attrs), [*arrays, dy])


def _inputs(op, dtype, shape, kernel, groups, oc, stride, padding, dilation):
    rng = np.random.default_rng(0)
    oh, ow = _cells(shape, kernel, stride, padding, dilation)
    icg, ocg = shape[1] // groups, oc // groups
    x = rng.standard_normal(shape).astype(dtype)
    if op == "local_conv2d":
        arrays = [x, rng.standard_normal((groups, oh, ow, icg, *kernel, ocg)).astype(dtype)]
    else:
        arrays = [x, rng.standard_normal((groups, ocg, icg, *kernel)).astype(dtype),
                  rng.integers(0, 2, (shape[0], *shape[2:])).astype(np.int32),
                  rng.integers(0, 2, (shape[0], oh, ow)).astype(np.int32)]
    return arrays, {"stride": stride, "padding": padding, "dilation": dilation}


def test_steps():
    x = np.zeros((2, 4, 8, 8), np.float32)
    w = np.zeros((2, 3, 2, 3, 3), np.float32)  # 2 groups of 3 outputs, shared weights
    ids = [np.zeros((2, 8, 8), np.int32), np.zeros((2, 6, 6), np.int32)]
    _, _, (s,) = cuda_launch(family, node_of("region_restricted_conv", [x, w, *ids]))
    assert s.entry == "mg_local_conv_forward_f32" and s.grid == (2, 1, 1)  # 432 outputs
    dy = np.zeros((2, 6, 6, 6), np.float32)
    _, _, (data, weight) = cuda_launch(family, node_of("region_restricted_conv_backward",
                                                       [x, w, *ids, dy]))
    assert data.entry == "mg_local_conv_data_f32" and data.grid == (2, 1, 1)  # 512 of dx
    assert weight.entry == "mg_local_conv_weight_f32" and weight.grid == (1, 1, 1)  # 108 of dw


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-local-conv-plan", lambda: CudaBackend(device=None))
    yield "cuda-local-conv-plan"
    unregister_backend("cuda-local-conv-plan")


@pytest.mark.nvrtc
def test_a_training_step_plan_emulated_like_cpu(planner):
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 4, 6, 5)).astype(np.float32),
             "wl": rng.standard_normal((2, 6, 5, 2, 3, 3, 3)).astype(np.float32),
             "wr": rng.standard_normal((4, 1, 1, 3, 3)).astype(np.float32),
             "rin": rng.integers(0, 3, (2, 6, 5)).astype(np.int32),
             "rout": rng.integers(0, 3, (2, 6, 5)).astype(np.int32)}
    g = mg.Graph()
    x, wl, wr, rin, rout = (g.input(k, v.shape, v.dtype) for k, v in feeds.items())
    y = F.local_conv2d(x, wl, padding=1) + F.region_restricted_conv(x, wr, rin, rout, padding=1,
                                                                   groups=4).sum(1, keepdims=True)
    loss = F.sum(y * y)
    outputs = [loss, *mg.grad(loss, [x, wl, wr])]
    cpu = mg.compile(outputs, optimize=0).run(feeds)
    plan = mg.compile(outputs, device=planner, optimize=0)
    kernels = {ins.kernel.rsplit("_", 1)[0] for ins in plan.instructions}
    assert {"local_conv2d", "local_conv2d_backward", "region_restricted_conv",
            "region_restricted_conv_backward"} <= kernels
    for got, want in zip(run_plan_emulated(plan, mg.backend.get_backend(planner), feeds), cpu):
        assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["local_conv2d", "region_restricted_conv"])
def test_ops_on_device(op, dtype):
    arrays, attrs = _inputs(op, dtype, (4, 8, 17, 15), (3, 3), 2, 8, (1, 1), (1, 1), (1, 1))
    close = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    # hand-written modules compile with FMA contraction on: close to the CPU's, not bitwise
    fwd = node_of(op, arrays, **attrs)
    np.testing.assert_allclose(run_on_device(fwd, arrays)[0], cpu_result(fwd, arrays)[0], **close)
    dy = np.random.default_rng(3).standard_normal(fwd.outputs[0].shape).astype(dtype)
    back = node_of(f"{op}_backward", [*arrays, dy], **attrs)
    for g, w in zip(run_on_device(back, [*arrays, dy]), cpu_result(back, [*arrays, dy])):
        np.testing.assert_allclose(g, w, **close)
