"""Elementwise fusion: the groups it forms (exact IR), results against the unfused graph, the
register allocator, and training steps through fused updates."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.planner.passes.fuse import fuse
from mgegraph.testing import random_graph

RNG = np.random.default_rng(0)


def both(outputs, feeds):
    """(fused results, unfused results) of the same graph."""
    fused = mg.compile(outputs, optimize=["fuse"]).run(feeds)
    plain = mg.compile(outputs, optimize=0).run(feeds)
    return fused, plain


def chain_graph(n=1000):
    g = mg.Graph()
    x, a, b, c = (g.input(k, (n,), "float32") for k in "xabc")
    y = F.relu(x * a + b) * c - F.tanh(x) / (1 + F.exp(-x))
    feeds = {k: RNG.standard_normal(n).astype(np.float32) for k in "xabc"}
    return g, y, feeds


def test_the_fusion_chain_is_one_node():
    g, y, feeds = chain_graph(8)
    r = fuse(g, [y])
    assert [n.op.name for n in r.graph.nodes if n.op.category != "source"] == \
        ["fused_elementwise"]
    assert r.stats["fused"] == ["mul+add+relu+mul+tanh+neg+exp+add+div+sub"]
    fused, plain = both([y], feeds)
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-6, atol=1e-6)


def test_fused_node_text():
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    y = F.relu(x * 2.0 + x)
    assert str(fuse(g, [y]).graph) == """\
%0:f32[4] = input[name=x]
%1:f32[] = const[value=2.0]
%2:f32[4] = fused_elementwise[code=((load,0,0,0,0),(const,1,0,0,0),(mul,2,0,1,0),(add,3,2,0,0),\
(relu,4,3,0,0),(store,0,4,0,0)), constants=(2.0), dtype=float32, n_outputs=1, shape=(4)] %0"""


@pytest.mark.parametrize("n", [0, 1, 7, 4096, 4097, 100_000])
def test_sizes_around_the_block(n):
    _, y, feeds = chain_graph(n)
    fused, plain = both([y], feeds)
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-6, atol=1e-6)


def test_broadcast_inputs_and_several_outputs():
    g = mg.Graph()
    x = g.input("x", (3, 5, 7), "float32")
    row = g.input("row", (7,), "float32")
    col = g.input("col", (3, 1, 1), "float32")
    h = F.sigmoid(x * row) + col
    y = F.square(h) - row
    z = F.sum(h)                           # h is needed outside the group: a second output
    feeds = {"x": RNG.standard_normal((3, 5, 7)).astype(np.float32),
             "row": RNG.standard_normal(7).astype(np.float32),
             "col": RNG.standard_normal((3, 1, 1)).astype(np.float32)}
    r = fuse(g, [y, z])
    (node,) = [n for n in r.graph.nodes if n.op.name == "fused_elementwise"]
    assert len(node.outputs) == 2
    fused, plain = both([y, z], feeds)
    for a, b in zip(fused, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_float64_and_attributes():
    g = mg.Graph()
    x = g.input("x", (64,), "float64")
    y = F.clip(F.leaky_relu(x * 3.0, 0.2), -1.0, 2.5) + F.exp(x)
    fused, plain = both([y], {"x": RNG.standard_normal(64)})
    # the fused kernel's vector exp and libm's exp differ in the last bit of some results
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-15, atol=1e-16)


def test_a_group_never_waits_on_itself():
    g = mg.Graph()
    x = g.input("x", (6, 6), "float32")
    a = F.exp(x)
    s = F.sum(a, axis=1, keepdims=True)    # not fusable: depends on a
    y = F.tanh(a) * s                      # fusing a with y would make a cycle through s
    fused, plain = both([y], {"x": RNG.standard_normal((6, 6)).astype(np.float32)})
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-6)


@pytest.mark.parametrize("seed", range(40))
def test_random_dags(seed):
    _, outputs, feeds = random_graph(seed)
    fused, plain = both(outputs, feeds)
    for a, b in zip(fused, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_training_steps_match_with_fused_updates():
    def train(opt_level):
        nn.init.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
        x = np.random.default_rng(5).standard_normal((5, 6)).astype(np.float32)
        y = np.array([0, 1, 2, 1, 0])
        g = mg.Graph()
        xs, ys = g.input("x", x.shape, "float32"), g.input("y", y.shape, "int64")
        loss = F.cross_entropy(model(xs), ys)
        params = list(model.parameters())
        opt = optim.Adam(params, lr=0.05)
        grads = mg.grad(loss, [g.bind(p) for p in params])
        opt.build(g, {id(p): dg for p, dg in zip(params, grads)})
        plan = mg.compile([loss], optimize=opt_level)
        losses = []
        for _ in range(3):
            opt.prepare_step()
            losses.append(float(plan.run({"x": x, "y": y})[0]))
        return losses, model.state_dict(), plan

    fused_losses, fused_state, plan = train(1)
    plain_losses, plain_state, _ = train(0)
    assert any(i.op == "fused_elementwise" for i in plan.instructions)
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-5)
    for key in plain_state:
        np.testing.assert_allclose(fused_state[key], plain_state[key], rtol=1e-5, atol=1e-6)
