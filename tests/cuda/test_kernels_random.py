"""csrc_cuda/rng.cu and mgegraph/cuda/kernels/random.py: NVRTC compiles, the host emulation draws
the CPU kernels' numbers bitwise (the samplers are one header, rng_sample.h), a bad parameter
fails the run with the CPU's code, and (marker cuda) the draws on a device."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile, run_on_device

from mgegraph.cuda.kernels import random as family

STEP = np.array(-77, np.int64)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("rng.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles(compiled):
    assert set(compiled) == set(ARCHS)


def _uniform_node(dtype, n=1031):
    return node_of("rng_uniform", [STEP], shape=(n,), dtype=np.dtype(dtype).name, seed=2**63 + 5)


def _param(dtype, values):
    return np.resize(np.asarray(values, dtype), 997)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_uniform_is_the_cpus(dtype):
    node = _uniform_node(dtype)
    np.testing.assert_array_equal(emulate(family, node, [STEP], fibers=False)[0],
                                  cpu_result(node, [STEP])[0])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("op,values", [("rng_gamma", (0.2, 1.0, 3.5, 40.0)),
                                       ("rng_poisson", (0.0, 0.7, 9.5, 10.0, 250.0))])
def test_gamma_and_poisson_are_the_cpus(dtype, op, values):
    arrays = [_param(dtype, values), STEP]
    node = node_of(op, arrays, seed=-9)
    got = emulate(family, node, arrays, fibers=False)[0]
    np.testing.assert_array_equal(got, cpu_result(node, arrays)[0])
    assert np.isfinite(got).all()


@pytest.mark.nvrtc
@pytest.mark.parametrize("op,bad", [("rng_gamma", 0.0), ("rng_poisson", np.nan)])
def test_a_bad_parameter_fails_with_the_cpus_code(op, bad):
    arrays = [np.array([1.0, bad, 2.0], np.float32), STEP]
    node = node_of(op, arrays)
    _, word = emulate(family, node, arrays, fibers=False, status=True)
    assert word == (1 << 8) | 2  # instruction 0, BAD_VALUE


@pytest.mark.cuda
def test_uniform_on_device():
    node = _uniform_node(np.float32)
    np.testing.assert_array_equal(run_on_device(node, [STEP])[0], cpu_result(node, [STEP])[0])
