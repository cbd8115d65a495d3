"""From float to QAT to int8: quantize_qat swaps the quantisable modules (sharing their
parameters), a QAT model trains eagerly and as a compiled step, and quantize gives int8 layers
whose forward makes the QAT forward's class decisions with outputs within one quantization step
of it (training = deployment), eagerly and as one compiled plan."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.quantization as Q
from mgegraph import module as M
from mgegraph.dtype import get_scale
from mgegraph.ir.errors import GraphError
from mgegraph.module import qat as QAT
from mgegraph.module import quantized as Quantized


class SmallCNN(M.Module):
    """Two ConvBnRelu2d, pooling (in floats: the int8 ops have no pooling, so the values leave
    and re-enter the quantized part around it), a Linear."""

    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.block1 = M.ConvBnRelu2d(3, 8, 3, padding=1)
        self.block2 = M.ConvBnRelu2d(8, 16, 3, stride=2, padding=1)
        self.leave, self.enter = M.DequantStub(), M.QuantStub()
        self.fc = M.Linear(16 * 4 * 4, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.block2(self.block1(self.quant(x)))
        x = self.enter(F.max_pool2d(self.leave(x), 2))
        return self.dequant(self.fc(F.flatten(x, 1)))


@pytest.fixture(autouse=True)
def _seeded_weights():
    """Each test's layers start from the same weights, whatever ran before it in the process."""
    mg.random.seed(0)


def _images(n=16, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3, 16, 16)).astype(np.float32)


def _labels(n=16, seed=0):
    return np.random.default_rng(seed).integers(0, 10, n).astype(np.int32)


def test_quantize_qat_swaps_modules_and_shares_parameters():
    net = SmallCNN()
    weight, bn = net.block1.conv.weight, net.block1.bn
    net.fc.quantize_disabled = True
    Q.quantize_qat(net)
    assert type(net.block1) is QAT.ConvBnRelu2d and type(net.quant) is QAT.QuantStub
    assert type(net.fc) is M.Linear  # quantize_disabled keeps it float
    assert net.block1.conv.weight is weight and net.block1.bn is bn
    assert isinstance(net.block1.act_observer, Q.ExponentialMovingAverageObserver)
    assert isinstance(net.block1.weight_fake_quant, Q.FakeQuantize)
    assert net.leave.act_observer is None  # a DequantStub observes nothing
    assert any(name.endswith("act_observer.min_val") for name in net.state_dict())


def test_containers_and_not_inplace():
    seq = M.Sequential(M.Linear(4, 3), M.Sequential(M.ConvRelu2d(2, 2, 1)))
    copy = Q.quantize_qat(seq, inplace=False)
    assert type(seq[0]) is M.Linear and type(copy[0]) is QAT.Linear
    assert type(copy[1][0]) is QAT.ConvRelu2d


