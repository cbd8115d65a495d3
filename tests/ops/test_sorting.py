"""sort, argsort, topk, cumsum and cumprod (mgegraph/ops/sorting.py, _kernels/sorting.pyx)
against NumPy and PyTorch: odd sizes, ties (stable), NaN (the largest value), k = 1 and k = n,
every numeric dtype, exclusive and reverse scans, the same bits on 1 and 2 threads, bad input."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ir.errors import OpError
from mgegraph.ops.builder import apply, apply_multi

RNG = np.random.default_rng(37)
DTYPES = (np.float32, np.float64, np.int32, np.int64)
SHAPES = ((1,), (7,), (3, 17), (2, 5, 33), (4, 1), (2, 0), (0, 3), (3, 1000))


def sample(shape, dtype, ties=False):
    if np.dtype(dtype).kind == "i" or ties:
        return RNG.integers(-4, 5, shape).astype(dtype)  # many ties
    return RNG.standard_normal(shape).astype(dtype)


def run(fn, *arrays):
    """fn on graph inputs like ``arrays``, compiled unoptimised, run on them (read-only)."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    outs = fn(*xs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    for a in arrays:
        a.setflags(write=False)
    return mg.compile(outs, optimize=0).run({f"x{i}": a for i, a in enumerate(arrays)})


def numpy_order(x, descending):
    """NumPy's stable order with NaN the largest value, either way."""
    if not descending:
        return np.argsort(x, axis=-1, kind="stable")
    # descending and stable: sort the reversed row ascending, map back, reverse
    n = x.shape[-1]
    rev = np.argsort(x[..., ::-1], axis=-1, kind="stable")
    return (n - 1 - rev)[..., ::-1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("descending", (False, True))
def test_sort_is_numpys_stable_sort(shape, dtype, descending):
    x = sample(shape, dtype, ties=True)
    values, indices = run(lambda v: F.sort(v, descending), x)
    order = numpy_order(x, descending)
    assert indices.dtype == np.int32 and values.dtype == x.dtype
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, -1))
    (only,) = run(lambda v: F.argsort(v, descending), x)
    np.testing.assert_array_equal(only, order)


@pytest.mark.parametrize("descending", (False, True))
def test_nan_is_the_largest_value(descending):
    x = np.array([[3.0, np.nan, -1.0, np.nan, np.inf, -np.inf, 0.0, -0.0]], np.float32)
    values, indices = run(lambda v: F.sort(v, descending), x)
    want = [1, 3, 4, 0, 6, 7, 2, 5] if descending else [5, 2, 6, 7, 0, 4, 1, 3]
    np.testing.assert_array_equal(indices[0], want)
    np.testing.assert_array_equal(values[0], x[0, want])
    if not descending:
        np.testing.assert_array_equal(indices[0], np.argsort(x[0], kind="stable"))


@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.int64))
@pytest.mark.parametrize("descending", (False, True))
def test_sort_matches_torch_stable_sort(dtype, descending):
    torch = pytest.importorskip("torch")
    x = sample((5, 129), dtype, ties=True)
    if dtype != np.int64:
        x[1, ::7] = np.nan
    values, indices = run(lambda v: F.sort(v, descending), x)
    want = torch.sort(torch.from_numpy(x.copy()), dim=-1, descending=descending, stable=True)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, k", ((1, 1), (9, 1), (9, 9), (33, 5), (1000, 17)))
@pytest.mark.parametrize("descending", (False, True))
def test_topk_is_the_first_k_of_the_stable_sort(dtype, n, k, descending):
    x = sample((3, n), dtype, ties=n > 9)
    values, indices = run(lambda v: F.topk(v, k, descending=descending), x)
    order = numpy_order(x, descending)[:, :k]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, -1))


@pytest.mark.parametrize("largest", (False, True))
@pytest.mark.parametrize("k", (1, 4, 31))
def test_topk_matches_torch(largest, k):
    torch = pytest.importorskip("torch")
    x = sample((6, 31), np.float32)  # no ties: torch.topk's order of equal values is its own
    values, indices = run(lambda v: F.topk(v, k, descending=largest), x)
    want = torch.topk(torch.from_numpy(x.copy()), k, dim=-1, largest=largest, sorted=True)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())


def test_topk_kth_only_and_no_sort_as_megengine():
    x = np.array([2, 4, 6, 8, 7, 5, 3, 1], np.float32)
    top, idx = F.topk(mg.tensor(x), 5)
    np.testing.assert_array_equal(top.numpy(), [1, 2, 3, 4, 5])  # MegEngine's docstring
    np.testing.assert_array_equal(idx.numpy(), [7, 0, 6, 1, 5])
    kth, at = F.topk(mg.tensor(np.stack([x, -x])), 3, kth_only=True)
    np.testing.assert_array_equal(kth.numpy(), [3, -6])
    np.testing.assert_array_equal(at.numpy(), [6, 2])
    loose, _ = F.topk(mg.tensor(x), 3, descending=True, no_sort=True)
    assert sorted(loose.numpy().tolist()) == [6, 7, 8]


