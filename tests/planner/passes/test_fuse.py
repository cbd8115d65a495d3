"""Elementwise fusion: the groups it forms (exact IR), results against the unfused graph, the
register allocator, training steps through fused updates, and groups split to fit a backend's
FusionLimits (the CPU kernel's 32 inputs, and small made-up limits)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph._kernels.lowering.fused import allocate_registers
from mgegraph.backend import FusionLimits, get_backend
from mgegraph.planner.passes.fuse import fuse, registers_needed
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


def test_a_group_read_through_an_outside_node_stays_apart_and_the_rest_merge():
    """A recurrent step: c is a group the step's gates read through a GEMM (outside), so c
    cannot join them, but the gate group beside it still merges with the node reading both
    (all of the step after the GEMM is one kernel: before, the gate stayed a group of its own)."""
    g = mg.Graph()
    x, w = g.input("x", (4, 4), "float32"), g.input("w", (4, 4), "float32")
    c = F.tanh(x) * 2                     # the previous step's group
    gate = F.sigmoid(x + c @ w)           # reads c through matmul
    y = gate * c + F.tanh(gate)
    r = fuse(g, [y])
    assert [n.op.name for n in r.graph.nodes if n.op.category != "source"] == \
        ["fused_elementwise", "matmul", "fused_elementwise"]
    fused, plain = both([y], {k: RNG.standard_normal((4, 4)).astype(np.float32) for k in "xw"})
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


# -- what fits the backend's fused kernel -------------------------------------------------------
CPU_LIMITS = get_backend("cpu").fusion


def input_chain(n, size=64):
    """x0 + x1 * x2 - x3 + ...: one elementwise group reading n inputs; its feeds."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", (size,), "float32") for i in range(n)]
    y = xs[0]
    for i, x in enumerate(xs[1:]):
        y = y + x if i % 3 == 0 else y * x if i % 3 == 1 else y - x
    feeds = {f"x{i}": RNG.uniform(0.5, 1.5, size).astype(np.float32) for i in range(n)}
    return g, y, feeds


def fused_nodes(graph):
    return [n for n in graph.nodes if n.op.name == "fused_elementwise"]


def assert_fits(graph, limits):
    for node in fused_nodes(graph):
        assert len(node.inputs) <= limits.max_inputs
        assert len(node.outputs) <= limits.max_outputs
        assert registers_needed(node.attr["code"]) <= limits.max_registers
        assert len(node.attr["shape"]) <= limits.max_dims


