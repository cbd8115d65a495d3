"""The int8 compute ops' shape and type rules (mgegraph/ops/quantized.py), and the NumPy
reference of their integers (tests/quant_reference.py) against the float computation."""
import numpy as np
import pytest
from quant_reference import quantized_add, quantized_conv2d, quantized_linear

import mgegraph as mg
from mgegraph.ir.errors import OpError
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops import quantized as Q
from mgegraph.ops.quantize import quantize


def _graph_inputs(x_shape=(2, 3, 8, 8), w_shape=(4, 3, 3, 3), w_scales=(0.01,)):
    g = mg.Graph()
    x = quantize(g.input("x", x_shape, "float32"), 0.1, 3, "uint8")
    axis = 0 if len(w_scales) > 1 else None
    w = quantize(g.const(np.ones(w_shape, np.float32)), w_scales, 0, "int8", axis=axis)
    return g, x, w


def test_conv_gives_the_requantised_type():
    _, x, w = _graph_inputs()
    y = Q.quantized_conv2d(x, w, padding=1, stride=2, out_scale=0.2, out_zero_point=-3)
    assert str(y.type) == "qs8(0.2,-3)[2,4,4,4]"


def test_conv_int32_result_carries_the_accumulator_scales():
    _, x, w = _graph_inputs(w_scales=(0.01, 0.02, 0.03, 0.04))
    y = Q.quantized_conv2d(x, w, out_dtype="int32")
    assert y.type.quant == QuantParams((0.001, 0.002, 0.003, 0.004), (0,) * 4, 1)
    assert y.shape == (2, 4, 6, 6)


@pytest.mark.parametrize("bad, message", [
    ({"out_scale": None}, "needs out_scale"),
    ({"out_dtype": "int32", "out_scale": 0.5}, "takes no out_scale"),
    ({"out_dtype": "float32", "out_scale": 0.5}, "out_dtype must be"),
    ({"out_scale": 0.5, "out_zero_point": 300}, "outside int8's range"),
])
def test_conv_refuses_bad_requantisation(bad, message):
    _, x, w = _graph_inputs()
    with pytest.raises(OpError, match=message):
        Q.quantized_conv2d(x, w, **bad)


def test_conv_refuses_float_and_per_channel_inputs():
    g, _x, w = _graph_inputs()
    with pytest.raises(OpError, match="input must be a quantized"):
        Q.quantized_conv2d(g.input("f", (2, 3, 8, 8), "float32"), w, out_scale=1.0)
    xc = quantize(g.input("c", (2, 3, 8, 8), "float32"), [0.1] * 3, 0, axis=1)
    with pytest.raises(OpError, match="per tensor"):
        Q.quantized_conv2d(xc, w, out_scale=1.0)


def test_bias_must_be_int32_in_accumulator_units():
    g, x, w = _graph_inputs()
    good = quantize(g.const(np.zeros(4, np.float32)), 0.001, 0, "int32")
    assert Q.quantized_conv2d(x, w, good, out_scale=1.0).shape == (2, 4, 6, 6)
    bad = quantize(g.const(np.zeros(4, np.float32)), 0.5, 0, "int32")
    with pytest.raises(OpError, match="scales input scale x weight scale"):
        Q.quantized_conv2d(x, w, bad, out_scale=1.0)
    with pytest.raises(OpError, match="1-D int32"):
        Q.quantized_conv2d(x, w, g.const(np.zeros(4, np.float32)), out_scale=1.0)


def test_linear_and_add_rules():
    g = mg.Graph()
    x = quantize(g.input("x", (5, 7), "float32"), 0.1)
    w = quantize(g.const(np.ones((6, 7), np.float32)), 0.5)
    assert str(Q.quantized_linear(x, w, out_scale=1.0).type) == "qs8(1)[5,6]"
    with pytest.raises(OpError, match="7 features"):
        Q.quantized_linear(x, quantize(g.const(np.ones((6, 8), np.float32)), 0.5),
                           out_scale=1.0)
    b = quantize(g.input("b", (1, 7), "float32"), 0.2, 5, "uint8")
    y = Q.quantized_add(x, b, out_scale=0.3, out_dtype="uint8", out_zero_point=128)
    assert str(y.type) == "qu8(0.3,128)[5,7]"
    with pytest.raises(OpError, match="int8 or uint8"):
        Q.quantized_add(x, b, out_dtype="int32")


