"""Module, Parameter, Sequential, batch norm and init under MegEngine's names and meanings
(``mgegraph.module`` is MegEngine's ``megengine.module``)."""
import copy
from collections import OrderedDict

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.module as M
from mgegraph import nn
from mgegraph.module import init

RNG = np.random.default_rng(0)


class Inner(M.Module):
    def __init__(self):
        super().__init__()
        self.bn = M.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(x)


class Outer(M.Module):
    def __init__(self):
        super().__init__()
        self.i = Inner()
        self.bn = M.BatchNorm2d(4)
        self.param = mg.Parameter(np.ones(1, np.float32))
        self.buff = mg.tensor(np.ones(1, np.float32))
        self.blocks = {"x": M.Linear(2, 2), "y": [M.Linear(2, 3), Inner()]}

    def forward(self, x):
        return self.bn(self.i(x))


def test_walk_names_dict_and_list_members_in_sorted_attribute_order():
    m = Outer()
    assert [n for n, _ in m.named_modules()] == [
        "", "blocks.x", "blocks.y.0", "blocks.y.1", "blocks.y.1.bn", "bn", "i", "i.bn"]
    assert [n for n, _ in m.named_modules(prefix="m")][:2] == ["m", "m.blocks.x"]
    assert m.children() == [m.blocks["x"], m.blocks["y"][0], m.blocks["y"][1], m.bn, m.i]
    parents = {id(child): parent for child, parent in m.modules(with_parent=True)}
    assert parents[id(m.blocks["y"][1].bn)] is m.blocks["y"][1] and parents[id(m)] is None
    assert [n for n, _ in m.named_parameters()] == [
        "blocks.x.bias", "blocks.x.weight", "blocks.y.0.bias", "blocks.y.0.weight",
        "blocks.y.1.bn.bias", "blocks.y.1.bn.weight", "bn.bias", "bn.weight", "i.bn.bias",
        "i.bn.weight", "param"]
    # a plain Tensor attribute is a buffer, as the running statistics are
    assert m.buffers(recursive=False) == [m.buff]
    assert "buff" in m.state_dict() and len(m.tensors()) == len(m.named_tensors()) == 18


def test_a_module_held_twice_is_walked_once_under_its_first_name():
    m = Outer()
    m.h = m.i
    names = [n for n, _ in m.named_modules()]
    assert "h" in names and "h.bn" in names and "i" not in names and "i.bn" not in names
    assert len(m.parameters()) == len({id(p) for p in m.parameters()})


def test_a_dict_key_that_is_not_a_string_is_refused_where_it_holds_state():
    m = M.Linear(2, 2)
    m.table = {True: M.Linear(2, 2)}
    with pytest.raises(mg.GraphError, match=r"table: keys of a dict .* must be str, got True"):
        m.named_modules()
    m.table = {True: 1}  # plain values under any key are no state
    assert len(m.named_modules()) == 1


