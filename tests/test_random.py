"""mgegraph.random (MegEngine's megengine.random): reproducible streams, the distributions
against SciPy's (Kolmogorov-Smirnov on fixed seeds), draws inside traces, and bad input."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import random as R
from mgegraph.jit import trace

stats = pytest.importorskip("scipy.stats")
N = 20000


def _ks(sample, cdf, *args):
    return stats.kstest(np.ravel(sample), cdf, args=args).pvalue


def test_seed_restarts_the_default_stream_and_rngs_of_one_seed_agree():
    R.seed(10)
    a, b = R.uniform(size=(10, 10)).numpy(), R.uniform(size=(10, 10)).numpy()
    R.seed(10)
    np.testing.assert_array_equal(R.uniform(size=(10, 10)).numpy(), a)
    assert not (a == b).all()
    m1, m2, m3 = R.RNG(111), R.RNG(111), R.RNG(222)
    x1, x2, x3 = (m.normal(size=(100,)).numpy() for m in (m1, m2, m3))
    np.testing.assert_array_equal(x1, x2)
    assert not (x1 == x3).all() and not (x1 == m1.normal(size=(100,)).numpy()).all()
    assert R.uniform().shape == (1,) and R.uniform().dtype == np.float32


def test_the_distributions_match_scipys():
    rng = R.RNG(3)
    assert _ks(rng.uniform(-2, 3, size=(N,)).numpy(), "uniform", -2, 5) > 1e-3
    assert _ks(rng.normal(1, 2, size=(N,)).numpy(), "norm", 1, 2) > 1e-3
    assert _ks(rng.exponential(2.0, size=(N,)).numpy(), "expon", 0, 0.5) > 1e-3
    for shape in (0.3, 1.0, 2.5, 30.0):
        assert _ks(rng.gamma(shape, 1.5, size=(N,)).numpy(), "gamma", shape, 0, 1.5) > 1e-3
    assert _ks(rng.beta(2.0, 0.8, size=(N,)).numpy(), "beta", 2.0, 0.8) > 1e-3
    for lam in (0.5, 4.0, 40.0):  # Knuth's product below 10, PTRS above
        counts = rng.poisson(lam, size=(N,)).numpy()
        assert counts.dtype == np.float32 and (counts == np.round(counts)).all()
        support = np.arange(int(lam * 3 + 10))
        want = stats.poisson.pmf(support, lam) * N
        got = np.bincount(counts.astype(int), minlength=support.size)[:support.size]
        keep = want > 5  # chi-square over the cells expected to hold more than five
        assert stats.chisquare(got[keep], want[keep] * got[keep].sum() / want[keep].sum()
                               ).pvalue > 1e-3


def test_tensor_parameters_broadcast_after_size():
    rng = R.RNG(4)
    shape = mg.tensor(np.array([[2, 3, 4], [9, 10, 11]], np.float32))
    scale = mg.tensor(np.array([0.5, 1, 1.5], np.float32))
    out = rng.gamma(shape, scale, size=(2000,))
    assert out.shape == (2000, 2, 3)
    mean = out.numpy().mean(axis=0)
    np.testing.assert_allclose(mean, shape.numpy() * scale.numpy(), rtol=0.05)
    assert rng.poisson(shape, size=(5, 4)).shape == (5, 4, 2, 3)
    assert rng.beta(shape, scale).shape == (2, 3)


def test_multinomial_with_and_without_replacement():
    rng = R.RNG(5)
    weights = mg.tensor(np.array([[1, 2, 3, 4], [0, 7, 2, 1]], np.float32))
    out = rng.multinomial(weights, 20000, replacement=True)
    assert out.shape == (2, 20000) and out.dtype == np.int32
    freq = np.stack([np.bincount(row, minlength=4) for row in out.numpy()]) / 20000
    np.testing.assert_allclose(freq, [[0.1, 0.2, 0.3, 0.4], [0, 0.7, 0.2, 0.1]], atol=0.015)
    draws = np.stack([rng.multinomial(weights, 3).numpy() for _ in range(300)])
    assert all(len(set(row)) == 3 for row in draws.reshape(-1, 3))  # no category twice
    assert not (draws[:, 1] == 0).any()  # weight 0 is never drawn
    first = np.bincount(draws[:, 0, 0], minlength=4) / 300
    np.testing.assert_allclose(first, [0.1, 0.2, 0.3, 0.4], atol=0.08)
    assert rng.multinomial(mg.tensor(np.ones(4, np.float32)), 2).shape == (2,)
    with pytest.raises(mg.GraphError, match="5 samples without replacement from 4"):
        rng.multinomial(weights, 5)


def test_permutation_and_shuffle():
    rng = R.RNG(6)
    order = rng.permutation(1000)
    assert order.dtype == np.int32 and sorted(order.numpy()) == list(range(1000))
    assert (order.numpy() != np.arange(1000)).sum() > 900
    assert rng.permutation(10, dtype="float32").dtype == np.float32
    rows = mg.tensor(np.arange(18, dtype=np.float32).reshape(6, 3))
    shuffled = rng.permutation(rows).numpy()
    assert sorted(map(tuple, shuffled)) == sorted(map(tuple, rows.numpy()))
    before = rows
    rng.shuffle(rows)
    assert rows is before and sorted(map(tuple, rows.numpy())) == \
        [tuple(r) for r in np.arange(18, dtype=np.float32).reshape(6, 3)]
    assert rng.permutation(0).shape == (0,)


def test_empty_shapes():
    for shape in [(0,), (0, 3), (4, 0, 2)]:
        for out in (R.uniform(0, 1, shape), R.normal(0, 1, shape), R.gamma(2, 1, shape),
                    R.beta(2, 1, shape), R.poisson(2, shape), R.exponential(1.5, shape)):
            assert out.shape == shape


def test_a_traced_function_draws_new_numbers_at_every_call():
    rng = R.RNG(7)

    @trace
    def draw():
        return rng.uniform(size=(8,)), rng.normal(size=(8,)), rng.poisson(3.0, size=(8,))

    calls = [[t.numpy() for t in draw()] for _ in range(4)]
    for i in range(3):
        for a, b in zip(calls[i], calls[i + 1]):
            assert not (a == b).all()
    assert not (calls[0][0] == calls[0][1]).all()  # two draws of one call differ


def test_bad_input_is_refused_with_the_line():
    with pytest.raises(mg.GraphError, match=r"uniform: low 1 must be below high 0 \(at .*test_"):
        R.uniform(1, 0)
    with pytest.raises(mg.GraphError, match="gamma: shape must be a number > 0"):
        R.gamma(0.0)
    with pytest.raises(mg.GraphError, match="poisson: lam must be a number >= 0"):
        R.poisson(-1.0)
    with pytest.raises(mg.GraphError, match="size must be >= 0"):
        R.normal(size=(2, -1))
    with pytest.raises(mg.GraphError, match="seed must be an int"):
        R.RNG(seed=1.5)
    with pytest.raises(mg.GraphError, match="do not broadcast"):
        R.beta(mg.tensor(np.ones(3, np.float32)), mg.tensor(np.ones(2, np.float32)))
    with pytest.raises(mg.KernelError, match="rng_gamma.*a value is invalid"):
        R.gamma(mg.tensor(np.array([1.0, -1.0], np.float32)))
    with pytest.raises(mg.GraphError, match="eager tensors live in host memory"):
        R.RNG(1, device="cuda0")
    t = mg.tensor(np.arange(4, dtype=np.float32))

    @trace
    def shuffles(x):
        R.shuffle(x)
        return x

    with pytest.raises(mg.GraphError, match="writes .* from Python"):
        shuffles(t)
