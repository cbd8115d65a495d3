"""The sequence ops' CUDA kernels: the embedding op on take's family (csrc_cuda/movement.cu), in
the plain host emulation, bitwise as the CPU kernel; rms_norm (csrc_cuda/rms_norm.cu): NVRTC
compiles it, its steps, its host emulation against the CPU kernel and (marker cuda) a device."""
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

from mgegraph.cuda.kernels import movement
from mgegraph.cuda.kernels import rms_norm as family

FLOATS = (np.float32, np.float64)


def _rand(dtype, shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_is_bitwise_the_cpu_kernel(dtype, padding_idx):
    weight = _rand(dtype, (5, 7), 0)
    ids = np.array([[3, 0, 4], [1, 3, 3]], np.int64)
    node = node_of("embedding", [weight, ids], padding_idx=padding_idx)
    got, want = emulate(movement, node, [weight, ids], fibers=False), cpu_result(node,
                                                                                 [weight, ids])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(want[0], weight[ids])


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("rms_norm.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_rms_norm_compiles_without_warnings_or_contraction(compiled):
    for result, log, _ in compiled.values():
        assert result == 0 and "warning" not in log.lower(), log
    ptx = ptx_of(compiled["sm_90"][2])
    body = ptx.split(".entry mg_rms_norm_f32(")[1].split(".entry")[0]
    assert "mul.rn.f32" in body and "fma.rn.f32" not in body


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, norm", [((4, 7), (7,)), ((3, 2, 700), (700,)),
                                         ((40, 5), (5,)), ((2, 3, 4), (3, 4))])
def test_rms_norm_matches_the_cpu_kernel(dtype, shape, norm):
    x, w = _rand(dtype, shape, 0), _rand(dtype, norm, 1)
    node = node_of("rms_norm", [x, w], normalized_shape=norm, eps=1e-5)
    (got,), (want,) = emulate(family, node, [x, w]), cpu_result(node, [x, w])
    tol = 1e-6 if dtype == np.float32 else 1e-13
    assert_close(got, want, rtol=tol, atol=tol)


def test_rms_norm_steps():
    x, w = np.zeros((64, 512), np.float32), np.zeros(512, np.float32)
    launch, _, steps = cuda_launch(family, node_of("rms_norm", [x, w], normalized_shape=(512,),
                                                   eps=1e-6))
    assert [s.entry for s in steps] == ["mg_rms_norm_f32"] and launch.ints[:2] == (64, 512)
    empty = np.zeros((0, 4), np.float32)
    _, _, steps = cuda_launch(family, node_of("rms_norm", [empty, w[:4]], normalized_shape=(4,),
                                              eps=1e-6))
    assert steps == []


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_on_device(dtype):
    x, w = _rand(dtype, (32, 512, 768), 0), _rand(dtype, (768,), 1)
    node = node_of("rms_norm", [x, w], normalized_shape=(768,), eps=1e-6)
    (got,), (want,) = run_on_device(node, [x, w]), cpu_result(node, [x, w])
    assert_close(got, want, rtol=1e-5, atol=1e-5)
