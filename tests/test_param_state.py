"""A run reads every param as it was when the run began (issue 14, items 6 and 9)."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import functional as F
from mgegraph import nn

W0 = np.arange(6, dtype=np.float32).reshape(2, 3)
ONES = np.ones((2, 3), np.float32)


def _run(make_output, optimize=1):
    g = mg.Graph()
    w = g.param("w", W0)
    x = g.input("x", (2, 3), np.float32)
    out = make_output(w)
    g.assign(w, w - x)
    return mg.compile([out], optimize=optimize).run({"x": ONES})[0]


@pytest.mark.parametrize("optimize", [0, 1])
def test_a_view_made_before_the_assign_and_read_after_it_sees_the_old_value(optimize):
    g = mg.Graph()
    w = g.param("w", W0)
    x = g.input("x", (2, 3), np.float32)
    view = F.reshape(w, (3, 2))
    g.assign(w, w - x)  # was computed straight into w before the read of the view
    out = view * 2
    np.testing.assert_array_equal(mg.compile([out], optimize=optimize).run({"x": ONES})[0],
                                  W0.reshape(3, 2) * 2)


@pytest.mark.parametrize("optimize", [0, 1])
@pytest.mark.parametrize("make, want", [
    (lambda w: F.reshape(w, (3, 2)), W0.reshape(3, 2)),
    (lambda w: F.reshape(w, (3, 2)) * 2, W0.reshape(3, 2) * 2),
    (lambda w: F.sum(w[1]), W0[1].sum()),
])
def test_reads_made_after_the_assign_see_the_value_before_it(make, want, optimize):
    g = mg.Graph()
    w = g.param("w", W0)
    x = g.input("x", (2, 3), np.float32)
    g.assign(w, w - x)  # w - x could be computed straight into w: not before these reads
    out = make(w)
    np.testing.assert_array_equal(mg.compile([out], optimize=optimize).run({"x": ONES})[0], want)


@pytest.mark.parametrize("optimize", [0, 1])
@pytest.mark.parametrize("make, want", [
    (lambda w: F.reshape(w, (3, 2)), W0.reshape(3, 2)),
    (lambda w: F.flatten(w), W0.reshape(-1)),
    (lambda w: w[1], W0[1]),
    (lambda w: F.reshape(F.reshape(w, (6,)), (3, 2)), W0.reshape(3, 2)),
    (lambda w: w + 0, W0),
    (lambda w: F.reshape(w, (3, 2)) * 2, W0.reshape(3, 2) * 2),
])
def test_an_output_viewing_an_assigned_param_is_the_value_before_the_update(make, want,
                                                                              optimize):
    np.testing.assert_array_equal(_run(make, optimize), want)


def test_an_assign_reading_a_view_of_another_updated_param_sees_its_old_value():
    g = mg.Graph()
    a = g.param("a", np.zeros(6, np.float32))
    b = g.param("b", W0)
    g.assign(a, F.reshape(b, (6,)))
    g.assign(b, b * 2)
    plan = mg.compile([F.sum(b)])
    plan.run({})
    values = plan.executable().buffers
    slot = {s.name: s.index for s in plan.slots if s.role == "param"}
    np.testing.assert_array_equal(values[slot["a"]], W0.reshape(-1))
    np.testing.assert_array_equal(values[slot["b"]], W0 * 2)


def test_a_param_assigned_twice_is_refused_naming_both_lines():
    g = mg.Graph()
    w = g.param("w", W0)
    g.assign(w, w + 1)
    g.assign(w, w * 10)
    with pytest.raises(mg.GraphError, match=r"'w' is assigned twice \(at .*test_param_state"):
        mg.compile([F.sum(w)])


@pytest.mark.parametrize("views", [
    lambda arr: (arr, arr),
    lambda arr: (arr[:1], arr.reshape(-1)[:4]),
])
def test_shared_params_overlapping_in_memory_one_assigned_are_refused(views):
    arr = W0.copy()
    first, second = views(arr)
    g = mg.Graph()
    a = g.param("a", first, share=True)
    b = g.param("b", second, share=True)
    g.assign(a, a + 1)
    with pytest.raises(mg.GraphError, match=r"'a' and 'b' share memory"):
        mg.compile([F.sum(b)])


def test_shared_params_overlapping_but_never_assigned_compile():
    arr = W0.copy()
    g = mg.Graph()
    a = g.param("a", arr, share=True)
    b = g.param("b", arr, share=True)
    assert mg.compile([F.sum(a + b)]).run({})[0] == 2 * W0.sum()


def _model_and_predictor():
    model = nn.Linear(3, 2)
    model.eval()
    predict = mg.compile_module(model, example_inputs=(ONES,))
    return model, predict


def test_setting_a_bound_parameters_value_reaches_the_compiled_predictor():
    model, predict = _model_and_predictor()
    predict(ONES)
    state = {name: np.full(p.shape, 0.5, p.dtype) for name, p in model._named_arrays()}
    for name, p in model._named_arrays():
        p.value = state[name]
    want = ONES @ state["weight"].T + state["bias"] if state["weight"].shape == (2, 3) \
        else ONES @ state["weight"] + state["bias"]
    np.testing.assert_allclose(predict(ONES), want, rtol=1e-6)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, state[name])


def test_setting_a_bound_parameter_to_another_shape_or_dtype_is_a_clear_error():
    model, _ = _model_and_predictor()
    p = model.parameters()[0]
    with pytest.raises(mg.GraphError, match="same shape and dtype.*recompile"):
        p.value = np.zeros((7,), p.dtype)
    with pytest.raises(mg.GraphError, match="float64"):
        p.value = np.zeros(p.shape, np.float64)


def test_an_unbound_parameter_takes_any_new_array():
    p = nn.Parameter(np.zeros(3, np.float32))
    p.value = np.ones((2, 2), np.float64)
    assert p.shape == (2, 2) and p.dtype == np.float64


def test_load_state_dict_reaches_the_compiled_predictor():
    model, predict = _model_and_predictor()
    state = {k: np.full_like(v, 0.25) for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    np.testing.assert_allclose(predict(ONES), np.full((2, 2), 0.25 * 3 + 0.25), rtol=1e-6)
