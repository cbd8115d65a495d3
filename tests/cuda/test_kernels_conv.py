"""csrc_cuda/conv.cu and mgegraph/cuda/kernels/conv.py: NVRTC compiles, the steps, the fiber
emulation of the implicit GEMMs against the CPU kernels, and (marker cuda) on a device."""

import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    assert_close,
    assert_close_scaled,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    ptxas_spills,
    run_on_device,
)

from mgegraph.cuda.kernel import Step
from mgegraph.cuda.kernels import conv as family

CASES = [  # (x shape, w shape, attributes)
    ((2, 4, 8, 7), (6, 4, 3, 3), {"padding": (1, 1)}),
    ((1, 3, 9, 9), (5, 3, 3, 2), {"stride": (2, 1), "padding": (1, 0)}),
    ((2, 2, 9, 8), (3, 2, 3, 3), {"dilation": (2, 2), "padding": (2, 1)}),
    ((2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2, "stride": (2, 2), "padding": (1, 1)}),
    ((3, 5, 4, 4), (7, 5, 1, 1), {}),
]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("conv.cu", arch, [b"--ptxas-options=-v"]) for arch in ARCHS}


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_compiles_without_warnings_or_spills(compiled, arch):
    spills = ptxas_spills(compiled[arch], arch)
    if spills is None:
        return  # PTX only: no ptxas report
    log = compiled[arch][1]
    assert len(spills) == len(family.KERNELS) + 3 + 4 and set(spills) == {("0", "0")}, log


@pytest.mark.nvrtc
def test_ptx_tiles_in_shared_memory(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    for name in family.KERNELS:
        assert f".entry mg_{name}(" in ptx
    assert "ld.shared" in ptx and "atom." not in ptx


def _rand(dtype, shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                    "atol": 1e-12}


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("case", CASES)
def test_conv_and_gradients_match_cpu(dtype, case):
    xs, ws, attrs = case
    x, w = _rand(dtype, xs, 0), _rand(dtype, ws, 1)
    fwd = node_of("conv2d", [x, w], **attrs)
    assert_close(emulate(family, fwd, [x, w])[0], cpu_result(fwd, [x, w])[0], **_tol(dtype))
    dy = _rand(dtype, fwd.outputs[0].shape, 2)
    data = node_of("conv2d_backward_data", [w, dy], input_hw=xs[2:], **attrs)
    assert_close(emulate(family, data, [w, dy])[0], cpu_result(data, [w, dy])[0], **_tol(dtype))
    filt = node_of("conv2d_backward_filter", [x, dy], kernel_size=ws[2:], **attrs)
    assert_close(emulate(family, filt, [x, dy])[0], cpu_result(filt, [x, dy])[0], **_tol(dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("activation", ("none", "relu", "relu6"))
def test_bias_and_activation_epilogue(activation):
    x, w, b = 4 * _rand(np.float64, (2, 3, 6, 6), 0), _rand(np.float64, (4, 3, 3, 3), 1), \
        _rand(np.float64, (4,), 2)
    node = node_of("conv2d", [x, w, b], padding=(1, 1), activation=activation)
    want = cpu_result(node, [x, w, b])[0]
    assert activation != "relu6" or (want == 6).any() and (want == 0).any()
    assert_close(emulate(family, node, [x, w, b])[0], want, **_tol(np.float64))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_backward_filter_split_over_pixels_matches_cpu(dtype):
    # 4 x 32 x 32 output pixels and a 3 x 18 result: two splits, summed in order by `_sum`
    x, dy = _rand(dtype, (4, 2, 32, 32), 0), _rand(dtype, (4, 3, 32, 32), 1)
    node = node_of("conv2d_backward_filter", [x, dy], kernel_size=(3, 3), padding=(1, 1))
    launch, _, steps = cuda_launch(family, node)
    assert [s.entry for s in steps] == [f"mg_conv2d_backward_filter_{_dt(dtype)}_split",
                                        f"mg_conv2d_backward_filter_{_dt(dtype)}_sum"]
    assert steps[0].grid == (1, 1, 2)
    assert launch.workspace == family.FILTER_HEADER + 2 * 3 * 18 * np.dtype(dtype).itemsize
    want = cpu_result(node, [x, dy])[0]
    # sums of 4096 products: float32 rounding is relative to the largest sums, not each one
    tol = _tol(dtype) if dtype == np.float64 else {"rtol": 1e-5, "atol": 1e-6 * abs(want).max()}
    assert_close(emulate(family, node, [x, dy])[0], want, **tol)


def _dt(dtype):
    return "f32" if dtype == np.float32 else "f64"


@pytest.mark.nvrtc
def test_large_float32_tile_matches_cpu():
    x, w = _rand(np.float32, (1, 2, 12, 12), 0), _rand(np.float32, (3, 2, 3, 3), 1)
    node = node_of("conv2d", [x, w], padding=(1, 1))
    steps = [Step("mg_conv2d_f32", (2, 1, 1), (256, 1, 1))]  # n = 144 pixels: two columns
    assert_close(emulate(family, node, [x, w], steps=steps)[0], cpu_result(node, [x, w])[0],
                 **_tol(np.float32))


def test_workspace_and_geometry():
    x, w = np.zeros((8, 64, 32, 32), np.float32), np.zeros((64, 64, 3, 3), np.float32)
    launch, _, (s,) = cuda_launch(family, node_of("conv2d", [x, w], padding=(1, 1)))
    assert launch.workspace == 0  # no im2col matrix
    assert s.entry == "mg_conv2d_f32_small" and s.grid == (8 * 32 * 32 // 64, 1, 1)
    x, w = np.zeros((64, 64, 56, 56), np.float32), np.zeros((64, 32, 3, 3), np.float32)
    _, _, (s,) = cuda_launch(family, node_of("conv2d", [x, w], padding=(1, 1), groups=2))
    assert s.entry == "mg_conv2d_f32" and s.grid == (64 * 56 * 56 // 128, 1, 2)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("case", CASES)
def test_conv_on_device(dtype, case):
    xs, ws, attrs = case
    xs = (32,) + xs[1:2] + (28, 28)
    x, w = _rand(dtype, xs, 0), _rand(dtype, ws, 1)
    fwd = node_of("conv2d", [x, w], **attrs)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    assert_close_scaled(run_on_device(fwd, [x, w])[0], cpu_result(fwd, [x, w])[0], rtol)
    dy = _rand(dtype, fwd.outputs[0].shape, 2)
    data = node_of("conv2d_backward_data", [w, dy], input_hw=xs[2:], **attrs)
    assert_close_scaled(run_on_device(data, [w, dy])[0], cpu_result(data, [w, dy])[0], rtol)
    filt = node_of("conv2d_backward_filter", [x, dy], kernel_size=ws[2:], **attrs)
    assert_close_scaled(run_on_device(filt, [x, dy])[0], cpu_result(filt, [x, dy])[0], rtol)
