"""F.batch_norm under MegEngine's contract: the running statistics updated in place or returned
(``inplace``), half data with float32 parameters, autocast, and the refusal to write what a
graph cannot update."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import amp, nn

RNG = np.random.default_rng(3)


def _want_stats(x, mean, var, momentum=0.9):
    axes = (0,) + tuple(range(2, x.ndim))
    n = x.size // x.shape[1]
    return (momentum * mean + (1 - momentum) * x.mean(axes),
            momentum * var + (1 - momentum) * x.var(axes) * n / (n - 1))


def test_training_updates_the_running_statistics_in_place_by_default():
    x = RNG.standard_normal((4, 3, 5, 2)).astype(np.float32)
    mean, var = RNG.random(3).astype(np.float32), RNG.random(3).astype(np.float32) + 0.5
    rm, rv = mg.tensor(mean), nn.Buffer(var.reshape(1, 3, 1, 1))
    y = F.batch_norm(mg.tensor(x), rm, rv, training=True, momentum=0.9)
    want_mean, want_var = _want_stats(x, mean, var)
    np.testing.assert_allclose(rm.numpy(), want_mean, rtol=1e-5)
    np.testing.assert_allclose(rv.numpy().ravel(), want_var, rtol=1e-5)
    assert y.shape == x.shape


def test_inplace_false_returns_the_new_statistics_and_writes_nothing():
    x = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    mean, var = np.zeros(2, np.float32), np.ones(2, np.float32)
    rm, rv = mg.tensor(mean), mg.tensor(var)
    y, new_mean, new_var = F.batch_norm(mg.tensor(x), rm, rv, training=True, inplace=False,
                                        momentum=0.5)
    want_mean, want_var = _want_stats(x, mean, var, 0.5)
    assert y.shape == x.shape
    np.testing.assert_allclose(new_mean.numpy(), want_mean, rtol=1e-5)
    np.testing.assert_allclose(new_var.numpy(), want_var, rtol=1e-5)
    np.testing.assert_array_equal(rm.numpy(), 0.0)
    np.testing.assert_array_equal(rv.numpy(), 1.0)


def test_in_a_graph_the_running_statistics_params_are_assigned():
    bn_mean = nn.Buffer(np.zeros(3, np.float32))
    g = mg.Graph()
    x = g.input("x", (4, 3, 2, 2), np.float32)
    plan = mg.compile([F.batch_norm(x, bn_mean, None, training=True)])
    data = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    plan.run({"x": data})
    np.testing.assert_allclose(bn_mean.numpy(), 0.1 * data.mean((0, 2, 3)), rtol=1e-5,
                               atol=1e-7)


def test_a_graph_input_as_running_statistic_cannot_be_written():
    g = mg.Graph()
    x = g.input("x", (4, 3), np.float32)
    with pytest.raises(mg.OpError, match=r"batch_norm\(f32\[4,3\], f32\[3\]\).*inplace=False"):
        F.batch_norm(x, g.input("m", (3,), np.float32), None, training=True)


def test_half_data_with_float32_parameters_matches_pytorch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((3, 4, 5, 5)).astype(np.float16)
    w = RNG.random(4).astype(np.float32) + 0.5
    b = RNG.standard_normal(4).astype(np.float32)
    y = F.batch_norm(mg.tensor(x), weight=mg.tensor(w), bias=mg.tensor(b), training=True)
    assert y.dtype == np.float16
    want = torch.nn.functional.batch_norm(torch.from_numpy(x.astype(np.float32)), None, None,
                                          torch.from_numpy(w), torch.from_numpy(b),
                                          training=True).numpy().astype(np.float16)
    np.testing.assert_allclose(y.numpy().astype(np.float32), want.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


def test_autocast_normalises_low_precision_data_with_high_precision_parameters():
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    w, b = mg.tensor(np.ones((1, 3, 1, 1), np.float32)), mg.tensor(np.zeros((1, 3, 1, 1),
                                                                           np.float32))
    with amp.autocast():
        y = F.batch_norm(mg.tensor(x), weight=w, bias=b, training=True)
    by_hand = F.batch_norm(mg.tensor(x.astype(np.float16)), weight=w, bias=b, training=True)
    assert y.dtype == by_hand.dtype == np.float16
    np.testing.assert_array_equal(y.numpy(), by_hand.numpy())
