"""A GradManager hands each gradient to its callbacks as soon as the backward walk has made it
final, and a callback may return a future (an object with ``get()``, MegEngine's protocol),
which the manager resolves once the walk is over: what lets data-parallel training send
buckets of gradients while the walk goes on (``distributed.make_allreduce_cb``)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F


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
    # the walk finishes b first (its branch was recorded last); futures in the order made
    assert log == ["call b", "call a", "get b", "get a"]
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


def _mlp_step(gm, layers, callback_log):
    """One step of a 3-layer MLP under ``gm``; ``callback_log`` gets, per gradient handed
    over, the number of tape nodes the walk has not reached yet."""
    x = mg.tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    with gm:
        tape = gm._tape  # the walk pops its nodes off this list
        callback_log.append(tape)
        h = x
        for i, layer in enumerate(layers):
            h = layer(h)
            if i + 1 < len(layers):
                h = F.relu(h)
        gm.backward(F.sum(h * h))


def test_each_gradient_reaches_its_callbacks_while_the_walk_goes_on():
    layers = [mg.nn.Linear(8, 8) for _ in range(3)]
    params = [p for layer in layers for p in (layer.weight, layer.bias)]
    seen, log = [], []

    def record(p, g):
        seen.append((params.index(p), len(log[0])))
        return g

    gm = mg.autodiff.GradManager().attach(params, callbacks=[record])
    _mlp_step(gm, layers, log)
    order = [i for i, _ in seen]
    left = [n for _, n in seen]
    # the last layer's gradients come first, and the first layer's once the walk is nearly done
    assert set(order[:2]) == {4, 5} and set(order[-2:]) == {0, 1}, order
    assert left == sorted(left, reverse=True) and left[0] > left[-1] >= 0, left
    assert left[0] >= 4  # the last layer's gradients left the walk with most of it ahead

    plain = [mg.nn.Linear(8, 8) for _ in range(3)]
    for mine, other in zip(layers, plain):
        other.load_state_dict(mine.state_dict())
        mine.weight.grad = mine.bias.grad = None
    gm2 = mg.autodiff.GradManager().attach([p for layer in plain for p in (layer.weight,
                                                                            layer.bias)])
    _mlp_step(gm, layers, [])
    _mlp_step(gm2, plain, [])
    for mine, other in zip(layers, plain):  # bitwise the walk without callbacks
        np.testing.assert_array_equal(mine.weight.grad.numpy(), other.weight.grad.numpy())
        np.testing.assert_array_equal(mine.bias.grad.numpy(), other.bias.grad.numpy())


class Watching:
    """A callback with the failure hook: records what it heard."""

    def __init__(self, fail_on=None):
        self.calls, self.failures, self.fail_on = 0, [], fail_on

    def __call__(self, p, g):
        self.calls += 1
        if self.calls == self.fail_on:
            raise ValueError("the callback fails on purpose")
        return Later([], "w", g)

    def backward_failed(self, error, during_walk):
        self.failures.append((type(error).__name__, during_walk))


def test_a_failing_walk_tells_the_callbacks_and_applies_no_gradient():
    a, b = mg.Parameter(np.ones(2, np.float32)), mg.Parameter(np.ones(3, np.float32))
    watch = Watching(fail_on=2)
    gm = mg.autodiff.GradManager().attach([a, b], callbacks=[watch])
    with gm:
        with pytest.raises(ValueError, match="on purpose"):
            gm.backward((a * 2.0).sum() + (b * 3.0).sum())
    assert watch.failures == [("ValueError", True)]
    assert a.grad is None and b.grad is None  # the first gradient, handed over, did not land


def test_a_failure_after_the_walk_says_so_and_applies_no_gradient():
    a, b = mg.Parameter(np.ones(2, np.float32)), mg.Parameter(np.ones(3, np.float32))
    watch = Watching()
    gm = mg.autodiff.GradManager().attach([a], callbacks=[watch])
    gm.attach([b], callbacks=[lambda p, g: F.zeros((7,))])  # a gradient of the wrong shape
    with gm:
        with pytest.raises(mg.GraphError, match="no gradient was applied"):
            gm.backward((a * 2.0).sum() + (b * 3.0).sum())
    assert watch.failures == [("GraphError", False)] and a.grad is None and b.grad is None


def test_a_callbacks_progress_hook_runs_after_each_node_walked():
    layers = [mg.nn.Linear(8, 8) for _ in range(2)]
    params = [p for layer in layers for p in (layer.weight, layer.bias)]

    class Ticking:
        def __init__(self):
            self.ticks, self.left = 0, []

        def __call__(self, p, g):
            return g

        def progress(self):
            self.ticks += 1
            self.left.append(len(log[0]))

    log, ticking = [], Ticking()
    gm = mg.autodiff.GradManager().attach(params, callbacks=[ticking])
    _mlp_step(gm, layers, log)
    # one tick per tape node, the tape one node shorter each time
    assert ticking.left == list(range(ticking.ticks - 1, -1, -1)) and ticking.ticks >= 5
