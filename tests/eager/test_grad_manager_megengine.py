"""GradManager as MegEngine's: non-scalar ``y``, several values, groups, higher orders, weakly
held attachments, and the paths ``mgegraph.autodiff.grad_manager`` / ``autodiff.Function``."""
import gc
import weakref

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.autodiff import GradManager
from mgegraph.eager.grad_manager import AttachError

RNG = np.random.default_rng(7)


def _x(n=6):
    return mg.tensor(RNG.random(n).astype(np.float32))


def test_the_megengine_paths_name_the_same_objects():
    from mgegraph.autodiff.grad_manager import GradManager as from_module
    from mgegraph.eager.function import Function

    assert from_module is GradManager is mg.GradManager
    assert mg.autodiff.Function is Function
    assert {"GradManager", "Function"} <= set(dir(mg.autodiff))


def test_a_non_scalar_y_without_dy_gives_the_gradient_of_its_sum():
    x = _x()
    gm = GradManager().attach(x)
    with gm:
        gm.backward(F.cos(x) * 3.0)
    np.testing.assert_allclose(x.grad.numpy(), -3.0 * np.sin(x.numpy()), rtol=1e-6)


def test_several_values_and_their_dys_add_up():
    x = _x()
    gm = GradManager().attach(x)
    dy = mg.tensor(np.full(6, 2.0, np.float32))
    with gm:
        gm.backward([x * 3.0, x * x], [None, dy])
    np.testing.assert_allclose(x.grad.numpy(), 3.0 + 4.0 * x.numpy(), rtol=1e-6)
    with gm, pytest.raises(mg.GraphError, match="2 values y and 1 dy"):
        gm.backward([x, x], [dy])


def test_a_y_that_depends_on_nothing_attached_leaves_every_grad_as_it_is():
    x, other = _x(), _x()
    gm = GradManager().attach(x)
    x.grad = mg.tensor(np.ones(6, np.float32))
    with gm:
        gm.backward(other * 2.0)
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(6, np.float32))
    with gm:
        gm.backward()  # y=None only ends the recording
    assert gm.attached_tensors() == [x]


def test_a_backward_is_seen_by_the_managers_recording_outside_it():
    # d/dx of d cos(x)/dx summed: the outer tape records the inner backward's ops
    x = _x()
    outer, inner = GradManager().attach(x), GradManager().attach(x)
    with outer:
        with inner:
            inner.backward(F.cos(x))
        first = x.grad.numpy()
        outer.backward(x.grad)
    np.testing.assert_allclose(first, -np.sin(x.numpy()), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()) - np.cos(x.numpy()),
                               rtol=1e-5)


def test_a_backward_is_hidden_from_later_managers_and_from_its_group():
    for enter in ("later", "group"):
        x = _x()
        gm, gm2 = GradManager().attach(x), GradManager().attach(x)
        if enter == "later":  # gm starts recording after gm2
            gm2.record()
            gm.record()
        else:
            group = gm | gm2
            group.__enter__()
        gm2.backward(F.cos(x))
        gm.backward(x.grad)  # x.grad is no value gm recorded: nothing changes
        gm.release()
        gm2.release()
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()), rtol=1e-6)


def test_a_group_records_with_each_of_its_managers():
    x = _x()
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm | gm2:
        y = F.cos(x)
        gm.backward(y)
        gm2.backward(y)
    np.testing.assert_allclose(x.grad.numpy(), -2 * np.sin(x.numpy()), rtol=1e-6)
    assert not mg.eager.mode.MODE.recorders


def test_attached_tensors_are_held_weakly_and_callbacks_may_return_none():
    w = mg.nn.Parameter(np.float32(2.0))
    gm = GradManager().attach(w)
    seen = []
    for i in range(3):
        with gm:
            x = mg.tensor(np.float32(i))
            gm.attach(x, callbacks=lambda t, g: seen.append(t) or None)
            ref = weakref.ref(x)
            gm.backward(x * w)
        assert seen.pop() is x and x.grad is None  # the callback said: no gradient
        del x
        gc.collect()
        assert ref() is None
    assert gm.attached_tensors() == [w]
    assert float(w.grad.numpy()) == 0.0 + 1.0 + 2.0


def test_attach_refuses_integer_tensors_with_an_assertion_error_as_megengine():
    gm = GradManager()
    for dtype in ("uint8", "int8", "int32"):
        with pytest.raises(AssertionError, match="has no gradient"):
            gm.attach(mg.tensor([1], dtype=dtype))
    with pytest.raises(AttachError, match="is not a Tensor"):
        gm.attach([np.ones(3)])
    gm.attach(mg.tensor([1.0], dtype="float16"))


def test_a_backward_pass_is_exact_on_the_graph_walker_too():
    # the walker's several roots: a graph's grad() still takes one loss and its seed
    g = mg.Graph()
    x = g.input("x", (3,))
    (dx,) = mg.grad(F.sum(x * x), [x])
    plan = mg.compile([dx])
    v = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(plan.run({"x": v})[0], 2 * v)
