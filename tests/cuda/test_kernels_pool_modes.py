"""csrc_cuda/pool.cu with dilation, ceil_mode and padding that differs at the two ends: the
host emulation (host_emu.h) of every pooling op against the CPU kernels, bitwise; (marker
cuda) the same on a device."""
import numpy as np
import pytest
from kernel_checks import cpu_result, emulate, node_of, run_on_device

from mgegraph.cuda.kernels import pool as family

FLOATS = (np.float32, np.float64)
WINDOWS = [  # (input shape, attributes)
    ((2, 3, 7, 8), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1),
                    "ceil_mode": True}),
    ((1, 2, 8, 7), {"kernel_size": (2, 2), "stride": (2, 2), "ceil_mode": True}),
    ((1, 2, 7, 8), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0),
                    "padding_end": (2, 1)}),
    ((1, 2, 9, 11), {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1),
                     "dilation": (2, 2)}),
    ((2, 2, 10, 9), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (2, 1),
                     "padding_end": (0, 1), "dilation": (2, 3), "ceil_mode": True}),
]


def _x(dtype, shape, seed=0, ties=True):
    rng = np.random.default_rng(seed)
    if ties:
        x = rng.integers(0, 3, shape).astype(dtype)
        x.flat[5] = np.nan
        return x
    return rng.standard_normal(shape).astype(dtype)


def _same(node, arrays):
    got = emulate(family, node, arrays, fibers=False)
    for g, w in zip(got, cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,attrs", WINDOWS)
def test_max_pool_and_gradients_are_bitwise(dtype, shape, attrs):
    x = _x(dtype, shape)
    fwd = node_of("max_pool2d", [x], **attrs)
    _same(fwd, [x])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1, ties=False)
    _same(node_of("max_pool2d_backward", [x, dy], **attrs), [x, dy])
    h = _x(dtype, shape, seed=2, ties=False)
    _same(node_of("max_pool2d_select", [x, h], **attrs), [x, h])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,attrs", WINDOWS)
@pytest.mark.parametrize("mode", ("average", "average_count_exclude_padding"))
def test_avg_pool_and_gradient_are_bitwise(dtype, shape, attrs, mode):
    x = _x(dtype, shape, ties=False)
    fwd = node_of("avg_pool2d", [x], mode=mode, **attrs)
    _same(fwd, [x])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1, ties=False)
    _same(node_of("avg_pool2d_backward", [dy], mode=mode, input_hw=shape[2:], **attrs), [dy])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,attrs", WINDOWS)
def test_pool_modes_on_device(dtype, shape, attrs):
    x = _x(dtype, (8, 16) + shape[2:])
    for node, arrays in _device_nodes(x, attrs):
        got = run_on_device(node, arrays)[0]
        np.testing.assert_array_equal(got, cpu_result(node, arrays)[0])


def _device_nodes(x, attrs):
    fwd = node_of("max_pool2d", [x], **attrs)
    dy = _x(x.dtype, fwd.outputs[0].shape, seed=1, ties=False)
    yield fwd, [x]
    yield node_of("max_pool2d_backward", [x, dy], **attrs), [x, dy]
    for mode in ("average", "average_count_exclude_padding"):
        yield node_of("avg_pool2d", [x], mode=mode, **attrs), [x]
        yield node_of("avg_pool2d_backward", [dy], mode=mode, input_hw=x.shape[2:],
                      **attrs), [dy]
