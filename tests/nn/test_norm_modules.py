"""Normalisation layers: training steps against PyTorch (GroupNorm, InstanceNorm, BatchNorm1d and
its running statistics), MegEngine's batch-norm options, and the errors of bad arguments."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.module as M
from mgegraph import nn, optim

RNG = np.random.default_rng(0)


def _copy(torch, ours, theirs):
    """ours' parameters into theirs, matched by name (PyTorch's nn.Sequential numbers layers as
    ours does)."""
    state = {k.replace("layers.", ""): v for k, v in ours.state_dict().items()}
    with torch.no_grad():
        for name, t in theirs.state_dict().items():
            if name in state:
                t.copy_(torch.from_numpy(state[name].reshape(t.shape)))


def _models(torch, norm, torch_norm, channels=4, image=True):
    nn.init.manual_seed(0)
    if image:
        ours = nn.Sequential(nn.Conv2d(2, channels, 3, padding=1), norm, nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 3))
        theirs = torch.nn.Sequential(torch.nn.Conv2d(2, channels, 3, padding=1), torch_norm,
                                     torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                     torch.nn.Flatten(), torch.nn.Linear(channels, 3))
    else:
        ours = nn.Sequential(nn.Linear(5, channels), norm, nn.ReLU(), nn.Linear(channels, 3))
        theirs = torch.nn.Sequential(torch.nn.Linear(5, channels), torch_norm, torch.nn.ReLU(),
                                     torch.nn.Linear(channels, 3))
    _copy(torch, ours, theirs)
    return ours, theirs


def _train_both(torch, ours, theirs, shape, steps=3):
    batches = [(RNG.standard_normal(shape).astype(np.float32), RNG.integers(0, 3, shape[0]))
               for _ in range(steps)]
    step = mg.compile_train_step(ours, F.cross_entropy, optim.SGD(ours.parameters(), lr=0.1),
                                 example_batch=batches[0])
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1)
    for x, y in batches:
        loss = step(x, y)
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(float(np.asarray(loss)), tloss.item(), rtol=1e-5, atol=1e-6)
    want = {k: v.numpy() for k, v in theirs.state_dict().items()}
    for name, value in ours.state_dict().items():
        key = name.replace("layers.", "")
        np.testing.assert_allclose(value.reshape(want[key].shape), want[key], rtol=2e-4,
                                   atol=2e-5, err_msg=name)


@pytest.mark.parametrize("kind", ["group", "instance", "instance2d"])
def test_training_steps_match_torch(kind):
    torch = pytest.importorskip("torch")
    norm, torch_norm = {
        "group": (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)),
        "instance": (nn.InstanceNorm(4), torch.nn.InstanceNorm2d(4, affine=True)),
        "instance2d": (nn.InstanceNorm2d(4, affine=True), torch.nn.InstanceNorm2d(4, affine=True)),
    }[kind]
    ours, theirs = _models(torch, norm, torch_norm)
    _train_both(torch, ours, theirs, (6, 2, 5, 4))


@pytest.mark.parametrize("shape", [(8, 5), (6, 5, 3)])
def test_batch_norm_1d_training_and_running_statistics_match_torch(shape):
    torch = pytest.importorskip("torch")
    # MegEngine's momentum 0.9 keeps 0.9 of the running value; PyTorch's 0.1 takes 0.1 of the batch
    norm, torch_norm = nn.BatchNorm1d(4, momentum=0.9), torch.nn.BatchNorm1d(4, momentum=0.1)
    nn.init.manual_seed(0)
    ours = nn.Sequential(nn.Linear(shape[-1], 4), norm)
    theirs = torch.nn.Sequential(torch.nn.Linear(shape[-1], 4), torch_norm)
    _copy(torch, ours, theirs)
    x = RNG.standard_normal(shape).astype(np.float32)
    if len(shape) == 3:  # (N, C, L): the linear layer works on the last axis, C comes first
        ours = nn.Sequential(norm)
        theirs = torch.nn.Sequential(torch_norm)
        x = RNG.standard_normal((6, 4, 3)).astype(np.float32)
    for _ in range(3):
        y = ours(mg.tensor(x)).numpy()
        want = theirs(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.running_mean.value.reshape(-1), torch_norm.running_mean.numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.running_var.value.reshape(-1), torch_norm.running_var.numpy(),
                               rtol=1e-5, atol=1e-6)
    ours.eval(), theirs.eval()
    np.testing.assert_allclose(ours(mg.tensor(x)).numpy(),
                               theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_batch_norm_1d_in_a_compiled_training_step_matches_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = _models(torch, nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4, momentum=0.1),
                           image=False)
    _train_both(torch, ours, theirs, (8, 5))


def test_megengine_param_dim_keeps_megengine_shapes_and_numbers():
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    plain, mge = nn.BatchNorm2d(3, param_dim="dim_c"), M.BatchNorm2d(3)
    assert plain.running_mean.shape == (3,) and plain.weight.shape == (3,)
    for p in (mge.weight, mge.bias, mge.running_mean, mge.running_var):
        assert p.shape == (1, 3, 1, 1)
    np.testing.assert_array_equal(plain(mg.tensor(x)).numpy(), mge(mg.tensor(x)).numpy())
    np.testing.assert_array_equal(plain.running_var.value.reshape(1, 3, 1, 1),
                                  mge.running_var.value)
    one_d = nn.BatchNorm1d(3)
    one_d(mg.tensor(x[:, :, 0]))
    assert one_d.running_mean.shape == (1, 3, 1, 1)


def test_freeze_normalises_with_running_statistics_and_trains_no_affine():
    bn = nn.BatchNorm2d(3, freeze=True)
    bn.running_mean.value = np.array([1.0, -1.0, 0.5], np.float32)
    bn.running_var.value = np.array([4.0, 1.0, 0.25], np.float32)
    bn.weight.value = np.array([2.0, 1.0, 0.5], np.float32)
    # MegEngine's: the affine stays Parameters (an optimiser may be given them), read detached
    assert set(bn.parameters()) == {bn.weight, bn.bias} and {n for n, _ in bn.named_buffers()} == {
        "running_mean", "running_var"}
    x = RNG.standard_normal((5, 3, 2, 2)).astype(np.float32)
    bn.train()
    y = bn(mg.tensor(x)).numpy()
    c = (1, 3, 1, 1)
    want = (x - bn.running_mean.value.reshape(c)) / np.sqrt(bn.running_var.value.reshape(c)
                                                           + 1e-5) * bn.weight.value.reshape(c)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bn.running_mean.value, [1.0, -1.0, 0.5])  # not updated


def test_without_running_statistics_batch_statistics_in_eval_too():
    bn = nn.BatchNorm2d(3, track_running_stats=False, affine=False)
    assert bn.running_mean is None and bn.weight is None and bn.state_dict() == {}
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    bn.eval()
    y = bn(mg.tensor(x)).numpy()
    want = (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(x.var((0, 2, 3), keepdims=True)
                                                            + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_lrn_module_is_megengines():
    x = RNG.standard_normal((2, 5, 3, 3)).astype(np.float32)
    got = nn.LocalResponseNorm(3, k=1.0, alpha=0.3, beta=0.5)(mg.tensor(x)).numpy()
    want = F.nn.local_response_norm(mg.tensor(x), 3, 1.0, 0.3, 0.5).numpy()
    np.testing.assert_array_equal(got, want)
    assert M.LocalResponseNorm is nn.LocalResponseNorm and M.GroupNorm is nn.GroupNorm


@pytest.mark.parametrize("make, match", [
    (lambda: nn.GroupNorm(3, 4), r"GroupNorm: num_channels 4 must be divisible by num_groups 3"),
    (lambda: nn.GroupNorm(0, 4), r"GroupNorm: num_groups must be an int >= 1"),
    (lambda: nn.GroupNorm(2, 4, eps=0), r"GroupNorm: eps must be a finite number > 0"),
    (lambda: nn.InstanceNorm(4, affine="yes"), r"InstanceNorm: affine must be True or False"),
    (lambda: nn.InstanceNorm2d(4, track_running_stats=True), r"InstanceNorm2d: track_running"),
    (lambda: nn.LocalResponseNorm(4), r"LocalResponseNorm: kernel_size must be odd, got 4"),
    (lambda: nn.BatchNorm1d(4, freeze=True, track_running_stats=False),
     r"BatchNorm1d: freeze=True needs"),
    (lambda: nn.BatchNorm2d(4, param_dim="dim_111c"), r"BatchNorm2d: param_dim must be one of"),
    (lambda: nn.BatchNorm2d(4, momentum=2), r"BatchNorm2d: momentum must be a number in"),
])
def test_bad_arguments(make, match):
    with pytest.raises(mg.GraphError, match=match):
        make()


@pytest.mark.parametrize("layer, shape, match", [
    (nn.BatchNorm1d(4), (2, 4, 3, 3), (r"BatchNorm1d\(4\): needs a 2-d or 3-d input with 4 "
                                       r"channels on axis 1, got shape \(2, 4, 3, 3\)")),
    (nn.BatchNorm2d(4), (2, 3, 3, 3), r"BatchNorm2d\(4\): needs a 4-d or 2-d input"),
    (nn.InstanceNorm(4), (2, 4), r"InstanceNorm\(4\): needs an \(N, 4, \.\.\.\) input"),
    (nn.GroupNorm(2, 4), (2, 6, 3), r"group_norm.*weight must have shape \(6,\)"),
])
def test_bad_inputs(layer, shape, match):
    with pytest.raises(mg.GraphError, match=match):
        layer(mg.tensor(np.zeros(shape, np.float32)))


def _frozen_bn_step(bn, opt, gm):
    def step(x):
        with gm:
            loss = bn(x).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


@pytest.mark.parametrize("traced", [None, False, True])
def test_frozen_batch_norm_gives_its_affine_to_an_optimiser_which_leaves_it(traced):
    bn = nn.BatchNorm2d(3, freeze=True)
    bn.weight.value = np.full((1, 3, 1, 1), 2.0, np.float32)
    bn.train()
    gm = mg.GradManager().attach(bn.parameters())
    opt = optim.SGD(bn.parameters(), lr=1.0, momentum=0.9, weight_decay=0.1)
    step = _frozen_bn_step(bn, opt, gm)
    if traced is not None:
        step = mg.jit.trace(step, symbolic=traced)
    x = RNG.random((6, 3, 2, 2)).astype(np.float32)
    for _ in range(3):
        loss = step(mg.tensor(x))
    assert bn.weight.grad is None
    np.testing.assert_array_equal(bn.weight.numpy(), 2.0)
    np.testing.assert_array_equal(bn.bias.numpy(), 0.0)
    np.testing.assert_allclose(loss.numpy(), (x / np.sqrt(1 + 1e-5) * 2).mean(), rtol=1e-5)


def test_frozen_batch_norm_in_a_graph_gets_no_gradient_and_reads_later_writes():
    bn = nn.BatchNorm2d(2, freeze=True, param_dim="dim_c")
    g = mg.Graph()
    x = g.input("x", (4, 2, 3, 3), np.float32)
    y = bn(x)
    dw, db = mg.grad(F.sum(y * y), [g.bind(bn.weight), g.bind(bn.bias)])
    plan = mg.compile([y, dw, db])
    bn.weight.value = np.array([3.0, -1.0], np.float32)  # after the plan was made
    data = RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)
    out, gw, gb = plan.run({"x": data})
    np.testing.assert_array_equal(gw, 0.0)
    np.testing.assert_array_equal(gb, 0.0)
    want = data / np.sqrt(1 + 1e-5) * np.array([3.0, -1.0], np.float32).reshape(1, 2, 1, 1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("traced", [None, False, True])
@pytest.mark.parametrize("layer,shape", [(nn.BatchNorm1d, (0, 4, 0)),
                                         (nn.BatchNorm2d, (0, 4, 0, 0)),
                                         (nn.BatchNorm2d, (3, 4, 0, 2))])
def test_batch_norm_of_an_empty_batch_is_empty_and_keeps_the_running_statistics(
        layer, shape, traced):
    bn = layer(4)
    bn.train()
    step = bn if traced is None else mg.jit.trace(lambda x: bn(x), symbolic=traced)
    for _ in range(2):
        y = step(mg.tensor(np.zeros(shape, np.float32)))
        assert y.shape == shape
    np.testing.assert_array_equal(bn.running_mean.numpy(), 0.0)
    np.testing.assert_array_equal(bn.running_var.numpy(), 1.0)


def test_batch_norm_trains_on_one_value_per_channel_as_megengine():
    bn = nn.BatchNorm2d(4)
    bn.bias.value = np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1)
    bn.train()
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32).reshape(1, 4, 1, 1)
    y = bn(mg.tensor(x)).numpy()
    np.testing.assert_array_equal(y, bn.bias.value)  # variance 0: every value is its mean
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x, rtol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9, rtol=1e-6)


def test_a_compiled_training_step_leaves_a_frozen_batch_norm_as_an_eager_step_does():
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3, freeze=True), nn.Flatten(),
                          nn.Linear(12, 2))
    model[1].weight.value = np.full((1, 3, 1, 1), 1.5, np.float32)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.5)
    x = RNG.random((4, 2, 2, 2)).astype(np.float32)
    y = np.array([0, 1, 0, 1])
    conv_before = model[0].weight.numpy()
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y))
    for _ in range(2):
        step(x, y)
    np.testing.assert_array_equal(model[1].weight.numpy(), 1.5)  # no decay, no momentum
    np.testing.assert_array_equal(model[1].bias.numpy(), 0.0)
    assert not np.array_equal(model[0].weight.numpy(), conv_before)
