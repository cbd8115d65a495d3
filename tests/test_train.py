"""Whole training steps as one plan: learning, shared weights, and PyTorch cross-checks."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim


def blobs(n=256, classes=3, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, dim)) * 3
    y = rng.integers(0, classes, n)
    x = centres[y] + rng.standard_normal((n, dim))
    return x.astype(np.float32), y.astype(np.int32)


def mlp(dim=8, hidden=16, classes=3):
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def test_training_step_learns_and_predictor_sees_the_weights():
    nn.init.manual_seed(0)
    x, y = blobs()
    model = mlp()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x[:32], y[:32]),
                                 metrics=("accuracy",))
    loader = mg.DataLoader((x, y), 32, shuffle=True, seed=0, drop_last=True)
    first, _ = step(*next(iter(loader)))
    history = mg.fit(step, loader, epochs=5, log=open("/dev/null", "w"))
    assert history[-1] < first / 4
    model.eval()
    predict = mg.compile_module(model, example_inputs=(x,))
    accuracy = (predict(x).argmax(1) == y).mean()
    assert accuracy > 0.95
    _, metrics = step(x[:32], y[:32])
    assert 0.9 <= metrics["accuracy"] <= 1.0


@pytest.mark.parametrize("optimize", [0, 1])
def test_the_step_is_one_plan_with_in_place_updates(optimize):
    nn.init.manual_seed(0)
    x, y = blobs(64)
    model = mlp()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y),
                                 optimize=optimize)
    plan = step.plan
    writes = [(ins.op, o) for ins in plan.instructions for o in ins.outputs
              if plan.slots[o].role == "param"]
    assert len(writes) == 3 * len(model.parameters())  # weight, exp_avg, exp_avg_sq
    ops = [op for op, _ in writes]
    if optimize:
        # each parameter's whole update is one fused kernel writing all three in place
        assert ops == ["fused_elementwise"] * len(writes)
    else:
        # the weight updates are elementwise and come after every other read of their
        # weight, so they are computed straight into the parameter; the state is copied
        assert ops.count("assign") == 2 * len(model.parameters())
    before = model.state_dict()
    step(x, y)
    after = model.state_dict()
    assert all(not np.array_equal(before[k], after[k]) for k in before)


def test_batch_norm_running_statistics_follow_the_step():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 2))
    x = np.random.default_rng(0).standard_normal((4, 2, 5, 5)).astype(np.float32)
    y = np.array([0, 1, 0, 1], np.int32)
    conv = model[0]
    opt = optim.SGD(model.parameters(), lr=0.0)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y))
    step(x, y)
    bn = model[1]
    h = _conv_numpy(x, conv.weight.value, conv.bias.value, 1)
    mean, var = h.mean((0, 2, 3)), h.var((0, 2, 3), ddof=1)
    running_mean, running_var = bn.running_mean.value.reshape(-1), bn.running_var.value.reshape(-1)
    np.testing.assert_allclose(running_mean, 0.1 * mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(running_var, 0.9 + 0.1 * var, rtol=1e-4, atol=1e-6)


def _conv_numpy(x, w, b, pad):
    n, c, hh, ww = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, o, hh, ww))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + hh, j:j + ww], w[:, :, i, j])
    return out + b[None, :, None, None]


# -- PyTorch cross-check -------------------------------------------------------------------------
def _torch_pair(kind):
    torch = pytest.importorskip("torch")
    nn.init.manual_seed(0)
    if kind == "mlp":
        ours = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        theirs = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                     torch.nn.Linear(32, 10))
        pairs = [(ours[0], theirs[0]), (ours[2], theirs[2])]
    else:
        ours = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(8, 10))
        theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                                     torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 8, 3, padding=1),
                                     torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                     torch.nn.Flatten(), torch.nn.Linear(8, 10))
        pairs = [(ours[0], theirs[0]), (ours[3], theirs[3]), (ours[7], theirs[7])]
    with torch.no_grad():
        for a, b in pairs:
            b.weight.copy_(torch.from_numpy(a.weight.value))
            b.bias.copy_(torch.from_numpy(a.bias.value))
    return torch, ours, theirs, pairs


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("optimiser", ["sgd", "adam"])
def test_fifty_steps_match_pytorch(kind, optimiser):
    torch, ours, theirs, pairs = _torch_pair(kind)
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    shape = (16, 64) if kind == "mlp" else (16, 1, 8, 8)
    batches = [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, 10, 16))
               for _ in range(50)]
    if optimiser == "sgd":
        opt = optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
        topt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = optim.Adam(ours.parameters(), lr=1e-3)
        topt = torch.optim.Adam(theirs.parameters(), lr=1e-3)
    step = mg.compile_train_step(ours, F.cross_entropy, opt, example_batch=batches[0])
    for x, y in batches:
        loss = step(x, y)
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss, tloss.item(), rtol=1e-4)
    for a, b in pairs:
        np.testing.assert_allclose(a.weight.value, b.weight.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)


def test_dropout_draws_a_new_mask_every_step_and_none_in_eval():
    nn.init.manual_seed(0)
    x, y = blobs(32)
    model = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5, seed=1), nn.Linear(64, 3))
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.0),
                                 example_batch=(x, y))
    losses = [step(x, y) for _ in range(3)]
    assert len(set(losses)) == 3  # same weights and batch: only the mask changed
    assert int(model[1].steps.value) == 3
    model.eval()
    predict = mg.compile_module(model, example_inputs=(x,))
    w1, b1 = model[0].weight.value, model[0].bias.value
    w2, b2 = model[2].weight.value, model[2].bias.value
    np.testing.assert_allclose(predict(x), (x @ w1.T + b1) @ w2.T + b2, rtol=1e-4, atol=1e-5)


def test_embedding_and_layer_norm_train():
    nn.init.manual_seed(0)

    class Tagger(nn.Module):
        def __init__(self):
            self.embed = nn.Embedding(20, 8)
            self.norm = nn.LayerNorm(8)
            self.out = nn.Linear(8, 4)

        def forward(self, tokens):
            return self.out(self.norm(self.embed(tokens)))

    tokens = np.random.default_rng(0).integers(0, 20, 64).astype(np.int64)
    labels = (tokens % 4).astype(np.int32)
    model = Tagger()
    step = mg.compile_train_step(model, F.cross_entropy, optim.Adam(model.parameters(), lr=0.05),
                                 example_batch=(tokens, labels))
    first = step(tokens, labels)
    for _ in range(60):
        last = step(tokens, labels)
    assert last < first / 10
