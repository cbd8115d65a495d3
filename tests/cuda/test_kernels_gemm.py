"""csrc_cuda/gemm.cu and mgegraph/cuda/kernels/gemm.py: NVRTC compiles (shared-memory tiles, no
local-memory spills), the launch geometry, the fiber emulation of whole blocks against the CPU
kernels (BLAS for floats), and (marker cuda) the products on a device."""

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
from mgegraph.cuda.kernels import gemm as family

ENTRIES = [f"mg_{name}" for name in family.KERNELS] + ["mg_matmul_f32_small",
                                                        "mg_linear_f32_small"]


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("gemm.cu", arch, [b"--ptxas-options=-v"]) for arch in ARCHS}


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_compiles_without_warnings_or_spills(compiled, arch):
    # ptxas reports every entry: registers, and its spills, which must be none
    spills = ptxas_spills(compiled[arch], arch)
    if spills is None:
        return  # PTX only: no ptxas report
    log = compiled[arch][1]
    assert len(spills) == len(ENTRIES) + 2 * len(family.KERNELS), log  # and _split, _sum
    assert all(s == ("0", "0") for s in spills), log
    for entry in ENTRIES:
        assert f"Compiling entry function '{entry}' for '{arch}'" in log


@pytest.mark.nvrtc
def test_ptx_tiles_in_shared_memory(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    assert "ld.shared" in ptx and "st.shared" in ptx and "bar.sync" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    # a thread reads its 8 rows and 8 columns of a slice as 16-byte vectors, 4 FMAs per float
    body = ptx.split(".entry mg_matmul_f32(")[1].split(".entry")[0]
    assert body.count("ld.shared.v4.f32") == 32 and body.count("fma.rn.f32") == 512
    assert "ld.shared.f32" not in body


def _rand(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-9, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                    "atol": 1e-12}


def _matmul(a, b, **attrs):
    node = node_of("matmul", [a, b], **attrs)
    return node, cpu_result(node, [a, b])[0]


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.int32, np.int64))
@pytest.mark.parametrize("ta", (False, True))
@pytest.mark.parametrize("tb", (False, True))
def test_matmul_transposes_match_cpu(dtype, ta, tb):
    m, n, k = 70, 37, 19  # no dimension a multiple of a tile
    a = _rand(dtype, (k, m) if ta else (m, k), 1)
    b = _rand(dtype, (n, k) if tb else (k, n), 2)
    node, want = _matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert_close(emulate(family, node, [a, b])[0], want, **_tol(dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("shapes", [((2, 1, 5, 6), (3, 6, 4)), ((4, 3, 8), (8, 5)),
                                    ((7,), (3, 7, 2)), ((3, 7), (7,)), ((2, 0, 4), (4, 3)),
                                    ((3, 0), (0, 4))])
def test_batched_broadcast_vectors_and_empty(shapes):
    a, b = _rand(np.float64, shapes[0], 3), _rand(np.float64, shapes[1], 4)
    node, want = _matmul(a, b)
    assert_close(emulate(family, node, [a, b])[0], want, **_tol(np.float64))


@pytest.mark.nvrtc
def test_integer_products_wrap():
    a = np.full((3, 4), 2**20, np.int32)
    b = np.full((4, 2), 2**13 + 1, np.int32)
    node, want = _matmul(a, b)
    assert_close(emulate(family, node, [a, b])[0], want)


@pytest.mark.nvrtc
@pytest.mark.parametrize("bias", (False, True))
@pytest.mark.parametrize("activation", ("none", "relu", "relu6"))
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_linear_epilogue_matches_cpu(bias, activation, dtype):
    x, w = 4 * _rand(dtype, (2, 33, 20), 5), _rand(dtype, (50, 20), 6)
    arrays = [x, w] + ([_rand(dtype, (50,), 7)] if bias else [])
    node = node_of("linear", arrays, activation=activation)
    want = cpu_result(node, arrays)[0]
    assert activation != "relu6" or (want == 6).any() and (want == 0).any()
    assert_close(emulate(family, node, arrays)[0], want, **_tol(dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.int32))
@pytest.mark.parametrize("ta", (False, True))
def test_split_k_matmul_matches_cpu(dtype, ta):
    # two tiles and k = 600: k splits in two, the parts summed in order (integers still wrap)
    m, n, k = 70, 37, 600
    a = _rand(dtype, (k, m) if ta else (m, k), 1)
    if dtype == np.int32:
        a = a * 2**24  # sums past 2**31
    b = _rand(dtype, (k, n), 2)
    node, want = _matmul(a, b, transpose_a=ta)
    launch, _, steps = cuda_launch(family, node)
    dt = {np.float32: "f32", np.float64: "f64", np.int32: "i32"}[dtype]
    assert [s.entry for s in steps] == [f"mg_matmul_{dt}_split", f"mg_matmul_{dt}_sum"]
    assert steps[0].grid == (1, 2, 2)
    assert launch.workspace == family.SPLIT_HEADER + 2 * m * n * np.dtype(dtype).itemsize
    tol = {"rtol": 1e-5, "atol": 1e-5 * abs(want).max()} if dtype == np.float32 else \
        _tol(dtype)
    assert_close(emulate(family, node, [a, b])[0], want, **tol)


@pytest.mark.nvrtc
@pytest.mark.parametrize("bias", (False, True))
def test_split_k_linear_applies_the_epilogue_once(bias):
    x, w = _rand(np.float64, (40, 700), 5), _rand(np.float64, (30, 700), 6)
    arrays = [x, w] + ([_rand(np.float64, (30,), 7) * 10] if bias else [])
    node = node_of("linear", arrays, activation="relu")
    assert cuda_launch(family, node)[2][0].entry == "mg_linear_f64_split"
    assert_close(emulate(family, node, arrays)[0], cpu_result(node, arrays)[0],
                 **_tol(np.float64))


@pytest.mark.nvrtc
def test_large_float32_tile_matches_cpu():
    # the 128 x 128 tile, emulated on a product too small for the steps to choose it
    a, b = _rand(np.float32, (130, 24), 8), _rand(np.float32, (24, 129), 9)
    node, want = _matmul(a, b)
    steps = [Step("mg_matmul_f32", (2, 2, 1), (256, 1, 1))]
    assert_close(emulate(family, node, [a, b], steps=steps)[0], want, **_tol(np.float32))


def test_geometry():
    def steps(shape_a, shape_b, dtype=np.float32):
        a, b = np.zeros(shape_a, dtype), np.zeros(shape_b, dtype)
        return cuda_launch(family, node_of("matmul", [a, b]))[2]
    (s,) = steps((4096, 4096), (4096, 4096))
    assert s.entry == "mg_matmul_f32" and s.grid == (32, 32, 1) and s.block == (256, 1, 1)
    (s,) = steps((256, 64), (64, 256))  # too few large tiles to fill the SMs
    assert s.entry == "mg_matmul_f32_small" and s.grid == (4, 4, 1)
    (s,) = steps((5, 100, 30), (30, 70), np.float64)
    assert s.entry == "mg_matmul_f64" and s.grid == (2, 8, 1)  # one tall GEMM over the batch
    (s,) = steps((5, 30, 100), (5, 100, 70), np.int64)
    assert s.entry == "mg_matmul_i64" and s.grid == (2, 1, 5)
    assert steps((0, 4), (4, 3)) == []
    (p, q) = steps((128, 1024), (1024, 1024))  # 32 small tiles, k = 1024: split in four
    assert (p.entry, p.grid, q.entry) == ("mg_matmul_f32_split", (16, 2, 4), "mg_matmul_f32_sum")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.int32, np.int64))
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("mnk", [(512, 512, 512), (1000, 130, 70), (3, 5000, 64)])
def test_matmul_on_device(dtype, ta, tb, mnk):
    m, n, k = mnk
    a = _rand(dtype, (k, m) if ta else (m, k), 1)
    b = _rand(dtype, (n, k) if tb else (k, n), 2)
    node, want = _matmul(a, b, transpose_a=ta, transpose_b=tb)
    if np.dtype(dtype).kind == "i":
        assert_close(run_on_device(node, [a, b])[0], want)
    else:
        assert_close_scaled(run_on_device(node, [a, b])[0], want,
                            1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.cuda
@pytest.mark.parametrize("activation", ("none", "relu"))
def test_linear_on_device(activation):
    x, w, bias = (_rand(np.float32, s, i) for i, s in enumerate([(256, 784), (512, 784), (512,)]))
    node = node_of("linear", [x, w, bias], activation=activation)
    assert_close_scaled(run_on_device(node, [x, w, bias])[0],
                        cpu_result(node, [x, w, bias])[0])
