"""A tensor's value and a parameter's value under a GradManager, as a hostile but realistic
user writes them."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import nn


def test_a_tensors_value_is_read_only_so_a_tape_keeps_what_it_recorded():
    w = nn.Parameter(np.ones(3, np.float32))
    x = mg.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    gm = mg.GradManager().attach(w)
    with gm:
        loss = (w * x).sum()
        with pytest.raises(ValueError, match="read-only"):
            x.value[:] = 100
        gm.backward(loss)
    assert w.grad.numpy().tolist() == [1.0, 2.0, 3.0]
    copy = x.numpy()
    copy[:] = 0  # numpy() is the caller's copy
    assert x.numpy().tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("bound", [False, True])
def test_setting_a_parameters_value_after_attach_keeps_its_gradient(bound):
    w = nn.Parameter(np.array([1.0, 2.0, 3.0], np.float32))
    if bound:  # a graph shares its array: the setter copies in place
        mg.Graph().bind(w)
    gm = mg.GradManager().attach(w)
    w.value = np.array([4.0, 5.0, 6.0], np.float32)  # loading weights after attach
    with gm:
        loss = (w * w).sum()
        w.value = np.zeros(3, np.float32)  # after the forward: the tape keeps what it read
        gm.backward(loss)
    assert w.grad.numpy().tolist() == [8.0, 10.0, 12.0]


def test_a_parameter_of_another_shape_after_the_forward_applies_no_gradient():
    a = nn.Parameter(np.ones(2, np.float32))
    b = nn.Parameter(np.ones(3, np.float32))
    gm = mg.GradManager().attach([a, b])
    with gm:
        loss = a.sum() + b.sum()
        b.value = np.ones(4, np.float32)
        with pytest.raises(mg.GraphError, match=r"gradient of Parameter.*f32\[3\].*f32\[4\]"):
            gm.backward(loss)
    assert a.grad is None and b.grad is None  # all or none


def test_setting_a_parameters_value_keeps_its_grad_for_the_step():
    p = nn.Parameter(np.ones(2, np.float32))
    opt = mg.optim.SGD([p], lr=1.0)
    gm = mg.GradManager().attach(p)
    with gm:
        gm.backward((p * 3).sum())
    p.value = np.full(2, 10.0, np.float32)  # e.g. a clip between backward and step
    opt.step()
    assert p.numpy().tolist() == [7.0, 7.0]
