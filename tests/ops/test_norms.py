"""Group, instance, local response, Lp and mean-variance normalisation against NumPy and
PyTorch, in compiled plans and eagerly, with the errors bad input gets."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.functional.norms import lrn
from mgegraph.ops.builder import apply, apply_multi

RNG = np.random.default_rng(0)
FLOATS = [np.float32, np.float64]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-12}


def normal(shape, dtype, scale=3.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(dtype)


# -- NumPy references (float64) -------------------------------------------------------------------
def ref_group_norm(x, groups, w, b, eps):
    x64 = x.astype(np.float64)
    grouped = x64.reshape(x.shape[0], groups, -1)
    mean, var = grouped.mean(-1, keepdims=True), grouped.var(-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + eps)).reshape(x.shape)
    per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return y * np.reshape(w, per_channel) + np.reshape(b, per_channel) if np.ndim(w) else \
        y * w + b


def ref_lrn(x, size, alpha, beta, k, before):
    x64 = x.astype(np.float64)
    sq = np.square(x64)
    out = np.empty_like(x64)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - before), min(x.shape[1], c - before + size)
        out[:, c] = x64[:, c] / (k + alpha / size * sq[:, lo:hi].sum(1)) ** beta
    return out


# -- group and instance norm ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 3), 3), ((3, 4), 2), ((1, 8, 7), 8),
                                           ((2, 5, 1, 1), 1), ((2, 6, 3, 2, 2), 2)])
def test_group_norm_matches_numpy(dtype, shape, groups):
    x = normal(shape, dtype, shift=4.0)
    w, b = normal(shape[1], dtype, 1.0), normal(shape[1], dtype, 1.0)
    out = run(lambda v, wv, bv: F.nn.group_norm(v, groups, True, wv, bv, eps=1e-3), x, w, b)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref_group_norm(x, groups, w, b, 1e-3), **tol(dtype))
    plain = run(lambda v: F.nn.group_norm(v, groups, affine=False), x)
    np.testing.assert_allclose(plain, ref_group_norm(x, groups, 1.0, 0.0, 1e-5), **tol(dtype))


def test_group_and_instance_norm_match_torch_eagerly():
    torch = pytest.importorskip("torch")
    x = normal((3, 6, 7, 5), np.float32, shift=2.0)
    w, b = normal(6, np.float32, 1.0), normal(6, np.float32, 1.0)
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
    got = F.nn.group_norm(mg.tensor(x), 2, True, mg.tensor(w), mg.tensor(b)).numpy()
    want = torch.nn.functional.group_norm(tx, 2, tw, tb).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = F.nn.instance_norm(mg.tensor(x), True, w, b, eps=1e-3).numpy()
    want = torch.nn.functional.instance_norm(tx, weight=tw, bias=tb, eps=1e-3).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_weight_in_megengine_shape_and_constant_groups():
    x = normal((2, 4, 3, 3), np.float64)
    w = normal((1, 4, 1, 1), np.float64, 1.0)
    out = run(lambda v, wv: F.nn.group_norm(v, 2, True, wv), x, w)
    np.testing.assert_allclose(out, ref_group_norm(x, 2, w, np.zeros(4), 1e-5), **tol(np.float64))
    # a group of equal values normalises to zeros, not NaN
    flat = np.full((2, 4, 3), 7.0, np.float32)
    np.testing.assert_array_equal(run(lambda v: F.nn.group_norm(v, 2), flat), 0.0)


def test_group_norm_errors_name_the_op_and_the_types():
    g = mg.Graph()
    x = g.input("x", (2, 6, 4), "float32")
    with pytest.raises(mg.OpError, match=r"group_norm\(f32\[2,6,4\]\).*num_groups must be an int "
                                         r">= 1 dividing the 6 channels, got 4"):
        F.nn.group_norm(x, 4)
    with pytest.raises(mg.OpError, match=r"group_norm.*got 0"):
        F.nn.group_norm(x, 0)
    with pytest.raises(mg.OpError, match=r"group_norm.*weight must have shape \(6,\)"):
        F.nn.group_norm(x, 3, True, g.input("w", (3,), "float32"))
    with pytest.raises(mg.OpError, match=r"group_norm.*bias dtype float64 differs"):
        F.nn.group_norm(x, 3, True, None, g.input("b", (6,), "float64"))
    with pytest.raises(mg.OpError, match=r"group_norm.*floating-point input, got int32"):
        F.nn.group_norm(g.input("i", (2, 6), "int32"), 3)
    with pytest.raises(mg.OpError, match=r"group_norm.*at least 2 dims"):
        F.nn.group_norm(g.input("v", (6,), "float32"), 3)
    with pytest.raises(mg.OpError, match=r"instance_norm.*at least 3 dims"):
        F.nn.instance_norm(g.input("m", (2, 6), "float32"))
    with pytest.raises(mg.OpError, match=r"test_norms.py:\d+"):  # the user's line
        F.nn.group_norm(x, 5)


# -- local response norm --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, size", [((2, 7, 4, 3), 5), ((3, 4), 3), ((1, 3, 5), 1),
                                         ((2, 2, 3, 3), 5)])
def test_local_response_norm_matches_numpy(dtype, shape, size):
    x = normal(shape, dtype)
    out = run(lambda v: F.nn.local_response_norm(v, size, k=1.5, alpha=0.01, beta=0.6), x)
    # MegEngine's alpha scales the window's sum: alpha * size over the mean
    want = ref_lrn(x, size, 0.01 * size, 0.6, 1.5, size // 2)
    np.testing.assert_allclose(out, want, **tol(dtype))


def test_megengine_lrn_documented_example():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    out = F.nn.local_response_norm(mg.tensor(x), kernel_size=3, k=1.0, alpha=1e-4, beta=0.75)
    np.testing.assert_allclose(out.numpy()[0, 0, 0], [0.0, 0.999925, 1.9994003, 2.9979765,
                                                      3.9952066], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6])
def test_lrn_matches_torch_for_even_and_odd_windows(size):
    torch = pytest.importorskip("torch")
    x = normal((2, 7, 3, 4), np.float32)
    got = lrn(mg.tensor(x), size, 0.05, 0.75, 1.0, size // 2).numpy()
    want = torch.nn.functional.local_response_norm(torch.from_numpy(x), size, 0.05, 0.75, 1.0)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_lrn_errors():
    g = mg.Graph()
    x = g.input("x", (2, 6, 4), "float32")
    with pytest.raises(mg.OpError, match=r"local_response_norm\(f32\[2,6,4\]\).*kernel_size "
                                         r"must be an odd int >= 1, got 4"):
        F.nn.local_response_norm(x, 4)
    with pytest.raises(mg.OpError, match=r"local_response_norm.*window size must be an int"):
        lrn(x, 0, 1e-4, 0.75, 1.0, 0)
    with pytest.raises(mg.OpError, match=r"local_response_norm.*floating-point input"):
        F.nn.local_response_norm(g.input("i", (2, 6), "int64"))


# -- Lp and mean-variance normalisation -----------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ord, axis", [(None, None), (2, 1), (1, -1), (3, (0, 2)),
                                       (np.inf, 0), (0.5, 1)])
def test_normalize_matches_numpy(dtype, ord, axis):
    x = normal((3, 4, 5), dtype)
    out = run(lambda v: F.normalize(v, ord=ord, axis=axis), x)
    p = 2 if ord is None else ord
    a = np.abs(x.astype(np.float64))
    norm = a.max(axis, keepdims=True) if p == np.inf else \
        (a ** p).sum(axis, keepdims=True) ** (1 / p)
    np.testing.assert_allclose(out, x / np.maximum(norm, 1e-12), **tol(dtype))


def test_normalize_matches_torch_and_clips_a_zero_norm():
    torch = pytest.importorskip("torch")
    x = normal((4, 6), np.float32)
    x[1] = 0.0
    got = F.normalize(mg.tensor(x), ord=2, axis=1).numpy()
    want = torch.nn.functional.normalize(torch.from_numpy(x), 2.0, 1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got[1], 0.0)


def test_normalize_errors():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    for bad in (0, -1, "fro", True, np.nan):
        with pytest.raises(mg.OpError, match=r"normalize\(f32\[2,3\]\).*ord must be a number"):
            F.normalize(x, ord=bad)


@pytest.mark.parametrize("axis", [(0, 2, 3), (2, 3), (1,)])
def test_mean_variance_normalization_matches_numpy(axis):
    x = normal((3, 4, 2, 5), np.float64, shift=1.0)
    out = run(lambda v: F.nn.mean_variance_normalization(v, axis), x)
    centred = x - x.mean(axis, keepdims=True)
    want = centred / (np.sqrt(np.square(centred).mean(axis, keepdims=True)) + 1e-9)
    np.testing.assert_allclose(out, want, **tol(np.float64))


def test_megengine_names():
    assert F.nn.group_norm is F.group_norm and F.nn.normalize is F.normalize
    assert F.nn.instance_norm is F.instance_norm
    assert F.nn.local_response_norm is F.local_response_norm


# -- the group_norm op and its kernels ------------------------------------------------------------
def ref_group_norm_grad(x, groups, w, dy, eps):
    """dx, dweight, dbias of group_norm in float64."""
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    n, c = x.shape[:2]
    grouped = x64.reshape(n, groups, -1)
    mean, var = grouped.mean(-1, keepdims=True), grouped.var(-1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    xhat = ((grouped - mean) * rstd).reshape(x.shape)
    axes = (0,) + tuple(range(2, x.ndim))
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    g = (dy64 * w.reshape(per_channel)).reshape(n, groups, -1)
    xh = xhat.reshape(n, groups, -1)
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    return dx.reshape(x.shape), (dy64 * xhat).sum(axes), dy64.sum(axes)


def group_norm_grads(x, groups, w, b, dy, eps=1e-3):
    g = mg.Graph()
    xv, wv, bv, dyv = (g.input(k, a.shape, a.dtype) for k, a in
                       (("x", x), ("w", w), ("b", b), ("dy", dy)))
    y = F.nn.group_norm(xv, groups, True, wv, bv, eps)
    plan = mg.compile([y, *mg.grad(y, [xv, wv, bv], seed=dyv)])
    return plan.run({"x": x, "w": w, "b": b, "dy": dy}), plan


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, groups", [((3, 6, 5, 7), 3), ((2, 4), 4), ((1, 9, 13), 3),
                                           ((5, 2, 1, 1), 1)])
def test_group_norm_backward_matches_numpy(dtype, shape, groups):
    x, dy = normal(shape, dtype, shift=5.0), normal(shape, dtype, 1.0)
    w, b = normal(shape[1], dtype, 1.0), normal(shape[1], dtype, 1.0)
    (y, dx, dw, db), plan = group_norm_grads(x, groups, w, b, dy)
    assert [i.op for i in plan.instructions] == ["group_norm", "group_norm_backward"]
    np.testing.assert_allclose(y, ref_group_norm(x, groups, w, b, 1e-3), **tol(dtype))
    for got, want in zip((dx, dw, db), ref_group_norm_grad(x, groups, w, dy, 1e-3)):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol(dtype)["rtol"] * 10,
                                   atol=1e-4 if dtype == np.float32 else 1e-11)


def test_group_norm_matches_torch_on_odd_sizes_and_far_from_zero():
    torch = pytest.importorskip("torch")
    x = normal((3, 10, 9, 11), np.float32, scale=0.5, shift=100.0)
    w, b, dy = normal(10, np.float32, 1.0), normal(10, np.float32, 1.0), normal(x.shape,
                                                                              np.float32, 1.0)
    (y, dx, dw, db), _ = group_norm_grads(x, 5, w, b, dy, eps=1e-5)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.group_norm(tx, 5, tw, tb, 1e-5)
    ty.backward(torch.from_numpy(dy))
    # with |mean| 200 times the std PyTorch's float32 sums lose digits (dweight's most): both
    # are measured against float64, and ours must be as close or closer
    exact = (ref_group_norm(x, 5, w, b, 1e-5), *ref_group_norm_grad(x, 5, w, dy, 1e-5))
    for got, want, ref in zip((y, dx, dw, db), (ty, tx.grad, tw.grad, tb.grad), exact):
        want = want.detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
        assert np.abs(got - ref).max() <= max(np.abs(want - ref).max(), 1e-6)


def test_group_norm_is_bitwise_the_same_on_one_and_two_threads(monkeypatch):
    x, dy = normal((4, 8, 6, 5), np.float32), normal((4, 8, 6, 5), np.float32)
    w, b = normal(8, np.float32), normal(8, np.float32)
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        _, plan = group_norm_grads(x, 4, w, b, dy)
        monkeypatch.undo()
        assert all(i.ints[-1] == threads for i in plan.instructions)
        with threadpool_limits(limits=threads):
            outs.append(plan.run({"x": x, "w": w, "b": b, "dy": dy}))
    for one, two in zip(*outs):
        np.testing.assert_array_equal(one, two)


def test_group_norm_reads_read_only_inputs_and_takes_an_empty_batch():
    x = normal((2, 4, 3), np.float64)
    w, b = normal(4, np.float64), normal(4, np.float64)
    for a in (x, w, b):
        a.flags.writeable = False
    out = run(lambda v, wv, bv: F.nn.group_norm(v, 2, True, wv, bv), x, w, b)
    np.testing.assert_allclose(out, ref_group_norm(x, 2, w, b, 1e-5), **tol(np.float64))
    for shape in ((0, 4, 3), (2, 4, 0)):  # no samples; samples of no positions
        empty = np.zeros(shape, np.float32)
        (y, dx, dw, db), _ = group_norm_grads(empty, 2, w.astype(np.float32),
                                              b.astype(np.float32), empty)
        assert y.shape == dx.shape == shape
        np.testing.assert_array_equal(dw, 0.0)
        np.testing.assert_array_equal(db, 0.0)


def test_group_norm_op_rule_errors():
    g = mg.Graph()
    x = g.input("x", (2, 6, 4), "float32")
    w = g.input("w", (6,), "float32")
    with pytest.raises(mg.OpError, match=r"group_norm\(f32\[2,6,4\], f32\[6\], f32\[6\]\): "
                                         r"groups must be an int >= 1 dividing the 6 channels"):
        apply("group_norm", (x, w, w), groups=4)
    with pytest.raises(mg.OpError, match=r"group_norm.*bias shape \(3,\) must be \(6,\)"):
        apply("group_norm", (x, w, g.input("b", (3,), "float32")), groups=3)
    with pytest.raises(mg.OpError, match=r"group_norm_backward.*dy must be f32\[2,6,4\]"):
        apply_multi("group_norm_backward", (x, w, g.input("d", (2, 6, 5), "float32")),
                    groups=3)


def test_group_norm_saves_and_loads(tmp_path):
    g = mg.Graph()
    x = g.input("x", (2, 4, 3, 3))
    w = g.param("w", normal(4, np.float32))
    y = F.nn.group_norm(x, 2, True, w, None, 1e-3)
    dx, = mg.grad(F.sum(y * y), [x])
    plan = mg.compile([y, dx])
    data = normal((2, 4, 3, 3), np.float32)
    mg.save(plan, tmp_path / "gn.mgm")
    for got, want in zip(mg.load(tmp_path / "gn.mgm").run({"x": data}), plan.run({"x": data})):
        np.testing.assert_array_equal(got, want)
