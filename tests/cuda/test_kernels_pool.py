"""csrc_cuda/pool.cu and mgegraph/cuda/kernels/pool.py: NVRTC compiles, and, since these kernels
use no shared memory, barriers or atomics, the plain host emulation (host_emu.h) of every op
against the CPU kernels, bitwise; (marker cuda) the ops on a device."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
)

from mgegraph.cuda.kernels import pool as family

FLOATS = (np.float32, np.float64)
WINDOWS = [  # sliding-window attributes: tiling, overlapping, padded, strided and clamped
    {"kernel_size": (2, 2), "stride": (2, 2)},
    {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1)},
    {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
    {"kernel_size": (3, 3), "stride": (2, 2)},
]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("pool.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_no_shared_memory_or_atomics(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    assert ".shared" not in ptx and "atom." not in ptx and "bar.sync" not in ptx


def _x(dtype, shape=(2, 3, 7, 6), seed=0, ties=True):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if ties:
        x[0, 0, :2, :2] = 1.5  # a tie: the first maximum wins
        x[1, 2, 3, 3] = np.nan
    return x


def _same(node, arrays):
    got = emulate(family, node, arrays, fibers=False)
    for g, w in zip(got, cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("attrs", WINDOWS)
def test_max_pool_and_gradients_are_bitwise(dtype, attrs):
    x = _x(dtype)
    fwd = node_of("max_pool2d", [x], **attrs)
    _same(fwd, [x])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1, ties=False)
    _same(node_of("max_pool2d_backward", [x, dy], **attrs), [x, dy])
    h = _x(dtype, seed=2, ties=False)
    _same(node_of("max_pool2d_select", [x, h], **attrs), [x, h])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("attrs", WINDOWS)
@pytest.mark.parametrize("mode", ("average", "average_count_exclude_padding"))
def test_avg_pool_and_gradient_are_bitwise(dtype, attrs, mode):
    x = _x(dtype, ties=False)
    fwd = node_of("avg_pool2d", [x], mode=mode, **attrs)
    _same(fwd, [x])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1, ties=False)
    _same(node_of("avg_pool2d_backward", [dy], mode=mode, input_hw=x.shape[2:], **attrs), [dy])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("oshp", ((3, 4), (1, 1), (5, 2)))
def test_adaptive_pools_are_bitwise(dtype, oshp):
    x = _x(dtype)
    for op in ("adaptive_max_pool2d", "adaptive_avg_pool2d"):
        _same(node_of(op, [x], oshp=oshp), [x])
    dy = _x(dtype, x.shape[:2] + oshp, seed=1, ties=False)
    _same(node_of("adaptive_max_pool2d_backward", [x, dy], oshp=oshp), [x, dy])
    _same(node_of("adaptive_avg_pool2d_backward", [dy], oshp=oshp, input_hw=x.shape[2:]), [dy])
    _same(node_of("adaptive_max_pool2d_select", [x, x * 2], oshp=oshp), [x, x * 2])


def test_steps():
    x = np.zeros((4, 8, 32, 32), np.float32)
    attrs = WINDOWS[0]
    _, _, (s,) = cuda_launch(family, node_of("max_pool2d", [x], **attrs))
    assert s.entry == "mg_pool2d_f32" and s.grid == (4 * 8 * 16 * 16 // 256, 1, 1)
    dy = np.zeros((4, 8, 16, 16), np.float32)
    _, _, (s,) = cuda_launch(family, node_of("max_pool2d_backward", [x, dy], **attrs))
    assert s.grid == (4 * 8 * 32 * 32 // 256, 1, 1)  # a thread per input cell


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("attrs", WINDOWS)
def test_pools_on_device(dtype, attrs):
    x = _x(dtype, (16, 32, 28, 28))
    fwd = node_of("max_pool2d", [x], **attrs)
    np.testing.assert_array_equal(run_on_device(fwd, [x])[0], cpu_result(fwd, [x])[0])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1, ties=False)
    back = node_of("max_pool2d_backward", [x, dy], **attrs)
    np.testing.assert_array_equal(run_on_device(back, [x, dy])[0], cpu_result(back, [x, dy])[0])
    avg = node_of("avg_pool2d", [x], **attrs)
    np.testing.assert_array_equal(run_on_device(avg, [x])[0], cpu_result(avg, [x])[0])