def scan_ref(x, axis, product, exclusive=False, reverse=False):
    """NumPy's sequential cumsum/cumprod in the dtype, with ONNX CumSum's exclusive/reverse."""
    if reverse:
        x = np.flip(x, axis)
    fn = np.cumprod if product else np.cumsum
    y = fn(x, axis=axis, dtype=x.dtype)
    if exclusive:
        first = np.ones_like if product else np.zeros_like
        y = np.concatenate([first(np.take(y, [0], axis)) if x.shape[axis] else
                            np.take(y, [], axis), np.take(y, range(x.shape[axis] - 1), axis)],
                           axis)
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", (((7,), 0), ((3, 17), 1), ((3, 17), 0), ((2, 5, 9), -2),
                                         ((2, 0, 3), 1), ((4, 1, 1), 0)))
@pytest.mark.parametrize("exclusive, reverse", ((False, False), (True, False), (False, True),
                                                (True, True)))
def test_scans_are_numpys_sequential_scans(dtype, shape, axis, exclusive, reverse):
    x = sample(shape, dtype)
    if dtype in (np.float32, np.float64):
        x = (x * 0.5 + 1.0).astype(dtype)  # products neither vanish nor blow up
    for op, product in (("cumsum", False), ("cumprod", True)):
        (got,) = run(lambda v, op=op: apply(op, (v,), axis=axis, exclusive=exclusive,
                                           reverse=reverse),
                     x.copy())
        assert got.dtype == x.dtype
        # the same additions in the same order: NumPy's bits
        np.testing.assert_array_equal(got, scan_ref(x, axis, product, exclusive, reverse))


def test_public_scans_match_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((4, 9, 5))
    x[1, 3, :] = 0.0
    t = torch.from_numpy(x.copy())
    for axis in (0, 1, -1):
        (s, p) = run(lambda v, a=axis: (F.cumsum(v, a), F.cumprod(v, a)), x.copy())
        np.testing.assert_allclose(s, torch.cumsum(t, axis).numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(p, torch.cumprod(t, axis).numpy(), rtol=1e-12, atol=1e-12)


def test_integer_scans_wrap_as_numpy():
    x = np.array([2**30, 2**30, 2**30, 7], np.int32)
    (got,) = run(lambda v: F.cumsum(v, 0), x.copy())
    np.testing.assert_array_equal(got, np.cumsum(x, dtype=np.int32))


@pytest.mark.skipif(not parallel.OPENMP, reason="built without OpenMP")
@pytest.mark.parametrize("fn", (lambda v: F.sort(v)[0], lambda v: F.topk(v, 7, True)[1],
                                lambda v: F.cumsum(v, 1), lambda v: F.cumprod(v, 0)))
def test_one_and_two_threads_give_the_same_bits(fn, monkeypatch):
    x = RNG.standard_normal((37, 301)).astype(np.float32)
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        plan = mg.compile([fn(g.input("x", x.shape))], optimize=0)
        monkeypatch.undo()
        assert plan.instructions[-1].ints[-1] == threads  # the struct's last field
        with threadpool_limits(limits=threads):
            outs.append(plan.run({"x": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("make, words", (
    # (F.topk takes the whole axis for a larger k, MegEngine's rule; the op itself refuses it)
    (lambda g: apply_multi("topk", (g.input("x", (3, 5)),), k=6, descending=False),
     ["topk", "k=6", "5 values", "f32[3,5]"]),
    (lambda g: F.topk(g.input("x", (3, 5)), 0), ["topk", "k must be an int >= 1"]),
    (lambda g: F.topk(g.input("x", (3, 5)), 2.5), ["topk", "k must be an int >= 1, got 2.5"]),
    (lambda g: F.cumsum(g.input("x", (3, 5)), 1.5), ["cumsum", "axis must be an int"]),
    (lambda g: F.sort(g.input("x", ())), ["sort", "scalar"]),
    (lambda g: F.sort(g.input("x", (2, 2**31 + 1))), ["sort", "2147483649 values", "int32 indices cover"]),
    (lambda g: F.sort(g.input("x", (3,), "bool")), ["sort", "bool"]),
    (lambda g: F.argsort(g.input("x", (3,), "uint8")), ["sort", "uint8"]),
    (lambda g: F.cumsum(g.input("x", (3, 4)), 2), ["cumsum", "axis 2", "2-d"]),
    (lambda g: F.cumprod(g.input("x", (3,), "bool"), 0), ["cumprod", "bool"]),
    (lambda g: apply("cumsum", (g.input("x", (3,)),), axis=0, reverse=1), ["reverse", "bool"]),
    (lambda g: apply("cumprod_backward", (g.input("x", (3,)), g.input("d", (4,))), axis=0),
     ["cumprod_backward", "gradient"]),
))
def test_bad_input_is_a_clear_op_error(make, words):
    with pytest.raises(OpError) as info:
        make(mg.Graph())
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert "test_sorting.py" in str(info.value)  # the user's line


def test_gradients_flow_in_eager_mode():
    x = mg.tensor(np.array([[3.0, 1.0, 2.0]], np.float32))
    gm = mg.GradManager().attach([x])
    with gm:
        loss = F.sum(F.topk(x, 2)[0] * mg.tensor(np.array([[10.0, 1.0]], np.float32)))
        gm.backward(loss)
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 10.0, 1.0]])
