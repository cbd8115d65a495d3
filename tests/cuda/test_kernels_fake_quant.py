"""csrc_cuda/fake_quant.cu and mgegraph/cuda/kernels/fake_quant.py: NVRTC compiles, the host
emulation gives the CPU kernel's floats bit for bit (per tensor and per channel, saturation and
ties), a NaN stays NaN, and a bad scale fails the run with the CPU's code; (marker cuda) the
same on a device."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile, run_on_device

from mgegraph.cuda.kernels import fake_quant as family
from mgegraph.kernel_abi.status import CODES

ATTRS = {"qmin": -128, "qmax": 127, "lsq_grad_scale": None}


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("fake_quant.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles(compiled):
    assert set(compiled) == set(ARCHS)


def _values(shape, dtype):
    x = np.random.default_rng(3).normal(size=shape).astype(dtype) * 4
    x.reshape(-1)[:5] = [1e9, -1e9, 0.125, -0.375, np.nan]
    return x


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("axis", (None, 1))
def test_fake_quant_is_the_cpus(dtype, axis):
    x = _values((2, 3, 37), dtype)
    s = np.array([0.25] if axis is None else [0.25, 0.05, 0.5], dtype)
    z = np.array([3] if axis is None else [3, -2, 0], dtype)
    node = node_of("fake_quant", [x, s, z], axis=axis, **ATTRS)
    got = emulate(family, node, [x, s, z], fibers=False)[0]
    np.testing.assert_array_equal(got, cpu_result(node, [x, s, z])[0])
    assert np.isnan(got.reshape(-1)[4])


@pytest.mark.nvrtc
def test_a_bad_scale_fails_with_the_cpus_code():
    x, z = np.ones(3, np.float32), np.zeros(1, np.float32)
    node = node_of("fake_quant", [x, np.zeros(1, np.float32), z], axis=None, **ATTRS)
    _, word = emulate(family, node, [x, np.zeros(1, np.float32), z], fibers=False, status=True)
    assert word == (1 << 8) | CODES["BAD_VALUE"]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_on_device(dtype):
    x = _values((8, 3, 33, 35), dtype)
    s, z = np.array([0.25, 0.05, 0.5], dtype), np.array([3, -2, 0], dtype)
    node = node_of("fake_quant", [x, s, z], axis=1, **ATTRS)
    np.testing.assert_array_equal(run_on_device(node, [x, s, z])[0],
                                  cpu_result(node, [x, s, z])[0])
