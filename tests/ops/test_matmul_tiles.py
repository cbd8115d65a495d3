"""float32 GEMMs on the gather tiles (linalg.pyx's tile_product), where lowering/matmul.py's
tiles_rule sends them: against NumPy for every layout of the operands, partial column blocks
and short row tiles, batches, linear's bias and relu; bitwise the same on one thread and two;
NaN and infinities carried as NumPy carries them."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as KC
from mgegraph._kernels import linalg as KL
from mgegraph._kernels.lowering import matmul as lowering

pytestmark = pytest.mark.skipif("avx512" not in KC.blocked_isas(),
                                reason="the 64-column gather tile needs AVX-512")
RNG = np.random.default_rng(0)


def plan_of(fn, *arrays, optimize=0):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)], optimize=optimize)


def run(fn, *arrays, optimize=0):
    (out,) = plan_of(fn, *arrays, optimize=optimize).run(
        {f"x{i}": a for i, a in enumerate(arrays)})
    return out


def fields(plan, op) -> dict:
    (ins,) = [i for i in plan.instructions if i.op == op]
    return dict(zip(KL.MATMUL_FIELDS if op == "matmul" else KL.LINEAR_FIELDS, ins.ints))


def on_tiles(plan, op) -> bool:
    return bool(fields(plan, op)["tiles"])


def reference(a, b, ta, tb):
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def close(got, want, k):
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 + 2e-7 * k)


def test_the_rule_takes_float32_gemms_wide_and_tall_enough():
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert lowering.tiles_rule(f32, 128, 1024, 784, True)
    assert lowering.tiles_rule(f32, 4, 64, 3, False)
    assert not lowering.tiles_rule(f64, 128, 1024, 784, False)  # float32 only
    assert not lowering.tiles_rule(f32, 3, 1024, 784, False)    # too few rows
    assert not lowering.tiles_rule(f32, 128, 63, 784, False)    # too few columns
    assert not lowering.tiles_rule(f32, 31, 1024, 784, True)    # B^T: its transpose pays at 32
    assert not lowering.tiles_rule(f32, 128, 1024, 0, False)    # k = 0: zeros, the BLAS's way
    assert lowering.tiles_rule(f32, 8, 64, lowering.TILE_MAX_K, False)
    assert not lowering.tiles_rule(f32, 8, 64, lowering.TILE_MAX_K + 1, False)  # workspace
    at_most = lowering.TILE_MAX_K_AT  # a stored A^T: gathered a column of A per step of k
    assert lowering.tiles_rule(f32, 512, 128, at_most, False, transpose_a=True)
    assert not lowering.tiles_rule(f32, 512, 128, at_most + 1, False, transpose_a=True)
    assert lowering.tiles_rule(f32, 512, 128, at_most + 1, False)  # A as stored: the tiles


@pytest.mark.parametrize("op", ["matmul", "addmm"])
def test_a_weight_gradient_over_many_rows_goes_to_the_blas(op):
    # g^T x over the (seq * batch) rows of an unrolled RNN's input projection
    k = lowering.TILE_MAX_K_AT + 1
    g = RNG.standard_normal((k, 70)).astype(np.float32)
    x = RNG.standard_normal((k, 64)).astype(np.float32)
    w = RNG.standard_normal((70, 64)).astype(np.float32)

    def fn(a, b, c):
        product = F.matmul(a, b, transpose_a=True)
        return c - product if op == "addmm" else product + 0 * c

    plan = plan_of(fn, g, x, w, optimize=2)
    (ins,) = [i for i in plan.instructions if i.op == op]
    names = KL.ADDMM_FIELDS if op == "addmm" else KL.MATMUL_FIELDS
    assert dict(zip(names, ins.ints))["tiles"] == 0
    want = reference(g, x, True, False)
    close(run(fn, g, x, w, optimize=2), w - want if op == "addmm" else want, k)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [
    (32, 64, 1),      # one whole block, k = 1
    (33, 100, 17),    # a partial block, a short last row tile
    (40, 130, 70),    # three blocks, the last 2 columns wide
    (128, 256, 256),  # whole tiles but the last rows; k = TILE_MAX_K_AT
])
def test_matmul_on_tiles_matches_numpy(m, n, k, ta, tb):
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(np.float32)

    def fn(x, y):
        return F.matmul(x, y, transpose_a=ta, transpose_b=tb)

    assert on_tiles(plan_of(fn, a, b), "matmul")
    close(run(fn, a, b), reference(a, b, ta, tb), k)


def test_batched_and_broadcast_products_run_each_matrix_on_tiles():
    a = RNG.standard_normal((3, 1, 36, 20)).astype(np.float32)
    b = RNG.standard_normal((2, 20, 70)).astype(np.float32)
    assert on_tiles(plan_of(F.matmul, a, b), "matmul")
    close(run(F.matmul, a, b), reference(a, b, False, False), 20)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_linear_on_tiles_with_its_epilogue(bias, relu):
    x = RNG.standard_normal((2, 19, 50)).astype(np.float32)  # 38 rows
    w = RNG.standard_normal((72, 50)).astype(np.float32)
    arrays = (x, w) + ((RNG.standard_normal(72).astype(np.float32),) if bias else ())

    def fn(*vs):  # the epilogue pass (optimize=1) makes the relu linear's activation
        return F.relu(F.linear(*vs)) if relu else F.linear(*vs)

    got = fields(plan_of(fn, *arrays, optimize=1), "linear")
    assert got["tiles"] and got["activation"] == relu and got["has_bias"] == bias
    want = reference(x, w, False, True) + (arrays[2] if bias else 0)
    if relu:
        want = np.maximum(want, 0)
    close(run(fn, *arrays, optimize=1), want, 50)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_the_same_bits_on_one_thread_and_two(ta, tb):
    m, n, k = 300, 200, 96  # 4 column blocks: rows split among the threads too
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    got = []
    for threads in (1, 2):
        with threadpool_limits(threads):
            got.append(run(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b))
    close(got[0], reference(a, b, ta, tb), k)
    assert got[0].tobytes() == got[1].tobytes()


def test_nan_and_infinities_land_where_numpy_puts_them():
    a = RNG.standard_normal((40, 30)).astype(np.float32)
    b = RNG.standard_normal((30, 130)).astype(np.float32)
    a[5, 3] = np.nan       # row 5 all NaN
    b[7, 129] = np.inf     # column 129 (the last, partial block) infinite where finite
    b[9, 64] = -0.0        # a packed -0 changes nothing
    with np.errstate(invalid="ignore"):
        want = reference(a, b, False, False)
    got = run(F.matmul, a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want[np.isinf(want)]))


def test_a_tiles_plan_has_a_workspace_of_one_block_per_thread():
    a = RNG.standard_normal((64, 80)).astype(np.float32)
    b = RNG.standard_normal((80, 128)).astype(np.float32)
    plan = plan_of(F.matmul, a, b)
    (ins,) = [i for i in plan.instructions if i.op == "matmul"]
    threads = dict(zip(KL.MATMUL_FIELDS, ins.ints))["threads"]
    assert plan.slots[ins.workspace].type.nbytes == threads * 80 * lowering.TILE_COLUMNS * 4
