"""MegEngine's names for mgegraph's parts: a MegEngine script's imports work unchanged."""
import numpy as np

import mgegraph as mge
import mgegraph.functional as F
import mgegraph.module as M
import mgegraph.optimizer as optim
from mgegraph.autodiff import GradManager
from mgegraph.jit import trace


def test_the_names_are_the_same_objects():
    assert M.Linear is mge.nn.Linear and M.Module is mge.nn.Module and M.init is mge.nn.init
    assert optim.SGD is mge.optim.SGD and optim.lr_scheduler.StepLR is mge.optim.StepLR
    assert GradManager is mge.GradManager and trace is mge.trace is mge.jit.trace
    assert F.nn.cross_entropy is F.cross_entropy and F.nn.conv2d is F.conv2d
    assert F.nn.square_loss is mge.nn.mse_loss
    assert mge.tensor([1.0]).__class__ is mge.Tensor


def test_a_megengine_style_module_and_a_traced_method():
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.fc = M.Linear(3, 2)

        @trace
        def predict(self, x):
            return F.softmax(self.fc(x), axis=1)

    net = Net()
    x = mge.tensor(np.ones((4, 3), np.float32))
    first, again = net.predict(x), net.predict(x)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    np.testing.assert_allclose(first.numpy().sum(1), 1.0, rtol=1e-6)
    assert len(Net.predict.plans) == 1
