"""Rematerialisation: the same losses, gradients and weights bitwise, smaller arenas, budgets,
the report. Every plan here also goes through the plan checker (tests/conftest.py)."""
import json

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.planner import PlanError
from mgegraph.planner.remat.remat import (
    RematOptions,
    recomputations,
    recomputed_nodes,
    remat_options,
    rematerialize,
    split,
)
from mgegraph.testing import random_graph


# -- models ---------------------------------------------------------------------------------------
def deep_mlp(depth, width):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class Block(nn.Module):
    """conv-bn-relu-dropout-conv-bn plus the input, relu: a ResNet basic block with dropout."""

    def __init__(self, c, seed):
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.drop = nn.Dropout(0.2, seed=seed)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = self.drop(F.relu(self.bn1(self.conv1(x))))
        return F.relu(x + self.bn2(self.conv2(h)))


def resnet_like(blocks, c):
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(),
                         *[Block(c, seed=k) for k in range(blocks)],
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))


def batch(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape, dtype=np.float32), rng.integers(0, 10, shape[0])


def norm_mlp(depth=8, width=32):
    """Linear-LayerNorm-GELU-Dropout layers."""
    layers = []
    for k in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU(), nn.Dropout(0.1, k)]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def train(make, shape, remat, steps=2, memory=None, adam=False):
    """Losses, the final state_dict and the plan of ``steps`` SGD-momentum (or Adam) steps."""
    nn.init.manual_seed(0)
    model = make()
    x, y = batch(shape)
    opt = optim.Adam(model.parameters(), lr=0.01) if adam else \
        optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y), remat=remat,
                                 memory=memory, metrics=("accuracy",) if adam else ())
    losses = [step(x, y) for _ in range(steps)]
    return losses, model.state_dict(), step.plan


def assert_same_training(make, shape, remat, memory=None, adam=False):
    want_losses, want_state, plain = train(make, shape, None, adam=adam)
    losses, state, plan = train(make, shape, remat, memory=memory, adam=adam)
    assert losses == want_losses  # floats compared exactly: bitwise
    assert state.keys() == want_state.keys()
    for name in state:
        np.testing.assert_array_equal(state[name], want_state[name], err_msg=name)
    return plain, plan


# -- options ---------------------------------------------------------------------------------------
def test_options_name_what_the_user_wrote():
    assert remat_options(None) is None
    assert remat_options("sqrt") == RematOptions("sqrt")
    assert remat_options(2**20).budget == 2**20
    with pytest.raises(mg.GraphError, match="'fast'"):
        remat_options("fast")
    with pytest.raises(mg.GraphError, match="-5"):
        RematOptions(-5)
    with pytest.raises(mg.GraphError, match="overhead"):
        RematOptions("auto", overhead=-0.1)


def test_split_finds_the_forward_part_from_the_graph():
    g = mg.Graph()
    x = g.input("x", (4, 8))
    w = g.param("w", np.ones((8, 8), np.float32))
    h = F.relu(x @ w)
    loss = F.sum(F.tanh(h))
    (dw,) = mg.grad(loss, [w])
    s = split(g, [loss, dw])
    assert {n.op.name for n in s.forward} == {"matmul", "relu", "tanh", "sum"}
    assert {v.node.op.name for v in s.crossing.values()} >= {"relu", "tanh"}


# -- bitwise equality ------------------------------------------------------------------------------
@pytest.mark.parametrize("remat", ["sqrt", "auto"])
def test_deep_mlp_trains_bitwise_the_same_in_a_third_of_the_memory(remat):
    plain, plan = assert_same_training(lambda: deep_mlp(32, 32), (64, 32), remat)
    assert plan.arena_bytes * 3 <= plain.arena_bytes
    assert plan.remat.chosen.extra_flops > 0


def test_resnet_like_with_batch_norm_and_dropout_trains_bitwise_the_same():
    """With every dead buffer poisoned (memory="debug"), so a recomputed value read after its
    buffer was reused would show."""
    plain, plan = assert_same_training(lambda: resnet_like(4, 8), (4, 3, 8, 8), "sqrt",
                                       memory="debug")
    assert plan.arena_bytes < plain.arena_bytes
    recomputed = {n.op.name for _, nodes in plan.remat.judge(plan.remat.chosen).remat.groups
                  for n in nodes}
    assert {"conv2d", "batch_norm", "dropout"} <= recomputed  # the same mask, drawn again


