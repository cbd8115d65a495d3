"""MegEngine's quantisable modules beyond the convolution and linear layer: the transposed
convolutions (with relu, with a batch norm), LinearRelu, LinearBn1d/LinearBnRelu1d,
BatchMatMulActivation, and the convolutions' padding_mode. Each float module against an explicit
computation (NumPy or PyTorch), its QAT form's batch-norm fold against the float conv + bn (eval
and training), quantize_qat / quantize converting it, the int8 forward within one output step
of the QAT forward, and the model file keeping it."""
import io

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.quantization as Q
from mgegraph import module as M
from mgegraph.dtype import get_scale
from mgegraph.ir.errors import GraphError
from mgegraph.module import qat as QAT
from mgegraph.module import quantized as Quantized


@pytest.fixture(autouse=True)
def _seeded_weights():
    mg.random.seed(0)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _randomise_bn(bn, seed=1):
    """Running statistics and affine parameters far from the defaults, so a fold that ignored
    any of them fails."""
    rng = _rng(seed)
    shape = bn.running_mean.value.shape
    bn.running_mean.value = rng.normal(size=shape).astype(np.float32)
    bn.running_var.value = rng.uniform(0.5, 2.0, shape).astype(np.float32)
    bn.weight.value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    bn.bias.value = rng.normal(size=shape).astype(np.float32)


# float module -> input shape
CASES = {
    "conv_transpose": (lambda: M.ConvTranspose2d(4, 6, 3, stride=2, padding=1), (2, 4, 5, 5)),
    "conv_transpose_relu": (lambda: M.ConvTransposeRelu2d(4, 6, 2, stride=2), (2, 4, 5, 5)),
    "conv_transpose_bn": (lambda: M.ConvTransposeBn2d(4, 6, 3, stride=2, padding=1,
                                                      output_padding=1, groups=2), (2, 4, 5, 5)),
    "conv_transpose_bn_relu": (lambda: M.ConvTransposeBnRelu2d(4, 6, 2, stride=2),
                               (2, 4, 5, 5)),
    "linear_relu": (lambda: M.LinearRelu(12, 7), (8, 12)),
    "linear_bn": (lambda: M.LinearBn1d(12, 7), (8, 12)),
    "linear_bn_relu": (lambda: M.LinearBnRelu1d(12, 7), (8, 12)),
    "bmm": (lambda: M.BatchMatMulActivation(3, 5, 4), (3, 5, 6)),
    "bmm_relu": (lambda: M.BatchMatMulActivation(3, 5, 4, nonlinear_mode="RELU"), (3, 5, 6)),
    "conv_reflect": (lambda: M.Conv2d(3, 5, 3, padding=1, padding_mode="reflect"),
                     (2, 3, 6, 6)),
    "conv_bn_relu_replicate": (lambda: M.ConvBnRelu2d(3, 5, 3, padding=(2, 1),
                                                      padding_mode="replicate"), (2, 3, 6, 6)),
}
QAT_TYPES = {"conv_transpose": QAT.ConvTranspose2d, "conv_transpose_relu": QAT.ConvTransposeRelu2d,
             "conv_transpose_bn": QAT.ConvTransposeBn2d,
             "conv_transpose_bn_relu": QAT.ConvTransposeBnRelu2d, "linear_relu": QAT.LinearRelu,
             "linear_bn": QAT.LinearBn1d, "linear_bn_relu": QAT.LinearBnRelu1d,
             "bmm": QAT.BatchMatMulActivation, "bmm_relu": QAT.BatchMatMulActivation,
             "conv_reflect": QAT.Conv2d, "conv_bn_relu_replicate": QAT.ConvBnRelu2d}
INT8_TYPES = {"conv_transpose": Quantized.ConvTranspose2d,
              "conv_transpose_relu": Quantized.ConvTransposeRelu2d,
              "conv_transpose_bn": Quantized.ConvTransposeBn2d,
              "conv_transpose_bn_relu": Quantized.ConvTransposeBnRelu2d,
              "linear_relu": Quantized.LinearRelu, "linear_bn": Quantized.LinearBn1d,
              "linear_bn_relu": Quantized.LinearBnRelu1d,
              "bmm": Quantized.BatchMatMulActivation, "bmm_relu": Quantized.BatchMatMulActivation,
              "conv_reflect": Quantized.Conv2d, "conv_bn_relu_replicate": Quantized.ConvBnRelu2d}


