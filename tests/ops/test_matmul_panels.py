"""float32 GEMMs on gemm_tile.h's panels, the "tiles" way of an AVX2 CPU (linalg.pyx's
panel_product, the C runtime's GEMM): with the way forced on every product it applies to,
against a float64 NumPy reference on odd sizes and every layout, k past one L1 block, linear's
bias and activations, addmm's epilogue apart and in place; bitwise the same on one thread and
two, and bitwise an emulation of its order (each element's FMAs over k from zero)."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import linalg as KL
from mgegraph._kernels.lowering import matmul as lowering

pytestmark = pytest.mark.skipif(lowering.tiles_isa() != "avx2",
                                reason="the panels are the tiles way of AVX2 CPUs without AVX-512")
RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def panels_forced(monkeypatch):
    """Every float32 GEMM the panels apply to takes them, whatever the fitted rule says."""
    monkeypatch.setattr(lowering, "tiles_rule", lambda dtype, m, n, k, tb, ta=False:
                        lowering.tiles_apply(dtype, m, n, k))


def compiled(fn, *arrays, optimize=0):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)], optimize=optimize)


def run(plan, *arrays):
    (out,) = plan.run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def fields(plan, op) -> dict:
    (ins,) = [i for i in plan.instructions if i.op == op]
    names = {"matmul": KL.MATMUL_FIELDS, "linear": KL.LINEAR_FIELDS, "addmm": KL.ADDMM_FIELDS}
    return dict(zip(names[op], ins.ints))


def op_of(x, transposed):
    return np.swapaxes(x, -1, -2) if transposed else x


def close(got, want, k):
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 + 2e-7 * k)


def fma_order(a, b):
    """op(A) op(B) summed over k from zero, each step a fused multiply-add (exact product in
    float64, then rounded; a double rounding that differs from the FMA once in ~2^29 steps)."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for p in range(a.shape[1]):
        c = (a[:, p:p + 1].astype(np.float64) * b[p].astype(np.float64) + c).astype(np.float32)
    return c


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [
    (2, 1, 1),        # one column of a panel, k = 1
    (7, 17, 3),       # a short row tile, a panel and a column
    (33, 100, 257),   # k past one L1 block (256 steps on AVX2)
    (61, 48, 300),    # whole panels, rows 6 x 10 + 1
    (300, 129, 40),   # many row blocks, a panel of one column
])
def test_matmul_on_panels_matches_numpy(m, n, k, ta, tb):
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    plan = compiled(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)
    assert fields(plan, "matmul")["tiles"]
    got = run(plan, a, b)
    close(got, op_of(a, ta).astype(np.float64) @ op_of(b, tb).astype(np.float64), k)
    np.testing.assert_array_equal(got.view(np.uint32), fma_order(op_of(a, ta), op_of(b, tb))
                                  .view(np.uint32))


def test_batched_and_broadcast_products_run_each_matrix_on_panels():
    a = RNG.standard_normal((3, 1, 36, 20)).astype(np.float32)
    b = RNG.standard_normal((2, 20, 70)).astype(np.float32)
    plan = compiled(F.matmul, a, b)
    assert fields(plan, "matmul")["tiles"]
    close(run(plan, a, b), np.matmul(a.astype(np.float64), b), 20)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("act", ["none", "relu", "relu6"])
def test_linear_on_panels_with_its_epilogue(bias, act):
    x = RNG.standard_normal((2, 19, 290)).astype(np.float32) * 0.5  # 38 rows, 2 k blocks
    w = RNG.standard_normal((75, 290)).astype(np.float32) * 0.5
    arrays = (x, w) + ((RNG.standard_normal(75).astype(np.float32),) if bias else ())
    activation = {"none": lambda v: v, "relu": F.relu, "relu6": F.relu6}[act]
    plan = compiled(lambda *vs: activation(F.linear(*vs)), *arrays, optimize=1)
    got = fields(plan, "linear")
    assert got["tiles"] and got["activation"] == ("none", "relu", "relu6").index(act)
    assert got["has_bias"] == bias
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (arrays[2] if bias else 0)
    want = np.clip(want, 0, 6 if act == "relu6" else None) if act != "none" else want
    close(run(plan, *arrays), want, 290)


