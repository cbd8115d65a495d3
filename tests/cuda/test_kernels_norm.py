"""csrc_cuda/norm.cu and mgegraph/cuda/kernels/norm.py: NVRTC compiles, the steps, the host
emulation of every step against the CPU kernels (batch norm's normalisation bitwise), and
(marker cuda) the ops on a device."""
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

from mgegraph.cuda.kernels import norm as family

FLOATS = (np.float32, np.float64)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("norm.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_ptx_normalises_without_contraction(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    body = ptx.split(".entry mg_batch_norm_f32(")[1].split(".entry")[0]
    assert "mul.rn.f32" in body and "add.rn.f32" in body and "fma.rn.f32" not in body


def _rand(dtype, shape, seed, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) + shift).astype(dtype)


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12,
                                                                    "atol": 1e-13}


def _check_all(node, arrays, **tol):
    want = cpu_result(node, arrays)
    got = emulate(family, node, arrays)
    for g, w in zip(got, want):
        assert_close(g, w, **tol)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,norm", [((6, 10), (10,)), ((2, 3, 4, 5), (4, 5)),
                                        ((3, 5000), (5000,))])
def test_layer_norm_and_gradient_match_cpu(dtype, shape, norm):
    x = _rand(dtype, shape, 0, shift=3.0)
    w, b = _rand(dtype, norm, 1), _rand(dtype, norm, 2)
    _check_all(node_of("layer_norm", [x, w, b], normalized_shape=norm), [x, w, b],
               **_tol(dtype))
    dy = _rand(dtype, shape, 3)
    _check_all(node_of("layer_norm_backward", [x, w, dy], normalized_shape=norm), [x, w, dy],
               **_tol(dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", ((8, 3, 5, 4), (16, 6), (2, 40, 300)))
def test_batch_norm_training_and_gradient_match_cpu(dtype, shape):
    c = shape[1]
    x = _rand(dtype, shape, 0, shift=5.0)
    w, b = _rand(dtype, (c,), 1), _rand(dtype, (c,), 2)
    node = node_of("batch_norm", [x, w, b], training=True)
    _check_all(node, [x, w, b], **_tol(dtype))
    _, mean, var = cpu_result(node, [x, w, b])
    dy = _rand(dtype, shape, 3)
    arrays = [x, w, mean, var, dy]
    _check_all(node_of("batch_norm_backward", arrays), arrays, **_tol(dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_inference_is_bitwise(dtype):
    x = _rand(dtype, (4, 3, 7, 5), 0)
    w, b, mean = (_rand(dtype, (3,), s) for s in (1, 2, 3))
    var = np.abs(_rand(dtype, (3,), 4)) + 0.1
    x[0, 1, 2, 3] = np.nan
    arrays = [x, w, b, mean, var]
    node = node_of("batch_norm", arrays, training=False)
    np.testing.assert_array_equal(emulate(family, node, arrays)[0], cpu_result(node, arrays)[0])


def test_steps():
    x = np.zeros((8, 3, 5, 4), np.float32)
    w = np.zeros(3, np.float32)
    launch, _, steps = cuda_launch(family, node_of("batch_norm", [x, w, w], training=True))
    assert [s.entry for s in steps] == ["mg_batch_norm_f32_stats", "mg_batch_norm_f32"]
    assert launch.workspace == 0
    _, _, steps = cuda_launch(family, node_of("batch_norm", [x, w, w, w, w]))
    assert [s.entry for s in steps] == ["mg_batch_norm_f32"]
    launch, _, steps = cuda_launch(family, node_of("batch_norm_backward", [x, w, w, w, x]))
    assert [s.entry for s in steps] == ["mg_batch_norm_backward_f32_stats",
                                        "mg_batch_norm_backward_f32"]
    assert launch.workspace == 8 * 4 * 3
    y = np.zeros((10, 64), np.float64)
    v = np.zeros(64, np.float64)
    launch, _, steps = cuda_launch(family, node_of("layer_norm_backward", [y, v, y],
                                                   normalized_shape=(64,)))
    assert [s.entry for s in steps] == ["mg_layer_norm_backward_f64_stats",
                                        "mg_layer_norm_backward_f64_params",
                                        "mg_layer_norm_backward_f64"]
    assert launch.workspace == 8 * 2 * 10


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_norms_on_device(dtype):
    x, dy = _rand(dtype, (64, 32, 14, 14), 0, shift=2.0), _rand(dtype, (64, 32, 14, 14), 1)
    w, b = _rand(dtype, (32,), 2), _rand(dtype, (32,), 3)
    node = node_of("batch_norm", [x, w, b], training=True)
    want = cpu_result(node, [x, w, b])
    for g, wv in zip(run_on_device(node, [x, w, b]), want):
        assert_close(g, wv, rtol=1e-5, atol=1e-6)
    arrays = [x, w, want[1], want[2], dy]
    back = node_of("batch_norm_backward", arrays)
    for g, wv in zip(run_on_device(back, arrays), cpu_result(back, arrays)):
        assert_close(g, wv, rtol=1e-5, atol=1e-5)
    y = x.reshape(64 * 32, 196)
    lw, lb = _rand(dtype, (196,), 4), _rand(dtype, (196,), 5)
    ln = node_of("layer_norm", [y, lw, lb], normalized_shape=(196,))
    assert_close(run_on_device(ln, [y, lw, lb])[0], cpu_result(ln, [y, lw, lb])[0],
                 rtol=1e-5, atol=1e-6)
    lnb = node_of("layer_norm_backward", [y, lw, dy.reshape(y.shape)], normalized_shape=(196,))
    arrays = [y, lw, dy.reshape(y.shape)]
    for g, wv in zip(run_on_device(lnb, arrays), cpu_result(lnb, arrays)):
        assert_close(g, wv, rtol=1e-5, atol=1e-5)


@pytest.mark.nvrtc
def test_layer_norm_gradient_of_no_rows_writes_zero_parameters():
    # the outputs start as garbage (poisoned): dweight and dbias must still be written
    x, w = np.zeros((0, 6), np.float32), np.ones(6, np.float32)
    node = node_of("layer_norm_backward", [x, w, x], normalized_shape=(6,))
    _, dw, db = emulate(family, node, [x, w, x])
    np.testing.assert_array_equal(dw, np.zeros(6, np.float32))
    np.testing.assert_array_equal(db, np.zeros(6, np.float32))
