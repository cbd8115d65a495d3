"""csrc_cuda/group_norm.cu and mgegraph/cuda/kernels/group_norm.py: NVRTC compiles, the steps,
the host emulation of every step against the CPU kernels, and (marker cuda) on a device."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    assert_close,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
)

from mgegraph.cuda.kernels import group_norm as family

FLOATS = (np.float32, np.float64)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("group_norm.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles_without_warnings_or_contraction(compiled):
    for result, log, _ in compiled.values():
        assert result == 0 and "warning" not in log.lower(), log
    ptx = ptx_of(compiled["sm_90"][2])
    body = ptx.split(".entry mg_group_norm_f32(")[1].split(".entry")[0]
    assert "mul.rn.f32" in body and "add.rn.f32" in body and "fma.rn.f32" not in body


def _rand(dtype, shape, seed, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) + shift).astype(dtype)


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                    "atol": 1e-12}


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, groups", [((4, 6, 5, 3), 3), ((3, 8), 2), ((2, 4, 700), 1),
                                           ((1, 64, 9, 9), 32)])
def test_group_norm_and_gradient_match_cpu(dtype, shape, groups):
    x, dy = _rand(dtype, shape, 0, shift=3.0), _rand(dtype, shape, 3)
    w, b = _rand(dtype, (shape[1],), 1), _rand(dtype, (shape[1],), 2)
    for op, arrays in (("group_norm", [x, w, b]), ("group_norm_backward", [x, w, dy])):
        node = node_of(op, arrays, groups=groups, eps=1e-3)
        for got, want in zip(emulate(family, node, arrays), cpu_result(node, arrays)):
            assert_close(got, want, **_tol(dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_the_epilogue_activation_matches_cpu(activation):
    x = _rand(np.float32, (2, 6, 5, 7), 0, shift=3.0)
    w, b = _rand(np.float32, (6,), 1), _rand(np.float32, (6,), 2) * 4
    node = node_of("group_norm", [x, w, b], groups=3, activation=activation)
    (got,), (want,) = emulate(family, node, [x, w, b]), cpu_result(node, [x, w, b])
    assert_close(got, want, **_tol(np.float32))
    assert (want == 0).any() and want.min() >= 0


@pytest.mark.nvrtc
def test_gradient_of_no_samples_writes_zero_parameters():
    x = np.zeros((0, 4, 3), np.float32)
    w = np.ones(4, np.float32)
    node = node_of("group_norm_backward", [x, w, x], groups=2)
    _, dw, db = emulate(family, node, [x, w, x])  # outputs start poisoned
    np.testing.assert_array_equal(dw, 0.0)
    np.testing.assert_array_equal(db, 0.0)


def test_steps():
    x = np.zeros((8, 6, 5, 4), np.float32)
    w = np.zeros(6, np.float32)
    launch, _, steps = cuda_launch(family, node_of("group_norm", [x, w, w], groups=3))
    assert [s.entry for s in steps] == ["mg_group_norm_f32"] and launch.workspace == 0
    launch, _, steps = cuda_launch(family, node_of("group_norm_backward", [x, w, x], groups=3))
    assert [s.entry for s in steps] == ["mg_group_norm_backward_f32_stats",
                                        "mg_group_norm_backward_f32_params",
                                        "mg_group_norm_backward_f32"]
    assert launch.workspace >= 8 * 2 * 8 * 3  # a mean and an rstd per group


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_group_norm_on_device(dtype):
    x, dy = _rand(dtype, (8, 64, 56, 56), 0, shift=2.0), _rand(dtype, (8, 64, 56, 56), 1)
    w, b = _rand(dtype, (64,), 2), _rand(dtype, (64,), 3)
    for op, arrays in (("group_norm", [x, w, b]), ("group_norm_backward", [x, w, dy])):
        node = node_of(op, arrays, groups=32)
        for got, want in zip(run_on_device(node, arrays), cpu_result(node, arrays)):
            assert_close(got, want, rtol=1e-5, atol=1e-4)
