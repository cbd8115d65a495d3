"""MegEngine's optimiser API: parameter groups, checkpoints, Adagrad/Adadelta, MultiStepLR and
gradient clipping, checked against NumPy references of MegEngine's formulas and PyTorch."""
from bisect import bisect_right

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.optimizer as mge_optim
from mgegraph import nn, optim

RNG = np.random.default_rng(7)
GRADS = [RNG.standard_normal((3, 4)).astype(np.float32) for _ in range(8)]
W0 = RNG.standard_normal((3, 4)).astype(np.float32)


def _param(value=W0):
    p = nn.Parameter(np.array(value, np.float32))
    p.name = "w"
    return p


def _steps(opt, params, grads):
    for g in grads:
        for p in params:
            p.grad = mg.tensor(g)
        opt.step().clear_grad()


def test_megengine_path_has_the_same_classes_and_the_new_names():
    assert mge_optim.SGD is optim.SGD and mge_optim.MultiStepLR is optim.MultiStepLR
    assert mge_optim.clip_grad_norm is optim.clip_grad_norm
    for name in ("Adagrad", "Adadelta", "LAMB", "LRScheduler", "clip_grad_value", "Optimizer"):
        assert hasattr(mge_optim, name)


def test_each_group_has_its_own_learning_rate_and_momentum():
    a, b = _param(), _param()
    opt = optim.SGD([{"params": [a], "lr": 0.5}, {"params": [b], "momentum": 0.9}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    assert opt.param_groups[0]["momentum"] == 0.0
    _steps(opt, [a, b], GRADS[:2])
    np.testing.assert_allclose(a.numpy(), W0 - 0.5 * (GRADS[0] + GRADS[1]), rtol=1e-6)
    buf = GRADS[0] * 0.9 + GRADS[1]
    np.testing.assert_allclose(b.numpy(), W0 - 0.1 * GRADS[0] - 0.1 * buf, rtol=1e-5)


def test_editing_a_groups_lr_takes_effect_at_the_next_step():
    p = _param()
    opt = optim.Adam([p], lr=0.01)
    _steps(opt, [p], GRADS[:1])
    opt.param_groups[0]["lr"] = 0.0
    before = p.numpy().copy()
    _steps(opt, [p], GRADS[1:2])
    np.testing.assert_array_equal(p.numpy(), before)


def test_a_group_whose_values_change_the_updates_graph_is_refused():
    p = _param()
    opt = optim.SGD([p], lr=0.1)
    _steps(opt, [p], GRADS[:1])
    opt.param_groups[0]["weight_decay"] = 0.1  # the built update has no decay term
    p.grad = mg.tensor(GRADS[1])
    with pytest.raises(mg.GraphError, match=r"param_groups\[0\].*make a new optimiser"):
        opt.step()


def test_bad_groups_are_refused_naming_the_group():
    p, q = _param(), _param()
    with pytest.raises(mg.GraphError, match="gives no 'lr'"):
        optim.SGD([{"params": [p]}])
    with pytest.raises(mg.GraphError, match="more than one parameter group"):
        optim.SGD([{"params": [p]}, {"params": [p, q]}], lr=0.1)
    with pytest.raises(mg.GraphError, match=r"param_groups\[1\]: betas\[0\]"):
        optim.Adam([{"params": [p]}, {"params": [q], "betas": (1.5, 0.9)}])
    opt = optim.SGD([p], lr=0.1)
    opt.param_groups[0]["lr"] = float("nan")
    p.grad = mg.tensor(GRADS[0])
    with pytest.raises(mg.GraphError, match=r"SGD param_groups\[0\]: lr"):
        opt.step()
    assert opt.step_count == 0


def test_a_group_added_later_keeps_plans_built_before_reading_the_right_lr():
    a, b = _param(), _param()
    opt = optim.SGD([a], lr=1.0)
    g = mg.Graph()
    grad = g.input("grad", a.shape, "float32")
    opt.build(g, {id(a): grad})
    plan = mg.compile([grad + 0.0])  # reads the one-group scalars
    opt.add_param_group({"params": [b], "lr": 0.5})
    opt.param_groups[0]["lr"] = 0.25
    opt.prepare_step()
    plan.run({"grad": np.ones(a.shape, np.float32)})
    np.testing.assert_allclose(a.numpy(), W0 - 0.25)
    _steps(opt, [a, b], [np.ones(a.shape, np.float32)])
    np.testing.assert_allclose(b.numpy(), W0 - 0.5)


FACTORIES = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
    "adamw": lambda ps: optim.AdamW(ps, lr=0.01),
    "adagrad": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.05, weight_decay=0.1),
    "adadelta": lambda ps: optim.Adadelta(ps, lr=1.0, rho=0.8, weight_decay=0.1),
    "lamb": lambda ps: optim.LAMB(ps, lr=0.01, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_a_checkpoint_restores_training_exactly(name):
    make = FACTORIES[name]
    p = _param()
    straight = make([p])
    _steps(straight, [p], GRADS)
    q = _param()
    first = make([q])
    _steps(first, [q], GRADS[:5])
    saved = first.state_dict()
    r = _param(q.numpy())
    resumed = make([r])
    resumed.load_state_dict(saved)
    _steps(resumed, [r], GRADS[5:])
    np.testing.assert_array_equal(r.numpy(), p.numpy())
    if straight.COUNTS_STEPS:  # SGD's update never reads it, and MegEngine keeps none
        assert resumed.step_count == straight.step_count == len(GRADS)


def test_state_dict_has_megengines_layout():
    a, b = _param(), _param()
    opt = optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.01)
    _steps(opt, [a, b], GRADS[:2])
    state = opt.state_dict()
    assert state["param_groups"][1] == {"lr": 0.5, "betas": (0.9, 0.999), "eps": 1e-8,
                                        "weight_decay": 0.0, "params": [1]}
    assert sorted(state["state"]) == [0, 1]
    assert sorted(state["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert float(state["state"][1]["step"]) == 2.0
    assert sorted(optim.SGD([_param()], lr=0.1, momentum=0.5).state_dict()["state"][0]) == \
        ["momentum_buffer"]


def test_a_checkpoint_of_other_groups_or_shapes_is_refused():
    opt = optim.SGD([_param()], lr=0.1, momentum=0.9)
    state = opt.state_dict()
    two = optim.SGD([{"params": [_param()]}, {"params": [_param()]}], lr=0.1, momentum=0.9)
    with pytest.raises(mg.GraphError, match="1 parameter groups, this optimiser 2"):
        two.load_state_dict(state)
    other = optim.SGD([nn.Parameter(np.zeros(5, np.float32))], lr=0.1, momentum=0.9)
    with pytest.raises(mg.GraphError, match=r"'momentum_buffer'.*float32\[3, 4\]"):
        other.load_state_dict(state)
    with pytest.raises(mg.GraphError, match="what state_dict"):
        opt.load_state_dict({"state": {}})


def reference_adagrad(w, grads, lr, lr_decay, eps, weight_decay):
    w, s, out = w.astype(np.float64), np.zeros(w.shape), []
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * w
        s = s + g * g
        w = w - lr / (1 + (t - 1) * lr_decay) * g / np.sqrt(s + eps)
        out.append(w)
    return out


def reference_adadelta(w, grads, lr, rho, eps, weight_decay):
    w, s, a, out = w.astype(np.float64), np.zeros(w.shape), np.zeros(w.shape), []
    for g in grads:
        g = g + weight_decay * w
        s = rho * s + (1 - rho) * g * g
        delta = np.sqrt(a + eps) / np.sqrt(s + eps) * g
        w = w - lr * delta
        a = rho * a + (1 - rho) * delta * delta
        out.append(w)
    return out


def _history(opt_factory):
    p = _param()
    opt, out = opt_factory([p]), []
    for g in GRADS:
        _steps(opt, [p], [g])
        out.append(p.numpy().copy())
    return out


def test_adagrad_and_adadelta_match_megengines_formulas():
    got = _history(lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.05, eps=1e-6,
                                            weight_decay=0.1))
    for g, w in zip(got, reference_adagrad(W0, GRADS, 0.1, 0.05, 1e-6, 0.1)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    got = _history(lambda ps: optim.Adadelta(ps, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.1))
    for g, w in zip(got, reference_adadelta(W0, GRADS, 1.0, 0.9, 1e-6, 0.1)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_adadelta_and_adagrad_without_eps_match_torch():
    torch = pytest.importorskip("torch")
    # torch's Adagrad adds eps outside the square root, MegEngine's inside: eps=0 agrees
    cases = [(lambda ps: optim.Adadelta(ps, lr=1.0, rho=0.9, weight_decay=0.1),
              lambda ps: torch.optim.Adadelta(ps, lr=1.0, rho=0.9, weight_decay=0.1)),
             (lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.05, eps=0.0),
              lambda ps: torch.optim.Adagrad(ps, lr=0.1, lr_decay=0.05, eps=0.0))]
    for ours, theirs in cases:
        got = _history(ours)
        w = torch.tensor(W0, requires_grad=True)
        opt = theirs([w])
        for g, mine in zip(GRADS, got):
            w.grad = torch.from_numpy(g)
            opt.step()
            np.testing.assert_allclose(mine, w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_multi_step_lr_applies_epoch_zero_when_made_and_decays_at_each_milestone():
    a, b = _param(), _param()
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.01, momentum=0.9)
    opt.param_groups[0]["lr"] = 5.0  # overwritten by the schedule's epoch 0 (initial_lr kept)
    sched = optim.MultiStepLR(opt, [3, 6, 8])
    for epoch in range(10):
        assert opt.param_groups[0]["lr"] == pytest.approx(5.0 * 0.1 ** bisect_right([3, 6, 8],
                                                                                     epoch))
        assert opt.param_groups[1]["lr"] == pytest.approx(0.1 ** bisect_right([3, 6, 8], epoch))
        sched.step()
    state = sched.state_dict()
    fresh = optim.MultiStepLR(optim.SGD([_param()], lr=5.0), [1])
    fresh.load_state_dict(state)
    assert fresh.milestones == [3, 6, 8] and fresh.current_epoch == 10
    with pytest.raises(mg.GraphError, match="milestones must increase"):
        optim.MultiStepLR(opt, [5, 2])


def test_schedules_resume_from_initial_lr():
    opt = optim.SGD([_param()], lr=1.0)
    with pytest.raises(mg.GraphError, match="initial_lr"):
        optim.StepLR(opt, step_size=2, current_epoch=4)
    opt.param_groups[0]["initial_lr"] = 1.0
    sched = optim.StepLR(opt, step_size=2, gamma=0.5, current_epoch=3)
    assert sched.current_epoch == 4 and opt.lr == 0.25


def test_clip_grad_norm_scales_every_grad_by_the_total_norm():
    a, b = _param(), nn.Parameter(np.ones(2, np.float32))
    a.grad, b.grad = mg.tensor(GRADS[0] * 10), mg.tensor(np.full(2, 3.0, np.float32))
    total = np.sqrt(np.sum((GRADS[0] * 10.0) ** 2) + 18.0)
    got = optim.clip_grad_norm([a, b], max_norm=2.0)
    np.testing.assert_allclose(float(got), total, rtol=1e-5)
    scale = 2.0 / (total + 1e-6)
    np.testing.assert_allclose(a.grad.numpy(), GRADS[0] * 10 * scale, rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), np.full(2, 3.0) * scale, rtol=1e-5)
    inf = optim.clip_grad_norm([b], max_norm=100.0, ord="inf")  # below max_norm: unchanged
    assert float(inf) == pytest.approx(3.0 * scale, rel=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), np.full(2, 3.0) * scale, rtol=1e-5)
    assert float(optim.clip_grad_norm([_param()], 1.0)) == 0.0  # no grads


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    a = _param()
    a.grad = mg.tensor(GRADS[1])
    t = torch.tensor(W0, requires_grad=True)
    t.grad = torch.from_numpy(GRADS[1].copy())
    for ord in (1.0, 3.0):
        a.grad, t.grad = mg.tensor(GRADS[1]), torch.from_numpy(GRADS[1].copy())
        want = torch.nn.utils.clip_grad_norm_([t], max_norm=0.5, norm_type=ord)
        got = optim.clip_grad_norm(a, max_norm=0.5, ord=ord)
        np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-5)


