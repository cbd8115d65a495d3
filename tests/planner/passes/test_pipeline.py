"""The pass pipeline: levels and names, the report, dumps, check mode naming the failing pass,
the IR verifier, and whole graphs (random DAGs, training steps) unchanged in their results."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.backend import get_backend
from mgegraph.compiler import evaluator
from mgegraph.ir.graph import Graph
from mgegraph.ir.types import tensor_type
from mgegraph.planner.passes import pipeline
from mgegraph.planner.passes.pipeline import LEVELS, PASSES, PassError, passes_report
from mgegraph.planner.passes.pipeline import optimize as optimize_pass
from mgegraph.planner.passes.rewrite import PassResult, rebuild
from mgegraph.planner.passes.verify import verify_graph
from mgegraph.testing import assert_same_results as same_results
from mgegraph.testing import random_graph


def optimize(graph, outputs, *args, **kw):
    """The pipeline as mg.compile runs it on the CPU: fold evaluates there, fuse within the
    fused kernel's limits, accumulate where the CPU has addmm."""
    return optimize_pass(graph, outputs, *args, evaluate=evaluator("cpu"),
                         fusion=get_backend("cpu").fusion, runs=cpu_runs, **kw)


def cpu_runs(op: str) -> bool:
    return get_backend("cpu").impl(op) is not None


def small_graph():
    g = Graph()
    x = g.input("x", (2, 3))
    w = g.param("w", np.ones((2, 3), np.float32))
    c = g.const(2.0) + 1.0
    F.exp(x)                                           # dead
    y = F.transpose(F.transpose(-(-(x * c)) * 1.0, (1, 0)), (1, 0)) + x * c + w
    return g, y


def test_level_one_runs_every_pass_in_order():
    assert [name for name, _, _ in PASSES] == ["dce", "cse", "fold_qdq", "fold", "simplify",
                                               "bnfold", "bucket_grads",
                                               "epilogue", "prepack", "accumulate", "fuse",
                                               "dce_final"]
    assert LEVELS[0] == [] and LEVELS[2] == [name for name, _, _ in PASSES]
    assert LEVELS[1] == LEVELS[2]  # level 2 differs in accumulate's rounding only
    assert all(why for _, _, why in PASSES)
    g, y = small_graph()
    new, (out,), report = optimize(g, [y], ["dce", "cse", "fold", "simplify", "dce_final"],
                                   check=True)
    assert str(new) == """\
%0:f32[2,3] = input[name=x]
%1:f32[2,3] = param[name=w]
%2:f32[] = const[value=3.0]
%3:f32[2,3] = mul %0 %2
%4:f32[2,3] = add %3 %3
%5:f32[2,3] = add %4 %1"""
    assert passes_report(report) == """\
dce          nodes removed 1
cse          merged 2
fold         folded 1, consts 1, bytes 4
simplify     rewrites: mul_one 1, neg_neg 1, transpose_transpose 1
dce_final    nodes removed 4"""
    same_results([y], [out], {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})


def test_level_zero_and_pass_lists():
    g, y = small_graph()
    same, (out,), report = optimize(g, y, 0)
    assert same is g and out is y and report == []
    _, _, report = optimize(g, [y], ["cse", "dce"])
    assert [name for name, _ in report] == ["cse", "dce"]
    assert passes_report([("fold", {"folded": 0}), ("simplify", {"rewrites": {}})]) == \
        "fold         folded 0\nsimplify     rewrites: none"


def test_unknown_names_and_levels_list_what_exists():
    g, y = small_graph()
    with pytest.raises(ValueError, match="available: dce, cse, fold_qdq, fold, simplify, bnfold, "
                                         "bucket_grads, epilogue, prepack, accumulate, fuse, "
                                         "dce_final"):
        optimize(g, [y], ["dce", "fusion"])
    with pytest.raises(ValueError, match=r"levels: \[0, 1, 2\]"):
        optimize(g, [y], 3)


def test_dump_sees_the_graph_after_each_pass():
    g, y = small_graph()
    seen = []
    optimize(g, [y], dump=lambda name, graph: seen.append((name, len(graph.nodes))))
    assert seen == [("dce", 15), ("cse", 13), ("fold_qdq", 13), ("fold", 13), ("simplify", 10),
                    ("bnfold", 10), ("bucket_grads", 10), ("epilogue", 10), ("accumulate", 10), ("fuse", 7), ("dce_final", 3)]


def _wrong_type_pass(graph, outputs):
    """Adds a neg that records a wrong type (add_node refuses one, so it is patched after)."""
    builder = rebuild(graph)
    x = builder.var(outputs[0])
    node = builder.graph.add_node("neg", (x,), {})
    node.outputs[0].type = tensor_type(x.shape, "float64")
    return PassResult(builder.graph, [x], True, {})


def _raising_pass(graph, outputs):
    raise KeyError("boom")


