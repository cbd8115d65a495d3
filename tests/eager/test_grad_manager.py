"""GradManager: eager reverse mode with the ops' own gradient rules."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

RNG = np.random.default_rng(1)


def _numeric_grad(f, x: np.ndarray, eps=1e-3) -> np.ndarray:
    g = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        hi, lo = x.astype(np.float64), x.astype(np.float64)
        hi[i] += eps
        lo[i] -= eps
        g[i] = (f(hi) - f(lo)) / (2 * eps)
    return g


def test_gradients_match_finite_differences():
    a = RNG.standard_normal((3, 4))
    w = nn.Parameter(RNG.standard_normal((4, 2)))  # float64: tight finite differences
    x = mg.tensor(a)
    gm = mg.GradManager().attach([w])

    def loss_of(wv):
        return float(np.sum(np.tanh(a @ wv) ** 2) + np.sum(np.exp(-np.abs(wv))))

    with gm:
        loss = F.sum(F.tanh(x @ w) ** 2) + F.sum(F.exp(-F.abs(w)))
        gm.backward(loss)
    np.testing.assert_allclose(w.grad.numpy(), _numeric_grad(loss_of, w.numpy()), rtol=1e-5,
                               atol=1e-7)
    assert float(loss) == pytest.approx(loss_of(w.numpy()))


def test_eager_gradients_equal_the_graphs_bitwise():
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    xv = RNG.standard_normal((4, 5)).astype(np.float32)
    yv = np.array([0, 2, 1, 2])
    g = mg.Graph()
    loss = F.cross_entropy(model(g.input("x", xv.shape)), g.input("y", (4,), "int64"))
    params = model.parameters()
    grads = mg.grad(loss, [g.bind(p) for p in params])
    want = mg.compile(grads, optimize=0).run({"x": xv, "y": yv})
    gm = mg.GradManager().attach(params)
    with gm:
        gm.backward(F.cross_entropy(model(mg.tensor(xv)), mg.tensor(yv)))
    for p, w in zip(params, want):
        np.testing.assert_array_equal(p.grad.numpy(), w)


def test_gradients_accumulate_and_callbacks_see_each_one():
    w = nn.Parameter(np.array([1.0, 2.0], np.float32))
    seen = []
    gm = mg.GradManager().attach([w], callbacks=lambda p, g: seen.append(p) or g * 2.0)
    for _ in range(2):
        with gm:
            gm.backward(F.sum(w * 3.0))
    assert w.grad.numpy().tolist() == [12.0, 12.0] and seen == [w, w]


def test_vector_jacobian_product_with_dy():
    w = nn.Parameter(np.array([1.0, 2.0, 3.0], np.float32))
    gm = mg.GradManager().attach(w)
    with gm:
        gm.backward(w * w, dy=np.array([1.0, 0.0, 2.0], np.float32))
    assert w.grad.numpy().tolist() == [2.0, 0.0, 12.0]


def test_nothing_is_recorded_or_held_outside_with_gm():
    w = nn.Parameter(np.ones((256, 256), np.float32))
    gm = mg.GradManager().attach(w)
    x = mg.tensor(np.ones((256, 256), np.float32))
    before = mg.memory_stats().current
    for _ in range(3):
        F.relu(x @ w)  # outside `with gm:`: each result dies at once
    assert mg.memory_stats().current == before
    with gm:
        y = F.sum(F.relu(x @ w))
        held = mg.memory_stats().current
        gm.backward(y)
    assert held > before + 256 * 256 * 4  # the tape kept the activations
    del y
    w.grad = None
    assert mg.memory_stats().current == before  # backward freed the tape


def test_errors_say_what_went_wrong():
    w = nn.Parameter(np.ones(3, np.float32))
    gm = mg.GradManager().attach(w)
    with pytest.raises(mg.GraphError, match="nothing was recorded"):
        gm.backward(F.sum(w))
    with gm:
        y = F.sum(w * 2.0)
        gm.backward(y)
        with pytest.raises(mg.GraphError, match="already called"):
            gm.backward(y)
    with pytest.raises(mg.GraphError, match="i32\\[3\\] tensor has no gradient"):
        mg.GradManager().attach(mg.tensor([1, 2, 3]))
    with gm, pytest.raises(mg.GraphError, match="floating point"):
        gm.backward(F.sum(F.astype(w, "int32")))


def test_a_state_update_during_the_forward_keeps_the_recorded_value_for_backward():
    # dropout reads its step counter, which the same forward advances (as a plan would, when
    # its run ends): the backward pass must use the mask the forward drew
    drop = nn.Dropout(0.5, seed=3)
    x = nn.Parameter(np.ones((4, 8), np.float32))
    gm = mg.GradManager().attach(x)
    with gm:
        y = drop(x)
        gm.backward(F.sum(y))
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())  # d sum(mask * x / p) / dx
    assert int(drop.steps) == 1


def test_optimizers_step_eagerly_as_a_compiled_step_does_bitwise():
    xv = RNG.standard_normal((8, 6)).astype(np.float32)
    yv = RNG.integers(0, 3, 8)
    base = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).state_dict()
    for make in (lambda ps: mg.optim.SGD(ps, 0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
                 lambda ps: mg.optim.Adam(ps, 0.01, weight_decay=1e-3),
                 lambda ps: mg.optim.AdamW(ps, 0.01)):
        results = []
        for eager in (True, False):
            model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
            model.load_state_dict(base)
            opt = make(model.parameters())
            sched = mg.optim.StepLR(opt, step_size=2, gamma=0.5)
            if eager:
                gm = mg.GradManager().attach(model.parameters())
                for _ in range(4):
                    with gm:
                        gm.backward(F.cross_entropy(model(mg.tensor(xv)), mg.tensor(yv)))
                    assert opt.step() is opt
                    opt.clear_grad()
                    sched.step()
            else:
                step = mg.compile_train_step(model, F.cross_entropy, opt, (xv, yv))
                for _ in range(4):
                    step(xv, yv)
                    sched.step()
            results.append(model.state_dict())
            assert opt.step_count == 4
        for name in base:
            np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)


def test_step_skips_params_without_a_grad():
    a, b = nn.Parameter(np.ones(2, np.float32)), nn.Parameter(np.ones(2, np.float32))
    opt = mg.optim.SGD([a, b], lr=0.5)
    gm = mg.GradManager().attach([a])
    with gm:
        gm.backward(F.sum(a * 2.0))
    opt.step().clear_grad()
    assert a.numpy().tolist() == [0.0, 0.0] and b.numpy().tolist() == [1.0, 1.0]
    assert a.grad is None
