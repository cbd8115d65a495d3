"""``mgegraph.autodiff.Function``: a forward and a backward the user writes, on a GradManager's
tape, inside nested managers (higher orders) and inside a traced training step."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.autodiff import Function, GradManager

RNG = np.random.default_rng(11)


class Scale(Function):
    """y = 10 a with a made-up gradient of 20 (so the rule used is visible)."""

    def forward(self, a):
        return a * 10.0

    def backward(self, dy):
        return dy * 20.0


class MulAdd(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b, a + b

    def backward(self, d_mul, d_add):
        da = None if d_mul is None else d_mul * self.b
        db = None if d_add is None else d_add * 1.0
        return da, db


def _p(*shape):
    return mg.nn.Parameter(RNG.random(shape).astype(np.float32))


def test_the_users_backward_gives_the_gradient():
    a = _p(3, 4)
    gm = GradManager().attach(a)
    with gm:
        y = Scale()(a)
        gm.backward(F.sum(y))
    np.testing.assert_allclose(y.numpy(), a.numpy() * 10, rtol=1e-6)
    np.testing.assert_array_equal(a.grad.numpy(), np.full((3, 4), 20, np.float32))


def test_an_output_the_loss_does_not_use_gets_none():
    a, b = _p(5), _p(5)
    gm = GradManager().attach([a, b])
    with gm:
        mul, _ = MulAdd()(a, b)
        gm.backward(F.sum(mul))
    np.testing.assert_allclose(a.grad.numpy(), b.numpy(), rtol=1e-6)
    assert b.grad is None  # its gradient was None


def test_a_forward_that_returns_its_input_is_a_node_of_its_own():
    class Identity(Function):
        def forward(self, a):
            return a

        def backward(self, dy):
            return dy * 3.0

    a = _p(4)
    gm = GradManager().attach(a)
    with gm:
        y = Identity()(a)
        assert y is not a
        gm.backward(F.sum(y * 2.0))
    np.testing.assert_array_equal(a.grad.numpy(), np.full(4, 6, np.float32))


def test_without_a_recording_manager_it_only_runs_forward():
    a = mg.tensor([1.0, 2.0])
    np.testing.assert_array_equal(Scale()(a).numpy(), [10.0, 20.0])


def test_bad_arguments_and_bad_gradients_say_which_function():
    with pytest.raises(TypeError, match=r"op Scale expect type Tensor as inputs, got int"):
        Scale()(mg.tensor([1.0]), 1)

    class TooMany(Function):
        def forward(self, a):
            return a * 2.0

        def backward(self, dy):
            return dy, dy

    class WrongShape(Function):
        def forward(self, a):
            return a * 2.0

        def backward(self, dy):
            return F.ones((2,))

    a = _p(3)
    gm = GradManager().attach(a)
    with gm, pytest.raises(mg.GraphError, match=r"TooMany.backward returned 2 gradients for 1"):
        gm.backward(F.sum(TooMany()(a)))
    with gm, pytest.raises(mg.GraphError, match=r"WrongShape.backward: gradient 0 is f32\[2\]"):
        gm.backward(F.sum(WrongShape()(a)))


def test_second_order_through_a_function_used_in_its_own_backward():
    class MySin(Function):
        def forward(self, x):
            self.x = x
            return F.sin(mg.tensor(x.numpy()))

        def backward(self, dy):
            return F.cos(self.x) * dy

    class MyCos(Function):
        def forward(self, x):
            self.x = x
            return F.cos(mg.tensor(x.numpy()))

        def backward(self, dy):
            return -MySin()(self.x) * dy

    v = RNG.random(8).astype(np.float32)
    x = mg.tensor(v)
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm:
        with gm2:
            gm2.backward(MyCos()(x))
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(v), rtol=1e-5)
        gm.backward(x.grad)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(v) - np.cos(v), rtol=1e-5)


def test_a_traced_training_step_keeps_the_users_gradient():
    a = _p(3)
    start = a.numpy()
    gm = GradManager().attach(a)
    opt = mg.optim.SGD([a], lr=0.5)

    @mg.jit.trace
    def step():
        with gm:
            loss = F.sum(Scale()(a))
            gm.backward(loss)
        opt.step()
        opt.clear_grad()
        return loss

    for i in range(3):
        step()
        np.testing.assert_allclose(a.numpy(), start - 0.5 * 20 * (i + 1), rtol=1e-5)