def test_without_fake_quant_a_qat_model_computes_as_the_float_one():
    net = SmallCNN().eval()
    x = _images(4)
    want = net(mg.tensor(x)).numpy()
    Q.quantize_qat(net)
    Q.disable_fake_quant(net)
    net.eval()
    np.testing.assert_allclose(net(mg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_qat_conv_bn_in_training_normalises_with_the_batch():
    float_block = M.ConvBn2d(3, 4, 3)
    float_block.bn.running_var.value = np.full((1, 4, 1, 1), 2.0, np.float32)
    qat_block = QAT.ConvBn2d.from_float_module(M.ConvBn2d(3, 4, 3))
    qat_block.load_state_dict(float_block.state_dict())
    Q.propagate_qconfig(qat_block, Q.ema_fakequant_qconfig)
    Q.disable_fake_quant(qat_block)
    x = mg.tensor(_images(4))
    np.testing.assert_allclose(qat_block(x).numpy(), float_block(x).numpy(), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(qat_block.bn.running_mean.numpy(),
                               float_block.bn.running_mean.numpy(), rtol=1e-4, atol=1e-6)


def _trained_qat(steps=4):
    net = SmallCNN()
    Q.quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    opt = mg.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    step = mg.compile_train_step(net, F.nn.cross_entropy, opt,
                                 example_batch=(_images(), _labels()))
    losses = [float(step(_images(seed=i), _labels(seed=i))) for i in range(steps)]
    assert all(np.isfinite(losses))
    return net


def test_a_compiled_qat_step_trains_and_observes():
    net = _trained_qat()
    observer = net.block1.act_observer
    assert float(observer.max_val.numpy()) > 0 > float(observer.min_val.numpy()) - 1e-3
    assert float(observer.runtime_momentum.numpy()) == pytest.approx(0.9)


def _steps_apart(got, want, scale):
    return np.rint((got - want) / scale)


def test_training_is_deployment():
    net = _trained_qat().eval()
    x = _images(64, seed=100)
    qat_out = net(mg.tensor(x)).numpy()
    Q.quantize(net)
    assert type(net.block1) is Quantized.ConvBnRelu2d and type(net.fc) is Quantized.Linear
    assert net.block1.weight.dtype == np.int8
    int8_out = net(mg.tensor(x)).numpy()
    steps = _steps_apart(int8_out, qat_out, get_scale(net.fc.output_dtype))
    assert np.abs(steps).max() <= 1
    assert (steps == 0).mean() > 0.9  # most outputs are the same integers
    np.testing.assert_array_equal(int8_out.argmax(1), qat_out.argmax(1))
    # one compiled plan of the int8 model gives the eager int8 forward's numbers
    plan_out = mg.compile_module(net, (x,))(x)
    np.testing.assert_array_equal(np.asarray(plan_out), int8_out)


def test_post_training_calibration():
    net = SmallCNN().eval()
    x = _images(32, seed=101)
    float_out = net(mg.tensor(x)).numpy()
    Q.quantize_qat(net, qconfig=Q.calibration_qconfig)
    Q.enable_observer(net)  # in eval mode: the running statistics stay, the observers observe
    # no fake quantizers: the float model's numbers, with its batch norm folded
    np.testing.assert_allclose(net(mg.tensor(x)).numpy(), float_out, rtol=1e-4, atol=1e-5)
    assert float(net.block1.act_observer.max_val.numpy()) > 0
    Q.quantize(net)
    int8_out = net(mg.tensor(x)).numpy()
    steps = np.abs(int8_out - float_out) / get_scale(net.fc.output_dtype)
    # three layers of int8 rounding: a few output steps (2.2 to 6.6 over weight seeds 0-7),
    # the same decisions
    assert steps.max() < 8
    assert (int8_out.argmax(1) == float_out.argmax(1)).mean() >= 0.9


def test_int8_add_is_the_qat_add_within_a_step():
    class Adder(M.Module):
        def __init__(self):
            super().__init__()
            self.qa, self.qb, self.add = M.QuantStub(), M.QuantStub(), M.Elemwise("add")
            self.dequant = M.DequantStub()

        def forward(self, a, b):
            return self.dequant(self.add(self.qa(a), self.qb(b)))

    net = Q.quantize_qat(Adder(), qconfig=Q.min_max_fakequant_qconfig)
    a, b = (mg.tensor(rng.normal(size=(5, 7)).astype(np.float32)) for rng in
            (np.random.default_rng(1), np.random.default_rng(2)))
    net(a, b)
    net.eval()
    want = net(a, b).numpy()
    Q.quantize(net)
    got = net(a, b).numpy()
    assert np.abs(_steps_apart(got, want, get_scale(net.add.output_dtype))).max() <= 1


def test_an_int8_layer_refuses_float_input():
    net = Q.quantize_qat(M.Sequential(M.Linear(4, 3)))
    net(mg.tensor(np.ones((2, 4), np.float32)))
    Q.quantize(net.eval())
    with pytest.raises(GraphError, match="quantized per tensor"):
        net(mg.tensor(np.ones((2, 4), np.float32)))


def test_four_bit_training_has_no_int8_form():
    net = Q.quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3)),
                         qconfig=Q.ema_lowbit_fakequant_qconfig)
    net(mg.tensor(np.ones((2, 4), np.float32)))
    with pytest.raises((GraphError, ValueError), match="qint4|storage"):
        Q.quantize(net.eval())


def test_repr_is_megengines():
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv_bn = M.ConvBnRelu2d(3, 3, 3)
            self.linear = M.Linear(3, 3)

    net = Q.quantize_qat(Net())
    observers = ("    (act_observer): ExponentialMovingAverageObserver()\n"
                 "    (act_fake_quant): FakeQuantize()\n"
                 "    (weight_observer): MinMaxObserver()\n"
                 "    (weight_fake_quant): FakeQuantize()\n")
    assert repr(net) == (
        "Net(\n  (conv_bn): QAT.ConvBnRelu2d(\n    (conv): Conv2d(3, 3, kernel_size=(3, 3))\n"
        "    (bn): BatchNorm2d(3, eps=1e-05, momentum=0.9, affine=True, "
        "track_running_stats=True)\n" + observers + "  )\n  (linear): QAT.Linear(\n"
        "    in_features=3, out_features=3, bias=True\n" + observers + "  )\n)")
    Q.quantize(net)
    assert repr(net) == ("Net(\n  (conv_bn): Quantized.ConvBnRelu2d(3, 3, kernel_size=(3, 3))\n"
                         "  (linear): Quantized.Linear()\n)")



def test_qat_modules_made_directly_have_no_observers_until_configured():
    linear = QAT.Linear(4, 3)
    assert linear.act_observer is None and linear.weight_fake_quant is None
    x = mg.tensor(np.ones((2, 4), np.float32))
    np.testing.assert_array_equal(linear(x).numpy(), M.Linear.forward(linear, x).numpy())
    Q.propagate_qconfig(linear, Q.ema_fakequant_qconfig)
    assert isinstance(linear.act_observer, Q.ExponentialMovingAverageObserver)


def test_conv_bn_refuses_padding_modes_it_does_not_compute():
    with pytest.raises(GraphError, match="padding_mode"):
        M.ConvBn2d(3, 4, 3, padding_mode="circular")  # PyTorch's; MegEngine has no such mode
