"""resize's antialias filter on CUDA (csrc_cuda/resize_antialias.cuh): NVRTC compiles it, and
its host emulation (host_emu.h) gives the CPU kernels' results (_kernels/resize_antialias.pxi)
bitwise, forward and gradient, over 1 to 3 axes, down and up, linear and cubic, edge and
excluded taps."""
import numpy as np
import pytest
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile

from mgegraph.cuda.kernels import resize as family

FLOATS = (np.float32, np.float64)
CASES = [
    ((2, 3, 13, 11), {"size": (4, 5), "mode": "linear", "exclude_outside": True}),
    ((1, 2, 9, 10), {"size": (3, 7), "mode": "cubic", "cubic_a": -0.5}),
    ((3, 17), {"size": (5,), "mode": "linear", "scale": (0.3,)}),
    ((1, 1, 6, 5, 9), {"size": (2, 7, 3), "mode": "cubic", "coord": "pytorch_half_pixel",
                       "exclude_outside": True}),
    ((1, 2, 1, 8), {"size": (1, 3), "mode": "linear"}),  # an axis of length 1
]


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_compiles(arch):
    result, log, _ = nvrtc_compile("resize.cu", arch)
    assert result == 0, log


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_antialiased_resize_and_its_gradient_are_bitwise(dtype, shape, attrs):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    forward = node_of("resize", [x], antialias=True, **attrs)
    dy = rng.standard_normal(forward.outputs[0].shape).astype(dtype)
    backward = node_of("resize_backward", [dy], antialias=True, input_size=shape[-len(attrs[
        "size"]):], **attrs)
    for node, arrays in ((forward, [x]), (backward, [dy])):
        for got, want in zip(emulate(family, node, arrays, fibers=False),
                             cpu_result(node, arrays)):
            np.testing.assert_array_equal(got, want)
