"""The int8 ops on weights packed once (ops/quantized_pack.py, planner/passes/prepack_quantized.py):
the pass packs a constant weight itself (bitwise the kernel's bytes), leaves a param's to the
prologue (repacked after a write), keeps depthwise convolutions as they are, and every plan
gives the reference's integers; the packed ops refuse an input their pack was not made for,
and round-trip through the model file."""
import io

import numpy as np
import pytest
from quant_reference import quantized_conv2d, quantized_linear

import mgegraph as mg
from mgegraph._kernels import qgemm
from mgegraph.ir.errors import OpError
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops import quantized as Q
from mgegraph.ops.builder import apply
from mgegraph.ops.quantized_pack import pack_weight_array, packed_size
from mgegraph.weight_writes import written

RNG = np.random.default_rng(4)
XP = per_tensor(0.05, 3)
CONV = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
        "out_dtype": "uint8", "out_scale": 0.3, "out_zero_point": 100, "relu": True}


def _weights(shape, dtype="int8"):
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    w = RNG.integers(lo, hi, shape).astype(dtype)
    mid = 0 if dtype == "int8" else 128
    wp = QuantParams(tuple(RNG.uniform(0.01, 0.02, shape[0])),
                     tuple(int(z) for z in mid + RNG.integers(-2, 3, shape[0])), 0)
    return w, wp


def ops_of(plan):
    return [i.op for i in plan.instructions]


@pytest.mark.parametrize("w_dtype, x_dtype, groups, with_bias", [
    ("int8", "int8", 1, True), ("uint8", "uint8", 3, False), ("uint8", "int8", 1, True),
    ("int8", "uint8", 3, True)])
def test_the_numpy_pack_is_the_kernels_bytes(w_dtype, x_dtype, groups, with_bias):
    w, wp = _weights((21, 5, 3, 3), w_dtype)
    bias = RNG.integers(-(2 ** 31), 2 ** 31 - 1, 21).astype(np.int32) if with_bias else None
    packed = pack_weight_array(w, wp.zero_points, bias, groups, 7, x_dtype)
    kernels = qgemm.packed_weights(w, wp.zero_points, bias, groups, x_dtype == "int8", 7)
    assert packed.nbytes == kernels.nbytes == packed_size(21, 45, groups)
    np.testing.assert_array_equal(packed.view(np.uint8), kernels)


def _conv_graph(x, w, wp, bias, weight="const", **attrs):
    g = mg.Graph()
    wv = g.param("w", w, share=True, quant=wp) if weight == "param" else g.const(w, quant=wp)
    return Q.quantized_conv2d(g.input("x", x.shape, x.dtype.name, quant=XP), wv,
                                 g.const(bias), **{**CONV, **attrs})


def test_a_const_weight_is_packed_by_the_pass():
    x = RNG.integers(-128, 128, (2, 16, 9, 9)).astype(np.int8)
    w, wp = _weights((24, 16, 3, 3))
    bias = RNG.integers(-500, 500, 24).astype(np.int32)
    y = _conv_graph(x, w, wp, bias)
    plan = mg.compile([y])
    assert ops_of(plan) == ["quantized_conv2d_packed"] and plan.prologue is None
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  quantized_conv2d(x, XP, w, wp, bias, **CONV))


def test_a_param_weight_is_packed_by_the_prologue_and_repacked_after_a_write():
    x = RNG.integers(-128, 128, (1, 16, 7, 7)).astype(np.int8)
    w, wp = _weights((24, 16, 3, 3))
    bias = RNG.integers(-500, 500, 24).astype(np.int32)
    y = _conv_graph(x, w, wp, bias, weight="param")
    plan = mg.compile([y])
    assert ops_of(plan) == ["quantized_conv2d_packed"]
    assert "quantized_pack_weight" in ops_of(plan.prologue)
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  quantized_conv2d(x, XP, w, wp, bias, **CONV))
    before = w.copy()
    w[...] = (-w.astype(np.int16)).clip(-128, 127)  # the shared param's array, written
    written(w)
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  quantized_conv2d(x, XP, w, wp, bias, **CONV))
    assert not np.array_equal(w, before)


