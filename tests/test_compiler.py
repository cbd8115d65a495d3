"""The compile driver: device selection, the caller's graph left alone, plans as plain data."""
import dataclasses

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F


def mlp_graph():
    g = mg.Graph()
    rng = np.random.default_rng(0)
    x = g.input("x", (4, 3))
    w = g.param("w", rng.standard_normal((3, 5)).astype(np.float32))
    b = g.param("b", np.zeros(5, np.float32))
    return g, x, w, b, F.relu(x @ w + b).sum()


def test_devices_lists_cpu_and_unknown_devices_are_named():
    assert "cpu" in mg.devices()
    g, *_, y = mlp_graph()
    with pytest.raises(mg.GraphError, match=r"unknown device 'tpu:0'; known devices: .*'cpu'"):
        mg.compile([y], device="tpu:0")
    with pytest.raises(mg.GraphError, match="device must be a string"):
        mg.compile([y], device=0)


@pytest.mark.parametrize("optimize", [0, 1])
def test_compile_leaves_the_callers_graph_as_it_was(optimize):
    # an output that is a param an assign updates gets a copy node (it must give the value the
    # run began with): that copy goes into the compiler's graph, never the caller's
    g, x, w, b, y = mlp_graph()
    g.assign(w, w * 0.5)
    before = str(g)
    plan = mg.compile([y, w], optimize=optimize)
    assert str(g) == before
    feeds = {"x": np.ones((4, 3), np.float32)}
    w0 = g.values[w.id].copy()
    _, w_out = plan.run(feeds)
    np.testing.assert_array_equal(w_out, w0)


def test_plans_are_frozen_comparable_data():
    g, *_, y = mlp_graph()
    a, b = mg.compile([y]), mg.compile([y])
    assert a == b and a is not b
    assert a != mg.compile([y], optimize=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.device = "other"
    # running one does not change its data (the executable lives beside it)
    a.run({"x": np.ones((4, 3), np.float32)})
    assert a == b
    assert all(isinstance(ins.kernel, str) for ins in a.instructions)
    assert {s.role for s in a.slots} <= set(mg.Role)


def test_a_replaced_plan_gets_its_own_memory():
    g, *_, y = mlp_graph()
    plan = mg.compile([y])
    feeds = {"x": np.ones((4, 3), np.float32)}
    (want,) = plan.run(feeds)
    copy = dataclasses.replace(plan)
    assert copy.executable() is not plan.executable()
    np.testing.assert_array_equal(copy.run(feeds)[0], want)


def test_a_name_no_input_binds_is_refused_at_compile():
    g = mg.Graph()
    x = g.input("x", (4, 6))
    y = F.reshape(x, ("batch", 24))  # batch is no input's dimension: no feed could set it
    with pytest.raises(mg.GraphError, match=r"reshape at .*test_compiler.py:\d+ gives "
                                            r"f32\[batch, 24\], but no input .* batch"):
        mg.compile([y])
