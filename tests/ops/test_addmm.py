"""addmm (c + alpha * scale * op(a) @ op(b)) against NumPy: transposes, a scale input, a single
row (gemv), an empty inner dimension, in place over c or into a buffer of its own, float64, both
BLAS libraries, and the shape checks."""
import numpy as np
import pytest
from test_blas_choice import MKL, restore_the_choice  # noqa: F401  (autouse: the BLAS put back)
from threadpoolctl import threadpool_limits

import mgegraph as mg
from mgegraph._kernels import blas_select
from mgegraph.ir.errors import OpError
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(5)
BLAS = ["openblas"] + (["mkl"] if MKL is not None else [])


def expected(c, a, b, ta, tb, alpha, scale):
    a2, b2 = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)
    s = 1.0 if scale is None else float(scale.ravel()[0])
    return c + alpha * s * (a2 @ b2)


def addmm_case(m, n, k, ta, tb, dtype, scaled, keep_c=False, alpha=-1.0):
    """A plan of addmm on inputs, its feeds and the float64 reference; with ``keep_c`` c is also
    an output, so addmm cannot take its bytes over."""
    c = RNG.standard_normal((m, n)).astype(dtype)
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    scale = np.array(0.25, dtype) if scaled else None
    g = mg.Graph()
    gc = g.input("c", c.shape, dtype)
    # c + 0: a temporary addmm may overwrite (an input's own buffer is never written)
    ins = [gc + np.array(0, dtype), g.input("a", a.shape, dtype), g.input("b", b.shape, dtype)]
    feeds = {"c": c, "a": a, "b": b}
    if scaled:
        ins.append(g.input("s", (), dtype))
        feeds["s"] = scale
    y = apply("addmm", tuple(ins), transpose_a=ta, transpose_b=tb, alpha=alpha)
    y = y + np.array(0, dtype)  # addmm's result a temporary, which may take c's bytes over
    outputs = [y, ins[0]] if keep_c else [y]
    plan = mg.compile(outputs, optimize=0)
    return plan, feeds, expected(c, a, b, ta, tb, alpha, scale)


@pytest.mark.parametrize("blas", BLAS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("scaled", [False, True])
def test_addmm_equals_numpy(blas, dtype, ta, tb, scaled):
    blas_select.select(blas)
    plan, feeds, want = addmm_case(37, 70, 45, ta, tb, dtype, scaled)
    with threadpool_limits(2):
        (got,) = plan.run(feeds)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("m,n,k", [(1, 50, 30), (20, 1, 30), (6, 9, 0), (0, 5, 3), (5, 0, 3)])
def test_addmm_thin_and_empty_products(m, n, k):
    plan, feeds, want = addmm_case(m, n, k, False, False, np.float32, True)
    (got,) = plan.run(feeds)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ta", [False, True])
def test_a_single_rows_addmm_split_by_parts_of_k_gives_the_bits_of_one_thread(ta):
    from mgegraph._kernels import linalg

    got, feeds = [], None
    for threads in (1, 2):
        with threadpool_limits(threads):
            plan, case_feeds, case_want = addmm_case(1, 1500, 700, ta, False, np.float32, True)
        feeds, want = (case_feeds, case_want) if feeds is None else (feeds, want)
        (ins,) = [i for i in plan.instructions if i.op == "addmm"]
        assert ins.ints[linalg.ADDMM_FIELDS.index("gemv_split")] == (threads > 1)
        (out,) = plan.run(feeds)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
        got.append(out)
    assert got[0].tobytes() == got[1].tobytes()


def test_addmm_in_place_and_into_its_own_buffer_agree():
    # in place: the output took c's bytes over; kept: c is an output too, so addmm copies it
    plan, feeds, want = addmm_case(64, 48, 32, True, False, np.float32, True)
    kept, _, _ = addmm_case(64, 48, 32, True, False, np.float32, True, keep_c=True)
    (y_place,) = plan.run(feeds)
    y_kept, c_kept = kept.run(feeds)
    def over_c(p):
        (ins,) = [i for i in p.instructions if i.op == "addmm"]
        return p.slots[ins.outputs[0]].offset == p.slots[ins.inputs[0]].offset
    assert over_c(plan) and not over_c(kept)
    np.testing.assert_array_equal(c_kept, feeds["c"])  # c itself unchanged
    np.testing.assert_array_equal(y_kept, y_place)
    np.testing.assert_allclose(y_place, want, rtol=1e-5, atol=1e-5)


def test_an_operand_sharing_cs_buffer_keeps_addmm_out_of_place():
    # addmm(t, t, b): a GEMM reads its operand t throughout, so it may not write over t
    g = mg.Graph()
    x = g.input("x", (16, 16), "float32")
    b = g.input("b", (16, 16), "float32")
    t = x + np.float32(1)
    y = apply("addmm", (t, t, b), alpha=0.5) + np.float32(0)  # addmm's result a temporary
    feeds = {"x": RNG.standard_normal((16, 16)).astype(np.float32),
             "b": RNG.standard_normal((16, 16)).astype(np.float32)}
    plan = mg.compile([y], optimize=0)
    tv = feeds["x"].astype(np.float64) + 1
    np.testing.assert_allclose(plan.run(feeds)[0], tv + 0.5 * tv @ feeds["b"], rtol=1e-5,
                               atol=1e-5)
    (ins,) = [i for i in plan.instructions if i.op == "addmm"]
    assert plan.slots[ins.outputs[0]].offset != plan.slots[ins.inputs[0]].offset


@pytest.mark.parametrize("shapes,why", [
    (((4, 5), (4, 3), (3, 6)), "c must have the product's shape (4, 6)"),
    (((4, 6), (4, 3), (2, 6)), "contracted dimensions differ"),
    (((4, 6), (2, 4, 3), (3, 6)), "a and b must be matrices"),
])
def test_addmm_shape_errors_name_the_op(shapes, why):
    g = mg.Graph()
    ins = tuple(g.input(f"x{i}", s, "float32") for i, s in enumerate(shapes))
    with pytest.raises(OpError, match="addmm") as err:
        apply("addmm", ins)
    assert why in str(err.value)


def test_addmm_refuses_integers_and_a_scale_of_many_values():
    g = mg.Graph()
    i = g.input("i", (2, 2), "int32")
    with pytest.raises(OpError, match="not supported by addmm"):
        apply("addmm", (i, i, i))
    f = g.input("f", (2, 2), "float32")
    with pytest.raises(OpError, match="scale must hold one value"):
        apply("addmm", (f, f, f, g.input("s", (2,), "float32")))
