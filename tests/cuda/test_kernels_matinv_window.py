"""csrc_cuda/matinv.cu and csrc_cuda/sliding_window.cu (mgegraph/cuda/kernels/matinv.py,
sliding_window.py): NVRTC compiles them without shared memory or atomics, and their host
emulation (host_emu.h) gives the CPU kernels' bits, a singular matrix the CPU's status; (marker
cuda) the ops on a device."""
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

from mgegraph.cuda.kernels import matinv as matinv_family
from mgegraph.cuda.kernels import sliding_window as window_family
from mgegraph.kernel_abi.status import CODES

FLOATS = (np.float32, np.float64)
RNG = np.random.default_rng(5)
WINDOWS = [  # (N, C, H, W), kernel, padding, stride, dilation
    ((2, 3, 7, 8), (3, 2), (1, 2), (2, 1), (1, 3)),
    ((1, 2, 5, 4), (1, 1), (0, 0), (1, 1), (1, 1)),
    ((1, 1, 3, 3), (3, 3), (2, 2), (4, 4), (1, 1)),
]


@pytest.mark.nvrtc
@pytest.mark.parametrize("source", ["matinv.cu", "sliding_window.cu"])
def test_no_shared_memory_or_atomics(source):
    """No atomics but mg_fail's compare-and-swap of the status word (matinv's singular
    matrix)."""
    for arch in ARCHS:
        ptx = ptx_of(nvrtc_compile(source, arch)[2])
        atomics = {line.split()[0] for line in ptx.splitlines() if "atom." in line}
        assert ".shared" not in ptx and "bar.sync" not in ptx
        assert atomics <= {"atom.global.cas.b64"}


def _same(family, node, arrays):
    got, want = emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5, 5), (2, 2, 7, 7)])
def test_matinv_emulated_is_the_cpu_bitwise(dtype, shape):
    a = (RNG.standard_normal(shape) + np.eye(shape[-1])).astype(dtype)
    _same(matinv_family, node_of("matinv", [a]), [a])


def test_matinv_emulated_propagates_a_nan_as_the_cpu():
    a = np.stack([np.eye(3), np.eye(3)])
    a[1, :, 0] = np.nan
    _same(matinv_family, node_of("matinv", [a]), [a])


def test_matinv_emulated_reports_a_singular_matrix():
    a = np.stack([np.eye(3), np.ones((3, 3))]).astype(np.float32)
    _, word = emulate(matinv_family, node_of("matinv", [a]), [a], fibers=False, status=True)
    assert word & 0xFF == CODES["BAD_VALUE"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "kernel", "padding", "stride", "dilation"), WINDOWS)
def test_sliding_windows_emulated_are_the_cpu_bitwise(dtype, shape, kernel, padding, stride,
                                                      dilation):
    attrs = {"kernel_size": kernel, "padding": padding, "stride": stride, "dilation": dilation}
    x = RNG.standard_normal(shape).astype(dtype)
    fwd = node_of("sliding_window", [x], **attrs)
    _same(window_family, fwd, [x])
    cols = RNG.standard_normal(fwd.outputs[0].shape).astype(dtype)
    _same(window_family, node_of("sliding_window_transpose", [cols], output_size=shape[2:],
                                 **attrs), [cols])


def test_steps_cover_every_output():
    x = np.zeros((2, 3, 16, 16), np.float32)
    _, _, (step,) = cuda_launch(window_family, node_of("sliding_window", [x], kernel_size=(3, 3),
                                                       padding=(1, 1)))
    assert step.entry == "mg_sliding_window_f32" and step.grid == (2 * 3 * 256 * 9 // 256, 1, 1)
    a = np.zeros((300, 4, 4))
    _, _, (step,) = cuda_launch(matinv_family, node_of("matinv", [a]))
    assert step.entry == "mg_matinv_f64" and step.grid == (2, 1, 1)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_on_device(dtype):
    a = (RNG.standard_normal((64, 6, 6)) + 6 * np.eye(6)).astype(dtype)
    close = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 0}
    node = node_of("matinv", [a])
    np.testing.assert_allclose(run_on_device(node, [a])[0], cpu_result(node, [a])[0], **close)
    x = RNG.standard_normal((4, 8, 20, 18)).astype(dtype)
    attrs = {"kernel_size": (3, 2), "padding": (1, 2), "stride": (2, 1), "dilation": (1, 3)}
    fwd = node_of("sliding_window", [x], **attrs)
    np.testing.assert_array_equal(run_on_device(fwd, [x])[0], cpu_result(fwd, [x])[0])
    cols = RNG.standard_normal(fwd.outputs[0].shape).astype(dtype)
    back = node_of("sliding_window_transpose", [cols], output_size=(20, 18), **attrs)
    np.testing.assert_array_equal(run_on_device(back, [cols])[0], cpu_result(back, [cols])[0])