def _float(name):
    make, shape = CASES[name]
    layer = make()
    if hasattr(layer, "bn"):
        _randomise_bn(layer.bn)
    if isinstance(layer, M.BatchMatMulActivation):
        layer.bias.value = _rng(2).normal(size=layer.bias.value.shape).astype(np.float32)
    return layer, shape


# ---- the float modules ------------------------------------------------------------------------

def _bn_eval(y, bn):
    shape = (1, -1) + (1,) * (y.ndim - 2)
    mean, var = (np.reshape(v.numpy(), shape) for v in (bn.running_mean, bn.running_var))
    gamma, beta = (np.reshape(v.numpy(), shape) for v in (bn.weight, bn.bias))
    return (y - mean) / np.sqrt(var + bn.eps) * gamma + beta


def test_float_modules_against_torch_and_numpy():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x4 = _rng(3).normal(size=(2, 4, 5, 5)).astype(np.float32)
    block, _ = _float("conv_transpose_bn")
    block.eval()
    ct = block.conv_transpose2d
    want = tf.conv_transpose2d(torch.from_numpy(x4), torch.from_numpy(ct.weight.numpy()),
                               torch.from_numpy(ct.bias.numpy()), stride=2, padding=1,
                               output_padding=1, groups=2).numpy()
    np.testing.assert_allclose(block(mg.tensor(x4)).numpy(), _bn_eval(want, block.bn),
                               rtol=1e-4, atol=1e-4)
    relu_block, _ = _float("conv_transpose_relu")
    w, b = relu_block.weight.numpy(), relu_block.bias.numpy()
    want = tf.relu(tf.conv_transpose2d(torch.from_numpy(x4), torch.from_numpy(w),
                                       torch.from_numpy(b), stride=2)).numpy()
    np.testing.assert_allclose(relu_block(mg.tensor(x4)).numpy(), want, rtol=1e-5, atol=1e-5)

    x2 = _rng(4).normal(size=(8, 12)).astype(np.float32)
    lin, _ = _float("linear_bn_relu")
    lin.eval()
    dense = x2 @ lin.linear.weight.numpy().T + lin.linear.bias.numpy()
    np.testing.assert_allclose(lin(mg.tensor(x2)).numpy(),
                               np.maximum(_bn_eval(dense, lin.bn), 0), rtol=1e-5, atol=1e-5)


def test_batch_matmul_activation_adds_its_bias_per_output_feature():
    bmm, shape = _float("bmm_relu")
    x = _rng(5).normal(size=shape).astype(np.float32)
    want = np.einsum("boi,bin->bon", bmm.weight.numpy(), x) + bmm.bias.numpy()[:, None]
    np.testing.assert_allclose(bmm(mg.tensor(x)).numpy(), np.maximum(want, 0), rtol=1e-5,
                               atol=1e-5)
    assert bmm.weight.shape == (3, 4, 5)
    with pytest.raises(GraphError, match=r"needs a \(batch, in_features, n\) input"):
        bmm(mg.tensor(np.ones((2, 5, 6), np.float32)))
    with pytest.raises(GraphError, match="nonlinear_mode"):
        M.BatchMatMulActivation(3, 5, 4, nonlinear_mode="sigmoid")


