"""csrc_cuda/dropout.cu and mgegraph/cuda/kernels/dropout.py: NVRTC compiles, the host emulation
draws the CPU's mask bitwise (with and without a step input), and (marker cuda) on a device."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile, run_on_device

from mgegraph.cuda.kernels import dropout as family


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("dropout.cu", arch) for arch in ARCHS}


def _arrays(dtype, with_step):
    x = np.random.default_rng(0).standard_normal((37, 29)).astype(dtype)
    return [x, np.array(12345, np.int64)] if with_step else [x]


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("with_step", (False, True))
@pytest.mark.parametrize("p", (0.0, 0.3, 1.0))
def test_mask_is_the_cpus(dtype, with_step, p):
    arrays = _arrays(dtype, with_step)
    node = node_of("dropout", arrays, drop_prob=p, seed=-7)
    got = emulate(family, node, arrays, fibers=False)[0]
    np.testing.assert_array_equal(got, cpu_result(node, arrays)[0])
    if 0 < p < 1:
        assert 0 < (got == 0).mean() < 1


@pytest.mark.cuda
@pytest.mark.parametrize("with_step", (False, True))
def test_mask_on_device(with_step):
    arrays = _arrays(np.float32, with_step)
    node = node_of("dropout", arrays, drop_prob=0.5, seed=3)
    np.testing.assert_array_equal(run_on_device(node, arrays)[0], cpu_result(node, arrays)[0])
