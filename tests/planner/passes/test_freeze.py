"""compile(freeze=True): weights become constants of the plan, folded once at compile time."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.plan import Role
from mgegraph.planner.passes.fold import fold


def conv_bn_net():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                          nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    rng = np.random.default_rng(1)
    for name, p in model.named_parameters():  # running statistics away from 0 and 1
        if "running_var" in name:
            p.value = rng.uniform(0.5, 2.0, p.shape).astype(np.float32)
        elif p.value.ndim == 1:  # biases, batch-norm scales and shifts, running means
            p.value = rng.standard_normal(p.shape).astype(np.float32)
    return model.eval()


X = np.random.default_rng(2).standard_normal((2, 3, 6, 6)).astype(np.float32)


def test_frozen_predictor_equals_the_live_one_and_shares_no_weight():
    model = conv_bn_net()
    live = mg.compile_module(model, (X,))
    frozen = mg.compile_module(model, (X,), freeze=True)
    plain = mg.compile_module(model, (X,), optimize=0)
    # the same fused weight arithmetic, once at compile time instead of in the prologue
    np.testing.assert_array_equal(frozen(X), live(X))
    np.testing.assert_allclose(frozen(X), plain(X), rtol=1e-5, atol=1e-5)
    plan = frozen.plan
    assert not plan.shared and plan.prologue is None
    assert not [s for s in plan.slots if s.role == Role.PARAM]
    assert {op for op in (i.op for i in plan.instructions)} <= {"conv2d", "linear", "reshape"}
    assert "fold_weights" in plan.passes_report()


def test_later_weight_changes_do_not_reach_a_frozen_plan():
    model = conv_bn_net()
    frozen = mg.compile_module(model, (X,), freeze=True)
    before = frozen(X)
    state = model.state_dict()
    model.load_state_dict({k: v * 0.5 for k, v in state.items()})
    for p in model.parameters():
        p.value = p.value + 1.0
    np.testing.assert_array_equal(frozen(X), before)
    assert not np.array_equal(mg.compile_module(model, (X,))(X), before)


def test_freeze_keeps_assigned_params_and_their_updates():
    g = mg.Graph()
    x = g.input("x", (3,), "float32")
    w = g.param("w", np.arange(3, dtype=np.float32), share=True)
    k = g.param("k", np.full(3, 2.0, np.float32), share=True)
    y = x * (k * 3.0) + w
    g.assign(w, w + 1.0)
    plan = mg.compile([y], freeze=True)
    params = {s.name for s in plan.slots if s.role == Role.PARAM}
    assert params == {"w"}
    (out,) = plan.run({"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out, [6.0, 7.0, 8.0])
    np.testing.assert_array_equal(g.values[w.id], [1.0, 2.0, 3.0])  # the update still lands
    g.values[k.id][...] = 100.0  # a frozen k is a copy: not seen
    (out,) = plan.run({"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out, [7.0, 8.0, 9.0])


def test_freeze_folds_large_weight_arithmetic_but_not_generators():
    g = mg.Graph()
    x = g.input("x", (4, 1024), "float32")
    w = g.const(np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32))
    y = x @ F.transpose(F.transpose(w, (1, 0)) * 2.0, (1, 0))  # 2 MiB values, over MAX_BYTES
    assert fold(g, [y], evaluate=mg.compiler.evaluator("cpu")).stats["folded"] == 0
    r = fold(g, [y], evaluate=mg.compiler.evaluator("cpu"), weights=True)
    assert r.stats == {"folded": 3, "consts": 1, "bytes": 1024 * 512 * 4}
    g = mg.Graph()
    s = F.sum(F.full((2048, 1024), 1.0, graph=g) * 2.0)  # 8 MiB made by a fill: left to the run
    assert fold(g, [s], evaluate=mg.compiler.evaluator("cpu"), weights=True).stats[
        "folded"] == 0


def test_frozen_plan_results_equal_unfrozen_on_a_graph():
    rng = np.random.default_rng(3)
    g = mg.Graph()
    x = g.input("x", (5, 16), "float32")
    w = g.param("w", rng.standard_normal((32, 16)).astype(np.float32), share=True)
    b = g.param("b", rng.standard_normal(32).astype(np.float32))
    y = F.relu(x @ F.transpose(w, (1, 0)) + F.astype(F.astype(b, "float64"), "float32"))
    xv = rng.standard_normal((5, 16)).astype(np.float32)
    for optimize in (0, 1):
        # the same passes on live weights (at optimize=1 the product may run on packed tiles,
        # whose sums round otherwise than the BLAS's)
        want = mg.compile([y], optimize=optimize).run({"x": xv})[0]
        got = mg.compile([y], optimize=optimize, freeze=True).run({"x": xv})[0]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("freeze", [False, True])
def test_freeze_is_recorded_in_the_plan_source(freeze):
    g = mg.Graph()
    x = g.input("x", (2,), "float32")
    y = x * g.param("w", np.ones(2, np.float32))
    assert mg.compile([y], freeze=freeze).source.options["freeze"] is freeze
