"""csrc_cuda/pool.cu's pooling of quantized int8 and uint8 values: NVRTC compiles it, and the plain
host emulation gives the CPU kernel's integers (_kernels/pool_int.pxi), bitwise, for every
window kind, both averages and the adaptive pools; (marker cuda) the same on a device."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, cuda_launch, emulate, nvrtc_compile, run_on_device

import mgegraph as mg
from mgegraph.cuda.kernels import pool as family
from mgegraph.ir.quant import per_tensor

STORAGE = {np.int8: -9, np.uint8: 140}  # the storage dtypes and a zero point each
WINDOWS = [  # tiling, overlapping and padded, strided and clamped, dilated, ceil mode
    {"kernel_size": (2, 2), "stride": (2, 2)},
    {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1)},
    {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
    {"kernel_size": (3, 3), "stride": (2, 3), "padding": (0, 1), "dilation": (2, 1)},
    {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "ceil_mode": True},
]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("pool.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles(compiled):
    assert set(compiled) == set(ARCHS)


def _q(dtype, shape=(2, 3, 9, 7), seed=0):
    info = np.iinfo(dtype)
    q = np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)
    q.reshape(-1)[:2] = [info.min, info.max]
    return q


def _node(op, q, **attrs):
    g = mg.Graph()
    x = g.input("q", q.shape, q.dtype, per_tensor(0.05, STORAGE[q.dtype.type]))
    return g.add_node(op, [x], attrs)


def _same(node, q):
    np.testing.assert_array_equal(emulate(family, node, [q], fibers=False)[0],
                                  cpu_result(node, [q])[0])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("attrs", WINDOWS)
def test_sliding_pools_are_the_cpus(dtype, attrs):
    q = _q(dtype)
    _same(_node("max_pool2d", q, **attrs), q)
    for mode in ("average", "average_count_exclude_padding"):
        _same(_node("avg_pool2d", q, mode=mode, **attrs), q)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("oshp", ((1, 1), (4, 3), (9, 2)))
def test_adaptive_pools_are_the_cpus(dtype, oshp):
    q = _q(dtype, seed=1)
    for op in ("adaptive_max_pool2d", "adaptive_avg_pool2d"):
        _same(_node(op, q, oshp=oshp), q)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", STORAGE)
def test_a_max_of_plain_integers_is_the_cpus(dtype):
    q = _q(dtype, seed=3)
    g = mg.Graph()
    node = g.add_node("max_pool2d", [g.input("q", q.shape, q.dtype)], WINDOWS[4])
    _same(node, q)


@pytest.mark.nvrtc
def test_ties_round_to_even():
    q = np.array([[[[0, 1, 1, 2, 0, -1, -1, -2, 2, 3]]]], np.int8)
    node = _node("avg_pool2d", q, kernel_size=(1, 2), stride=(1, 2))
    np.testing.assert_array_equal(emulate(family, node, [q], fibers=False)[0].reshape(-1),
                                  [0, 2, 0, -2, 2])


def test_the_launch_carries_the_zero_point():
    q = np.zeros((1, 2, 4, 4), np.uint8)
    launch, _, (step,) = cuda_launch(family, _node("avg_pool2d", q, kernel_size=(2, 2),
                                                   stride=(2, 2)))
    assert launch.floats == (140.0,) and step.entry == "mg_pool2d_u8"


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", STORAGE)
def test_quantized_pools_on_device(dtype):
    q = _q(dtype, (8, 16, 28, 28), seed=2)
    for node in (_node("max_pool2d", q, **WINDOWS[1]), _node("avg_pool2d", q, **WINDOWS[4]),
                 _node("adaptive_avg_pool2d", q, oshp=(1, 1))):
        np.testing.assert_array_equal(run_on_device(node, [q])[0], cpu_result(node, [q])[0])
