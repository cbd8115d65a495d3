"""mg.compile(..., check_numerics=True): the first NaN/inf names its instruction (issue 14.13)."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import functional as F
from mgegraph import nn, optim


def _log_plan(check_numerics=True):
    g = mg.Graph()
    x = g.input("x", (4,), np.float32)
    y = F.log(x) * 2  # the line the error must name
    return mg.compile([F.sum(y)], check_numerics=check_numerics)


def test_numerics_error_is_a_kernel_error_exported_from_mgegraph():
    assert issubclass(mg.NumericsError, mg.KernelError)


def test_the_first_non_finite_output_names_instruction_op_slot_and_line():
    plan = _log_plan()
    with pytest.raises(mg.NumericsError) as info:
        plan.run({"x": np.array([1, 2, -1, 3], np.float32)})
    message = str(info.value)
    first = next(i for i, ins in enumerate(plan.instructions) if "log" in ins.op
                 or "fused" in ins.op)
    assert f"instruction {first} (" in message
    assert "NaN" in message and "test_numerics.py:" in message
    assert "every feed was finite" in message
    assert f"s{plan.instructions[first].outputs[0]}" in message


def test_a_feed_already_non_finite_is_named():
    with pytest.raises(mg.NumericsError, match=r"feed\(s\) 'x' already held NaN/inf"):
        _log_plan().run({"x": np.array([1, np.inf, 2, 3], np.float32)})


def test_finite_runs_give_the_same_result_and_off_never_checks():
    x = np.array([1, 2, 3, 4], np.float32)
    assert _log_plan(True).run({"x": x}) == _log_plan(False).run({"x": x})
    (total,) = _log_plan(False).run({"x": -x})
    assert np.isnan(total)


def test_the_option_is_plan_data():
    on, off = _log_plan(True), _log_plan(False)
    assert on.check_numerics and not off.check_numerics
    assert on != off
    assert "check_numerics" in str(on) and "check_numerics" not in str(off)


def test_a_train_step_stops_before_a_nan_batch_reaches_the_weights():
    model = nn.Linear(3, 2)
    x, y = np.ones((4, 3), np.float32), np.array([0, 1, 0, 1])
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1),
                                 example_batch=(x, y), check_numerics=True)
    assert step.plan.check_numerics
    step(x, y)
    before = model.state_dict()
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(mg.NumericsError, match="'input0' already held"):
        step(bad, y)
    for name, value in model.state_dict().items():
        assert np.isfinite(value).all()
        np.testing.assert_array_equal(value, before[name])


def test_compile_module_passes_check_numerics():
    model = nn.Linear(3, 2)
    predict = mg.compile_module(model, example_inputs=(np.ones((2, 3), np.float32),),
                                check_numerics=True)
    assert predict.plan.check_numerics


def test_an_infinity_is_reported_as_one():
    g = mg.Graph()
    x = g.input("x", (2,), np.float32)
    plan = mg.compile([F.exp(x)], check_numerics=True)
    with pytest.raises(mg.NumericsError, match="an infinity"):
        plan.run({"x": np.array([0, 1000], np.float32)})


@pytest.mark.parametrize("memory", [None, "debug"])
def test_finite_runs_match_with_and_without_under_every_memory_preset(memory):
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input("x", (8, 16), np.float32)
    w = g.param("w", rng.standard_normal((16, 16)).astype(np.float32))
    h = F.relu(x @ w)
    outs = [F.sum(F.tanh(h @ w) * h), F.mean(h)]
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    on = mg.compile(outs, memory=memory, check_numerics=True).run(feeds)
    off = mg.compile(outs, memory=memory).run(feeds)
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)