def test_sequential_names_its_layers_0_1_or_by_an_ordered_dict():
    seq = M.Sequential(M.Linear(3, 4), M.ReLU(), M.Linear(4, 2))
    assert list(seq.state_dict()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert len(seq) == 3 and seq[2] is seq.layers[2] and next(iter(seq)) is seq[0]
    named = M.Sequential(OrderedDict(fc0=M.Linear(3, 4), act=M.ReLU(), fc1=M.Linear(4, 2)))
    assert [n for n, _ in named.named_children()] == ["act", "fc0", "fc1"]
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    head = named[:2]
    np.testing.assert_array_equal(head(mg.tensor(x)).numpy(),
                                  named.act(named.fc0(mg.tensor(x))).numpy())
    del named[1]
    assert len(named) == 2 and not hasattr(named, "act")
    with pytest.raises(mg.GraphError, match=r"Sequential: layer 'x' must be a Module"):
        M.Sequential(OrderedDict(x=3))


def test_forward_hooks_change_inputs_and_outputs_until_removed():
    lin = M.Linear(2, 2)
    pre = lin.register_forward_pre_hook(lambda module, inputs: tuple(x * 0 for x in inputs))
    post = lin.register_forward_hook(lambda module, inputs, out: out + 1)
    x = mg.tensor(np.ones((1, 2), np.float32))
    np.testing.assert_allclose(lin(x).numpy(), lin.bias.numpy()[None] + 1)
    pre.remove(), post.remove()
    np.testing.assert_allclose(lin(x).numpy(), (x.numpy() @ lin.weight.numpy().T) +
                               lin.bias.numpy(), rtol=1e-6)


def test_train_eval_apply_and_zero_grad():
    m = Outer()
    m.eval()
    m.i.train(recursive=False)
    assert m.i.training and not m.i.bn.training and not m.bn.training
    m.apply(lambda module: setattr(module, "training", True))
    assert all(module.training for module in m.modules())
    m.param.grad = mg.tensor(np.full(1, 3.0, np.float32))
    m.zero_grad()
    np.testing.assert_array_equal(m.param.grad.numpy(), [0.0])
    assert m.bn.weight.grad is None


def test_load_state_dict_strict_closure_and_shapes():
    src, dst = Outer(), Outer()
    src.param.value = np.full(1, 7.0, np.float32)
    state = src.state_dict()
    dst.load_state_dict(state)
    np.testing.assert_array_equal(dst.param.value, [7.0])
    with pytest.raises(KeyError, match=r"unexpected \['extra'\]"):
        dst.load_state_dict({**state, "extra": np.zeros(1)})
    partial = {k: v for k, v in state.items() if k != "param"}
    with pytest.raises(KeyError, match=r"missing \['param'\]"):
        dst.load_state_dict(partial)
    with pytest.warns(UserWarning, match="missing"):
        dst.load_state_dict(partial, strict=False)
    # MegEngine's closure: an array per name, None skips it
    with pytest.warns(UserWarning, match=r"missing \['blocks.x.bias'"):
        dst.load_state_dict(lambda name, t: np.full(t.shape, 2.0, np.float32)
                            if name == "param" else None, strict=False)
    np.testing.assert_array_equal(dst.param.value, [2.0])
    with pytest.raises(ValueError, match=r"param has shape \(2,\), the module needs \(1,\)"):
        dst.load_state_dict({**state, "param": np.zeros(2, np.float32)})
    dst.load_state_dict({**state, "buff": np.full(1, 5.0, np.float32)})
    np.testing.assert_array_equal(dst.buff.numpy(), [5.0])  # a plain Tensor buffer loads too


def test_replace_param_numbers_parameters_in_walk_order():
    lin = M.Linear(2, 3)
    new_weight = mg.Parameter(np.zeros((3, 2), np.float32))
    assert lin.replace_param({1: new_weight}, 0) == 2  # bias 0, weight 1
    assert lin.weight is new_weight
    with pytest.raises(mg.GraphError, match=r"replace_param: bias has shape \(3,\)"):
        lin.replace_param({0: mg.Parameter(np.zeros(4, np.float32))}, 0)


def test_batch_norm_keeps_megengine_shapes_and_states_c_values():
    bn = M.BatchNorm2d(3)
    assert all(p.shape == (1, 3, 1, 1) for p in (bn.weight, bn.bias, bn.running_mean,
                                                 bn.running_var))
    assert {k: v.shape for k, v in bn.state_dict().items()} == {
        "bias": (3,), "running_mean": (3,), "running_var": (3,), "weight": (3,)}
    torch = pytest.importorskip("torch")
    theirs = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        theirs.running_mean.copy_(torch.tensor([1.0, 2.0, 3.0]))
    state = {k: v.numpy() for k, v in theirs.state_dict().items() if k != "num_batches_tracked"}
    bn.load_state_dict(state)
    np.testing.assert_array_equal(bn.running_mean.value.reshape(-1), [1.0, 2.0, 3.0])
    theirs.eval(), bn.eval()
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(bn(mg.tensor(x)).numpy(),
                               theirs(torch.from_numpy(x)).detach().numpy(), atol=1e-6)


def test_sync_batch_norm_is_batch_norm_on_one_process():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    sync, plain = M.SyncBatchNorm(4), M.BatchNorm1d(4)
    np.testing.assert_array_equal(sync(mg.tensor(x)).numpy(), plain(mg.tensor(x)).numpy())
    np.testing.assert_array_equal(sync.running_var.value, plain.running_var.value)
    with pytest.raises(mg.GraphError, match=r"SyncBatchNorm: group='world'"):
        M.SyncBatchNorm(4, group="world")


def test_running_statistics_cannot_be_turned_on_after_construction():
    bn = M.BatchNorm2d(3, track_running_stats=False)
    bn.track_running_stats = True
    with pytest.raises(mg.GraphError, match=r"track_running_stats was False at construction"):
        bn(mg.tensor(RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)))


def test_frozen_batch_norm_without_affine_normalises_with_running_statistics():
    bn = M.BatchNorm2d(3, freeze=True, affine=False)
    bn.running_mean[...] = np.full((1, 3, 1, 1), 1.0, np.float32)
    bn.running_var[:, 1] = 4.0
    x = RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
    want = (x - 1.0) / np.sqrt(np.array([1.0, 4.0, 1.0]).reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(mg.tensor(x)).numpy(), want, rtol=1e-5)


