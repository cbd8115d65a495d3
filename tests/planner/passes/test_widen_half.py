"""The half-precision widening: exact IR before and after, what stays, what the backend runs."""
import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.planner.passes.half import needs_widening, widen_half
from mgegraph.planner.passes.verify import verify_graph


def test_a_node_on_halves_becomes_casts_around_float32():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float16")
    y = F.exp(x.T) * 2.0
    result = widen_half(g, [y], runs=lambda node: False)
    assert str(result.graph) == """\
%0:f16[2,3] = input[name=x]
%1:f16[3,2] = transpose[pattern=(1,0)] %0
%2:f32[3,2] = cast[dtype=float32] %1
%3:f32[3,2] = exp %2
%4:f16[3,2] = cast[dtype=float16] %3
%5:f16[] = const[value=2.0]
%6:f32[3,2] = cast[dtype=float32] %4
%7:f32[] = cast[dtype=float32] %5
%8:f32[3,2] = mul %6 %7
%9:f16[3,2] = cast[dtype=float16] %8"""
    assert result.changed and result.stats == {"nodes_widened": 2}
    assert result.outputs[0].dtype == np.float16
    verify_graph(result.graph)


def test_nothing_changes_without_halves_or_where_the_backend_runs_them():
    g = mg.Graph()
    y = F.exp(g.input("x", (4,), "float32"))
    assert not widen_half(g, [y], runs=lambda node: False).changed
    h = mg.Graph()
    z = F.exp(h.input("x", (4,), "bfloat16"))
    kept = widen_half(h, [z], runs=lambda node: node.op.name == "exp")
    assert not kept.changed and kept.graph is h


def test_only_ops_that_compute_are_widened():
    g = mg.Graph()
    x = g.input("x", (4, 2), "bfloat16")
    moved = [x.T, x.reshape(8), F.concat([x, x], axis=0), x[1:], x.astype("float32")]
    assert not any(needs_widening(v.node) for v in moved)
    assert needs_widening(F.sum(x).node) and needs_widening((x > 0).node)


def test_integer_results_are_not_cast():
    g = mg.Graph()
    x = g.input("x", (4, 3), "float16")
    i = F.argmax(x, axis=1)
    result = widen_half(g, [i], runs=lambda node: False)
    assert result.outputs[0].dtype == np.int64
    assert [n.op.name for n in result.graph.nodes] == ["input", "cast", "argmax"]
    xv = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float16)
    (got,) = mg.compile([i]).run({"x": xv})
    np.testing.assert_array_equal(got, xv.argmax(1))
