"""The C runtime's int8 kernels on weights proven in range for AVX2's vpmaddubsw tile (qgemm.h's
qg_pairs_fit, the same header as the Python kernels): 7-bit weights packed by the plan's
prologue (the C runtime's pack kernel) and per call, bitwise the Python executor's, in the
widest build (1 and 2 threads) and the portable one."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.quantization as Q
from mgegraph._kernels import qgemm
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_conv2d, quantized_linear

from .cbuild import cc
from .test_export_int8 import assert_bitwise, exported, int8_digits


def digits_7bit():
    """the digits CNN calibrated with 7-bit weights (calibration_reduce_range_qconfig)"""
    return int8_digits(qconfig=Q.calibration_reduce_range_qconfig, seed=31)


def ops_7bit(optimize=None):
    """convolutions (int8 and uint8 inputs, groups, a weight zero point) and a linear layer on
    param weights within [-64, 63], some pairs at the bounds: packed by the prologue, or per
    call (optimize=0)"""
    rng = np.random.default_rng(32)
    g = mg.Graph()
    x = g.input("x", (2, 6, 9, 7), "float32")
    xq = quantize(x, 0.03, 120, "uint8")

    def weight(name, shape, quant):
        w = rng.integers(-64, 64, shape).astype(np.int8)
        w.reshape(shape[0], -1)[::2, :2] = (127, 1)
        return g.param(name, w, quant=quant)

    w = weight("w", (20, 6, 3, 3), per_channel(rng.uniform(0.005, 0.02, 20), None, 0))
    y = quantized_conv2d(xq, w, g.param("b", rng.integers(-900, 900, 20).astype(np.int32)),
                         padding=1, out_scale=0.1, out_zero_point=-3, out_dtype="int8",
                         relu=True)
    gw = weight("gw", (10, 10, 3, 3), per_tensor(0.02, 3))
    y2 = quantized_conv2d(y, gw, None, groups=2, padding=1, out_dtype="int32")
    fc = weight("fc", (5, 20 * 9 * 7), per_channel(rng.uniform(0.01, 0.02, 5), None, 0))
    logits = quantized_linear(y.reshape(2, 20 * 9 * 7), fc, None, out_dtype="int32")
    options = {} if optimize is None else {"optimize": optimize}
    feeds = {"x": rng.standard_normal((2, 6, 9, 7), dtype=np.float32) * 2}
    return mg.compile([dequantize(y2), dequantize(logits)], **options), feeds


MODELS = {"digits": digits_7bit, "ops": ops_7bit, "ops-unpacked": lambda: ops_7bit(optimize=0)}


def test_the_models_weights_carry_the_proof():
    for make in MODELS.values():
        plan, _ = make()
        weights = [v for v in plan.values.values()
                   if isinstance(v, np.ndarray) and v.dtype == np.int8 and v.ndim >= 2]
        assert weights  # (the digits' other weights are held in another form)
        for w in weights:
            packed = qgemm.packed_weights(w, np.zeros(w.shape[0], np.int32), None)
            assert qgemm.packed_pairs_fit(packed)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("model", MODELS)
def test_7bit_int8_plans_are_bitwise_the_python_executors(tmp_path, model, threads):
    cc()
    plan, feeds = MODELS[model]()
    assert_bitwise(exported(tmp_path, plan), plan, feeds, options=("--threads", threads))


@pytest.mark.parametrize("model", MODELS)
def test_the_portable_build_gives_the_same_integers(tmp_path, model):
    cc()
    plan, feeds = MODELS[model]()
    assert_bitwise(exported(tmp_path, plan, cflags="-O2 -DQG_PORTABLE_ONLY"), plan, feeds)
