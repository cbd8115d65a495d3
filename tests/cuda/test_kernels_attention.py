"""csrc_cuda/attention.cu and mgegraph/cuda/kernels/attention.py: NVRTC compiles it; its steps;
the plain host emulation (no shared memory, barriers or atomics) of the forward and both
backward steps against the CPU's tiled kernel, with masks, grouped heads and fully masked rows;
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

from mgegraph.cuda.kernels import attention as family

FLOATS = (np.float32, np.float64)
RNG = np.random.default_rng(40)


def _rand(dtype, *shape):
    return RNG.standard_normal(shape).astype(dtype)


# q, k, v shapes, mask, causal: rows and keys the CPU's 64 x 64 tiles do not divide
CASES = {
    "plain": ((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3), None, False),
    "causal gqa": ((1, 4, 70, 8), (1, 2, 66, 8), (1, 2, 66, 5), None, True),
    "bool mask, a row masked": ((2, 2, 9, 4), (2, 2, 11, 4), (2, 2, 11, 4), "bool", False),
    "additive causal": ((1, 2, 8, 4), (1, 2, 12, 4), (1, 2, 12, 4), "add", True),
}


def _arrays(name, dtype):
    qs, ks, vs, mask, causal = CASES[name]
    arrays = [_rand(dtype, *qs), _rand(dtype, *ks), _rand(dtype, *vs)]
    if mask == "bool":
        m = RNG.random((qs[0], 1, qs[2], ks[2])) > 0.4
        m[:, :, 3] = False                # a row with no key attended: 0 and no gradient
        arrays.append(m)
    elif mask == "add":
        arrays.append(_rand(dtype, qs[2], ks[2])[None, None])
    return arrays, {"scale": 0.4, "is_causal": causal}


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("attention.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles_without_warnings_or_shared_memory(compiled):
    for result, log, _ in compiled.values():
        assert result == 0 and "warning" not in log.lower(), log
    ptx = ptx_of(compiled["sm_90"][2])
    assert ".shared" not in ptx and "atom." not in ptx


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", CASES)
def test_forward_matches_the_cpu_kernel(name, dtype):
    arrays, attrs = _arrays(name, dtype)
    node = node_of("attention", arrays, **attrs)
    got, want = emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for g, w in zip(got, want):
        assert_close(g, w, rtol=tol, atol=tol)
    if CASES[name][3] == "bool":
        assert (got[0][:, :, 3] == 0).all() and np.isneginf(got[1][:, :, 3]).all()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", CASES)
def test_backward_matches_the_cpu_kernel(name, dtype):
    arrays, attrs = _arrays(name, dtype)
    out, lse = cpu_result(node_of("attention", arrays, **attrs), arrays)
    dout = _rand(dtype, *out.shape)
    inputs = [*arrays, out, lse, dout]
    node = node_of("attention_backward", inputs, **attrs)
    got, want = emulate(family, node, inputs, fibers=False), cpu_result(node, inputs)
    tol = 2e-5 if dtype == np.float32 else 1e-11
    for g, w in zip(got, want):
        assert_close(g, w, rtol=tol, atol=tol)


def test_steps_and_no_workspace():
    arrays, attrs = _arrays("causal gqa", np.float32)
    launch, _, steps = cuda_launch(family, node_of("attention", arrays, **attrs))
    assert launch.workspace == 0 and [s.entry for s in steps] == ["mg_attention_f32"]
    out = np.zeros((1, 4, 70, 5), np.float32)
    node = node_of("attention_backward", [*arrays, out, out[..., 0], out], **attrs)
    _, _, steps = cuda_launch(family, node)
    assert [s.entry for s in steps] == ["mg_attention_backward_f32_dq",
                                        "mg_attention_backward_f32_dkv"]
    assert steps[0].grid[0] * steps[0].block[0] >= 4 * 70
    assert steps[1].grid[0] * steps[1].block[0] >= 2 * 66


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_on_device(dtype):
    arrays, attrs = _arrays("causal gqa", dtype)
    node = node_of("attention", arrays, **attrs)
    got, want = run_on_device(node, arrays), cpu_result(node, arrays)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)
