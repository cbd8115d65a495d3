"""NN ops against NumPy references: softmax, log_softmax, cross_entropy, layer_norm, batch_norm,
dropout, and the backward ops their gradient rules use."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply, apply_multi

RNG = np.random.default_rng(0)
FLOATS = [np.float32, np.float64]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    outs = fn(*xs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    got = mg.compile(outs).run({f"x{i}": a for i, a in enumerate(arrays)})
    return got if len(got) > 1 else got[0]


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-13}


def normal(shape, dtype, scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


# -- NumPy references (float64) -------------------------------------------------------------------
@np.errstate(all="ignore")  # empty inputs and log(0) are part of the cases
def ref_log_softmax(x, axis):
    x = x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True) if x.size else 0
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def ref_softmax(x, axis):
    return np.exp(ref_log_softmax(x, axis))


@np.errstate(all="ignore")
def ref_cross_entropy(pred, label, axis, with_logits, ls, reduction):
    logp = ref_log_softmax(pred, axis) if with_logits else np.log(pred.astype(np.float64))
    logp = np.moveaxis(logp, axis, -1)
    picked = np.take_along_axis(logp, label[..., None].astype(np.int64), -1)[..., 0]
    loss = -(1 - ls) * picked - (ls * logp.mean(-1) if ls else 0)
    return {"none": loss, "sum": loss.sum(),
            "mean": loss.sum() / loss.size if loss.size else np.nan}[reduction]


def ref_layer_norm(x, k, w, b, eps):
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def ref_batch_norm(x, mean, var, w, b, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x = x.astype(np.float64)
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * w.reshape(shape)
            + b.reshape(shape))


# -- softmax / log_softmax ------------------------------------------------------------------------
SOFTMAX_CASES = [((5,), None, 0), ((3, 4), None, 1), ((2, 3, 4), None, 0), ((2, 3, 4, 5), None, 1),
                 ((2, 3, 4), -1, 2), ((2, 3, 4), 1, 1), ((3, 7, 300), 1, 1), ((300, 3), 0, 0),
                 ((1,), 0, 0), ((), None, 0), ((3, 0), 1, 1), ((0, 3), 1, 1), ((4, 1, 2), 1, 1)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis,resolved", SOFTMAX_CASES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_matches_numpy(name, dtype, shape, axis, resolved):
    x = normal(shape, dtype)
    out = run(lambda v: getattr(F, name)(v, axis=axis), x)
    ref = (ref_softmax if name == "softmax" else ref_log_softmax)(x, resolved if shape else None)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(out, ref, **tol(dtype))


def test_softmax_is_stable_and_alias_exists():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    np.testing.assert_allclose(run(lambda v: F.softmax(v, axis=1), x), ref_softmax(x, 1),
                               rtol=1e-6)
    np.testing.assert_allclose(run(lambda v: F.logsoftmax(v, axis=1), x), ref_log_softmax(x, 1),
                               rtol=1e-6)
    assert F.logsoftmax is F.log_softmax


def test_softmax_build_errors():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    with pytest.raises(mg.OpError, match=r"softmax\(f32\[2,3\]\).*out of range.*test_nn.py"):
        F.softmax(x, axis=2)
    with pytest.raises(mg.OpError, match=r"log_softmax\(i32\[2\]\).*int32 is not supported"):
        F.log_softmax(g.input("i", (2,), "int32"))
    y = F.softmax(x, axis=-1)  # the axis is stored normalised
    assert str(g).splitlines()[-1] == f"%{y.id}:f32[2,3] = softmax[axis=1] %0"


# -- cross entropy --------------------------------------------------------------------------------
CE_CASES = [((6, 5), 1), ((6, 5), -1), ((5,), 0), ((2, 4, 3, 3), 1), ((3, 2, 300), 1),
            ((0, 4), 1), ((4, 1), 1)]


@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,axis", CE_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_with_logits(dtype, shape, axis, reduction, label_dtype):
    pred = normal(shape, dtype)
    a = axis % len(shape)
    label = RNG.integers(0, shape[a], shape[:a] + shape[a + 1:]).astype(label_dtype)
    for ls in (0.0, 0.1):
        out = run(lambda p, y: F.cross_entropy(p, y, axis=axis, label_smooth=ls,
                                               reduction=reduction), pred, label)
        want = ref_cross_entropy(pred, label, a, True, ls, reduction)
        assert out.dtype == dtype and out.shape == np.shape(want)
        np.testing.assert_allclose(out, want, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_with_probabilities(dtype):
    prob = ref_softmax(normal((7, 4), np.float64), 1).astype(dtype)
    prob[0, 3] = 0  # an unused zero probability must not poison the loss without smoothing
    label = np.array([1, 0, 3, 2, 2, 1, 0], np.int64)
    for ls in (0.0, 0.2):
        if ls:
            prob[0, 3] = 0.01
        out = run(lambda p, y: F.cross_entropy(p, y, with_logits=False, label_smooth=ls,
                                               reduction="none"), prob, label)
        np.testing.assert_allclose(out, ref_cross_entropy(prob, label, 1, False, ls, "none"),
                                   **tol(dtype))
    assert np.isfinite(out).all()


@pytest.mark.parametrize("bad", [5, -1])
def test_cross_entropy_label_out_of_range_is_a_kernel_error(bad):
    g = mg.Graph()
    p = g.input("p", (3, 5), "float32")
    y = g.input("y", (3,), "int32")
    plan = mg.compile([F.cross_entropy(p, y)])
    with pytest.raises(mg.KernelError, match=r"cross_entropy.*out of range"):
        plan.run({"p": np.zeros((3, 5), np.float32), "y": np.array([0, bad, 1], np.int32)})


def test_cross_entropy_build_errors():
    g = mg.Graph()
    p = g.input("p", (3, 5), "float32")
    with pytest.raises(mg.OpError, match=r"cross_entropy.*label shape \(5,\)"):
        F.cross_entropy(p, g.input("a", (5,), "int32"))
    with pytest.raises(mg.OpError, match=r"cross_entropy.*label dtype float32"):
        F.cross_entropy(p, g.input("b", (3,), "float32"))
    y = g.input("y", (3,), "int64")
    with pytest.raises(mg.OpError, match="reduction must be one of"):
        F.cross_entropy(p, y, reduction="avg")
    with pytest.raises(mg.OpError, match="label_smooth must be in"):
        F.cross_entropy(p, y, label_smooth=1.5)
    with pytest.raises(mg.OpError, match="out of range"):
        F.cross_entropy(p, y, axis=2)


# -- layer norm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,norm", [((4, 6), 6), ((2, 3, 4, 5), (4, 5)), ((3, 1), (1,)),
                                        ((5,), (5,)), ((0, 3), 3), ((2, 700), (700,))])
def test_layer_norm_matches_numpy(dtype, shape, norm):
    k = 1 if isinstance(norm, int) else len(norm)
    nshape = shape[len(shape) - k:]
    x = normal(shape, dtype) + 5
    w, b = normal(nshape, dtype, 1.0), normal(nshape, dtype, 1.0)
    out = run(lambda v, wv, bv: F.layer_norm(v, norm, weight=wv, bias=bv, eps=1e-3), x, w, b)
    np.testing.assert_allclose(out, ref_layer_norm(x, k, w, b, 1e-3), **tol(dtype))
    plain = run(lambda v: F.layer_norm(v, norm, affine=False), x)
    np.testing.assert_allclose(plain, ref_layer_norm(x, k, 1.0, 0.0, 1e-5), **tol(dtype))


def test_layer_norm_build_errors():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4), "float32")
    with pytest.raises(mg.OpError, match=r"layer_norm.*normalized_shape \(3,\) does not match"):
        F.layer_norm(x, 3)
    with pytest.raises(mg.OpError, match=r"layer_norm.*weight shape \(3,\)"):
        F.layer_norm(x, 4, weight=g.input("w", (3,), "float32"))
    with pytest.raises(mg.OpError, match=r"layer_norm.*bias dtype float64"):
        F.layer_norm(x, 4, bias=g.input("b", (4,), "float64"))


# -- batch norm -----------------------------------------------------------------------------------
# M (elements per sample and channel) of 1, below, at and past the 4 and 8 lanes of the sums;
# more channels than one chunk (256) with M > 1
BN_SHAPES = [(8, 3), (4, 3, 5, 5), (2, 300), (3, 2, 7), (2, 4, 1, 1), (5, 1), (2, 3, 8, 8),
             (3, 260, 5), (2, 4, 37, 3)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_training_uses_batch_statistics(dtype, shape):
    c = shape[1]
    x = normal(shape, dtype) + 10  # a large mean: a one-pass variance would lose digits
    w, b = normal((c,), dtype, 1.0), normal((c,), dtype, 1.0)
    axes = (0,) + tuple(range(2, len(shape)))
    mean, var = x.astype(np.float64).mean(axes), x.astype(np.float64).var(axes)

    def build(v, wv, bv):
        y = F.batch_norm(v, weight=wv, bias=bv, training=True, eps=1e-3)
        return [y, y.node.outputs[1], y.node.outputs[2]]

    y, m, s = run(build, x, w, b)
    np.testing.assert_allclose(m, mean, **tol(dtype))
    np.testing.assert_allclose(s, var, **tol(dtype))
    # y is normalised with the statistics as returned, rounded to x's dtype (as PyTorch's CPU
    # kernel does): remat remakes y from them bitwise.
    np.testing.assert_allclose(y, ref_batch_norm(x, m, s, w, b, 1e-3), **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_on_its_saved_statistics_remakes_its_output_bitwise(dtype, shape):
    # what rematerialisation relies on to remake a training batch norm in one pass
    c = shape[1]
    x = normal(shape, dtype) + 3
    w, b = normal((c,), dtype, 1.0), normal((c,), dtype, 1.0)

    def build(v, wv, bv):
        y, mean, var = F.batch_norm(v, weight=wv, bias=bv, training=True).node.outputs
        return [y, F.batch_norm(v, mean, var, wv, bv, training=False)]

    y, remade = run(build, x, w, b)
    np.testing.assert_array_equal(remade, y)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_inference_uses_running_statistics(dtype, shape):
    c = shape[1]
    param_shape = (1, c) + (1,) * (len(shape) - 2)
    x = normal(shape, dtype)
    rm, rv = normal(param_shape, dtype, 1.0), np.abs(normal(param_shape, dtype, 1.0)) + 0.5
    w, b = normal((c,), dtype, 1.0), normal((c,), dtype, 1.0)
    out = run(lambda *v: F.batch_norm(*v, training=False), x, rm, rv, w, b)
    np.testing.assert_allclose(out, ref_batch_norm(x, rm, rv, w, b, 1e-5), **tol(dtype))
    plain = run(lambda v, m, s: F.batch_norm(v, m, s), x, rm, rv)  # no affine: ones and zeros
    np.testing.assert_allclose(plain, ref_batch_norm(x, rm, rv, np.ones(c), np.zeros(c), 1e-5),
                               **tol(dtype))


def test_batch_norm_build_errors():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4, 4), "float32")
    with pytest.raises(mg.OpError, match=r"batch_norm.*needs running_mean and running_var"):
        F.batch_norm(x)
    with pytest.raises(mg.OpError, match=r"batch_norm.*weight shape \(4,\)"):
        F.batch_norm(x, training=True, weight=g.input("w", (4,), "float32"))
    with pytest.raises(mg.OpError, match=r"batch_norm\(f32\[3\].*at least 2-d"):
        F.batch_norm(g.input("v", (3,), "float32"), training=True)
    with pytest.raises(mg.OpError, match=r"batch_norm.*running_var dtype float64"):
        F.batch_norm(x, np.zeros(3, np.float32), g.input("rv", (3,), "float64"))


# -- dropout --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_is_inverted_and_deterministic(dtype):
    x = (RNG.random(200_000) + 0.5).astype(dtype)
    p = 0.3
    a, b, c = run(lambda v: [F.dropout(v, p, seed=1), F.dropout(v, p, seed=1),
                             F.dropout(v, p, seed=2)], x)
    np.testing.assert_array_equal(a, b)
    kept = a != 0
    assert (kept != (c != 0)).mean() > 0.3  # another seed, another mask
    assert abs(kept.mean() - (1 - p)) < 0.005
    np.testing.assert_array_equal(a[kept], x[kept] * dtype(1 / (1 - p)))  # exact scaling
    again = run(lambda v: F.dropout(v, p, seed=1), x)  # a fresh plan gives the same mask
    np.testing.assert_array_equal(again, a)


def test_dropout_off_returns_the_input_and_extremes():
    g = mg.Graph()
    x = g.input("x", (4, 5), "float32")
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    xv = np.ones((4, 5), np.float32)
    np.testing.assert_array_equal(run(lambda v: F.dropout(v, 1.0), xv), np.zeros((4, 5)))
    assert run(lambda v: F.dropout(v, 0.5), np.zeros((0, 3), np.float32)).shape == (0, 3)
    with pytest.raises(mg.OpError, match=r"dropout\(f32\[4,5\]\).*drop_prob must be in"):
        F.dropout(x, 1.5)
    with pytest.raises(mg.OpError, match=r"dropout.*int64 is not supported"):
        F.dropout(g.input("i", (3,), "int64"), 0.5)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(-2**63, 2**64 - 1), p=st.floats(0.05, 0.95))
def test_dropout_mask_depends_only_on_seed_and_index(seed, p):
    x = np.ones(4096, np.float32)
    whole = run(lambda v: F.dropout(v, p, seed=seed), x)
    half = run(lambda v: F.dropout(v, p, seed=seed), x[:2048])
    np.testing.assert_array_equal(whole[:2048], half)
    assert set(np.unique(whole)) <= {0.0, np.float32(1 / (1 - p))}


# -- backward ops ---------------------------------------------------------------------------------
def ref_cross_entropy_grad(pred, label, axis, with_logits, ls, reduction, dloss):
    p = np.moveaxis(pred.astype(np.float64), axis, -1)
    c = p.shape[-1]
    target = (1 - ls) * np.eye(c)[label] + ls / c
    scale = {"none": np.asarray(dloss, np.float64)[..., None], "sum": dloss,
             "mean": dloss / max(label.size, 1)}[reduction]
    if with_logits:
        d = (ref_softmax(p, -1) - target) * scale
    else:
        d = np.where(target == 0, 0.0, -target / p) * scale
    return np.moveaxis(d, -1, axis)


@pytest.mark.parametrize("with_logits", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,axis", [((6, 5), 1), ((2, 4, 3), 1), ((3, 2, 300), 1), ((0, 4), 1),
                                        ((5,), 0)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_backward_matches_numpy(dtype, shape, axis, reduction, with_logits):
    a = axis % len(shape)
    pred = normal(shape, dtype)
    if not with_logits:
        pred = ref_softmax(pred, a).astype(dtype)
    label = RNG.integers(0, shape[a], shape[:a] + shape[a + 1:]).astype(np.int32)
    dloss = normal(label.shape if reduction == "none" else (), dtype, 1.0)
    for ls in (0.0, 0.1):
        attrs = dict(axis=a, with_logits=with_logits, label_smooth=ls, reduction=reduction)
        out = run(lambda p, y, d: apply("cross_entropy_backward", (p, y, d), **attrs),
                  pred, label, dloss)
        want = ref_cross_entropy_grad(pred, label, a, with_logits, ls, reduction, dloss)
        assert out.dtype == dtype and out.shape == shape
        np.testing.assert_allclose(out, want, rtol=tol(dtype)["rtol"] * 10, atol=tol(dtype)["atol"])


def test_cross_entropy_backward_errors():
    g = mg.Graph()
    p, y = g.input("p", (3, 5), "float32"), g.input("y", (3,), "int64")
    with pytest.raises(mg.OpError, match=r"_backward.*loss gradient must be f32\[\]"):
        apply("cross_entropy_backward", (p, y, p))
    plan = mg.compile([apply("cross_entropy_backward", (p, y, g.input("e", (), "float32")))])
    with pytest.raises(mg.KernelError, match="out of range"):
        plan.run({"p": np.zeros((3, 5), np.float32), "y": np.array([0, 5, 1]),
                  "e": np.float32(1)})


def ref_layer_norm_grad(x, k, w, dy, eps):
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    rstd = 1 / np.sqrt(x.var(axes, keepdims=True) + eps)
    xhat = (x - x.mean(axes, keepdims=True)) * rstd
    gw = dy * w
    dx = rstd * (gw - gw.mean(axes, keepdims=True) - xhat * (gw * xhat).mean(axes, keepdims=True))
    rows = tuple(range(x.ndim - k))
    return dx, (dy * xhat).sum(rows), dy.sum(rows)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,k", [((4, 6), 1), ((2, 3, 4, 5), 2), ((3, 1), 1), ((5,), 1),
                                     ((0, 3), 1), ((2, 700), 1)])
def test_layer_norm_backward_matches_numpy(dtype, shape, k):
    nshape = shape[len(shape) - k:]
    x, dy, w = normal(shape, dtype) + 5, normal(shape, dtype, 1.0), normal(nshape, dtype, 1.0)
    got = run(lambda *v: apply_multi("layer_norm_backward", v, normalized_shape=nshape,
                                     eps=1e-3), x, w, dy)
    for out, want in zip(got, ref_layer_norm_grad(x, k, w, dy, 1e-3)):
        assert out.dtype == dtype
        np.testing.assert_allclose(out, want, rtol=tol(dtype)["rtol"] * 10, atol=1e-5
                                   if dtype == np.float32 else 1e-12)


def ref_batch_norm_grad(x, w, dy, eps):
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    rstd = 1 / np.sqrt(x.var(axes, keepdims=True) + eps)
    xhat = (x - x.mean(axes, keepdims=True)) * rstd
    db, dw = dy.sum(axes), (dy * xhat).sum(axes)
    n = x.size // x.shape[1]
    dx = w.reshape(shape) * rstd * (dy - db.reshape(shape) / n - xhat * dw.reshape(shape) / n)
    return dx, dw, db


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_backward_matches_numpy(dtype, shape):
    c = shape[1]
    x, dy, w = normal(shape, dtype) + 10, normal(shape, dtype, 1.0), normal((c,), dtype, 1.0)

    def build(v, wv, d):
        y = F.batch_norm(v, weight=wv, training=True, eps=1e-3)
        mean, var = y.node.outputs[1:]
        return apply_multi("batch_norm_backward", (v, wv, mean, var, d), eps=1e-3)

    for out, want in zip(run(build, x, w, dy), ref_batch_norm_grad(x, w, dy, 1e-3)):
        assert out.dtype == dtype
        np.testing.assert_allclose(out, want, rtol=tol(dtype)["rtol"] * 10, atol=1e-5
                                   if dtype == np.float32 else 1e-11)


def test_norm_backward_errors():
    g = mg.Graph()
    x, w = g.input("x", (2, 3), "float32"), g.input("w", (3,), "float32")
    with pytest.raises(mg.OpError, match=r"layer_norm_backward.*dy must be f32\[2,3\]"):
        apply_multi("layer_norm_backward", (x, w, w), normalized_shape=(3,))
    with pytest.raises(mg.OpError, match=r"batch_norm_backward.*mean must be the batch statistic"):
        apply_multi("batch_norm_backward", (x, w, x, w, x))
