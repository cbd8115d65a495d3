"""csrc_cuda/quantize.cu and mgegraph/cuda/kernels/quantize.py: NVRTC compiles, the host
emulation gives the CPU kernels' integers and floats bit for bit (per tensor and per channel),
a NaN fails the run with the CPU's code, and per-channel parameters beyond the float block are
refused when the plan is made."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile

import mgegraph as mg
from mgegraph.cuda.kernels import quantize as family
from mgegraph.ir.errors import GraphError
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.kernel_abi.status import CODES


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("quantize.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles(compiled):
    assert set(compiled) == set(ARCHS)


def _values(shape, dtype=np.float32):
    x = np.random.default_rng(3).normal(size=shape).astype(dtype) * 4
    x.reshape(-1)[:4] = [1e9, -1e9, 0.125, -0.375]  # saturation both ways, ties
    return x


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", ("int8", "uint8", "int32"))
@pytest.mark.parametrize("axis", (None, 1))
def test_quantize_is_the_cpus(dtype, axis):
    x = _values((2, 3, 37))
    scales = (0.25,) if axis is None else (0.25, 0.05, 0.5)
    zps = (3,) * len(scales)
    node = node_of("quantize", [x], scales=scales, zero_points=zps, axis=axis, dtype=dtype)
    np.testing.assert_array_equal(emulate(family, node, [x], fibers=False)[0],
                                  cpu_result(node, [x])[0])


def _dequantize_node(q, quant, dtype="float32"):
    g = mg.Graph()
    return g.add_node("dequantize", [g.input("q", q.shape, q.dtype, quant)], {"dtype": dtype})


@pytest.mark.nvrtc
@pytest.mark.parametrize("storage", (np.int8, np.uint8, np.int32))
@pytest.mark.parametrize("out", ("float32", "float64"))
def test_dequantize_is_the_cpus(storage, out):
    q = np.random.default_rng(4).integers(0, 120, (3, 41)).astype(storage)
    for quant in (per_tensor(0.1, 7), per_channel([0.3, 0.01, 2.5], [1, 0, 5], 0)):
        node = _dequantize_node(q, quant, out)
        np.testing.assert_array_equal(emulate(family, node, [q], fibers=False)[0],
                                      cpu_result(node, [q])[0])


@pytest.mark.nvrtc
def test_a_nan_fails_with_the_cpus_code():
    x = np.array([1.0, np.nan, 2.0], np.float32)
    node = node_of("quantize", [x], scales=(0.5,), zero_points=(0,), axis=None, dtype="int8")
    _, word = emulate(family, node, [x], fibers=False, status=True)
    assert word == (1 << 8) | CODES["NOT_A_NUMBER"]


def test_many_channels_are_refused_when_the_plan_is_made():
    from kernel_checks import cuda_launch
    x = np.zeros((5, 2), np.float32)
    node = node_of("quantize", [x], scales=(1.0,) * 5, zero_points=(0,) * 5, axis=0,
                   dtype="int8")
    with pytest.raises(GraphError, match="at most 4 channels"):
        cuda_launch(family, node)
