"""Group norm's one-pass statistics (sums of x - k, k a group's first value) and its float32
loops (_kernels/group_norm.h): against float64 NumPy and PyTorch on odd sizes (runs that leave
a tail after the 8 lanes), far from zero, on constant groups and a first value far from the mean,
forward and backward, at one and two threads; the float32 and float64 kernels sum in one order."""
import numpy as np
import pytest
from test_norms import ref_group_norm, ref_group_norm_grad
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel

RNG = np.random.default_rng(5)


def reference(x, groups, w, b, dy, eps):
    """y, dx, dweight, dbias in float64."""
    return (ref_group_norm(x, groups, w.astype(np.float64), b.astype(np.float64), eps),
            *ref_group_norm_grad(x, groups, w.astype(np.float64), dy, eps))


def compiled(x, groups, eps, threads=None, monkeypatch=None):
    if threads is not None:
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
    g = mg.Graph()
    xv, dyv = g.input("x", x.shape, x.dtype), g.input("dy", x.shape, x.dtype)
    wv, bv = g.input("w", (x.shape[1],), x.dtype), g.input("b", (x.shape[1],), x.dtype)
    y = F.nn.group_norm(xv, groups, True, wv, bv, eps)
    plan = mg.compile([y, *mg.grad(y, [xv, wv, bv], seed=dyv)])
    if monkeypatch is not None:
        monkeypatch.undo()
    return lambda x, w, b, dy: plan.run({"x": x, "w": w, "b": b, "dy": dy})


def data(shape, dtype, scale, shift):
    x = (RNG.standard_normal(shape) * scale + shift).astype(dtype)
    w, b = RNG.standard_normal((2, shape[1])).astype(dtype)
    return x, w, b, RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 7), 3), ((3, 4, 3, 3), 2), ((1, 5, 17), 5),
                                               ((2, 8, 1), 2), ((4, 3, 5, 5), 1)])
@pytest.mark.parametrize(("scale", "shift"), [(1.0, 0.0), (0.01, 300.0)])
def test_float32_matches_float64_numpy(shape, groups, scale, shift):
    x, w, b, dy = data(shape, np.float32, scale, shift)
    eps = 1e-5
    got = compiled(x, groups, eps)(x, w, b, dy)
    want = reference(x, groups, w, b, dy, eps)
    # the statistics in double; the elementwise passes subtract the mean rounded to float32
    # (PyTorch's precision): a normalised value is off by up to half an ulp of the mean over the
    # std (0.0005 in the second row, |mean| / std = 30,000), a sum over a channel by the root
    # of its count times that
    per_value = 4e-6 + 2.0 ** -24 * shift / scale
    count = x.size // x.shape[1]
    for what, g, r in zip(("y", "dx", "dw", "db"), got, want):
        bound = per_value * (np.abs(r).max() + 1) * {"y": 1, "dx": 1 / scale, "dw": count ** 0.5,
                                                    "db": 1}[what]
        assert np.abs(g - r).max() <= bound, what


def test_float32_and_float64_kernels_take_the_same_sums():
    # the float32 loops (group_norm.h) and the float64 loops (norm.pyx) add the same double
    # values in the same lanes: a float32 input widened to float64 gives the float64 kernel's
    # statistics, so the outputs agree to float32's rounding of the last steps
    x, w, b, dy = data((2, 4, 11, 3), np.float32, 2.0, 7.0)
    got = compiled(x, 2, 1e-5)(x, w, b, dy)
    wide = compiled(x.astype(np.float64), 2, 1e-5)(*(a.astype(np.float64) for a in (x, w, b, dy)))
    for g, v in zip(got, wide):
        np.testing.assert_allclose(g, v, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_constant_group_normalises_to_the_bias(dtype):
    x = np.full((2, 4, 9), 1e4, dtype)
    x[1, 2:] = -3.25
    w, b, dy = np.ones(4, dtype), np.arange(4, dtype=dtype), RNG.standard_normal(x.shape)
    y, dx, dw, db = compiled(x, 2, 1e-5)(x, w, b, dy.astype(dtype))
    np.testing.assert_array_equal(y, np.broadcast_to(b[:, None], x.shape))
    assert np.isfinite(dx).all() and np.isfinite(dw).all()


def test_a_first_value_far_from_the_mean():
    # the shift is one of the group's values: an outlier first leaves s1 / n large, and the
    # variance must still keep its digits
    x, w, b, dy = data((2, 4, 25), np.float32, 1.0, 50.0)
    x[:, 0, 0] = 2000.0
    got = compiled(x, 2, 1e-5)(x, w, b, dy)
    want = reference(x, 2, w, b, dy, 1e-5)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * (np.abs(r).max() + 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_matches_torch_at_one_and_two_threads(threads, monkeypatch):
    torch = pytest.importorskip("torch")
    x, w, b, dy = data((3, 12, 9, 7), np.float32, 1.5, -4.0)
    run = compiled(x, 4, 1e-5, threads, monkeypatch)
    with threadpool_limits(limits=threads):
        got = run(x, w, b, dy)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.group_norm(tx, 4, tw, tb, 1e-5)
    ty.backward(torch.from_numpy(dy))
    for g, t in zip(got, (ty, tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(g, t.detach().numpy(), rtol=1e-4, atol=1e-4)
