"""The epilogue's relu6 in the model file: version 2 of linear, conv2d and conv2d_packed where a
node applies it, version 1 (what readers from before relu6 run) where it does not, and a version
1 node that says relu6 refused."""
import json

import numpy as np
import pytest
from test_model_file import first, members, refused, with_json

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(0)


def mobilenet_head(fused=True):
    """MobileNet-v2's expand and depthwise layers, each conv + relu6, then a linear + relu6, and
    a conv + relu beside them: with ``fused``, written with the epilogue's activations (as the
    epilogue pass makes them), else as the ops after the convolutions."""
    rng = np.random.default_rng(1)  # the same weights fused or not
    g = mg.Graph()
    x = g.input("x", (1, 8, 9, 9))

    def conv(v, w, b=None, activation="relu6", **args):
        ins = (v, g.param(f"w{len(g.nodes)}", w)) + (() if b is None else (g.param(
            f"b{len(g.nodes)}", b),))
        if fused:
            return apply("conv2d", ins, activation=activation, **args)
        y = apply("conv2d", ins, **args)
        return F.relu6(y) if activation == "relu6" else F.relu(y)

    one = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    h = conv(x, rng.standard_normal((16, 8, 1, 1), np.float32),
             rng.standard_normal(16, np.float32), **one)
    h = conv(h, rng.standard_normal((16, 1, 3, 3), np.float32), stride=(2, 2), padding=(1, 1),
             dilation=(1, 1), groups=16)
    w3 = g.param("w3", 0.2 * rng.standard_normal((10, 400), np.float32))
    b3 = g.param("b3", rng.standard_normal(10, np.float32))
    h = F.flatten(h, 1)
    y = apply("linear", (h, w3, b3), activation="relu6") if fused \
        else F.relu6(F.linear(h, w3, b3))
    z = conv(x, np.ones((2, 8, 1, 1), np.float32), activation="relu", **one)
    return mg.compile([y, z], optimize=0)


def _nodes(path, op):
    d = json.loads(members(path.read_bytes())["model.json"])
    return [n for n in d["graph"]["nodes"] if n["op"] == op]


def test_relu6_epilogues_round_trip_bitwise(tmp_path):
    plan, unfused = mobilenet_head(), mobilenet_head(fused=False)
    mg.save(plan, tmp_path / "m.mgm")
    versions = sorted((n["attrs"]["activation"], n["version"])
                      for n in _nodes(tmp_path / "m.mgm", "conv2d"))
    assert versions == [("relu", 1), ("relu6", 2), ("relu6", 2)]
    assert [n["version"] for n in _nodes(tmp_path / "m.mgm", "linear")] == [2]
    x = 4 * RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    loaded = mg.load(tmp_path / "m.mgm").run([x])
    for got, want, plain in zip(loaded, plan.run({"x": x}), unfused.run({"x": x})):
        assert got.tobytes() == want.tobytes() == plain.tobytes()
    assert (loaded[0] == 6).any() and (loaded[0] == 0).any()


def test_files_without_relu6_stay_version_1(tmp_path):
    g = mg.Graph()
    x = g.input("x", (2, 5))
    plan = mg.compile([F.relu(F.linear(x, g.param("w", np.ones((3, 5), np.float32))))])
    mg.save(plan, tmp_path / "m.mgm")
    assert [n["version"] for n in _nodes(tmp_path / "m.mgm", "linear")] == [1]
    assert OP_VERSIONS["linear"] == 2
    np.testing.assert_array_equal(mg.load(tmp_path / "m.mgm").run([np.ones((2, 5), np.float32)])[0],
                                  np.full((2, 3), 5.0))


def test_a_version_1_node_that_says_relu6_is_refused(tmp_path):
    mg.save(mobilenet_head(), tmp_path / "m.mgm")
    data = (tmp_path / "m.mgm").read_bytes()
    refused(tmp_path, with_json(data, lambda d: first(d, "linear").update(version=1)),
            "relu6' needs version 2")
    refused(tmp_path, with_json(data, lambda d: first(d, "linear").update(version=3)),
            "version 3 is unknown")


@pytest.mark.parametrize("op", ["linear", "conv2d", "conv2d_packed"])
def test_epilogue_ops_are_version_2(op):
    assert OP_VERSIONS[op] == 2
