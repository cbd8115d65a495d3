"""MegEngine's quantization parameters on values and the bias's fake quantization in QAT: an
eager tensor carries ``qparams`` (empty until a QAT module or fake quantizer sets them), and a
QAT convolution or linear layer fake-quantizes its bias to qint32 in units of input scale x
weight scale (in a graph, reading the fake quantizer that made its input), so its forward holds
the bias the int8 layer holds."""
import copy

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.quantization as Q
from mgegraph import module as M
from mgegraph.dtype import QParams, get_scale
from mgegraph.quantization import QuantMode, create_qparams, fake_quant_bias, fake_quant_tensor
from mgegraph.quantization.utils import qparams_of


def _x(shape=(4, 3, 8, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# -- Tensor.qparams ---------------------------------------------------------------------------
def test_a_tensor_carries_empty_symmetric_qparams_until_set():
    x = mg.tensor([1.0, 2.0])
    assert isinstance(x.qparams, QParams) and x.qparams.mode is QuantMode.SYMMERTIC
    assert x.qparams.scale is None and x.qparams is x.qparams
    x.qparams.scale = mg.tensor(0.5)
    assert (x * 2).qparams.scale is None  # an op's result carries none
    x.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", mg.tensor(0.25)))
    assert x.qparams.dtype_meta.name == "qint8" and float(x.qparams.scale.numpy()) == 0.25
    copied = copy.deepcopy(x)
    assert copied.qparams == x.qparams and copied.qparams is not x.qparams


def test_qat_outputs_carry_their_fake_quantizers_parameters():
    net = Q.quantize_qat(M.Sequential(M.QuantStub(), M.ConvBnRelu2d(3, 4, 3)).eval())
    Q.enable_observer(net)
    x = mg.tensor(_x())
    q = net[0](x)
    y = net[1](q)
    for module, out in ((net[0], q), (net[1], y)):
        assert out.qparams == module.get_activation_qparams()
        assert float(out.qparams.scale.numpy()) > 0


# -- fake_quant_bias ---------------------------------------------------------------------------
def _int8_params(scale):
    return create_qparams(QuantMode.SYMMERTIC, "qint8", mg.tensor(np.float32(scale)))


def test_the_bias_becomes_a_multiple_of_input_scale_times_weight_scale():
    bias = mg.tensor(np.array([0.1234, -0.0051, 3.0], np.float32))
    inp, w = mg.tensor(_x((2, 3))), mg.tensor(_x((3, 3)))
    inp.qparams.update(_int8_params(0.05))
    w.qparams.update(_int8_params(0.02))
    b_qat = fake_quant_bias(bias, inp, w)
    unit = np.float32(0.05) * np.float32(0.02)
    np.testing.assert_array_equal(b_qat.numpy(), np.rint(bias.numpy() / unit) * unit)
    assert b_qat.qparams.dtype_meta.name == "qint32"
    assert float(b_qat.qparams.scale.numpy()) == pytest.approx(unit)


@pytest.mark.parametrize("inp_params", [
    None,  # the input carries none: made by an op, not a fake quantizer (a pooling, say)
    create_qparams(QuantMode.ASYMMERTIC, "quint8", mg.tensor(0.05), mg.tensor(128.0)),
])
def test_the_bias_stays_where_megengines_rule_does_not_apply(inp_params):
    bias, w = mg.tensor([0.1234]), mg.tensor([[1.0]])
    w.qparams.update(_int8_params(0.02))
    inp = mg.tensor([[1.0]])
    if inp_params is not None:
        inp.qparams.update(inp_params)
    assert fake_quant_bias(bias, inp, w) is bias


def test_a_graph_reads_the_parameters_of_the_fake_quantizer_that_made_a_value():
    g = mg.Graph()
    x = g.input("x", (2, 3), np.float32)
    y = fake_quant_tensor(x, create_qparams(QuantMode.SYMMERTIC, "qint8", g.const(0.05)))
    qp = qparams_of(y)
    assert qp.mode is QuantMode.SYMMERTIC and qp.dtype_meta.name == "qint8"
    assert qp.scale is y.node.inputs[1]
    asym = fake_quant_tensor(x, create_qparams(QuantMode.ASYMMERTIC, "quint8", g.const(0.05),
                                               g.const(np.float32(128))))
    assert qparams_of(asym).mode is QuantMode.ASYMMERTIC
    assert qparams_of(F.relu(y)) is None


# -- QAT layers against the int8 ones -----------------------------------------------------------
class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv = M.Conv2d(3, 8, 3, padding=1)
        self.block = M.ConvBnRelu2d(8, 8, 3, padding=1)
        self.fc = M.Linear(8 * 8 * 8, 5)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.block(self.conv(self.quant(x)))
        return self.dequant(self.fc(F.flatten(x, 1)))


def _calibrated():
    mg.nn.init.manual_seed(3)
    net = Net()
    for m in (net.conv, net.fc, net.block.conv):  # biases far from multiples of the units
        m.bias.value = np.random.default_rng(1).normal(size=m.bias.shape).astype(np.float32)
    Q.quantize_qat(net.eval(), qconfig=Q.ema_fakequant_qconfig)
    Q.enable_observer(net)
    net(mg.tensor(_x(seed=5)))
    Q.disable_observer(net)
    return net


def test_a_qat_layers_bias_is_the_int8_layers():
    net = _calibrated()
    x = mg.tensor(_x(seed=6))
    q = net.quant(x)
    w_qat = net.conv.apply_quant_weight(net.conv.weight, q.graph)
    unit = float(q.qparams.scale.numpy()) * float(w_qat.qparams.scale.numpy())
    b_qat = net.conv.apply_quant_bias(net.conv.bias, q, w_qat).numpy()
    np.testing.assert_allclose(b_qat / unit, np.rint(b_qat / unit), atol=1e-3)
    assert np.abs(b_qat - net.conv.bias.numpy()).max() > 0  # it moved
    want = F.conv2d(q, w_qat, mg.tensor(b_qat), 1, 1)
    np.testing.assert_array_equal(net.conv.calc_conv_qat(q).numpy(), want.numpy())


def test_the_qat_forward_is_the_int8_forward_in_more_outputs():
    net = _calibrated()
    x = mg.tensor(_x((64, 3, 8, 8), seed=7))
    qat_out = net(x).numpy()
    traced = mg.compile_module(net, (x.numpy(),))(x.numpy())  # a graph: bias read structurally
    np.testing.assert_array_equal(np.asarray(traced), qat_out)
    Q.quantize(net)
    steps = np.rint((net(x).numpy() - qat_out) / get_scale(net.fc.output_dtype))
    assert np.abs(steps).max() <= 1
    # 3 of these 320 outputs differed by a step with the float bias; none with the qint32 one
    assert (steps == 0).mean() > 0.995