def test_layer_norm_gelu_dropout_with_adam_and_a_metric_train_bitwise_the_same():
    plain, plan = assert_same_training(norm_mlp, (16, 32), "sqrt", adam=True)
    assert plan.arena_bytes * 3 <= plain.arena_bytes * 2


def test_auto_prefers_recomputing_cheap_ops():
    """With a small overhead bound only cheap values (norms, relu, dropout) are recomputed."""
    _, plan = assert_same_training(lambda: resnet_like(3, 8), (4, 3, 8, 8),
                                   RematOptions("auto", overhead=0.05))
    report = plan.remat
    nodes = report.judge(report.chosen).remat.groups
    assert report.chosen.extra_flops <= 0.05 * report.base_flops
    assert nodes and all(n.op.cheap(n) for _, group in nodes for n in group)


def test_gradients_are_bitwise_the_same():
    rng = np.random.default_rng(1)
    g = mg.Graph()
    x = g.input("x", (16, 12))
    ws = [g.param(f"w{k}", rng.standard_normal((12, 12)).astype(np.float32) / 4)
          for k in range(12)]
    h = x
    for w in ws:
        h = F.tanh(h @ w)
    loss = F.mean(h * h)
    grads = mg.grad(loss, ws)
    feeds = {"x": rng.standard_normal((16, 12)).astype(np.float32)}
    want = mg.compile([loss] + grads).run(feeds)
    plan = mg.compile([loss] + grads, remat="sqrt")
    assert plan.remat.chosen.extra_flops > 0
    for a, b in zip(plan.run(feeds), want):
        np.testing.assert_array_equal(a, b)


def random_training_graph(seed):
    """random_graph's DAG, a loss over its outputs, and an SGD assign of its param."""
    g, outputs, feeds = random_graph(seed, nodes=20)
    w = g.params["w"]
    loss = sum(F.mean(F.tanh(o)) for o in outputs)
    (dw,) = mg.grad(loss, [w])
    g.assign(w, w - dw * 0.1)
    return loss, dw, feeds


def two_runs(plan, feeds):
    return plan.run(feeds) + plan.run(feeds)  # the second after the assign's update


@pytest.mark.parametrize("seed", range(30))
def test_random_training_graphs_are_bitwise_the_same(seed):
    """Every candidate plan the search considers, not only the one it picks."""
    loss, dw, feeds = random_training_graph(seed)
    want = two_runs(mg.compile([loss, dw]), feeds)
    loss, dw, feeds = random_training_graph(seed)
    report = mg.compile([loss, dw], remat="sqrt").remat
    for candidate in report.pool:
        assert candidate.floor <= report.judge(candidate).bound, candidate.name
        for a, b in zip(two_runs(report.plan_of(candidate), feeds), want):
            np.testing.assert_array_equal(a, b, err_msg=candidate.name)


def sgd_graph(model, x_shape, lr):
    """The training graph of ``model`` on a batch of ``x_shape`` (SGD assigns to the model's
    params): its loss, the first output."""
    g = mg.Graph()
    x, y = g.input("x", x_shape), g.input("y", x_shape[:1], "int64")
    loss = F.reshape(F.cross_entropy(model(x), y), ())
    opt = optim.SGD(model.parameters(), lr=lr)
    grads = mg.grad(loss, [g.bind(p) for p in opt.params])
    opt.build(g, {id(p): dg for p, dg in zip(opt.params, grads)})
    return loss


def resnet_graph(blocks=3, c=4):
    """The training graph of ``resnet_like`` (batch norm, dropout, skips), the feeds and the
    model."""
    nn.init.manual_seed(0)
    model = resnet_like(blocks, c)
    xv, yv = batch((2, 3, 6, 6))
    return sgd_graph(model, xv.shape, lr=0.05), {"x": xv, "y": yv}, model


def test_every_mirrored_candidate_of_a_resnet_is_bitwise_the_same():
    """Mirrored plans remake batch norm, relu and dropout outputs at each use."""
    loss, feeds, model = resnet_graph()
    start = model.state_dict()
    want = two_runs(mg.compile([loss]), feeds)
    report = mg.compile([loss], remat="sqrt", memory="debug").remat
    mirrored = [c for c in report.pool if c.mirror]
    assert mirrored
    for candidate in mirrored:
        model.load_state_dict(start)  # the runs update the model's params
        for a, b in zip(two_runs(report.plan_of(candidate), feeds), want):
            np.testing.assert_array_equal(a, b, err_msg=candidate.name)


