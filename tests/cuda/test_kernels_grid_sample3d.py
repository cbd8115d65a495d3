"""The volume sampler of csrc_cuda/vision.cu (vision_sample3d.cuh: grid_sample3d and its
gradients): NVRTC compiles it, and its host emulation (host_emu.h; no shared memory, barriers
or atomics) gives the CPU kernels' results bitwise in every mode, padding and alignment."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile

from mgegraph.cuda.kernels import vision as family

FLOATS = (np.float32, np.float64)
RNG = np.random.default_rng(0)
MODES = [{"mode": m, "padding_mode": p, "align_corners": a}
         for m, p, a in (("bilinear", "zeros", False), ("bilinear", "border", True),
                         ("bilinear", "reflection", False), ("nearest", "reflection", True),
                         ("nearest", "zeros", False))]


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_compiles(arch):
    result, log, _ = nvrtc_compile("vision.cu", arch)
    assert result == 0, log


def _same(node, arrays):
    got = emulate(family, node, arrays, fibers=False)
    for g, w in zip(got, cpu_result(node, arrays)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("attrs", MODES)
def test_grid_sample3d_and_gradients_are_bitwise(dtype, attrs):
    x = RNG.standard_normal((2, 3, 4, 5, 3)).astype(dtype)
    grid = RNG.uniform(-1.4, 1.4, (2, 3, 2, 2, 3)).astype(dtype)
    grid[0, 0, 0, 0] = (np.nan, 0.2, 0.1)  # a point that is not finite
    dy = RNG.standard_normal((2, 3, 3, 2, 2)).astype(dtype)
    _same(node_of("grid_sample3d", [x, grid], **attrs), [x, grid])
    _same(node_of("grid_sample3d_backward_data", [grid, dy], input_dhw=(4, 5, 3), **attrs),
          [grid, dy])
    _same(node_of("grid_sample3d_backward_grid", [x, grid, dy], **attrs), [x, grid, dy])
