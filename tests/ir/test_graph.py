"""The IR: building graphs, inferred types, the text form, DOT, and build-time errors."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F


def small_graph():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    w = g.param("w", np.ones((3,), np.float32))
    y = F.relu(x * w + 1.0)
    return g, x, w, y


def test_text_form_is_stable_and_readable():
    g, *_ = small_graph()
    assert str(g) == "\n".join([
        "%0:f32[2,3] = input[name=x]",
        "%1:f32[3] = param[name=w]",
        "%2:f32[2,3] = mul %0 %1",
        "%3:f32[] = const[value=1.0]",
        "%4:f32[2,3] = add %2 %3",
        "%5:f32[2,3] = relu %4",
    ])


def test_attributes_print_in_brackets():
    g = mg.Graph()
    x = g.input("x", (4,), "float32")
    F.clip(x, -1, 1)
    F.astype(x, "int64")
    lines = str(g).splitlines()
    assert lines[1] == "%1:f32[4] = clip[lower=-1.0, upper=1.0] %0"
    assert lines[2] == "%2:i64[4] = cast[dtype=int64] %0"


def test_types_are_inferred_when_nodes_are_made():
    g = mg.Graph()
    a = g.input("a", (5, 1, 3), "float32")
    b = g.input("b", (4, 1), "float64")
    c = a + b
    assert c.shape == (5, 4, 3) and c.dtype == np.float64
    assert (a < 0).dtype == np.bool_
    assert F.astype(a, "int32").dtype == np.int32


def test_dot_lists_every_node_and_edge():
    g, *_ = small_graph()
    dot = g.to_dot()
    assert dot.startswith("digraph mgegraph {") and dot.endswith("}")
    assert dot.count("label=\"relu") == 1 and dot.count("->") == 5


def test_params_and_consts_are_copied():
    value = np.zeros(3, np.float32)
    g = mg.Graph()
    w = g.param("w", value)
    value[:] = 7
    assert np.all(g.values[w.id] == 0)


def test_names_must_be_unique_and_dtypes_supported():
    g = mg.Graph()
    g.input("x", (1,))
    with pytest.raises(mg.GraphError, match="already used"):
        g.param("x", np.zeros(1, np.float32))
    with pytest.raises(TypeError, match="not supported"):
        g.input("y", (1,), "complex64")
    with pytest.raises(ValueError, match="negative dimension"):
        g.input("z", (-1, 2))


def test_unknown_and_missing_attributes_are_refused():
    g = mg.Graph()
    x = g.input("x", (2,))
    with pytest.raises(mg.OpError, match="unknown attribute"):
        g.add_node("relu", (x,), {"alpha": 1})
    with pytest.raises(mg.OpError, match="missing attribute 'lower'"):
        g.add_node("clip", (x,), {"upper": 1.0})
    with pytest.raises(mg.GraphError, match="no op named 'frobnicate'"):
        g.add_node("frobnicate", (x,), {})


def test_var_has_no_truth_value():
    g = mg.Graph()
    x = g.input("x", (2,))
    with pytest.raises(TypeError, match="truth value"):
        bool(x > 0)