def test_a_frozen_model_holds_its_int8_weights_packed():
    # freezing keeps a quantized param's quantization on the const it becomes
    x = RNG.integers(-128, 128, (1, 16, 7, 7)).astype(np.int8)
    w, wp = _weights((24, 16, 3, 3))
    bias = RNG.integers(-500, 500, 24).astype(np.int32)
    plan = mg.compile([_conv_graph(x, w, wp, bias, weight="param")], freeze=True)
    assert ops_of(plan) == ["quantized_conv2d_packed"] and plan.prologue is None
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  quantized_conv2d(x, XP, w, wp, bias, **CONV))


def test_a_depthwise_convolution_keeps_its_op():
    x = RNG.integers(-128, 128, (1, 6, 8, 8)).astype(np.int8)
    w, wp = _weights((6, 1, 3, 3))
    bias = RNG.integers(-500, 500, 6).astype(np.int32)
    y = _conv_graph(x, w, wp, bias, groups=6)
    plan = mg.compile([y])
    assert ops_of(plan) == ["quantized_conv2d"]
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  quantized_conv2d(x, XP, w, wp, bias, **{**CONV, "groups": 6}))


def test_a_linear_layer_is_packed_and_keeps_its_leading_axes():
    x = RNG.integers(0, 256, (2, 5, 33)).astype(np.uint8)
    xp = per_tensor(0.02, 130)
    w, wp = _weights((19, 33), "uint8")
    attrs = {"out_dtype": "int8", "out_scale": 0.5, "out_zero_point": -3, "relu": False}
    g = mg.Graph()
    y = Q.quantized_linear(g.input("x", x.shape, "uint8", quant=xp), g.const(w, quant=wp),
                           **attrs)
    plan = mg.compile([y])
    assert ops_of(plan) == ["quantized_linear_packed"]
    np.testing.assert_array_equal(plan.run({"x": x})[0],
                                  quantized_linear(x, xp, w, wp, None, **attrs))


def _packed_conv(g, x_type_zero=3, packed_len=None):
    _, wp = _weights((8, 4, 3, 3))
    size = packed_size(8, 36) // 4 if packed_len is None else packed_len
    packed = g.const(np.zeros(size, np.int32))
    x = g.input("x", (1, 4, 5, 5), "int8", quant=per_tensor(0.05, x_type_zero))
    return apply("quantized_conv2d_packed", (x, packed), **CONV, weight_shape=(8, 4, 3, 3),
                 weight_scales=wp.scales, x_zero_point=3, x_dtype="int8")


def test_the_packed_op_refuses_an_input_its_pack_was_not_made_for():
    with pytest.raises(OpError, match="packed for a int8 input of zero point 3"):
        _packed_conv(mg.Graph(), x_type_zero=4)
    with pytest.raises(OpError, match=r"are int32 \(\d+,\)"):
        _packed_conv(mg.Graph(), packed_len=7)


def test_the_packed_ops_round_trip_through_the_model_file():
    x = RNG.integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    w, wp = _weights((8, 4, 3, 3))
    g = mg.Graph()
    xv = g.input("x", x.shape, "int8", quant=XP)
    packed = apply("quantized_pack_weight", (g.param("w", w, quant=wp),), x_zero_point=3,
                   x_dtype="int8")
    y = apply("quantized_conv2d_packed", (xv, packed), **CONV, weight_shape=(8, 4, 3, 3),
              weight_scales=wp.scales, x_zero_point=3, x_dtype="int8")
    plan = mg.compile([y], optimize=0)
    f = io.BytesIO()
    mg.save(plan, f)
    loaded = mg.load(io.BytesIO(f.getvalue()))
    want = quantized_conv2d(x, XP, w, wp, None, **CONV)
    np.testing.assert_array_equal(plan.run({"x": x})[0], want)
    np.testing.assert_array_equal(loaded.run({"x": x})[0], want)
