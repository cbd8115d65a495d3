"""Iterating a graph Var, as a NumPy array and an eager Tensor iterate."""
import pytest

import mgegraph as mg


def test_a_var_iterates_over_its_first_axis():
    g = mg.Graph()
    x = g.input("x", (3, 2))
    rows = list(x)
    assert len(rows) == 3 and all(r.shape == (2,) for r in rows)
    a, b, c = g.input("v", (3,))
    assert a.shape == ()


def test_a_0d_var_is_not_iterable():
    g = mg.Graph()
    with pytest.raises(TypeError, match="0-d Var"):
        list(g.input("s", ()))
