"""The plan prologue: what reads only weights runs once per weight change, not once per run,
and a predictor sharing live weights still sees every write the writers announce."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.plan import Role
from mgegraph.planner.passes.prologue import PLACEHOLDER, written

X = np.random.default_rng(2).standard_normal((4, 3, 6, 6)).astype(np.float32)
Y = np.arange(4) % 5


def conv_bn_net():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                          nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    rng = np.random.default_rng(1)
    for name, p in model.named_parameters():
        if "running_var" in name:
            p.value = rng.uniform(0.5, 2.0, p.shape).astype(np.float32)
        elif p.value.ndim == 1:
            p.value = rng.standard_normal(p.shape).astype(np.float32)
    return model


def counting(predictor):
    """The predictor's prologue runs, counted from now on."""
    pro = predictor.plan.executable()._prologue
    runs, run = [0], pro.run

    def counted():
        runs[0] += 1
        return run()

    pro.run = counted
    return runs


def fresh(model):
    """What a predictor compiled now gives: the oracle of one that saw the writes."""
    return mg.compile_module(model, (X,))(X)


def test_a_bnfold_predictor_moves_the_weight_arithmetic_into_the_prologue():
    model = conv_bn_net().eval()
    live = mg.compile_module(model, (X,))
    plan = live.plan
    assert plan.prologue is not None
    assert "batch_norm" not in {i.op for i in plan.instructions}
    assert "prologue     moved" in plan.passes_report()
    placeholders = [s for s in plan.slots if s.role == Role.PARAM and s.name.startswith(
        PLACEHOLDER)]
    assert len(placeholders) == 4 and all(s.index in plan.shared for s in placeholders)
    # the main plan's instructions read activations; the prologue's read weights only
    assert not plan.prologue.feeds
    plain = mg.compile_module(model, (X,), optimize=0)
    np.testing.assert_allclose(live(X), plain(X), rtol=1e-5, atol=1e-5)
    assert plan.arena_bytes <= plain.plan.arena_bytes


def test_the_prologue_runs_once_per_weight_change_not_once_per_run():
    model = conv_bn_net().eval()
    live = mg.compile_module(model, (X,))
    runs = counting(live)
    for _ in range(5):
        live(X)
    assert runs[0] == 0  # it ran when the executable was made
    model[1].weight.value = model[1].weight.value * 2.0
    live(X), live(X)
    assert runs[0] == 1
    other = nn.Parameter(np.zeros(3, np.float32))  # a write of a weight it does not read
    mg.Graph().bind(other)
    other.value = np.ones(3, np.float32)
    live(X)
    assert runs[0] == 1


def test_the_executor_alone_sees_the_weights_of_the_last_run():
    model = conv_bn_net().eval()
    live = mg.compile_module(model, (X,))
    want = live(X)
    ex = live.plan.executable()
    ex.executor.run()
    np.testing.assert_array_equal(ex.buffers[live.plan.outputs[0]], want)


@pytest.mark.parametrize("optimize", [0, 1])
def test_a_predictor_sees_a_training_step_bitwise_as_one_compiled_after_it(optimize):
    model = conv_bn_net()
    opt = mg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = mg.compile_train_step(model, F.cross_entropy, opt, (X, Y), optimize=optimize)
    model.eval()
    live = mg.compile_module(model, (X,))
    plain = mg.compile_module(model, (X,), optimize=0)
    before = live(X)
    model.train()
    step(X, Y), step(X, Y)
    model.eval()
    got = live(X)
    assert not np.array_equal(got, before)
    np.testing.assert_array_equal(got, fresh(model))
    np.testing.assert_allclose(got, plain(X), rtol=1e-5, atol=1e-5)


def test_a_predictor_sees_an_eager_training_step():
    model = conv_bn_net()
    model.eval()
    live = mg.compile_module(model, (X,))
    before = live(X)
    opt = mg.optim.Adam(model.parameters(), lr=0.01)
    gm = mg.GradManager().attach(model.parameters())
    with gm:
        gm.backward(F.cross_entropy(model(mg.tensor(X)), mg.tensor(Y)))
    opt.step().clear_grad()
    got = live(X)
    assert not np.array_equal(got, before)
    np.testing.assert_array_equal(got, fresh(model))


def test_a_predictor_sees_load_state_dict_and_value_sets():
    model = conv_bn_net().eval()
    live = mg.compile_module(model, (X,))
    rng = np.random.default_rng(5)
    state = {k: (v + rng.uniform(0.1, 0.5, v.shape)).astype(v.dtype)
             for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    np.testing.assert_array_equal(live(X), fresh(model))
    bn = model[4]
    bn.running_var.value = bn.running_var.value * 3.0
    bn.weight.value = -bn.weight.value
    np.testing.assert_array_equal(live(X), fresh(model))


def test_a_numpy_write_is_seen_only_once_announced():
    model = conv_bn_net().eval()
    live = mg.compile_module(model, (X,))
    before = live(X)
    model[1].weight.value[...] *= 2.0  # straight into the array: not seen (documented)
    np.testing.assert_array_equal(live(X), before)
    written(model[1].weight.value)
    np.testing.assert_array_equal(live(X), fresh(model))


def test_weight_only_outputs_and_plain_views_stay_in_the_main_plan():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    w = g.param("w", np.arange(6, dtype=np.float32).reshape(3, 2), share=True)
    wt = F.transpose(w * 2.0, (1, 0))
    y = x + wt
    plan = mg.compile([y, wt * 1.0, F.reshape(w, (6,))])
    xv = np.ones((2, 3), np.float32)
    want = mg.compile([y, wt * 1.0, F.reshape(w, (6,))], optimize=0).run({"x": xv})
    for got, ref in zip(plan.run({"x": xv}), want):
        np.testing.assert_array_equal(got, ref)
    g.values[w.id][...] += 1.0
    written(g.values[w.id])
    want = mg.compile([y, wt * 1.0, F.reshape(w, (6,))], optimize=0).run({"x": xv})
    for got, ref in zip(plan.run({"x": xv}), want):
        np.testing.assert_array_equal(got, ref)


def test_no_prologue_at_optimize_0_nor_for_assigned_params():
    g = mg.Graph()
    x = g.input("x", (3,), "float32")
    w = g.param("w", np.ones(3, np.float32), share=True)
    y = x * (w * 2.0)
    assert mg.compile([y], optimize=0).prologue is None
    g.assign(w, w + 1.0)
    plan = mg.compile([y])
    assert plan.prologue is None
    xv = np.ones(3, np.float32)
    np.testing.assert_array_equal(plan.run({"x": xv})[0], [2.0] * 3)
    np.testing.assert_array_equal(plan.run({"x": xv})[0], [4.0] * 3)


def test_a_backend_without_prologues_gets_none():
    reference = pytest.importorskip("backends.reference")
    from mgegraph.backend import unregister_backend

    mg.register_backend("reference", reference.ReferenceBackend)
    try:
        g = mg.Graph()
        x = g.input("x", (3,), "float32")
        w = g.param("w", np.ones(3, np.float32), share=True)
        plan = mg.compile([x * (w * 2.0)], device="reference")
        assert plan.prologue is None
        np.testing.assert_array_equal(plan.run({"x": np.ones(3, np.float32)})[0], [2.0] * 3)
    finally:
        unregister_backend("reference")