def _fake_quant_conv(x, xp, w, wp, bias, attrs):
    """dequantize, the float convolution in float64, quantize: the value the integers stand
    for, before the requantisation's float32 rounding."""
    import torch  # lazy: optional test dependency
    xf = (x.astype(np.float64) - xp.zero_point) * xp.scale
    wf = (w.astype(np.float64) - np.asarray(wp.zero_points)[:, None, None, None]) * np.asarray(
        wp.scales)[:, None, None, None]
    bf = bias * xp.scale * np.asarray(wp.scales)
    y = torch.nn.functional.conv2d(torch.from_numpy(xf), torch.from_numpy(wf),
                                   torch.from_numpy(bf), attrs["stride"], attrs["padding"],
                                   attrs["dilation"], attrs["groups"]).numpy()
    q = np.rint(y / attrs["out_scale"]) + attrs["out_zero_point"]
    return np.clip(q, -128, 127)


def test_reference_conv_matches_the_float_computation_within_one_step():
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (2, 6, 9, 7)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 3, 3, 2)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 4).astype(np.int32)
    xp = per_tensor(0.02, 128)
    wp = QuantParams((0.003, 0.004, 0.005, 0.006), (0, 1, -2, 3), 0)
    attrs = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2, "out_dtype": "int8",
                 "out_scale": 0.05, "out_zero_point": -4, "relu": False}
    got = quantized_conv2d(x, xp, w, wp, bias, **attrs)
    want = _fake_quant_conv(x, xp, w, wp, bias, attrs)
    assert got.dtype == np.int8 and got.shape == want.shape
    assert np.abs(got.astype(int) - want).max() <= 1
    assert (got == want).mean() > 0.99


def test_reference_linear_and_add():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (3, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 5)).astype(np.int8)
    xp, wp = per_tensor(0.1, 2), per_tensor(0.01)
    y = quantized_linear(x, xp, w, wp, None, out_dtype="int32", out_scale=None,
                         out_zero_point=0, relu=False)
    np.testing.assert_array_equal(y, (x.astype(int) - 2) @ w.T.astype(int))
    r = quantized_linear(x, xp, w, wp, None, out_dtype="uint8", out_scale=0.05,
                         out_zero_point=100, relu=True)
    want = np.clip(np.rint(y * (0.1 * 0.01 / 0.05)) + 100, 100, 255)
    assert np.abs(r.astype(int) - want).max() <= 1
    s = quantized_add(x, xp, w[:1], wp, out_dtype="int8", out_scale=0.1, out_zero_point=0,
                      relu=False)
    real = (x.astype(float) - 2) * 0.1 + w[:1] * 0.01
    assert np.abs(s - np.clip(np.rint(real / 0.1), -128, 127)).max() <= 1


def test_a_window_that_could_overflow_int32_is_refused():
    g = mg.Graph()
    k = Q.MAX_WINDOW
    x = quantize(g.input("x", (2, k + 1), "float32"), 0.1)
    w = quantize(g.const(np.ones((3, k + 1), np.float32)), 0.5)
    with pytest.raises(OpError, match="can overflow past 33025"):
        Q.quantized_linear(x, w, out_scale=1.0)
    xc = quantize(g.input("c", (1, 3670, 4, 4), "float32"), 0.1)
    wc = quantize(g.const(np.ones((2, 3670, 3, 3), np.float32)), 0.5)  # 33030 per output
    with pytest.raises(OpError, match="sums 33030 products"):
        Q.quantized_conv2d(xc, wc, out_scale=1.0)
    x_ok = quantize(g.input("ok", (2, k), "float32"), 0.1)
    assert Q.quantized_linear(x_ok, quantize(g.const(np.ones((3, k), np.float32)), 0.5),
                              out_dtype="int32").shape == (2, 3)