@pytest.mark.parametrize("mode, torch_mode", [("reflect", "reflect"), ("replicate", "replicate")])
def test_conv_padding_mode_is_torchs(mode, torch_mode):
    torch = pytest.importorskip("torch")
    conv = M.Conv2d(3, 4, 3, stride=2, padding=(1, 2), padding_mode=mode)
    x = _rng(6).normal(size=(2, 3, 7, 8)).astype(np.float32)
    ref = torch.nn.Conv2d(3, 4, 3, stride=2, padding=(1, 2), padding_mode=torch_mode)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(conv.weight.numpy()))
        ref.bias.copy_(torch.from_numpy(conv.bias.numpy()))
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(conv(mg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert f"padding_mode='{mode}'" in repr(conv)
    with pytest.raises(GraphError, match="padding_mode"):
        M.Conv2d(3, 4, 3, padding_mode="circular")


# ---- QAT: the fold against the float layer and its batch norm --------------------------------

@pytest.mark.parametrize("name", ["conv_transpose_bn", "conv_transpose_bn_relu", "linear_bn",
                                  "linear_bn_relu", "conv_bn_relu_replicate"])
def test_the_fold_is_the_float_layer_and_batch_norm(name):
    float_block, shape = _float(name)
    qat_block, _ = _float(name)
    qat_block.load_state_dict(float_block.state_dict())
    qat_block = Q.quantize_qat(qat_block)
    assert type(qat_block) is QAT_TYPES[name]
    Q.disable_fake_quant(qat_block)
    x = mg.tensor(_rng(7).normal(size=shape).astype(np.float32))
    # eval: the folded weight and bias alone
    float_block.eval(), qat_block.eval()
    np.testing.assert_allclose(qat_block(x).numpy(), float_block(x).numpy(), rtol=1e-4,
                               atol=1e-4)
    # training: the batch's statistics, the running ones updated alike
    float_block.train(), qat_block.train()
    np.testing.assert_allclose(qat_block(x).numpy(), float_block(x).numpy(), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(qat_block.bn.running_mean.numpy(),
                               float_block.bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)


def test_the_grouped_transposed_fold_scales_each_output_channel():
    block, _ = _float("conv_transpose_bn")
    qat = Q.quantize_qat(block)
    _, w_fold, b_fold = qat.fold(mg.tensor(np.zeros(1, np.float32)).graph)
    bn, ct = block.bn, block.conv_transpose2d
    factor = (bn.weight.numpy() / np.sqrt(bn.running_var.numpy() + bn.eps)).reshape(-1)
    w = ct.weight.numpy()  # (in 4, out/groups 3, kh, kw), groups 2: output channel g * 3 + j
    want = w.reshape(2, 2, 3, 3, 3) * factor.reshape(2, 1, 3, 1, 1)
    np.testing.assert_allclose(w_fold.numpy(), want.reshape(w.shape), rtol=1e-6)
    want_b = bn.bias.numpy().reshape(-1) + (ct.bias.numpy() - bn.running_mean.numpy().reshape(-1)
                                            ) * factor
    np.testing.assert_allclose(b_fold.numpy(), want_b, rtol=1e-5, atol=1e-6)


# ---- QAT -> int8 ------------------------------------------------------------------------------

class Wrapped(M.Module):
    def __init__(self, layer):
        super().__init__()
        self.quant, self.layer, self.dequant = M.QuantStub(), layer, M.DequantStub()

    def forward(self, x):
        return self.dequant(self.layer(self.quant(x)))


def _calibrated(name):
    layer, shape = _float(name)
    net = Q.quantize_qat(Wrapped(layer), qconfig=Q.min_max_fakequant_qconfig)
    assert type(net.layer) is QAT_TYPES[name]
    for seed in range(3):  # training mode: the observers and the batch norms see the data
        net(mg.tensor(_rng(10 + seed).normal(size=shape).astype(np.float32)))
    return net.eval(), shape


@pytest.mark.parametrize("name", sorted(CASES))
def test_int8_forward_is_the_qat_forward_within_a_step(name):
    net, shape = _calibrated(name)
    x = _rng(20).normal(size=shape).astype(np.float32)
    qat_out = net(mg.tensor(x)).numpy()
    Q.quantize(net)
    assert type(net.layer) is INT8_TYPES[name]
    assert net.layer.weight.dtype == np.int8
    int8_out = net(mg.tensor(x)).numpy()
    steps = np.rint((int8_out - qat_out) / get_scale(net.layer.output_dtype))
    assert np.abs(steps).max() <= 1
    assert (steps == 0).mean() > 0.95
    # one compiled plan of the int8 model: the eager numbers
    plan = mg.compile_module(net, (x,))
    np.testing.assert_array_equal(np.asarray(plan(x)), int8_out)


@pytest.mark.parametrize("name", ["conv_transpose_bn_relu", "linear_bn", "bmm_relu",
                                  "conv_bn_relu_replicate"])
def test_the_model_file_keeps_the_int8_layers(name):
    net, shape = _calibrated(name)
    Q.quantize(net)
    x = _rng(21).normal(size=shape).astype(np.float32)
    predict = mg.compile_module(net, (x,))
    f = io.BytesIO()
    mg.save(predict, f)
    loaded = mg.load(io.BytesIO(f.getvalue()))
    assert loaded(x).tobytes() == np.asarray(predict(x)).tobytes()
    # and the module itself, as mg.save writes objects (its output dtype a quantized one)
    f = io.BytesIO()
    mg.save(net, f)
    again = mg.load(io.BytesIO(f.getvalue()))
    assert type(again.layer) is INT8_TYPES[name]
    assert again.layer.output_dtype == net.layer.output_dtype
    assert get_scale(again.layer.output_dtype) == get_scale(net.layer.output_dtype)
    np.testing.assert_array_equal(again(mg.tensor(x)).numpy(), net(mg.tensor(x)).numpy())
