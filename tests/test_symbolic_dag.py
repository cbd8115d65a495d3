"""Random DAGs with a named batch: one SymbolicPlan run at two batch sizes gives bitwise what two
plans of the same DAG built with the numbers give, the DAG's gradients included.

The DAGs are ``mgegraph.testing.random_graph``'s: its op table, drawn the same way, plus ops that
work along the batch axis (a mean, a log-softmax, a flip, a pad, over the rows). A draw is kept
where it fits at both batch sizes, as random_graph keeps what fits its shape; the named build
must then take it too.
"""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import FeedError, OpError
from mgegraph.testing import _RANDOM_OPS  # random_graph's op table

WIDTH = 8
BATCHES = (3, 5)  # random_graph's "rows" op slices x[1:3]: a batch of at least 3
ALONG_THE_BATCH = (
    ("flip_rows", 1, lambda a: a[::-1]),
    ("log_softmax_rows", 1, lambda a: F.log_softmax(a, axis=0)),
    ("pad_rows", 1, lambda a: F.pad(a, ((2, 0), (0, 0)), mode="reflect")[:-2]),
    ("var_rows", 1, lambda a: a * F.var(a, axis=0, keepdims=True)),
    ("scale_by_rows", 2, lambda a, b: a - F.mean(b, axis=0, keepdims=True)),
    ("last_rows", 1, lambda a: F.concat([a[-2:], a[:-2]], axis=0)),
)
OPS = _RANDOM_OPS + ALONG_THE_BATCH


def _fit(make, picks, like):
    """random_graph's rule: the op's result brought back to (batch, WIDTH), or None."""
    try:
        var = make(*picks)
        if var.shape != like.shape:
            var = var + F.zeros_like(like)
        return var if var.shape == like.shape else None
    except OpError:
        return None


def random_dags(seed: int, nodes: int = 24):
    """The same DAG with a named batch and with each of BATCHES: ((graph, outputs), ...)."""
    rng = np.random.default_rng(seed)
    sizes = ("batch", *BATCHES)
    graphs = [mg.Graph() for _ in sizes]
    count = int(rng.integers(1, 4))
    w = rng.standard_normal((1, WIDTH)).astype(np.float32)
    pools = [[g.input(f"x{i}", (b, WIDTH)) for i in range(count)] + [g.param("w", w.copy())]
             for g, b in zip(graphs, sizes)]
    for _ in range(nodes):
        name, arity, make = OPS[rng.integers(len(OPS))]
        at = [int(i) for i in rng.integers(max(0, len(pools[0]) - 8), len(pools[0]), arity)]
        fixed = [_fit(make, [pool[i] for i in at], pool[0]) for pool in pools[1:]]
        if any(v is None for v in fixed):
            continue
        named = _fit(make, [pools[0][i] for i in at], pools[0][0])
        assert named is not None, f"{name} fits at batch {BATCHES} but not with a named batch"
        for pool, var in zip(pools, [named, *fixed]):
            pool.append(var)
    picked = rng.choice(np.arange(count + 1, len(pools[0])), min(3, len(pools[0]) - count - 1),
                        replace=False)
    return [(g, _with_gradients(g, [pool[int(i)] for i in picked], pool))
            for g, pool in zip(graphs, pools)]


def _with_gradients(g, outputs, pool):
    """The outputs, then the gradients of the sum of their means w.r.t. the inputs and w."""
    loss = F.mean(outputs[0])
    for y in outputs[1:]:
        loss = loss + F.mean(y)
    sources = [v for v in pool if v.node.op.name in ("input", "param")]
    return outputs + mg.grad(loss, sources)


def _feeds(seed: int, batch: int, graph) -> dict:
    rng = np.random.default_rng([seed, batch])
    return {name: rng.standard_normal((batch, WIDTH)).astype(np.float32)
            for name in sorted(graph.inputs)}


@pytest.mark.parametrize("seed", range(8))
def test_one_symbolic_plan_is_bitwise_two_fixed_plans(seed):
    (g, outputs), *fixed = random_dags(seed)
    assert g.symbolic and outputs[0].type.symbolic
    plan = mg.compile(outputs)
    for batch, (fg, fixed_outputs) in zip(BATCHES, fixed):
        feeds = _feeds(seed, batch, fg)
        want = mg.compile(fixed_outputs).run(feeds)
        got = plan.run(feeds)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert len(plan.plans) == len(BATCHES)


def test_a_named_size_meeting_another_is_a_fact_checked_at_the_feed():
    """(batch, 4) + (n, 4): the names must agree; batch 1 against n 8 is refused by name,
    never broadcast silently."""
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    plan = mg.compile([F.relu(x + y)])
    ones = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(plan.run({"x": ones, "y": ones})[0], 2 * ones)
    with pytest.raises(FeedError, match=r"batch == n \(batch=1, n=8\)") as caught:
        plan.run({"x": np.ones((1, 4), np.float32), "y": np.ones((8, 4), np.float32)})
    assert "add" in str(caught.value) and "test_symbolic_dag.py" in str(caught.value)
