"""The int8 transposed convolution and batched matmul in the model file: a saved plan loads
and runs bitwise, their nodes carry op version 1 and their attributes, the int8 weights stay
int8, and a node whose attributes break the op's rule is refused by name on load."""
import io
import json

import numpy as np
import pytest
from test_model_file import first, members, refused, with_json

import mgegraph as mg
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_batch_matmul, quantized_conv_transpose2d

RNG = np.random.default_rng(5)
W = RNG.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
A = RNG.integers(0, 256, (1, 5, 6)).astype(np.uint8)


def _plan():
    g = mg.Graph()
    xq = quantize(g.input("x", (2, 4, 3, 2)), 0.05, 7, "int8")
    y = quantized_conv_transpose2d(xq, g.param("w", W, quant=per_tensor(0.01, -1)),
                                   g.const(np.arange(-3, 3, dtype=np.int32) * 100), stride=2,
                                   padding=1, output_padding=1, groups=2, out_scale=0.2,
                                   out_zero_point=3, relu=True)
    # (2, 6, 6, 4) -> (2, 6, 24): the batched matmul of a shared a, per-row parameters
    b = quantize(dequantize(y).reshape((2, 6, 24)), 0.1, 100, "uint8")
    a = g.const(A, quant=per_channel(RNG.uniform(0.005, 0.02, 5), [120, 128, 130, 127, 126], 1))
    z = quantized_batch_matmul(a, b, out_dtype="int32")
    return mg.compile([y, z])


@pytest.fixture(scope="module")
def saved() -> bytes:
    f = io.BytesIO()
    mg.save(_plan(), f)
    return f.getvalue()


def test_the_int8_transposed_and_batched_ops_round_trip(saved):
    x = RNG.standard_normal((2, 4, 3, 2)).astype(np.float32)
    loaded = mg.load(io.BytesIO(saved))
    for got, want in zip(loaded.run({"x": x}), _plan().run({"x": x})):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert str(loaded.output_types[0]) == "qs8(0.2,3)[2,6,6,4]"
    assert loaded.output_types[1].shape == (2, 5, 24)
    assert loaded.output_types[1].quant.axis == 1  # the accumulator's per-row scales


def test_their_nodes_and_weights_as_stored(saved):
    d = json.loads(members(saved)["model.json"])
    t = first(d, "quantized_conv_transpose2d")
    assert t["version"] == 1 and t["attrs"]["output_padding"] == {"tuple": [1, 1]}
    assert first(d, "quantized_batch_matmul")["version"] == 1
    stored = [np.load(io.BytesIO(data)) for name, data in members(saved).items()
              if name.endswith(".npy")]
    assert any(s.dtype == np.int8 and np.array_equal(s, W) for s in stored)
    assert any(s.dtype == np.uint8 and np.array_equal(s, A) for s in stored)


def test_a_node_breaking_the_rule_is_refused(tmp_path, saved):
    def bad(d):
        first(d, "quantized_conv_transpose2d")["attrs"]["output_padding"] = {"tuple": [2, 2]}
    refused(tmp_path, with_json(saved, bad), "output_padding")