def test_mirror_remakes_cheap_values_but_recomputes_each_dear_one_once():
    loss, _, _ = resnet_graph()
    s = split(loss.graph, [loss])
    for mirror in (False, True):
        nodes = [n for _, group in recomputations(s, frozenset(), mirror) for n in group]
        dear = [n for n in nodes if not n.op.cheap(n)]
        assert dear and len(dear) == len(set(map(id, dear)))
        assert (len(nodes) > len(set(map(id, nodes)))) == mirror
        assert {n.op.name for n in nodes} >= {"conv2d", "batch_norm", "dropout"}


def test_batch_norm_is_remade_from_the_statistics_it_saved():
    """In its inference form on the batch mean and variance the forward kept: one pass, no
    reductions (the candidates above check that y comes out bitwise the same)."""
    loss, _, _ = resnet_graph()
    s = split(loss.graph, [loss])
    r = rematerialize(s, [loss], frozenset(), recomputations(s, frozenset(), mirror=True))
    remade = [n for n in r.graph.nodes if id(n) in r.clones and n.op.name == "batch_norm"]
    assert remade and not any(n.attr["training"] for n in remade)
    for n in remade:
        makers = {id(v.node) for v in n.inputs[3:]}
        assert len(makers) == 1 and not makers & r.clones
        assert all(v.node.attr["training"] for v in n.inputs[3:])


def test_mirror_holds_no_cheap_clone_across_a_dear_backward_node():
    loss, _, _ = resnet_graph()
    s = split(loss.graph, [loss])
    nodes = s.graph.nodes
    groups = dict(recomputations(s, frozenset(), mirror=True))
    remade: dict[int, int] = {}  # id() of a cheap forward node -> where its clone was last made
    for index in range(s.backward_from, len(nodes)):
        for n in groups.get(index, ()):
            if n.op.cheap(n):
                remade[id(n)] = index
        for v in nodes[index].inputs:
            if v.node is not None and id(v.node) in remade:
                between = nodes[remade[id(v.node)] + 1:index]
                assert all(b.op.cheap(b) for b in between), v


# -- budgets ---------------------------------------------------------------------------------------
def mlp_graph(depth=16, width=32):
    nn.init.manual_seed(0)
    return sgd_graph(deep_mlp(depth, width), (32, width), lr=0.01)


def test_budgets_are_met_and_looser_ones_never_cost_more_compute():
    loss = mlp_graph()
    plain = mg.compile([loss]).arena_bytes
    smallest = mg.compile([loss], remat="sqrt").arena_bytes
    budgets = np.linspace(smallest, plain, 8).astype(int)
    plans = [mg.compile([loss], remat=int(b)) for b in budgets]
    for budget, plan in zip(budgets, plans):
        assert plan.arena_bytes <= budget
    flops = [p.remat.chosen.extra_flops for p in plans]
    assert flops == sorted(flops, reverse=True)
    assert flops[0] > 0 and flops[-1] == 0
    # each choice is on the frontier: no candidate fits its budget with less recomputation
    report = plans[3].remat
    cheaper = [c for c in report.pool if c.extra_flops < report.chosen.extra_flops]
    assert all(report.judge.arena(c) > budgets[3] for c in cheaper)


def test_an_unreachable_budget_says_the_smallest_peak():
    loss = mlp_graph()
    smallest = mg.compile([loss], remat="sqrt").arena_bytes
    with pytest.raises(mg.GraphError, match=r"remat budget 1.00 KiB \(1024 B\) cannot be met: "
                                            rf"the smallest peak reachable is .* \({smallest} B\)"):
        mg.compile([loss], remat=1024)


def test_nothing_is_recomputed_that_is_kept_anyway():
    """Outputs, and what the loss reads (the logits), are live when the backward starts."""
    plan = mg.compile([mlp_graph()], remat="sqrt")
    s = plan.remat.split
    logits = next(v for v in s.forward[-1].inputs if v.node.op.name == "linear")
    assert logits.id in s.always_kept
    for c in plan.remat.pool:
        made = {v.id for n in recomputed_nodes(s, c.kept) for v in n.outputs}
        made |= {v.id for _, nodes in recomputations(s, c.kept, c.mirror) for n in nodes
                 for v in n.outputs}
        assert not made & s.always_kept, c.name


