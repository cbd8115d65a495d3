"""csrc_cuda/resize.cu and mgegraph/cuda/kernels/resize.py: NVRTC compiles, no shared memory or
atomics, and the plain host emulation (host_emu.h) of resize and resize_backward against the CPU
kernels, bitwise, over every mode and coordinate transformation; pad's wrap mode on CUDA's
movement kernels likewise; (marker cuda) the ops on a device."""
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

from mgegraph.cuda.kernels import movement
from mgegraph.cuda.kernels import resize as family

FLOATS = (np.float32, np.float64)
CASES = [  # (input shape, attributes): 1 to 3 axes, up and down, every mode and coordinate
    ((2, 3, 5, 7), {"size": (11, 4), "mode": "linear"}),
    ((2, 3, 5, 7), {"size": (3, 13), "mode": "cubic", "coord": "align_corners"}),
    ((1, 2, 6, 5), {"size": (9, 2), "mode": "cubic", "cubic_a": -0.5, "exclude_outside": True,
                    "coord": "asymmetric"}),
    ((3, 7), {"size": (12,), "mode": "nearest", "nearest_mode": "round_prefer_ceil",
              "coord": "pytorch_half_pixel"}),
    ((1, 2, 3, 4, 5), {"size": (5, 2, 7), "mode": "linear", "coord": "half_pixel_symmetric",
                       "scale": (5 / 3, 0.5, 1.5)}),
    ((2, 2, 4, 4), {"size": (8, 12), "mode": "nearest", "nearest_mode": "floor",
                    "coord": "tf_half_pixel_for_nearest"}),
    ((1, 1, 1, 6), {"size": (1, 3), "mode": "cubic"}),
]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("resize.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_no_shared_memory_or_atomics(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    assert ".shared" not in ptx and "atom." not in ptx and "bar.sync" not in ptx


def _x(dtype, shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _same(node, arrays):
    for g, w in zip(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_resize_and_its_gradient_are_bitwise(dtype, shape, attrs):
    x = _x(dtype, shape)
    fwd = node_of("resize", [x], **attrs)
    _same(fwd, [x])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1)
    k = len(attrs["size"])
    _same(node_of("resize_backward", [dy], input_size=shape[-k:], **attrs), [dy])


def test_steps():
    x = np.zeros((4, 8, 32, 32), np.float32)
    _, _, (s,) = cuda_launch(family, node_of("resize", [x], size=(64, 64)))
    assert s.entry == "mg_resize_f32" and s.grid == (4 * 8 * 64 * 64 // 256, 1, 1)
    dy = np.zeros((4, 8, 64, 64), np.float32)
    _, _, (s,) = cuda_launch(family, node_of("resize_backward", [dy], size=(64, 64),
                                             input_size=(32, 32)))
    assert s.entry == "mg_resize_backward_f32" and s.grid == (1, 1, 1)  # a thread per plane


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.int64))
def test_pad_wrap_and_its_gradient_are_bitwise(dtype):
    x = _x(np.float64, (3, 4)).astype(dtype)
    width = ((2, 5), (7, 1))  # wider than the axes: the period repeats
    node = node_of("pad", [x], pad_width=width, mode="wrap")
    for g, w in zip(emulate(movement, node, [x], fibers=False), cpu_result(node, [x])):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(cpu_result(node, [x])[0], np.pad(x, width, mode="wrap"))
    if dtype == np.float32:
        dy = _x(dtype, (10, 12))
        back = node_of("pad_backward", [dy], pad_width=width, mode="wrap")
        for g, w in zip(emulate(movement, back, [dy]), cpu_result(back, [dy])):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)  # atomics: any order


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_resize_on_device(dtype, shape, attrs):
    x = _x(dtype, (8,) + shape[1:] if len(shape) > 2 else shape)
    fwd = node_of("resize", [x], **attrs)
    np.testing.assert_array_equal(run_on_device(fwd, [x])[0], cpu_result(fwd, [x])[0])
    dy = _x(dtype, fwd.outputs[0].shape, seed=1)
    k = len(attrs["size"])
    back = node_of("resize_backward", [dy], input_size=x.shape[-k:], **attrs)
    np.testing.assert_array_equal(run_on_device(back, [dy])[0], cpu_result(back, [dy])[0])


@pytest.mark.cuda
def test_bilinear_upsampling_on_device_at_size():
    x = _x(np.float32, (8, 64, 128, 128))
    fwd = node_of("resize", [x], size=(256, 256))
    np.testing.assert_array_equal(run_on_device(fwd, [x])[0], cpu_result(fwd, [x])[0])
