"""Constant folding: exact IR, what counts as constant, the size limit, unchanged results."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.compiler import evaluator
from mgegraph.planner.passes.fold import fold as fold_pass
from mgegraph.planner.passes.verify import verify_graph
from mgegraph.testing import assert_same_results as same_results
from mgegraph.testing import random_graph


def fold(graph, outputs, **kw):
    """The pass as mg.compile runs it: folding on the CPU."""
    return fold_pass(graph, outputs, evaluate=evaluator("cpu"), **kw)


def test_a_constant_chain_becomes_one_const():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    c = F.exp(g.const(np.linspace(0, 1, 3, dtype=np.float32))) * 2.0 + 1.0
    y = x * c
    result = fold(g, [y])
    assert str(result.graph) == """\
%0:f32[2,3] = input[name=x]
%1:f32[3] = const[value=None]
%2:f32[] = const[value=2.0]
%3:f32[] = const[value=1.0]
%4:f32[3] = const[value=None]
%5:f32[2,3] = mul %0 %4"""
    assert result.stats == {"folded": 3, "consts": 1, "bytes": 12} and result.changed
    want = (np.exp(np.linspace(0, 1, 3, dtype=np.float32)) * np.float32(2) + np.float32(1))
    np.testing.assert_allclose(result.graph.values[result.graph.nodes[4].outputs[0].id], want,
                               rtol=1e-6)
    same_results([y], result.outputs, {"x": np.ones((2, 3), np.float32)})


def test_a_scalar_result_prints_its_value():
    g = mg.Graph()
    x = g.input("x", (2,))
    y = x + F.sum(g.const(np.ones(4, np.float32)))
    result = fold(g, [y])
    assert str(result.graph).splitlines()[2] == "%2:f32[] = const[value=4.0]"


def test_params_and_inputs_are_not_constant():
    g = mg.Graph()
    x = g.input("x", (3,))
    w = g.param("w", np.ones(3, np.float32))
    outs = [F.exp(w), F.exp(x) + 1.0]
    result = fold(g, outs)
    assert not result.changed and str(result.graph) == str(g)
    assert result.stats == {"folded": 0, "consts": 0, "bytes": 0}


def test_fills_are_folded_only_with_what_reads_them():
    g = mg.Graph()
    x = g.input("x", (4,))
    ones = F.ones_like(x)                # alone, a fill stays: no persistent constant for it
    twos = ones * 2.0                    # a constant node reading it is folded
    result = fold(g, [x + ones, x * twos])
    assert str(result.graph) == """\
%0:f32[4] = input[name=x]
%1:f32[4] = fill[dtype=float32, shape=(4), value=1.0]
%2:f32[] = const[value=2.0]
%3:f32[4] = const[value=None]
%4:f32[4] = add %0 %1
%5:f32[4] = mul %0 %3"""
    same_results([x + ones, x * twos], result.outputs, {"x": np.arange(4, dtype=np.float32)})


def test_results_over_the_size_limit_stay_computed():
    g = mg.Graph()
    x = g.input("x", (256,))
    big = F.broadcast_to(g.const(np.float32(3.0)), (256,))   # 1 KiB
    y = x * F.sqrt(big)
    small = fold(g, [y], max_bytes=512)
    assert small.stats["folded"] == 0 and not small.changed
    large = fold(g, [y], max_bytes=1024)
    assert large.stats == {"folded": 2, "consts": 1, "bytes": 1024}
    same_results([y], large.outputs, {"x": np.ones(256, np.float32)})


def test_an_output_can_be_folded_and_assigns_read_folded_values():
    g = mg.Graph()
    x = g.input("x", (3,))
    w = g.param("w", np.zeros(3, np.float32))
    g.assign(w, F.exp(g.const(np.ones(3, np.float32))))
    c = F.sum(g.const(np.arange(3, dtype=np.float32)))
    result = fold(g, [c, x])
    assert result.outputs[0].node.op.name == "const"
    assert result.graph.assigns[0].inputs[1].node.op.name == "const"
    plans = [mg.compile([c, x]), mg.compile(result.outputs)]
    for plan in plans:
        got, _ = plan.run({"x": np.ones(3, np.float32)})
        assert got == 3.0
    written = [p.executable().buffers[next(s.index for s in p.slots if s.name == "w")] for p in plans]
    np.testing.assert_array_equal(written[0], written[1])
    assert written[0][0] > 2.7


def test_folding_is_bitwise_the_unfolded_computation():
    g = mg.Graph()
    x = g.input("x", (5, 7))
    rng = np.random.default_rng(0)
    table = g.const(rng.standard_normal((7, 7)).astype(np.float32))
    c = F.softmax(F.tanh(table) @ F.transpose(table, (1, 0)), axis=-1)
    y = x @ c
    result = fold(g, [y])
    assert result.stats["consts"] == 1
    same_results([y], result.outputs, {"x": rng.standard_normal((5, 7)).astype(np.float32)})


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_with_constants_keep_their_results(seed):
    g, outputs, feeds = random_graph(seed)
    k = g.const(np.random.default_rng(seed).standard_normal((6, 8)).astype(np.float32))
    outputs = [o + F.tanh(k) * 0.5 for o in outputs]
    result = fold(g, outputs)
    verify_graph(result.graph)
    assert result.stats["folded"] >= 2
    same_results(outputs, result.outputs, feeds)
