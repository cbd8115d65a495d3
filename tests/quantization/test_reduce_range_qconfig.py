"""7-bit weights (dtype metas qint7 and qint7_narrow; ema_fakequant_reduce_range_qconfig and
calibration_reduce_range_qconfig): calibration and QAT on the digits CNN of
benchmarks/qat_digits.py give int8 models whose weights the int8 GEMM's packing proves in
range for AVX2's vpmaddubsw tile, at an accuracy beside the 8-bit weights'."""
import copy
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.quantization as Q
from mgegraph._kernels import qgemm
from mgegraph.demo import load_digits_split
from mgegraph.dtype import create_quantized_dtype, get_scale, quant_dtype_meta

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "qat_digits.py"


def _bench():
    spec = importlib.util.spec_from_file_location("qat_digits_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_7bit_metas_store_as_int8_and_read_back_as_qint8():
    for name, lo, hi in (("qint7", -64, 63), ("qint7_narrow", -63, 63)):
        meta = quant_dtype_meta(name)
        assert (meta.qmin, meta.qmax, meta.np_dtype_str) == (lo, hi, "int8")
        stored = create_quantized_dtype(meta, 0.25, None)
        assert stored == np.int8 and get_scale(stored) == 0.25
        assert stored.metadata["mgb_dtype"]["name"] == "QuantizedS8"
    qc = Q.ema_fakequant_reduce_range_qconfig
    assert qc.weight_fake_quant().dtype is quant_dtype_meta("qint7_narrow")
    assert qc.act_fake_quant().dtype is quant_dtype_meta("qint8")
    assert Q.calibration_reduce_range_qconfig.weight_observer().dtype.qmax == 63


def _weights(net):
    """each quantized layer's int8 weight as (out, k)"""
    out = []
    for layer in (net.block1, net.block2, net.fc):
        w = np.asarray(layer.weight)
        out.append(w.reshape(w.shape[0], -1))
    return out


def _proof(w) -> bool:
    packed = qgemm.packed_weights(w, np.zeros(w.shape[0], np.int32), None)
    return qgemm.packed_pairs_fit(packed)


@pytest.fixture(scope="module")
def trained():
    bench = _bench()
    mg.nn.init.manual_seed(0)
    x_train, y_train, x_test, y_test = load_digits_split()
    x_train, x_test = x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8)
    net = bench.DigitsCNN()
    bench._train(net, (x_train, y_train), 3, 3e-3)
    return bench, net, x_train, x_test, y_test


def test_calibration_to_7bit_weights_takes_the_proven_tile(trained):
    bench, net, x_train, x_test, y_test = trained
    accuracy, weights = {}, {}
    for name, qconfig in (("8-bit", Q.calibration_qconfig),
                          ("7-bit", Q.calibration_reduce_range_qconfig)):
        ptq = Q.quantize_qat(copy.deepcopy(net).eval(), qconfig=qconfig)
        Q.enable_observer(ptq)
        ptq(mg.tensor(x_train[:256]))
        Q.quantize(ptq)
        accuracy[name] = float((bench._predict(ptq, x_test).argmax(1) == y_test).mean())
        weights[name] = _weights(ptq)
    float_accuracy = float((bench._predict(net, x_test).argmax(1) == y_test).mean())
    assert float_accuracy > 0.95
    assert accuracy["7-bit"] >= accuracy["8-bit"] - 0.02, accuracy
    assert accuracy["7-bit"] >= float_accuracy - 0.03, (accuracy, float_accuracy)
    for w in weights["7-bit"]:
        assert w.dtype == np.int8 and w.min() >= -63 and w.max() <= 63
        assert np.abs(w).max() == 63  # the range is used, not just met
        assert _proof(w)
    assert not all(_proof(w) for w in weights["8-bit"])  # 8-bit weights keep the wide tile


def test_qat_to_7bit_weights_quantizes_to_its_fake_quant_forward(trained):
    bench, net, x_train, x_test, y_test = trained
    qat = Q.quantize_qat(copy.deepcopy(net).train(), qconfig=Q.ema_fakequant_reduce_range_qconfig)
    for start in range(0, 512, 128):  # the observers see a few batches, as in training
        qat(mg.tensor(x_train[start:start + 128]))
    qat_logits = bench._predict(qat, x_test)
    Q.quantize(qat)
    int8_logits = bench._predict(qat, x_test)
    assert (int8_logits.argmax(1) == qat_logits.argmax(1)).mean() > 0.97
    assert (int8_logits.argmax(1) == y_test).mean() > 0.9
    assert all(_proof(w) for w in _weights(qat))
