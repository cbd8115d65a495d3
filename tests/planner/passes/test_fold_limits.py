"""The fold pass's size limit holds for the values it computes, not only for those it keeps:
a constant subgraph that would materialise a value over ``max_bytes`` is not folded."""
import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.compiler import evaluator
from mgegraph.planner.passes.fold import MAX_BYTES
from mgegraph.planner.passes.fold import fold as fold_pass
from mgegraph.testing import assert_same_results as same_results


def fold(graph, outputs, **kw):
    return fold_pass(graph, outputs, evaluate=evaluator("cpu"), **kw)


def consts_over(graph, limit):
    return [v.nbytes for v in graph.values.values() if v is not None and v.nbytes > limit]


def test_a_reduction_of_a_huge_fill_is_not_folded():
    g = mg.Graph()
    x = g.input("x", ())
    big = F.full((8192, 8192), 1.0, graph=g)            # 256 MiB if it were materialised
    y = x + F.sum(big)
    calls = []

    def evaluate(wanted):
        calls.append(wanted)
        return evaluator("cpu")(wanted)

    result = fold_pass(g, [y], evaluate=evaluate)
    assert result.stats["folded"] == 0 and not calls        # nothing evaluated at compile time
    assert not consts_over(result.graph, MAX_BYTES)
    plan = mg.compile([y])
    assert not [a.nbytes for a in plan.values.values() if a.nbytes > MAX_BYTES]
    assert plan.run({"x": np.float32(1.0)})[0] == np.float32(8192 * 8192 + 1)


def test_intermediates_over_the_limit_block_what_reads_them_only():
    g = mg.Graph()
    x = g.input("x", (4,))
    small = F.exp(g.const(np.arange(4, dtype=np.float32)))      # folded: 16 bytes
    big = F.sum(F.full((64, 64), 2.0, graph=g) * 3.0, axis=0)[:4]        # reads a 16 KiB fill
    outs = [x + small, x + big]
    result = fold(g, outs, max_bytes=1024)
    assert result.stats["folded"] == 1 and result.stats["bytes"] == 16
    assert not consts_over(result.graph, 1024)
    same_results(outs, result.outputs, {"x": np.ones(4, np.float32)})
    # with room for the fill the whole chain folds into one small const
    roomy = fold(g, outs, max_bytes=1 << 16)
    assert roomy.stats["consts"] == 2 and roomy.stats["bytes"] == 32


def test_a_large_const_input_is_read_in_place_and_folded():
    g = mg.Graph()
    x = g.input("x", ())
    y = x + F.sum(g.const(np.ones((64, 64), np.float32)))       # 16 KiB, already in memory
    result = fold(g, [y], max_bytes=1024)
    assert result.stats["folded"] == 1 and result.stats["bytes"] == 4