def assert_bitwise(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# Runs as long as the kernel allows: the first 31 steps read 32 inputs, each later run the run
# before it and 31 more; the 33-input chain's last step is left alone, unfused.
RUN_INPUTS = {33: [32], 100: [32, 32, 32, 7]}


@pytest.mark.parametrize("n", [33, 100])
def test_a_chain_of_more_inputs_than_the_kernel_holds_compiles_and_runs(n):
    g, y, feeds = input_chain(n)
    plan = mg.compile([y])
    fused = [i for i in plan.instructions if i.op == "fused_elementwise"]
    assert [len(i.inputs) for i in fused] == RUN_INPUTS[n]
    assert_bitwise(plan.run(feeds)[0], mg.compile([y], optimize=0).run(feeds)[0])
    r = fuse(g, [y], limits=CPU_LIMITS)
    assert_fits(r.graph, CPU_LIMITS)
    assert r.stats["split"] == 1
    assert [len(node.inputs) for node in fused_nodes(r.graph)] == RUN_INPUTS[n]


def test_without_limits_or_within_them_a_group_stays_whole():
    g, y, _ = input_chain(33)
    assert fuse(g, [y]).stats == {"groups": 1, "fused": ["+".join(["add", "mul", "sub"] * 11
                                                                   )[:-len("+sub")]]}
    g, y, _ = chain_graph(8)
    assert fuse(g, [y], limits=CPU_LIMITS).stats == fuse(g, [y]).stats
    assert str(fuse(g, [y], limits=CPU_LIMITS).graph) == str(fuse(g, [y]).graph)


def test_a_group_is_split_at_the_input_limit():
    g = mg.Graph()
    x = [g.input(f"x{i}", (5,), "float32") for i in range(5)]
    y = ((x[0] + x[1]) * x[2] + x[3]) * x[4]
    small = FusionLimits(max_inputs=3, max_outputs=1, max_registers=8, max_dims=4)
    r = fuse(g, [y], limits=small)
    assert r.stats == {"groups": 2, "fused": ["add+mul", "add+mul"], "split": 1}
    first, second = fused_nodes(r.graph)
    assert second.inputs[0].id == first.outputs[0].id
    assert_fits(r.graph, small)
    feeds = {f"x{i}": RNG.standard_normal(5).astype(np.float32) for i in range(5)}
    assert_bitwise(mg.compile(r.outputs, optimize=0).run(feeds)[0],
                   mg.compile([y], optimize=0).run(feeds)[0])


def test_a_group_is_split_at_the_output_limit():
    g = mg.Graph()
    x = g.input("x", (3, 5), "float32")
    row = g.input("row", (5,), "float32")
    h = F.sigmoid(x * row) + 1.0
    y = F.square(h) - row
    z = F.sum(h)                           # h is read outside the group: a second output
    assert len(fuse(g, [y, z]).graph.nodes[-2].outputs) == 2
    one = FusionLimits(max_inputs=8, max_outputs=1, max_registers=8, max_dims=4)
    r = fuse(g, [y, z], limits=one)
    assert r.stats["fused"] == ["mul+sigmoid+add", "square+sub"]
    assert_fits(r.graph, one)


def test_a_group_is_split_at_the_register_limit():
    g = mg.Graph()
    x, a, b = (g.input(k, (7,), "float32") for k in "xab")
    y = (x * a + x * b) * (x - a)          # x, a and x * a live while b and x * b are made
    code = fused_nodes(fuse(g, [y]).graph)[0].attr["code"]
    assert registers_needed(code) == allocate_registers(code)[1] == 5
    few = FusionLimits(max_inputs=8, max_outputs=2, max_registers=4, max_dims=4)
    r = fuse(g, [y], limits=few)
    assert r.stats["split"] == 1
    assert_fits(r.graph, few)
    feeds = {k: RNG.standard_normal(7).astype(np.float32) for k in "xab"}
    assert_bitwise(mg.compile(r.outputs, optimize=0).run(feeds)[0],
                   mg.compile([y], optimize=0).run(feeds)[0])


def test_a_group_of_more_dims_than_the_kernel_takes_stays_unfused():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4), "float32")
    y = F.exp(x) * x + 1.0
    r = fuse(g, [y], limits=FusionLimits(max_inputs=8, max_outputs=2, max_registers=8,
                                         max_dims=2))
    assert r.stats == {"groups": 0, "fused": [], "split": 1} and not r.changed


LIMITS = [FusionLimits(3, 1, 8, 8), FusionLimits(2, 2, 3, 8), FusionLimits(4, 1, 2, 8),
          FusionLimits(32, 32, 64, 8)]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("limits", LIMITS, ids=lambda k: f"in{k.max_inputs}-out{k.max_outputs}"
                                                        f"-reg{k.max_registers}")
def test_random_dags_fit_small_limits_and_keep_their_results(seed, limits):
    _, outputs, feeds = random_graph(seed)
    r = fuse(outputs[0].graph, outputs, limits=limits)
    assert_fits(r.graph, limits)
    for a, b in zip(mg.compile(r.outputs, optimize=0).run(feeds),
                    mg.compile(outputs, optimize=0).run(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(20))
def test_the_register_count_is_the_cpu_allocators(seed):
    _, outputs, _ = random_graph(seed)
    for node in fused_nodes(fuse(outputs[0].graph, outputs).graph):
        code = node.attr["code"]
        assert registers_needed(code) == allocate_registers(code)[1]