def test_clip_grad_value_and_zero_grad():
    a, b = _param(), _param()
    a.grad = mg.tensor(GRADS[2])
    optim.clip_grad_value([a, b], lower=-0.5, upper=0.25)
    np.testing.assert_array_equal(a.grad.numpy(), np.clip(GRADS[2], -0.5, 0.25))
    assert b.grad is None
    with pytest.raises(mg.GraphError, match="lower 1 is above upper 0"):
        optim.clip_grad_value([a], lower=1, upper=0)
    opt = optim.SGD([a, b], lr=0.1)
    opt.zero_grad()
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros((3, 4), np.float32))
    assert b.grad is None


def reference_lamb(w, grads, lr, betas, eps, weight_decay, bias_correction=True,
                   always_adapt=False):
    w, m, v, out = w.astype(np.float64), np.zeros(w.shape), np.zeros(w.shape), []
    for t, g in enumerate(grads, 1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        bc1 = 1 - betas[0] ** t if bias_correction else 1.0
        bc2 = 1 - betas[1] ** t if bias_correction else 1.0
        delta = (m / bc1) / (np.sqrt(v / bc2) + eps) + weight_decay * w
        p_norm, d_norm = np.linalg.norm(w), np.linalg.norm(delta)
        adapt = (always_adapt or weight_decay > 0) and p_norm > 0 and d_norm > 0
        w = w - lr * (p_norm / d_norm if adapt else 1.0) * delta
        out.append(w)
    return out


@pytest.mark.parametrize("kwargs", [{"weight_decay": 0.1}, {"always_adapt": True},
                                    {"bias_correction": False}])
def test_lamb_matches_megengines_formula(kwargs):
    got = _history(lambda ps: optim.LAMB(ps, lr=0.01, **kwargs))
    want = reference_lamb(W0, GRADS, 0.01, (0.9, 0.999), 1e-8, kwargs.get("weight_decay", 0.0),
                          kwargs.get("bias_correction", True), kwargs.get("always_adapt", False))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