def test_auto_keeps_within_its_overhead_bound_and_a_looser_one_never_raises_the_peak():
    loss = mlp_graph()
    peaks = []
    for bound in (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5):
        plan = mg.compile([loss], remat=RematOptions("auto", overhead=bound))
        report = plan.remat
        assert report.chosen.extra_flops <= bound * report.base_flops
        assert plan.arena_bytes == min(report.judge.arena(c) for c in report.pool
                                       if c.extra_flops <= bound * report.base_flops)
        peaks.append(plan.arena_bytes)
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < peaks[0]


@pytest.mark.parametrize("graph", ["resnet", "mlp"])
def test_floors_are_lower_bounds_and_sqrt_finds_the_smallest_arena(graph):
    """The search skips building candidates by their floors: it must still find the least."""
    loss = resnet_graph()[0] if graph == "resnet" else mlp_graph()
    report = mg.compile([loss], remat="sqrt").remat
    assert len(report.judge.done) < len(report.pool)
    for c in report.pool:
        assert c.floor <= report.judge(c).bound <= report.judge.arena(c), c.name
    segments = [c for c in report.pool if c.segments or c.name == "none"]
    assert report.judge.arena(report.chosen) == min(map(report.judge.arena, segments))


# -- scheduling ------------------------------------------------------------------------------------
def test_recomputations_are_pinned_behind_the_backward_step_before_them():
    plan = mg.compile([mlp_graph()], remat="sqrt")
    judged = plan.remat.judge(plan.remat.chosen)
    assert judged.lowered.after
    where = {id(ins): k for k, ins in enumerate(plan.instructions)}
    for i, j in judged.lowered.after:
        a, b = judged.lowered.instructions[i], judged.lowered.instructions[j]
        assert where[id(a)] < where[id(b)]


def test_the_checker_rejects_a_read_of_a_param_after_its_update():
    """What a recomputation scheduled after the optimiser's update would do."""
    g = mg.Graph()
    x = g.input("x", (4,))
    w = g.param("w", np.ones(4, np.float32))
    y = x * w
    g.assign(w, w + 1.0)
    plan = mg.compile([F.sum(y)], optimize=0)
    ops = [ins.op for ins in plan.instructions]
    reader = ops.index("mul")
    moved = [ins for k, ins in enumerate(plan.instructions) if k != reader]
    moved.append(plan.instructions[reader])
    moved.append(moved.pop(moved.index(next(i for i in moved if i.op == "sum"))))
    bad = mg.Plan(plan.device, plan.slots, tuple(moved), plan.feeds, plan.outputs, plan.values,
                  plan.memory)
    with pytest.raises(PlanError, match=r"writes s\d+ over .* which step \d+ still reads"):
        mg.planner.verify(bad)


# -- the report ------------------------------------------------------------------------------------
def test_report_says_what_was_kept_and_recomputed(tmp_path):
    plan = mg.compile([mlp_graph()], remat="auto")
    text = plan.remat_report()
    for words in ("kept", "recomputed", "bytes saved", "extra compute", "peak against extra"):
        assert words in text
    data = json.loads(plan.remat_report(format="json"))
    assert data["arena_bytes"] == plan.arena_bytes
    assert data["bytes_saved"] == data["arena_bytes_without_remat"] - plan.arena_bytes > 0
    assert data["recomputed"] and data["kept"]
    curve = data["curve"]
    assert curve[0]["extra_flops_percent"] == 0.0 and len(curve) >= 3
    assert [p["arena_bytes"] for p in curve] == sorted((p["arena_bytes"] for p in curve),
                                                       reverse=True)
    assert "remat: " in plan.memory_report()
    assert json.loads(plan.memory_report(format="json"))["remat"]["extra_flops_percent"] == \
        data["extra_flops_percent"]
    mg.planner.save_remat_picture(plan, tmp_path / "remat.svg")
    svg = (tmp_path / "remat.svg").read_text()
    assert svg.count("<svg") == 3 and "without remat" in svg and "with remat" in svg
    with pytest.raises(mg.GraphError, match="without remat"):
        mg.compile([mlp_graph()]).remat_report()


def test_inference_graph_has_nothing_to_recompute():
    g = mg.Graph()
    x = g.input("x", (4, 8))
    y = F.relu(x @ g.param("w", np.ones((8, 8), np.float32)))
    plan = mg.compile([y], remat="sqrt")
    assert plan.remat.chosen.extra_flops == 0
    assert plan.arena_bytes == mg.compile([y]).arena_bytes