@pytest.mark.parametrize("op", ["sub", "add"])
@pytest.mark.parametrize("k", [30, 300])  # one k block and several (an addmm takes k whole)
def test_addmm_on_panels_rounds_as_the_ops_it_replaces(op, k):
    c = RNG.standard_normal((45, 70)).astype(np.float32)
    a = RNG.standard_normal((k, 45)).astype(np.float32)
    b = RNG.standard_normal((k, 70)).astype(np.float32)

    def fn(x, y, z):  # the accumulate pass (optimize=2) makes it one addmm, c its output
        product = F.matmul(y, z, transpose_a=True)
        return x - product if op == "sub" else x + product

    plan = compiled(fn, c, a, b, optimize=2)
    assert fields(plan, "addmm")["tiles"]
    product = fma_order(a.T, b)
    want = c - product if op == "sub" else c + product
    np.testing.assert_array_equal(run(plan, c, a, b).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_the_same_bits_on_one_thread_and_two(ta, tb):
    m, n, k = 300, 200, 260  # rows and panels split among the threads, two k blocks
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    got = []
    for threads in (1, 2):
        with threadpool_limits(threads):
            plan = compiled(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)
            assert fields(plan, "matmul")["threads"] == threads
            got.append(run(plan, a, b))
    close(got[0], op_of(a, ta).astype(np.float64) @ op_of(b, tb).astype(np.float64), k)
    np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))


def test_nan_and_infinities_land_where_numpy_puts_them():
    a = RNG.standard_normal((40, 30)).astype(np.float32)
    b = RNG.standard_normal((30, 130)).astype(np.float32)
    a[5, 3] = np.nan       # row 5 all NaN
    b[7, 129] = np.inf     # column 129 (a panel of one column) infinite where finite
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b
    got = run(compiled(F.matmul, a, b), a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want[np.isinf(want)]))


@pytest.mark.parametrize("n,rows", [(130, 66), (40, 0)])
def test_a_panels_plan_has_a_workspace_of_op_b_packed_and_op_a_where_it_pays(n, rows):
    # op(B) in panels of 16 (9 of them for 130 columns, 3 for 40); op(A) in row tiles of 6
    # (64 rows take 11 tiles, 66 rows) where 4 panels or more read it; then a flag for each
    # panel and row tile, marking it packed
    a = RNG.standard_normal((64, 80)).astype(np.float32)
    b = RNG.standard_normal((80, n)).astype(np.float32)
    plan = compiled(F.matmul, a, b)
    (ins,) = [i for i in plan.instructions if i.op == "matmul"]
    panels = -(-n // 16)
    want = 80 * (panels * 16 + rows) * 4 + (panels + 11) * 4
    assert plan.slots[ins.workspace].type.nbytes == KL.panels_bytes(64, n, 80) == want


def test_the_panels_apply_while_their_workspace_is_bounded():
    f32 = np.dtype(np.float32)
    assert lowering.tiles_apply(f32, 64, 1024, 1024)
    assert not lowering.tiles_apply(f32, 4096, 1024, 1024)  # 16 MiB of A packed, and B's 4
    assert not lowering.tiles_apply(f32, 64, 1024, 0)       # k = 0: zeros, the BLAS's way
    assert not lowering.tiles_apply(np.dtype(np.float64), 64, 1024, 1024)


def test_the_rule_takes_a_few_rows_of_a_transposed_a_and_short_ks(monkeypatch):
    monkeypatch.undo()  # the fitted rule, not the forced one
    f32 = np.dtype(np.float32)
    assert lowering.tiles_rule(f32, 10, 1024, 128, False, transpose_a=True)  # a weight gradient
    assert lowering.tiles_rule(f32, 128, 1024, 10, False)  # an input gradient through 10
    assert not lowering.tiles_rule(f32, 17, 1024, 128, False, transpose_a=True)
    assert not lowering.tiles_rule(f32, 10, 63, 128, False, transpose_a=True)  # a few columns
    assert not lowering.tiles_rule(f32, 4, 1024, 784, True)  # nn.Linear at batch 4: OpenBLAS
    assert not lowering.tiles_rule(f32, 128, 1024, 1024, False)  # OpenBLAS's own kernel is faster
    assert not lowering.tiles_rule(f32, 1, 1024, 10, True)  # a single row: the GEMV