@pytest.mark.parametrize("bad, message", [(_wrong_type_pass, "records types f64"),
                                          (_raising_pass, "boom")])
def test_check_mode_names_the_failing_pass(monkeypatch, bad, message):
    monkeypatch.setattr(pipeline, "PASSES", PASSES + [("bad", bad, "a broken pass")])
    g = Graph()
    y = F.exp(g.input("x", (3,)))
    with pytest.raises(PassError, match=f"pass 'bad'.*{message}") as info:
        optimize(g, [y], ["dce", "bad"], check=True)
    assert info.value.pass_name == "bad"


def test_verify_graph_finds_use_before_definition_and_bad_tables():
    g = Graph()
    x = g.input("x", (3,))
    y = F.exp(x)
    F.neg(y)
    verify_graph(g)
    g.nodes[1], g.nodes[2] = g.nodes[2], g.nodes[1]
    with pytest.raises(mg.GraphError, match="neg reads %1 before it is defined"):
        verify_graph(g)
    h = Graph()
    h.param("w", np.zeros(2, np.float32))
    h.values[0] = np.zeros(3, np.float32)
    with pytest.raises(mg.GraphError, match="stored value"):
        verify_graph(h)
    h.values[0] = np.zeros(2, np.float32)
    h.inputs["ghost"] = h.params["w"]
    with pytest.raises(mg.GraphError, match="no node"):
        verify_graph(h)


# fuse, bnfold and accumulate change the arithmetic (vector exp/tanh; weights scaled before the
# GEMM; the BLAS adding its product into c)
INEXACT_PASSES = {"fuse", "bnfold", "accumulate"}


@pytest.mark.parametrize("seed", range(200))
def test_random_graphs_keep_their_results(seed):
    # each pass alone, then the whole pipeline, against the graph with no pass
    g, outputs, feeds = random_graph(seed)
    for name, run_pass, _ in PASSES:
        alone = run_pass(g, outputs, **({"runs": cpu_runs} if name == "accumulate" else {}))
        verify_graph(alone.graph)
        same_results(outputs, alone.outputs, feeds, rtol=1e-5 if name in INEXACT_PASSES else 0)
    new, outs, report = optimize(g, outputs, 2, check=True)
    assert len(new.nodes) <= len(g.nodes) and len(report) == len(PASSES)
    same_results(outputs, outs, feeds, rtol=1e-5)


def _train_graph(opt_kind: str):
    """A training step as compile_train_step builds it: (graph, [loss], model)."""
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    params = model.parameters()
    opt = optim.SGD(params, lr=0.1, momentum=0.9) if opt_kind == "sgd" else optim.Adam(params)
    g = Graph()
    x, y = g.input("input0", (4, 6)), g.input("input1", (4,), "int64")
    loss = F.cross_entropy(model(x), y)
    grads = mg.grad(loss, [g.bind(p) for p in params])
    opt.build(g, {id(p): dg for p, dg in zip(params, grads)})
    return g, [F.reshape(loss, ())], model, opt


def _train(plan, model, opt, steps=3):
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        opt.prepare_step()
        feeds = {"input0": rng.standard_normal((4, 6)).astype(np.float32),
                 "input1": rng.integers(0, 3, 4)}
        losses.append(plan.run(feeds)[0])
    return losses, model.state_dict()


@pytest.mark.parametrize("opt_kind", ["sgd", "adam"])
def test_an_optimised_training_step_trains_bitwise_alike(opt_kind):
    g, outs, model, opt = _train_graph(opt_kind)
    want_losses, want_state = _train(mg.compile(outs, optimize=0), model, opt)
    g2, outs2, model2, opt2 = _train_graph(opt_kind)
    new, new_outs, report = optimize(g2, outs2, check=True)
    for p in model2.parameters():                      # still the user's arrays, updated in place
        assert any(new.values[v.id] is p.value for v in new.params.values())
    got_losses, got_state = _train(mg.compile(new_outs, optimize=0), model2, opt2)
    assert len(new.assigns) == len(g2.assigns)
    np.testing.assert_array_equal(got_losses, want_losses)
    for key in want_state:
        np.testing.assert_array_equal(got_state[key], want_state[key], err_msg=key)
    assert not np.array_equal(want_state["0.weight"], _train_graph(opt_kind)[2]
                              .state_dict()["0.weight"])
    assert dict(report)["cse"]["merged"] > 0


def test_passes_the_target_cannot_serve_are_skipped_and_reported():
    # a device with no fused kernel (fusion=None) gets no fused nodes; without an evaluator
    # nothing is folded
    g, y = small_graph()
    new, _, report = optimize_pass(g, [y], ["fold", "fuse"])
    assert [n.op.name for n in new.nodes] == [n.op.name for n in g.nodes]
    assert dict(report) == {"fold": {"skipped": "the target gives no evaluator"},
                            "fuse": {"skipped": "the target gives no fused kernel"}}
