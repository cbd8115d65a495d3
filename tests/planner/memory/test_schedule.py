"""Liveness, in-place choice and the memory-aware schedule, each on lowered plans directly."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.backend import get_backend
from mgegraph.lowering import lower
from mgegraph.planner.memory import arena, liveness
from mgegraph.planner.memory.inplace import choose_overwrites
from mgegraph.planner.memory.plan import MemoryOptions, peak_bytes, plan_memory
from mgegraph.planner.memory.schedule import dependencies, memory_aware_order
from mgegraph.testing import random_graph


def lowered(outputs):
    return lower(outputs[0].graph, outputs, get_backend("cpu"))


def test_liveness_spans_a_chain_exactly():
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    a = F.exp(x)
    b = F.reshape(a, (2, 2))       # a view: reading b reads a's buffer
    c = F.neg(x)
    d = F.sum(b) + F.sum(c)
    low = lowered([d])
    live = liveness.analyze(low.slots, low.instructions)
    ops = [i.op for i in low.instructions]
    a_slot = low.instructions[ops.index("exp")].outputs[0]
    assert live.request_span(a_slot) == (0, ops.index("sum") + 1)
    b_slot = low.instructions[ops.index("sum")].inputs[0]
    assert live.root[b_slot] == a_slot


def test_in_place_takes_only_a_dying_temporary():
    g = mg.Graph()
    x = g.input("x", (8,), "float32")
    a = F.exp(x)                  # dies at the relu
    b = F.relu(a)
    c = F.tanh(b) + b             # b is read twice: the tanh may not take it
    low = lowered([F.sum(c)])
    live = liveness.analyze(low.slots, low.instructions)
    chosen = choose_overwrites(low.slots, low.instructions, live, 64)
    by_op = {ins.op: ins for ins in low.instructions}
    assert chosen[by_op["relu"].outputs[0]] == (by_op["exp"].outputs[0], 0)
    assert by_op["tanh"].outputs[0] not in chosen
    assert chosen[by_op["add"].outputs[0]][0] in by_op["add"].inputs


def train_plan_parts():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = np.ones((4, 6), np.float32), np.zeros(4, np.int64)
    g = mg.Graph()
    xs, ys = g.input("input0", x.shape, "float32"), g.input("input1", y.shape, "int64")
    loss = F.cross_entropy(model(xs), ys)
    params = list(model.parameters())
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    grads = mg.grad(loss, [g.bind(p) for p in params])
    opt.build(g, {id(p): dg for p, dg in zip(params, grads)})
    return lowered([F.reshape(loss, ())])


def test_updates_wait_for_every_read_of_their_param():
    low = train_plan_parts()
    before = dependencies(low.slots, low.instructions)
    for j, ins in enumerate(low.instructions):
        for p in ins.outputs:
            if low.slots[p].role == "param":
                readers = {i for i, other in enumerate(low.instructions)
                           if i != j and p in other.inputs}
                assert readers <= before[j]


@pytest.mark.parametrize("seed", range(20))
def test_memory_aware_order_is_a_topological_order(seed):
    _, outputs, _ = random_graph(seed, nodes=40)
    low = lowered(outputs)
    order = memory_aware_order(low.slots, low.instructions)
    assert sorted(order) == list(range(len(low.instructions)))
    position = {j: k for k, j in enumerate(order)}
    for j, needs in enumerate(dependencies(low.slots, low.instructions)):
        assert all(position[i] < position[j] for i in needs)


def test_training_order_is_topological_and_no_worse():
    low = train_plan_parts()
    order, memory = plan_memory(low.slots, low.instructions, MemoryOptions())
    position = {j: k for k, j in enumerate(order)}
    for j, needs in enumerate(dependencies(low.slots, low.instructions)):
        assert all(position[i] < position[j] for i in needs)
    assert memory.lower_bound_bytes <= memory.lower_bounds["user"]


@pytest.mark.parametrize("seed", range(30))
def test_the_fast_peak_equals_the_solvers_lower_bound(seed):
    _, outputs, _ = random_graph(seed, nodes=40)
    plan = mg.compile(outputs)
    requests = [arena.Request(s, b, e, plan.slots[s].nbytes)
                for s, (b, e) in plan.memory.spans.items()]
    overwrites = [arena.Overwrite(src, dst, off)
                  for dst, (src, off) in plan.memory.overwrites.items()]
    assert peak_bytes(requests, overwrites, 64) == arena.lower_bound(requests, overwrites, 64)
    assert plan.memory.lower_bounds[plan.memory.schedule] == plan.lower_bound_bytes
