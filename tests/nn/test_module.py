"""Modules: traversal order, state dicts, train/eval, parameters shared by plans."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn


class Block(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(4, 3)
        self.norm = nn.BatchNorm2d(3)
        self.scale = nn.Parameter(np.ones(3, np.float32))

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        self.blocks = [Block(), Block()]
        self.head = nn.Linear(3, 2, bias=False)


def test_parameters_are_found_in_sorted_order_with_dotted_names():
    names = [n for n, _ in Net().named_parameters()]
    assert names == ["blocks.0.fc.bias", "blocks.0.fc.weight", "blocks.0.norm.bias",
                     "blocks.0.norm.weight", "blocks.0.scale", "blocks.1.fc.bias",
                     "blocks.1.fc.weight", "blocks.1.norm.bias", "blocks.1.norm.weight",
                     "blocks.1.scale", "head.weight"]
    buffers = [n for n, _ in Net().named_buffers()]
    assert buffers == ["blocks.0.norm.running_mean", "blocks.0.norm.running_var",
                       "blocks.1.norm.running_mean", "blocks.1.norm.running_var"]


def test_state_dict_round_trip_copies_in_place():
    a, b = Net(), Net()
    state = a.state_dict()
    assert set(state) == {n for n, _ in a.named_parameters()} | {n for n, _ in a.named_buffers()}
    target = b.head.weight.value
    b.load_state_dict(state)
    assert b.head.weight.value is target  # same array: plans bound to it see the new values
    for name, value in b.state_dict().items():
        np.testing.assert_array_equal(value, state[name])
    state["head.weight"][...] = 9  # a copy, not a view
    assert not np.any(a.head.weight.value == 9)


def test_load_state_dict_checks_keys_and_shapes():
    net = Net()
    state = net.state_dict()
    del state["head.weight"]
    with pytest.raises(KeyError, match="missing"):
        net.load_state_dict(state)
    state = net.state_dict()
    state["head.weight"] = np.zeros((5, 5), np.float32)
    with pytest.raises(ValueError, match="head.weight"):
        net.load_state_dict(state)


def test_train_and_eval_reach_every_submodule():
    net = Net().eval()
    assert not any(m.training for _, m in net.named_modules())
    net.train()
    assert all(m.training for _, m in net.named_modules())


def test_a_parameter_is_one_shared_buffer_in_every_plan():
    block = Block()
    g = mg.Graph()
    x = g.input("x", (2, 4), "float32")
    plan = mg.compile([block(x)])
    xv = np.ones((2, 4), np.float32)
    before = plan.run({"x": xv})[0]
    block.scale.value[...] = 2
    after = plan.run({"x": xv})[0]
    np.testing.assert_allclose(after, before * 2, rtol=1e-6)
    assert str(g).count("param[name=scale]") == 1


def test_layers_match_numpy():
    nn.init.manual_seed(1)
    fc = nn.Linear(5, 3)
    g = mg.Graph()
    x = g.input("x", (4, 5), "float32")
    xv = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    (out,) = mg.compile([fc(x)]).run({"x": xv})
    np.testing.assert_allclose(out, xv @ fc.weight.value.T + fc.bias.value, rtol=1e-5)
    bound = 1 / np.sqrt(5)
    assert np.all(np.abs(fc.weight.value) <= bound) and np.all(np.abs(fc.bias.value) <= bound)


def test_seeded_initialisation_is_reproducible():
    nn.init.manual_seed(3)
    a = nn.Conv2d(3, 8, 3).weight.value
    nn.init.manual_seed(3)
    b = nn.Conv2d(3, 8, 3).weight.value
    np.testing.assert_array_equal(a, b)
    w = nn.init.xavier_uniform((64, 32))
    assert np.abs(w).max() <= np.sqrt(6 / 96)


def test_a_parameter_alone_is_an_eager_value_and_joins_a_graph_with_a_var():
    p = nn.Parameter(np.array([-1.0, 2.0], np.float32))
    y = F.relu(p)  # no graph Var among the inputs: it runs now, as in MegEngine
    assert isinstance(y, mg.Tensor) and y.numpy().tolist() == [0.0, 2.0]
    g = mg.Graph()
    x = g.input("x", (2,))
    z = F.add(p, x)  # with a Var it is that graph's param, in either order
    assert isinstance(z, mg.Var) and not isinstance(z, mg.Tensor) and z.graph is g
    assert mg.compile([z]).run({"x": np.ones(2, np.float32)})[0].tolist() == [0.0, 3.0]
