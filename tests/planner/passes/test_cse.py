"""Common subexpression elimination: what merges, what never does, and unchanged results."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.planner.passes.cse import CONST_MERGE_BYTES, cse
from mgegraph.planner.passes.verify import verify_graph
from mgegraph.testing import assert_same_results as same_results
from mgegraph.testing import random_graph


def test_equal_nodes_merge_and_chains_follow():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    a = F.exp(x) * 2.0
    b = F.exp(x) * 2.0                   # the same exp, const and mul again
    y = a + b
    result = cse(g, [y])
    assert str(result.graph) == """\
%0:f32[2,3] = input[name=x]
%1:f32[2,3] = exp %0
%2:f32[] = const[value=2.0]
%3:f32[2,3] = mul %1 %2
%4:f32[2,3] = add %3 %3"""
    assert result.stats == {"merged": 3} and result.changed
    same_results([y], result.outputs, {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)})


def test_attributes_and_argument_order_keep_nodes_apart():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    z = g.input("z", (2, 3))
    outs = [F.sum(x, axis=0), F.sum(x, axis=1), x - z, z - x,
            F.full((2,), 0.0, graph=g), F.full((2,), -0.0, graph=g)]
    result = cse(g, outs)
    assert not result.changed and str(result.graph) == str(g)


def test_sources_merge_only_as_small_equal_consts():
    g = mg.Graph()
    x = g.input("x", (4,))
    x2 = g.input("x2", (4,))
    w1 = g.param("w1", np.ones(4, np.float32))
    w2 = g.param("w2", np.ones(4, np.float32))
    c1, c2 = g.const(np.arange(4, dtype=np.float32)), g.const(np.arange(4, dtype=np.float32))
    c3 = g.const(np.arange(4, dtype=np.float64))            # other dtype
    n = CONST_MERGE_BYTES // 4 + 1
    big1, big2 = g.const(np.zeros(n, np.float32)), g.const(np.zeros(n, np.float32))
    outs = [x + w1 + c1, x2 + w2 + c2, F.astype(x, "float64") + c3, F.sum(big1) + F.sum(big2)]
    result = cse(g, outs)
    assert result.stats == {"merged": 1}
    text = str(result.graph)
    assert text.count("param") == 2 and text.count("input") == 2 and text.count("const") == 4
    feeds = {"x": np.ones(4, np.float32), "x2": np.full(4, 3.0, np.float32)}
    same_results(outs, result.outputs, feeds)


def test_dropouts_with_the_same_seed_and_step_are_one_value():
    g = mg.Graph()
    x = g.input("x", (64,))
    step = g.param("step", np.zeros((), np.int64))
    same = [F.dropout(x, 0.5, seed=3, step=step), F.dropout(x, 0.5, seed=3, step=step)]
    other = [F.dropout(x, 0.5, seed=4, step=step), F.dropout(x, 0.5, seed=3)]
    result = cse(g, same + other)
    assert result.stats == {"merged": 1}
    assert result.outputs[0] is result.outputs[1]
    same_results(same + other, result.outputs, {"x": np.ones(64, np.float32)})


def test_assigns_are_never_merged():
    g = mg.Graph()
    x = g.input("x", (3,))
    w = g.param("w", np.zeros(3, np.float32), share=False)
    g.assign(w, w + x)
    g.assign(w, w + x)                   # the values merge; both writes stay
    result = cse(g, [F.sum(x)])
    assert str(result.graph).count("assign") == 2 and len(result.graph.assigns) == 2
    assert result.stats == {"merged": 1}


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_keep_their_results(seed):
    g, outputs, feeds = random_graph(seed)
    result = cse(g, outputs)
    verify_graph(result.graph)
    assert len(result.graph.nodes) == len(g.nodes) - result.stats["merged"]
    same_results(outputs, result.outputs, feeds)


def test_autodiff_graphs_repeat_values_that_merge():
    g = mg.Graph()
    x = g.input("x", (3, 4))
    w = g.param("w", np.full((4, 2), 0.5, np.float32))
    loss = F.sum(F.tanh(x @ w) * F.tanh(x @ w))
    grads = mg.grad(loss, [w])
    result = cse(g, [loss] + grads)
    assert result.stats["merged"] >= 2
    same_results([loss] + grads, result.outputs, {"x": np.ones((3, 4), np.float32)})
