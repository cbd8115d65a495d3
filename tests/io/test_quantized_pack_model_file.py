"""Packed int8 weights in the model file: version 2 of quantized_pack_weight and the packed ops
(the layout every int8 variant reads, AMX tiles included); a version 1 node, whose const may
hold bytes of the older layout, is refused rather than misread."""
import json

import numpy as np
import pytest
from quant_reference import quantized_conv2d
from test_model_file import first, members, refused, with_json

import mgegraph as mg
from mgegraph.ir.quant import QuantParams
from mgegraph.ops.builder import apply
from mgegraph.ops.quantized_pack import pack_weight_array

RNG = np.random.default_rng(0)
XP, WP = QuantParams((0.03,), (7,), None), QuantParams((0.01,), (0,), None)


def _plan():
    """A graph with packed weights as a const, as a hand-built or an exported graph holds them"""
    g = mg.Graph()
    w = RNG.integers(-128, 128, (20, 6, 3, 3)).astype(np.int8)
    packed = pack_weight_array(w, (0,), None, 1, x_zero_point=7, x_dtype="uint8")
    attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
             "out_dtype": "uint8", "out_scale": 0.4, "out_zero_point": 3, "relu": True}
    y = apply("quantized_conv2d_packed", (g.input("x", (1, 6, 9, 9), "uint8", quant=XP),
                                          g.const(packed)),
              weight_shape=w.shape, weight_scales=WP.scales, x_zero_point=7, x_dtype="uint8",
              **attrs)
    return mg.compile([y]), w, attrs


def _versions(data: bytes) -> dict:
    nodes = json.loads(members(data)["model.json"])["graph"]["nodes"]
    return {n["op"]: n["version"] for n in nodes}


def test_packed_weights_round_trip_bitwise_as_version_2(tmp_path):
    plan, w, attrs = _plan()
    mg.save(plan, tmp_path / "m.mgm")
    assert _versions((tmp_path / "m.mgm").read_bytes())["quantized_conv2d_packed"] == 2
    x = RNG.integers(0, 256, (1, 6, 9, 9)).astype(np.uint8)
    got = mg.load(tmp_path / "m.mgm").run([x])[0]
    np.testing.assert_array_equal(got, quantized_conv2d(x, XP, w, WP, None, **attrs))


def test_a_version_1_packed_op_is_refused(tmp_path):
    mg.save(_plan()[0], tmp_path / "m.mgm")
    data = (tmp_path / "m.mgm").read_bytes()
    refused(tmp_path, with_json(data, lambda d: first(d, "quantized_conv2d_packed").update(
        version=1)), "version 1 is unknown")


@pytest.mark.parametrize("op", ["quantized_pack_weight", "quantized_conv2d_packed",
                                "quantized_linear_packed"])
def test_packed_ops_are_version_2(op):
    from mgegraph.io.graph_json import OP_VERSIONS
    assert OP_VERSIONS[op] == 2
