"""Algebraic simplification: each rule's IR, the rules that must not fire, unchanged results."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.planner.passes.dce import dce
from mgegraph.planner.passes.simplify import RULES, simplify
from mgegraph.planner.passes.verify import verify_graph
from mgegraph.testing import assert_same_results as same_results
from mgegraph.testing import random_graph


def simplified(outputs):
    """The simplified graph with its dead nodes removed, and the outputs in it."""
    result = simplify(outputs[0].graph, outputs)
    clean = dce(result.graph, result.outputs)
    return result, clean


def test_identities_with_scalars_return_the_operand():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    y = ((x * 1.0) + 0.0) - 0.0
    z = F.exp(1.0 * (0.0 + y) / 1.0)
    result, clean = simplified([z])
    assert result.stats == {"rewrites": {"add_zero": 2, "div_one": 1, "mul_one": 2,
                                         "sub_zero": 1}}
    assert str(clean.graph) == """\
%0:f32[2,3] = input[name=x]
%1:f32[2,3] = exp %0"""
    same_results([z], clean.outputs, {"x": np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)})


def test_all_equal_arrays_and_fills_count_as_scalars():
    g = mg.Graph()
    x = g.input("x", (3,))
    y = x * g.const(np.ones(3, np.float32)) + F.zeros_like(x)
    _, clean = simplified([F.neg(y)])
    assert str(clean.graph) == "%0:f32[3] = input[name=x]\n%1:f32[3] = neg %0"


def test_an_identity_that_broadcasts_or_promotes_stays():
    g = mg.Graph()
    x = g.input("x", (3,))
    i = g.input("i", (3,), "int32")
    outs = [x * g.const(np.ones((2, 3), np.float32)), g.const(np.zeros((2, 1), np.float32)) + x]
    result = simplify(g, outs)
    assert not result.changed and str(result.graph) == str(g)
    promoted = i * 1.0                   # the cast to float64 stays, the multiplication goes
    result = simplify(g, [promoted])
    assert result.stats == {"rewrites": {"mul_one": 1}}
    assert result.outputs[0].node.op.name == "cast"


def test_times_zero_only_for_integers():
    g = mg.Graph()
    x = g.input("x", (3,))
    i = g.input("i", (3,), "int64")
    outs = [x * 0.0, i * 0, 0 * i]
    result, clean = simplified(outs)
    assert result.stats == {"rewrites": {"mul_zero": 2}}
    assert str(clean.graph) == """\
%0:f32[3] = input[name=x]
%1:i64[3] = input[name=i]
%2:f32[] = const[value=0.0]
%3:f32[3] = mul %0 %2
%4:i64[3] = fill[dtype=int64, shape=(3), value=0]
%5:i64[3] = fill[dtype=int64, shape=(3), value=0]"""
    feeds = {"x": np.array([np.nan, np.inf, 1.0], np.float32), "i": np.arange(3)}
    same_results(outs, clean.outputs, feeds)


def test_double_negation_and_inverse_transposes_vanish():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4))
    a = -(-(-(-x)))
    b = F.transpose(F.transpose(a, (2, 0, 1)), (1, 2, 0))
    result, clean = simplified([F.exp(b)])
    assert result.stats == {"rewrites": {"neg_neg": 2, "transpose_transpose": 1}}
    assert str(clean.graph) == "%0:f32[2,3,4] = input[name=x]\n%1:f32[2,3,4] = exp %0"


def test_transposes_compose_with_new_axes():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    t = F.transpose(F.transpose(x, (1, "x", 0)), (2, 0, 1))
    result, clean = simplified([t])
    assert str(clean.graph) == """\
%0:f32[2,3] = input[name=x]
%1:f32[2,3,1] = transpose[pattern=(0,1,x)] %0"""
    same_results([t], clean.outputs, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})


def test_reshapes_merge_and_no_op_movement_goes():
    g = mg.Graph()
    x = g.input("x", (2, 6))
    r = F.reshape(F.reshape(F.reshape(x, (3, 4)), (12,)), (4, 3))
    back = F.reshape(F.reshape(x, (12,)), (2, 6))
    same = [g.add_node("reshape", (x,), {"shape": (2, 6)}).outputs[0],
            g.add_node("cast", (x,), {"dtype": "float32"}).outputs[0],
            g.add_node("broadcast_to", (x,), {"shape": (2, 6)}).outputs[0],
            g.add_node("transpose", (x,), {"pattern": (0, 1)}).outputs[0]]
    outs = [r, back + sum(same[1:], same[0])]
    result, clean = simplified(outs)
    assert result.stats["rewrites"] == {"broadcast_same": 1, "cast_same": 1,
                                        "reshape_reshape": 3, "reshape_same": 1,
                                        "transpose_identity": 1}
    assert str(clean.graph) == """\
%0:f32[2,6] = input[name=x]
%1:f32[4,3] = reshape[shape=(4,3)] %0
%2:f32[2,6] = add %0 %0
%3:f32[2,6] = add %2 %0
%4:f32[2,6] = add %3 %0
%5:f32[2,6] = add %0 %4"""
    same_results(outs, clean.outputs, {"x": np.arange(12, dtype=np.float32).reshape(2, 6)})


def test_copy_is_kept_and_a_custom_table_applies_only_its_rules():
    g = mg.Graph()
    x = g.input("x", (3,))
    c = g.add_node("copy", (x,), {}).outputs[0]
    y = -(-(c * 1.0))
    only_neg = [rule for rule in RULES if rule.name == "neg_neg"]
    result = simplify(g, [y], rules=only_neg)
    assert result.stats == {"rewrites": {"neg_neg": 1}}
    assert result.outputs[0].node.op.name == "mul"
    assert simplify(g, [c]).outputs[0].node.op.name == "copy"


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_keep_their_results(seed):
    g, outputs, feeds = random_graph(seed)
    noisy = [F.transpose(F.transpose(-(-(o * 1.0)), (1, 0)), (1, 0)) + 0.0 for o in outputs]
    result = simplify(g, noisy)
    verify_graph(result.graph)
    assert sum(result.stats["rewrites"].values()) >= 4 * len(outputs)
    for out, original in zip(result.outputs, outputs):
        assert out.type == original.type
    same_results(noisy, result.outputs, feeds)
