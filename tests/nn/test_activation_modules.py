"""The activation modules of mgegraph.nn against PyTorch's, in graphs and eagerly; PReLU's
learned slope trained by SGD, step by step as PyTorch trains its PReLU."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.ir.errors import GraphError

torch = pytest.importorskip("torch")
TNN = torch.nn
RNG = np.random.default_rng(0)

# (mgegraph module, the PyTorch module it matches)
PAIRS = {
    "ELU": (nn.ELU(0.6), TNN.ELU(0.6)), "SELU": (nn.SELU(), TNN.SELU()),
    "CELU": (nn.CELU(1.7), TNN.CELU(1.7)), "Softsign": (nn.Softsign(), TNN.Softsign()),
    "Hardsigmoid": (nn.Hardsigmoid(), TNN.Hardsigmoid()),
    "Hardtanh": (nn.Hardtanh(-0.3, 2.0), TNN.Hardtanh(-0.3, 2.0)),
    "Mish": (nn.Mish(), TNN.Mish()), "LogSigmoid": (nn.LogSigmoid(), TNN.LogSigmoid()),
    "Softplus": (nn.Softplus(), TNN.Softplus()),
    "Softshrink": (nn.Softshrink(0.3), TNN.Softshrink(0.3)),
    "Hardshrink": (nn.Hardshrink(0.3), TNN.Hardshrink(0.3)),
    "ReLU6": (nn.ReLU6(), TNN.ReLU6()), "Softmax": (nn.Softmax(1), TNN.Softmax(1)),
    "LogSoftmax": (nn.LogSoftmax(-1), TNN.LogSoftmax(-1)),
    "LeakyReLU": (nn.LeakyReLU(0.2), TNN.LeakyReLU(0.2)), "SiLU": (nn.SiLU(), TNN.SiLU()),
    "Hardswish": (nn.Hardswish(), TNN.Hardswish()), "Identity": (nn.Identity(), TNN.Identity()),
    "PReLU": (nn.PReLU(3, 0.1), TNN.PReLU(3, 0.1)),
}


@pytest.mark.parametrize("name", PAIRS)
def test_modules_match_torch_in_a_graph_and_eagerly(name):
    ours, theirs = PAIRS[name]
    x = (RNG.standard_normal((2, 3, 5)) * 4).astype(np.float32)
    want = theirs(torch.from_numpy(x)).detach().numpy()
    g = mg.Graph()
    (graph_y,) = mg.compile([ours(g.input("x", x.shape, "float32"))]).run({"x": x})
    np.testing.assert_allclose(graph_y, want, rtol=3e-6, atol=1e-6)
    np.testing.assert_allclose(ours(mg.tensor(x)).numpy(), want, rtol=3e-6, atol=1e-6)


def test_every_new_class_is_exported():
    assert set(PAIRS) <= set(nn.__all__)
    assert {"ReLU", "Sigmoid", "Tanh", "GELU"} <= set(nn.__all__)  # where they were


def test_prelu_holds_one_trainable_slope_per_channel():
    m = nn.PReLU(4, init=0.3)
    # MegEngine's layout, which broadcasts against NCHW data as it is
    assert m.weight.shape == (1, 4, 1, 1) and m.weight.trainable
    np.testing.assert_array_equal(m.weight.numpy(), np.full((1, 4, 1, 1), 0.3, np.float32))
    x = RNG.standard_normal((2, 4, 3, 3))
    np.testing.assert_allclose(m(mg.tensor(x.astype(np.float32))).numpy(),
                               np.maximum(x, 0) + m.weight.numpy() * np.minimum(x, 0), rtol=1e-6)
    assert m.state_dict()["weight"].shape == (4,)  # PyTorch's (C,) checkpoints load
    m.load_state_dict({"weight": np.arange(4, dtype=np.float32)})
    np.testing.assert_array_equal(m.weight.numpy().ravel(), np.arange(4))
    assert nn.PReLU().weight.shape == (1,)
    assert [name for name, _ in m.named_parameters()] == ["weight"]
    assert repr(m) == "PReLU(num_parameters=4)"


@pytest.mark.parametrize("num_parameters", [1, 3])
def test_prelu_trained_by_sgd_matches_torch(num_parameters):
    # a conv-shaped input (N, C, H, W), a loss that pulls the slopes, five SGD steps
    x = RNG.standard_normal((4, 3, 5, 6)).astype(np.float32)
    target = RNG.standard_normal((4, 3, 5, 6)).astype(np.float32)
    ours, theirs = nn.PReLU(num_parameters, 0.25), TNN.PReLU(num_parameters, 0.25)
    opt, topt = optim.SGD(ours.parameters(), lr=0.5), torch.optim.SGD(theirs.parameters(), lr=0.5)
    gm = mg.GradManager().attach(ours.parameters())
    for _ in range(5):
        with gm:
            loss = F.mean(F.square(ours(mg.tensor(x)) - mg.tensor(target)))
            gm.backward(loss)
        opt.step().clear_grad()
        topt.zero_grad()
        tloss = ((theirs(torch.from_numpy(x)) - torch.from_numpy(target)) ** 2).mean()
        tloss.backward()
        topt.step()
        assert float(loss) == pytest.approx(float(tloss.detach()), rel=1e-5)
        np.testing.assert_allclose(ours.weight.numpy().ravel(), theirs.weight.detach().numpy(),
                                   rtol=1e-5, atol=1e-7)
    assert not np.allclose(ours.weight.numpy(), 0.25)  # the slopes moved


def test_bad_arguments_are_clear_errors():
    with pytest.raises(GraphError, match="PReLU: num_parameters must be an int >= 1, got 0"):
        nn.PReLU(0)
    with pytest.raises(GraphError, match=r"PReLU: 3 slopes, one per channel \(axis 1\), for an "
                                         r"input of shape \(2, 4\)"):
        nn.PReLU(3)(mg.tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(GraphError, match="CELU: alpha must not be 0"):
        nn.CELU(0.0)
    with pytest.raises(GraphError, match="Hardtanh: min_val 2 is greater than max_val 1"):
        nn.Hardtanh(2, 1)
    with pytest.raises(GraphError, match="Softshrink: lambd must be >= 0, got -0.5"):
        nn.Softshrink(-0.5)
