"""Dead code elimination: exact IR before and after, roots kept, results unchanged."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.planner.passes.dce import dce
from mgegraph.planner.passes.rewrite import rebuild
from mgegraph.planner.passes.verify import verify_graph
from mgegraph.testing import assert_same_results as same_results
from mgegraph.testing import random_graph


def test_dead_nodes_and_unused_sources_go():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    g.input("unused", (4,))
    w = g.param("w", np.zeros(3, np.float32))
    F.exp(x * w)                       # dead, and so is its mul
    y = F.relu(x) + 2.0
    assert str(g) == """\
%0:f32[2,3] = input[name=x]
%1:f32[4] = input[name=unused]
%2:f32[3] = param[name=w]
%3:f32[2,3] = mul %0 %2
%4:f32[2,3] = exp %3
%5:f32[2,3] = relu %0
%6:f32[] = const[value=2.0]
%7:f32[2,3] = add %5 %6"""
    result = dce(g, [y])
    assert str(result.graph) == """\
%0:f32[2,3] = input[name=x]
%1:f32[4] = input[name=unused]
%2:f32[2,3] = relu %0
%3:f32[] = const[value=2.0]
%4:f32[2,3] = add %2 %3"""
    assert result.changed and result.stats == {"nodes_removed": 3}
    assert list(result.graph.inputs) == ["x", "unused"] and not result.graph.params
    assert str(result.outputs[0]) == "Var(%4:f32[2,3])"
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3,
             "unused": np.ones(4, np.float32)}
    same_results([y], result.outputs, feeds)


def test_assigns_are_roots_and_keep_the_shared_array():
    g = mg.Graph()
    x = g.input("x", (3,))
    weights = np.ones(3, np.float32)
    w = g.param("w", weights, share=True)
    g.assign(w, w * 0.5 + x)
    y = F.sum(x)
    result = dce(g, [y])
    assert str(result.graph) == str(g) and not result.changed
    (new_w,) = result.graph.params.values()
    assert result.graph.values[new_w.id] is weights and result.graph.shared == {new_w.id}
    mg.compile(result.outputs).run({"x": np.full(3, 2.0, np.float32)})
    np.testing.assert_array_equal(weights, [2.5, 2.5, 2.5])


def test_unshared_params_and_consts_keep_their_arrays_without_copies():
    g = mg.Graph()
    x = g.input("x", (3,))
    w = g.param("w", np.ones(3, np.float32))
    c = g.const(np.arange(3, dtype=np.float32))
    result = dce(g, [x * w + c])
    new_w, new_c = (result.graph.nodes[i].outputs[0] for i in (1, 2))
    assert result.graph.values[new_w.id] is g.values[w.id] and not result.graph.shared
    assert result.graph.values[new_c.id] is g.values[c.id]
    assert result.graph.nodes[2].location == c.node.location


def test_an_assign_of_a_param_to_itself_is_removed():
    g = mg.Graph()
    x = g.input("x", (3,))
    w = g.param("w", np.ones(3, np.float32))
    g.assign(w, w)
    result = dce(g, [x + 1.0])
    assert "assign" not in str(result.graph) and not result.graph.assigns
    assert result.stats == {"nodes_removed": 2}  # the assign and then the unread param


def test_locations_point_at_the_user_code():
    g = mg.Graph()
    x = g.input("x", (3,))
    y = F.exp(x)
    result = dce(g, [y])
    assert result.graph.nodes[-1].location == y.node.location
    assert __file__ in y.node.location


def test_a_removed_value_cannot_be_mapped():
    g = mg.Graph()
    x = g.input("x", (3,))
    dead = F.exp(x)
    builder = rebuild(g, lambda b, node: (None,) if node.op.name == "exp" else None)
    with pytest.raises(mg.GraphError, match="removed"):
        builder.var(dead)


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_keep_their_results(seed):
    g, outputs, feeds = random_graph(seed)
    result = dce(g, outputs)
    verify_graph(result.graph)
    assert len(result.graph.nodes) == len(g.nodes) - result.stats["nodes_removed"]
    same_results(outputs, result.outputs, feeds)
