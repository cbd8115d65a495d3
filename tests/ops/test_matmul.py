"""matmul and linear against NumPy: 1-D operands, batch broadcasting, transposes, empty dims."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mgegraph as mg
import mgegraph.functional as F

RNG = np.random.default_rng(0)
ALL = [np.float32, np.float64, np.int32, np.int64]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def data(shape, dtype):
    if np.dtype(dtype).kind == "i":
        return RNG.integers(-5, 6, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def check(out, expected):
    assert out.dtype == expected.dtype and out.shape == expected.shape
    if out.dtype == np.float32:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    elif out.dtype == np.float64:
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(out, expected)


def reference(a, b, ta=False, tb=False):
    a = np.swapaxes(a, -1, -2) if ta and a.ndim >= 2 else a
    b = np.swapaxes(b, -1, -2) if tb and b.ndim >= 2 else b
    if a.dtype.kind == "f":  # reference in float64, rounded once
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    return np.matmul(a, b)


SHAPES = [
    ((3, 4), (4, 5)), ((7, 2), (2, 3)), ((1, 1), (1, 1)), ((1, 4), (4, 1)), ((3, 1), (1, 5)),
    ((1, 6), (6, 9)), ((6, 4), (4, 1)),                                # gemv paths
    ((4,), (4,)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,)),
    ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (1, 4, 5)),  # shared B: one GEMM
    ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 6)), ((1, 3, 2, 4), (2, 1, 4, 3)),
    ((2, 2, 1, 2, 3, 4), (2, 1, 2, 1, 4, 2)),
    ((3, 0), (0, 5)), ((2, 3, 0), (0, 4)), ((0,), (0,)),              # k = 0: zeros
    ((0, 4), (4, 5)), ((3, 4), (4, 0)), ((0, 3, 4), (4, 5)), ((1, 3, 4), (0, 4, 5)),
]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_matches_numpy(sa, sb, dtype):
    a, b = data(sa, dtype), data(sb, dtype)
    check(run(F.matmul, a, b), reference(a, b))


def test_matmul_k0_gives_zeros():
    out = run(F.matmul, np.ones((2, 3, 0), np.float32), np.ones((0, 4), np.float32))
    np.testing.assert_array_equal(out, np.zeros((2, 3, 4), np.float32))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((1, 4), (4, 6)), ((5, 4), (4, 1)),
                                   ((2, 3, 4), (4, 5)), ((3, 4), (2, 1, 4, 5)), ((4,), (4, 5)),
                                   ((2, 1, 3, 4), (3, 4, 2)), ((3, 0), (0, 2))])
def test_matmul_transposes(sa, sb, ta, tb, dtype):
    # sa, sb are the shapes of op(a), op(b); the operands are stored transposed where flagged
    def stored(shape, flag):
        return shape[:-2] + shape[-2:][::-1] if flag and len(shape) >= 2 else shape
    a, b = data(stored(sa, ta), dtype), data(stored(sb, tb), dtype)
    out = run(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)
    check(out, reference(a, b, ta, tb))


def test_matmul_operator_and_promotion():
    a, b = data((2, 3), np.float32), data((3, 4), np.float64)
    check(run(lambda x, y: x @ y, a, b), reference(a.astype(np.float64), b))
    w = data((3, 2), np.float32)
    check(run(lambda x: x @ w, a), reference(a, w))
    xi = data((2, 3), np.int32)
    out = run(lambda x, y: F.matmul(x, y), xi, data((3, 2), np.float32))
    assert out.dtype == np.float64


def test_matmul_rmatmul_with_array():
    x, w = data((3, 4), np.float32), data((2, 3), np.float32)
    check(run(lambda v: w @ v, x), reference(w, x))


@pytest.mark.parametrize("sa,sb,reason", [
    ((3, 4), (5, 6), "contracted dimensions differ"),
    ((4,), (5,), "contracted dimensions differ"),
    ((2, 3, 4), (3, 4, 5), "batch dimensions"),
    ((), (3,), "at least 1 dimension"),
])
def test_matmul_shape_errors(sa, sb, reason):
    g = mg.Graph()
    a, b = g.input("a", sa), g.input("b", sb)
    with pytest.raises(mg.OpError, match=f"matmul.*{reason}"):
        F.matmul(a, b)


def test_matmul_rejects_bool():
    g = mg.Graph()
    a, b = g.input("a", (2, 2), "bool"), g.input("b", (2, 2), "bool")
    with pytest.raises(mg.OpError, match="matmul.*bool"):
        F.matmul(a, b)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_matmul_broadcast_property(draw):
    m, n, k = (draw.draw(st.integers(0, 4)) for _ in range(3))
    ndim = draw.draw(st.integers(0, 3))
    batch = [draw.draw(st.integers(1, 3)) for _ in range(ndim)]
    ba = [d if draw.draw(st.booleans()) else 1 for d in batch][draw.draw(st.integers(0, ndim)):]
    bb = [d if draw.draw(st.booleans()) else 1 for d in batch][draw.draw(st.integers(0, ndim)):]
    ta, tb = draw.draw(st.booleans()), draw.draw(st.booleans())
    dtype = draw.draw(st.sampled_from([np.float64, np.int64]))
    a = data(tuple(ba) + ((k, m) if ta else (m, k)), dtype)
    b = data(tuple(bb) + ((n, k) if tb else (k, n)), dtype)
    out = run(lambda x, y: F.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)
    check(out, reference(a, b, ta, tb))


# -- linear ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xshape", [(5, 4), (2, 3, 4), (4,), (1, 4), (0, 4), (3, 0)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_numpy(xshape, bias, dtype):
    k = xshape[-1]
    x, w, b = data(xshape, dtype), data((6, k), dtype), data((6,), dtype)
    wide = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    out = run(F.linear, x, w, b) if bias else run(F.linear, x, w)
    check(out, wide.astype(dtype))


def test_linear_is_one_node():
    g = mg.Graph()
    x, w, b = g.input("x", (2, 3)), g.input("w", (4, 3)), g.input("b", (4,))
    y = F.linear(x, w, b)
    assert [n.op.name for n in g.nodes if n.op.category != "source"] == ["linear"]
    assert y.shape == (2, 4)


@pytest.mark.parametrize("xs,ws,bs,reason", [
    ((2, 3), (4, 5), None, "in_features=5"),
    ((2, 3), (3,), None, "weight must be 2-D"),
    ((2, 3), (4, 3), (3,), r"bias must have shape \(4,\)"),
])
def test_linear_errors(xs, ws, bs, reason):
    g = mg.Graph()
    x, w = g.input("x", xs), g.input("w", ws)
    b = None if bs is None else g.input("b", bs)
    with pytest.raises(mg.OpError, match=f"linear.*{reason}"):
        F.linear(x, w, b)


def test_linear_rejects_ints():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match="linear"):
        F.linear(g.input("x", (2, 3), "int32"), g.input("w", (4, 3), "int32"))


# -- a single float32 row: gemv_row.h's loops, split by columns among threads ---------------------
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("n,k", [(n, k) for n in (1, 5, 16, 17, 1100) for k in (0, 1, 3, 70)]
                         + [(1030, 600)])  # 2.4 MB: two threads, split by columns
def test_a_single_row_times_a_matrix_on_one_thread_and_two(n, k, tb):
    from threadpoolctl import threadpool_limits

    a = data((1, k), np.float32)
    b = data((n, k) if tb else (k, n), np.float32)
    got = []
    for threads in (1, 2):
        with threadpool_limits(threads):
            got.append(run(lambda x, y: F.matmul(x, y, transpose_b=tb), a, b))
    # float32 sums of k terms: the error grows with k (cancellation to small results)
    want = reference(a, b, tb=tb)
    assert got[0].dtype == want.dtype and got[0].shape == want.shape
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5 + 2e-7 * k)
    assert got[0].tobytes() == got[1].tobytes()


@pytest.mark.parametrize("k", [7, 16, 70, 333])
def test_a_single_rows_dot_products_do_not_depend_on_the_block_a_row_is_in(k):
    # gemv_row.h sums 8 rows of a stored B^T at once and the rest one at a time: dropping B^T's
    # first rows moves every other row to another place in its block, or out of the blocks
    a = data((1, k), np.float32)
    bt = data((29, k), np.float32)
    def product(x, y):
        return F.matmul(x, y, transpose_b=True)

    full = run(product, a, bt)
    for drop in (1, 3, 8, 22):
        part = run(product, a, np.ascontiguousarray(bt[drop:]))
        assert part.tobytes() == full[:, drop:].tobytes()


def _gemv_split_of(plan):
    from mgegraph._kernels import linalg

    (ins,) = [i for i in plan.instructions if i.op == "matmul"]
    return ins.ints[linalg.MATMUL_FIELDS.index("gemv_split")]


# n past gemv_row.h's 1024-column blocks, k from its first split (512) to 4 parts of 500 rows
@pytest.mark.parametrize("n,k", [(1, 4096), (17, 512), (1030, 600), (2100, 2000), (600, 1024)])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_a_single_row_split_by_parts_of_k_gives_the_bits_of_one_thread(n, k, batch):
    # on 2 threads the lowering splits k among them (a workspace for the parts' sums), on 1 the
    # loop sums the same parts in the same order: the same bits, also for a batch of rows that
    # each multiply their own B
    from threadpoolctl import threadpool_limits

    a, b = data((*batch, 1, k), np.float32), data((*batch, k, n), np.float32)
    got, split = [], []
    for threads in (1, 2, 3):
        with threadpool_limits(threads):
            g = mg.Graph()
            plan = mg.compile([F.matmul(g.input("a", a.shape, "float32"),
                                        g.input("b", b.shape, "float32"))])
            split.append(_gemv_split_of(plan))
            got.append(plan.run({"a": a, "b": b})[0])
    # (products of under 2 MiB run on one thread: parallel.GRAIN_BYTES)
    assert split[0] == 0 and split[1] == split[2] == (n * k * 4 >= 2 << 20)
    np.testing.assert_allclose(got[0], reference(a, b), rtol=1e-5, atol=1e-5 + 2e-7 * k)
    assert got[0].tobytes() == got[1].tobytes() == got[2].tobytes()


@pytest.mark.parametrize("k", [511, 512, 1024, 3001, 4096, 4200])
@pytest.mark.parametrize("narrow", [1, 10, 17, 32])
def test_a_narrow_single_row_product_gives_the_bits_of_a_wide_ones_columns(k, narrow):
    # a column's sum in gemv_row.h's rows form is the same in a vector lane or in the scalar
    # tail, in a narrow block or in a wide one, whatever the parts of k
    a, b = data((1, k), np.float32), data((k, 70), np.float32)
    wide = run(F.matmul, a, b)
    part = run(F.matmul, a, np.ascontiguousarray(b[:, :narrow]))
    assert part.tobytes() == np.ascontiguousarray(wide[:, :narrow]).tobytes()
    np.testing.assert_allclose(part, reference(a, b[:, :narrow]), rtol=1e-5, atol=1e-5 + 2e-7 * k)


def test_a_single_row_carries_nan_and_infinities_as_numpy_does():
    a = data((1, 40), np.float32)
    b = data((40, 1030), np.float32)
    a[0, 3] = np.nan
    b[7, 1025] = np.inf  # in the second block of columns
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    got = run(F.matmul, a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    a[0, 3] = 1.0
    got = run(F.matmul, a, b)
    assert np.isinf(got[0, 1025]) and np.isfinite(np.delete(got, 1025)).all()
