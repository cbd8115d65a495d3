"""A GradManager callback may return a future (an object with ``get()``, MegEngine's protocol):
the manager resolves every future only once every gradient's callbacks have run, which is what
lets data-parallel training pack gradients into buckets (``distributed.make_allreduce_cb``)."""
import numpy as np

import mgegraph as mg


class Later:
    def __init__(self, log, name, value):
        self.log, self.name, self.value = log, name, value

    def get(self):
        self.log.append(f"get {self.name}")
        return self.value


def test_futures_are_resolved_after_every_callback_ran():
    log = []
    a, b = mg.Parameter(np.ones(2, np.float32)), mg.Parameter(np.ones(3, np.float32))

    def later(p, g):
        name = "a" if p is a else "b"
        log.append(f"call {name}")
        return Later(log, name, g * 10.0)

    gm = mg.autodiff.GradManager().attach([a, b], callbacks=[later])
    with gm:
        gm.backward((a * 2.0).sum() + (b * 3.0).sum())
    assert log == ["call a", "call b", "get a", "get b"]
    np.testing.assert_array_equal(a.grad.numpy(), [20.0, 20.0])
    np.testing.assert_array_equal(b.grad.numpy(), [30.0, 30.0, 30.0])


def test_a_future_is_resolved_before_the_next_callback_sees_it():
    log = []
    w = mg.Parameter(np.ones(2, np.float32))

    def first(p, g):
        return Later(log, "first", g + 1.0)

    def second(p, g):
        assert isinstance(g, mg.Tensor)
        log.append("second")
        return g * 2.0

    gm = mg.autodiff.GradManager().attach([w], callbacks=[first, second])
    with gm:
        gm.backward(w.sum())
    assert log == ["get first", "second"]
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 4.0])
