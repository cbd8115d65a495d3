"""Quantized values in the model file: their types' scales and zero points (per tensor and per
channel) round-trip with the weights' integers, and a file whose quantization is malformed is
refused, naming what is wrong, before anything runs."""
import io

import numpy as np
import pytest
from test_model_file import members, refused, with_json

import mgegraph as mg
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_add, quantized_conv2d, quantized_linear

WEIGHTS = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)


def _plan():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4))
    w = g.param("w", WEIGHTS, quant=per_channel([0.1, 0.02, 0.5], [0, 1, -2], 0))
    q = quantize(x, 0.05, 120, "uint8")
    return mg.compile([dequantize(q) * dequantize(w), q])


@pytest.fixture(scope="module")
def saved() -> bytes:
    f = io.BytesIO()
    mg.save(_plan(), f)
    return f.getvalue()


def test_a_quantized_model_round_trips(saved):
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    loaded = mg.load(io.BytesIO(saved))
    for got, want in zip(loaded.run({"x": x}), _plan().run({"x": x})):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert [str(t) for t in loaded.output_types] == ["f32[2,3,4]", "qu8(0.05,120)[2,3,4]"]


def test_int8_weights_are_stored_as_int8(saved):
    stored = [np.load(io.BytesIO(data)) for name, data in members(saved).items()
              if name.endswith(".npy")]
    assert any(a.dtype == np.int8 and np.array_equal(a, WEIGHTS) for a in stored)


def _param_type(d):
    return next(n for n in d["graph"]["nodes"] if n["op"] == "param")["outputs"][0]


@pytest.mark.parametrize("change, match", [
    (lambda q: q.update(scales=[0.1, -0.02, 0.5]), "scale must be positive"),
    (lambda q: q.update(scales=[0.1, 0.02]), "lists of 3 scales"),
    (lambda q: q.update(zero_points=[0, 1, 200]), "zero point 200 is outside int8"),
    (lambda q: q.update(zero_points=[0, 1.5, 2]), "zero points ints"),
    (lambda q: q.update(scales=[0.1, True, 0.5]), "scales must be numbers"),
    (lambda q: q.update(axis=2), "axis 2 is not an axis"),
    (lambda q: q.update(axis=None), "lists of 1 scales"),
    (lambda q: q.update(extra=1), "unexpected keys"),
])
def test_a_malformed_quantization_is_refused(tmp_path, saved, change, match):
    refused(tmp_path, with_json(saved, lambda d: change(_param_type(d)["quant"])), match)


def test_a_quantization_on_a_float_value_is_refused(tmp_path, saved):
    def float_param(d):
        _param_type(d)["dtype"] = "float32"
    refused(tmp_path, with_json(saved, float_param), "cannot hold quantized values")


def test_the_int8_compute_ops_round_trip():
    rng = np.random.default_rng(3)
    g = mg.Graph()
    x = g.input("x", (1, 4, 6, 6), "uint8", quant=per_tensor(0.04, 128))
    w = g.param("w", rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8),
                quant=per_channel(rng.uniform(0.01, 0.02, 8), None, 0))
    bias = g.param("b", rng.integers(-900, 900, 8).astype(np.int32))
    y = quantized_conv2d(x, w, bias, padding=1, out_scale=0.1, out_zero_point=3, relu=True)
    z = quantized_add(y, y, out_scale=0.2)
    fc = g.param("fc", rng.integers(-128, 128, (5, 288)).astype(np.int8),
                 quant=per_tensor(0.01))
    out = quantized_linear(z.reshape(1, 288), fc, out_dtype="int32")
    plan = mg.compile([out, z])
    f = io.BytesIO()
    mg.save(plan, f)
    xv = rng.integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
    loaded = mg.load(io.BytesIO(f.getvalue()))
    for got, want in zip(loaded.run({"x": xv}), plan.run({"x": xv})):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert [str(t) for t in loaded.output_types] == ["qs32(0.002)[1,5]", "qs8(0.2)[1,8,6,6]"]
