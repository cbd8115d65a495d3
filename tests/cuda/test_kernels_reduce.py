"""csrc_cuda/reduce.cu and mgegraph/cuda/kernels/reduce.py: NVRTC compiles, the launch geometry,
the host emulation (one thread per output, and the split launch's parts) against the CPU kernel,
and (marker cuda) every op and dtype on a device against the CPU backend."""
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

from mgegraph.cuda.kernels import reduce as family

OPS = ("sum", "prod", "mean", "var", "max", "min", "argmax", "argmin")
DTYPES = (np.float32, np.float64, np.int32, np.int64, np.bool_)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("reduce.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_ptx_combines_through_warp_shuffles(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    for dt in ("f32", "f64", "i32", "i64", "bool"):
        for step in ("", "_part", "_final"):
            assert f".entry mg_reduce_{dt}{step}(" in ptx
    assert "shfl.sync.bfly" in ptx


def _data(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "i":
        return rng.integers(-5, 6, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _check(op, x, axis):
    node = node_of(op, [x], axis=axis)
    want = cpu_result(node, [x])[0]
    got = emulate(family, node, [x])[0]
    assert_close(got, want, rtol=1e-5 if x.dtype == np.float32 else 1e-12)


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((5, 7), (1,)), ((5, 7), (0,)), ((3, 4, 6), (0, 2)),
                                         ((6,), None), ((2, 3, 4), (1,))])
def test_host_emulation_matches_cpu(op, dtype, shape, axis):
    _check(op, _data(dtype, shape), axis)


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", ("max", "min", "argmax", "argmin", "sum", "mean", "var"))
def test_nan_propagates_and_arg_takes_the_first(op):
    x = np.array([[1, 3, 3, 0], [np.nan, 2, np.nan, 5], [2, 2, -1, -1]], np.float32)
    _check(op, x, (1,))
    _check(op, x.T.copy(), (0,))


@pytest.mark.nvrtc
def test_integer_sums_and_products_wrap():
    x = np.array([[2**62, 2**62, 2**62, 5], [3**30, 3**30, -7, 1]], np.int64)
    _check("sum", x, (1,))
    _check("prod", x, (1,))


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", ("sum", "prod", "mean", "var"))
def test_empty_reduction_gives_the_identity(op):
    _check(op, np.zeros((3, 0), np.float32), (1,))


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", ("sum", "mean", "var", "argmax", "min", "prod"))
def test_split_launch_parts_match_cpu(op):
    # one output of 2**17 elements: eight parts meet in the workspace (var by Chan's formula)
    x = (_data(np.float64, (1 << 17,), seed=3) + 100.0)
    if op == "prod":
        x = 1 + x / 1e7
    x[77_777] = 1e3  # a clear maximum, found in a later part
    node = node_of(op, [x], axis=None)
    launch, _, steps = cuda_launch(family, node)
    assert [s.entry for s in steps] == ["mg_reduce_f64_part", "mg_reduce_f64_final"]
    assert steps[0].grid == (8, 1, 1)
    assert launch.workspace == family.SPLIT_HEADER + 8 * family.PARTIAL_BYTES
    assert_close(emulate(family, node, [x])[0], cpu_result(node, [x])[0], rtol=1e-12)


def _steps(shape, axis, dtype=np.float32):
    x = np.zeros(shape, dtype)
    return cuda_launch(family, node_of("sum", [x], axis=axis))[2]


def test_geometry_follows_the_layout():
    # neighbouring outputs neighbours in memory: a thread each, loads coalesce
    (s,) = _steps((1000, 512), (0,))
    assert s.block == (1, 256, 1) and s.grid == (2, 1, 1)
    # rows of a few elements: a thread each (a warp would idle)
    (s,) = _steps((1000, 4), (1,))
    assert s.block == (1, 256, 1)
    # short rows: a warp each; long rows: a block each
    (s,) = _steps((1000, 100), (1,))
    assert s.block == (32, 8, 1) and s.grid == (125, 1, 1)
    (s,) = _steps((100, 10_000), (1,))
    assert s.block == (256, 1, 1) and s.grid == (100, 1, 1)
    assert _steps((0, 5), (1,)) == []  # nothing to write: no launch
    assert all(s.entry == "mg_reduce_f32" for s in _steps((4, 4), (1,)))


def test_reduce_parts():
    assert family.reduce_parts((0, 0, 1, 1 << 15, 1)) == 0          # too few elements
    assert family.reduce_parts((0, 0, 1, 1 << 16, 1)) == 4
    assert family.reduce_parts((0, 0, 1, 1 << 40, 1)) == family.MAX_PARTS
    assert family.reduce_parts((0, 1, 100, 1, 1, 1 << 20, 100)) == 0  # many outputs


def test_every_cpu_op_and_dtype_has_a_kernel():
    from mgegraph.backend import KernelTable, kernel_name
    table = KernelTable("cuda")
    family.implement(table)
    names = {kernel_name(i.kernel, d) for i in table.impls.values() for d in i.dtypes}
    assert set(table.impls) == set(OPS) and names == set(family.KERNELS)


@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((300, 70), (1,)), ((300, 70), (0,)),
                                         ((4, 5000), (1,)), ((1 << 18,), None),
                                         ((8, 3, 33), (0, 2))])
def test_on_device_matches_cpu(op, dtype, shape, axis):
    x = _data(dtype, shape, seed=5)
    node = node_of(op, [x], axis=axis)
    assert_close(run_on_device(node, [x])[0], cpu_result(node, [x])[0],
                 rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,axis,block", [((3, 5000), (1,), (256, 1, 1)),
                                               ((40, 64), (0,), (1, 256, 1)),
                                               ((50, 9), (1,), (1, 256, 1)),
                                               ((70, 33), (1,), (32, 8, 1))])
def test_every_geometry_emulates_like_cpu(op, shape, axis, block):
    # a block per output (warps combined through shared memory), a thread per output, a warp
    x = _data(np.float32, shape, seed=7)
    x[1, 2] = x.max() + 1  # a unique maximum, away from index 0
    node = node_of(op, [x], axis=axis)
    assert cuda_launch(family, node)[2][0].block == block
    assert_close(emulate(family, node, [x])[0], cpu_result(node, [x])[0])