def test_repr_is_megengine_s():
    net = M.Sequential(OrderedDict(conv=M.Conv2d(3, 8, 3, padding=1, bias=False),
                                   bn=M.BatchNorm2d(8), pool=M.MaxPool2d(2)))
    net.extra = [M.Dropout(0.1)]
    assert repr(net) == (
        "Sequential(\n"
        "  (conv): Conv2d(3, 8, kernel_size=(3, 3), padding=(1, 1), bias=False)\n"
        "  (bn): BatchNorm2d(8, eps=1e-05, momentum=0.9, affine=True, track_running_stats=True)\n"
        "  (pool): MaxPool2d(kernel_size=2, stride=2, padding=0)\n"
        "  (extra.0): Dropout(drop_prob=0.1)\n"
        ")")
    assert repr(M.Linear(2, 3)) == "Linear(in_features=2, out_features=3, bias=True)"


def test_parameter_takes_megengine_arguments():
    assert mg.Parameter is nn.Parameter
    p = mg.Parameter(np.zeros(3), dtype=np.float32, device="cpu0", name="w")
    assert p.dtype == np.float32 and p.name == "w" and p.trainable
    p[1] = 5.0
    np.testing.assert_array_equal(p.value, [0.0, 5.0, 0.0])
    with pytest.raises(mg.GraphError, match="eager tensors live in host memory"):
        mg.Parameter([1.0], device="gpu0")


def test_init_functions_fill_in_place_with_megengine_fans():
    x = mg.tensor(np.zeros((2, 3)), dtype=np.float32)
    init.fill_(x, 5.0)
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 5.0, np.float32))
    conv = M.Conv2d(2, 3, (5, 7))
    assert init.calculate_fan_in_and_fan_out(conv.weight) == (2 * 35, 3 * 35)
    assert init.calculate_fan_in_and_fan_out(M.Linear(3, 8).weight) == (3, 8)
    with pytest.raises(ValueError, match=r"shape \(8,\) has no fans"):
        init.calculate_fan_in_and_fan_out(M.Linear(3, 8).bias)
    w = M.Linear(100, 200).weight
    init.xavier_uniform_(w)
    assert np.abs(w.value).max() <= np.sqrt(6.0 / 300) and w.value.std() > 0.05
    init.msra_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.value.std() - np.sqrt(2.0 / 200)) < 0.01
    assert init.calculate_gain("leaky_relu", 0) == pytest.approx(np.sqrt(2.0))
    with pytest.raises(ValueError, match="unknown nonlinearity 'swish'"):
        init.calculate_gain("swish")


@pytest.mark.parametrize("layer,args,want", [
    (M.Conv2d, (2, 4, (5, 7), 1, 0, 1, 2), (35, 70)),          # out / groups x kernel
    (M.Conv3d, (2, 4, (5, 7, 9), 1, 0, 1, 2), (315, 630)),
    (M.ConvTranspose2d, (4, 6, 3, 1, 0, 0, 1, 2), (27, 18)),   # (in, out/groups, k, k)
    (M.Conv1d, (2, 3, 5), (10, 15)),
])
def test_grouped_convolution_weights_have_megengine_fans(layer, args, want):
    module = layer(*args)
    assert init.calculate_fan_in_and_fan_out(module.weight) == want
    copied = copy.deepcopy(module)  # the weight's groups come along
    assert init.calculate_fan_in_and_fan_out(copied.weight) == want
    assert init.calculate_correct_fan(module.weight, "fan_out") == want[1]


def test_elemwise_names_a_function_by_megengine_mode():
    a, b = (mg.tensor(RNG.standard_normal(7).astype(np.float32)) for _ in range(2))
    np.testing.assert_array_equal(M.Elemwise("ADD")(a, b).numpy(), (a + b).numpy())
    np.testing.assert_array_equal(M.Elemwise("fuse_add_relu")(a, b).numpy(),
                                  np.maximum((a + b).numpy(), 0))
    np.testing.assert_array_equal(M.Elemwise("h_swish")(a).numpy(),
                                  mg.functional.hswish(a).numpy())
    with pytest.raises(mg.GraphError, match=r"Elemwise: unknown mode 'nope'"):
        M.Elemwise("nope")


def test_megengine_submodule_paths_name_the_nn_classes():
    from mgegraph.module.batchnorm import SyncBatchNorm
    from mgegraph.module.module import Module
    from mgegraph.module.normalization import GroupNorm, InstanceNorm, LayerNorm
    assert (Module, SyncBatchNorm, GroupNorm) == (nn.Module, nn.SyncBatchNorm, nn.GroupNorm)
    assert (InstanceNorm, LayerNorm) == (nn.InstanceNorm, nn.LayerNorm)
