"""Gradients of graphs with a named batch: the walker's undoing of broadcasting compares named
sizes, and whole SGD training steps run through one SymbolicPlan at two batch sizes equal the
steps of fixed-shape plans bitwise (losses, gradients and the updated weights)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from workloads import _convnet, _mlp_module  # the benchmarks' models


def _sgd_step(model, shape, batch):
    """loss, then SGD assigns of every parameter: the graph of one training step."""
    g = mg.Graph()
    x = g.input("x", (batch, *shape))
    y = g.input("y", (batch,), "int64")
    loss = F.cross_entropy(model(x), y)
    params = [g.bind(p) for p in model.parameters()]
    grads = mg.grad(loss, params)
    for p, d in zip(params, grads):
        g.assign(p, p - 0.01 * d)
    return g, [loss, *grads]


@pytest.mark.parametrize("make, shape, sizes", [
    (_mlp_module, (784,), [(3, (784,)), (5, (784,)), (1, (784,))]),
    (_convnet, (3, 8, 8), [(3, (3, 8, 8)), (5, (3, 8, 8)), (1, (3, 8, 8))]),
    (_convnet, (3, "h", "w"), [(2, (3, 8, 6)), (3, (3, 5, 9))]),  # named image sides too
], ids=["mlp", "convnet", "convnet_hw"])
def test_training_steps_at_two_batch_sizes_equal_fixed_plans(make, shape, sizes):
    nn.init.manual_seed(0)
    named = make()
    nn.init.manual_seed(0)
    fixed = make()  # the same weights, stepped by the fixed plans
    g, outputs = _sgd_step(named, shape, "batch")
    assert outputs[0].type.shape == () and g.symbolic
    plan = mg.compile(outputs)
    for batch, image in sizes:
        rng = np.random.default_rng(batch)
        feeds = {"x": rng.standard_normal((batch, *image), dtype=np.float32),
                 "y": rng.integers(0, 10, batch)}
        got = plan.run(feeds)
        want = mg.compile(_sgd_step(fixed, image, batch)[1]).run(feeds)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        for p, q in zip(named.parameters(), fixed.parameters()):
            np.testing.assert_array_equal(p.value, q.value)
    assert len(plan.plans) == len(sizes)


def _grads_at(batch, build):
    g = mg.Graph()
    x = g.input("x", (batch, 4))
    w = g.param("w", np.arange(4, dtype=np.float32).reshape(1, 4) / 4)
    return build(g, x, w), [x, w]


@pytest.mark.parametrize("build", [
    lambda g, x, w: F.sum(F.tanh(x * w)),  # w (1, 4) broadcast over the batch
    lambda g, x, w: F.mean(x[:, :1] * x),  # x's column broadcast along its own rows
    lambda g, x, w: F.sum(F.mean(x, axis=0, keepdims=True) * x),  # a named count
    lambda g, x, w: F.mean(F.var(x, axis=0) * w),
], ids=["param", "column", "mean_rows", "var_rows"])
def test_unbroadcast_with_a_named_batch(build):
    loss, wrt = _grads_at("batch", build)
    grads = mg.grad(loss, wrt)
    assert [d.type for d in grads] == [v.type for v in wrt]
    plan = mg.compile([loss, *grads])
    for batch in (1, 6):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, 4), np.float32)}
        floss, fwrt = _grads_at(batch, build)
        want = mg.compile([floss, *mg.grad(floss, fwrt)]).run(feeds)
        for a, b in zip(plan.run(feeds), want):
            np.testing.assert_array_equal(a, b)


def test_gradient_through_two_names_that_must_agree():
    """y of (n, 4) added to x of (batch, 4): its gradient comes back with its own name."""
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    dx, dy = mg.grad(F.sum((x + y) * x), [x, y])
    assert (str(dx.type), str(dy.type)) == ("f32[batch, 4]", "f32[n, 4]")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = mg.compile([dx, dy]).run({"x": a, "y": -a})
    np.testing.assert_array_equal(got[0], 2 * a - a)
    np.testing.assert_array_equal(got[1], a)
