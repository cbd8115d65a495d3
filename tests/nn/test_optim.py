"""Optimisers as graph nodes: updates against NumPy references of PyTorch's formulas."""
import math

import numpy as np
import pytest

import mgegraph as mg
from mgegraph import nn, optim

STEPS = 5


def run_updates(opt_factory, seed=0):
    """Feed fixed gradients to an optimiser's update nodes; returns the weights after each step."""
    rng = np.random.default_rng(seed)
    p = nn.Parameter(rng.standard_normal((3, 4)).astype(np.float32))
    p.name = "w"
    opt = opt_factory([p])
    g = mg.Graph()
    grad = g.input("grad", p.shape, "float32")
    opt.build(g, {id(p): grad})
    plan = mg.compile([g.bind(p) + 0.0])
    grads = [rng.standard_normal(p.shape).astype(np.float32) for _ in range(STEPS)]
    history = []
    for gv in grads:
        opt.prepare_step()
        plan.run({"grad": gv})
        history.append(p.value.copy())
    return grads, history


def reference_sgd(w, grads, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
    w, buf, out = w.astype(np.float64), None, []
    for g in grads:
        g = g + weight_decay * w
        if momentum:
            buf = g if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
        out.append(w)
    return out


def reference_adam(w, grads, lr, betas, eps, weight_decay=0.0, decoupled=False):
    w = w.astype(np.float64)
    m, v, out = np.zeros_like(w), np.zeros_like(w), []
    for t, g in enumerate(grads, 1):
        if decoupled:
            w = w * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * w
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        denom = np.sqrt(v) / math.sqrt(1 - betas[1] ** t) + eps
        w = w - lr / (1 - betas[0] ** t) * m / denom
        out.append(w)
    return out


def initial_weight(seed=0):
    return np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)


@pytest.mark.parametrize("kwargs", [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True},
                                    {"momentum": 0.5, "weight_decay": 0.1}])
def test_sgd_matches_reference(kwargs):
    grads, history = run_updates(lambda ps: optim.SGD(ps, lr=0.1, **kwargs))
    for got, want in zip(history, reference_sgd(initial_weight(), grads, 0.1, **kwargs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls,kwargs", [(optim.Adam, {}), (optim.Adam, {"weight_decay": 0.1}),
                                        (optim.AdamW, {"weight_decay": 0.1})])
def test_adam_matches_reference(cls, kwargs):
    grads, history = run_updates(lambda ps: cls(ps, lr=0.01, **kwargs))
    want = reference_adam(initial_weight(), grads, 0.01, (0.9, 0.999), 1e-8,
                          decoupled=cls is optim.AdamW, weight_decay=kwargs.get("weight_decay", 0))
    for got, w in zip(history, want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_optimisers_match_torch_when_installed():
    torch = pytest.importorskip("torch")
    cases = [(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
              lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                         weight_decay=0.01)),
             (lambda ps: optim.AdamW(ps, lr=0.01), lambda ps: torch.optim.AdamW(ps, lr=0.01))]
    for ours, theirs in cases:
        grads, history = run_updates(ours)
        w = torch.tensor(initial_weight(), requires_grad=True)
        opt = theirs([w])
        for g, got in zip(grads, history):
            w.grad = torch.from_numpy(g)
            opt.step()
            np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_learning_rate_schedules():
    p = nn.Parameter(np.zeros(1, np.float32))
    opt = optim.SGD([p], lr=1.0)
    step = optim.StepLR(opt, step_size=2, gamma=0.5)
    assert [step.step() for _ in range(4)] == [1.0, 0.5, 0.5, 0.25]
    opt.lr = 1.0
    cosine = optim.CosineAnnealingLR(opt, T_max=4)
    assert [round(cosine.step(), 6) for _ in range(5)] == [0.853553, 0.5, 0.146447, 0.0, 0.0]
    opt.lr = 1.0
    warm = optim.LinearWarmup(opt, warmup_steps=4)
    assert opt.lr == 0.0
    assert [warm.step() for _ in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_lr_change_takes_effect_without_recompiling():
    p = nn.Parameter(np.ones(2, np.float32))
    p.name = "w"
    opt = optim.SGD([p], lr=1.0)
    g = mg.Graph()
    grad = g.input("grad", (2,), "float32")
    opt.build(g, {id(p): grad})
    plan = mg.compile([grad + 0.0])
    for lr in (1.0, 0.25):
        opt.lr = lr
        opt.prepare_step()
        plan.run({"grad": np.ones(2, np.float32)})
    np.testing.assert_allclose(p.value, 1 - 1.0 - 0.25)


def test_optimiser_refuses_buffers():
    with pytest.raises(TypeError, match="trainable"):
        optim.SGD([nn.Buffer(np.zeros(1))], lr=0.1)
