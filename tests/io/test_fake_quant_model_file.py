"""fake_quant in the model file: version 2 where a node has TQT's gradient rule (tqt), version 1
without the attribute (what readers from before it run) where it has not, and a version 1 node
that says tqt refused."""
import json

import numpy as np
from test_model_file import first, members, refused, with_json

import mgegraph as mg
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ops.fake_quant import fake_quant


def _saved(tmp_path, tqt):
    g = mg.Graph()
    x = g.input("x", (2, 6))
    y = fake_quant(x, 0.125, 0.0, -128, 127, lsq_grad_scale=1.0 if tqt else None, tqt=tqt)
    plan = mg.compile([y])
    mg.save(plan, tmp_path / "m.mgm")
    return plan, tmp_path / "m.mgm"


def _node(path):
    d = json.loads(members(path.read_bytes())["model.json"])
    return next(n for n in d["graph"]["nodes"] if n["op"] == "fake_quant")


def test_fake_quant_round_trips_at_the_version_its_attributes_need(tmp_path):
    x = np.linspace(-20, 20, 12, dtype=np.float32).reshape(2, 6)
    for tqt, version in ((False, 1), (True, 2)):
        plan, path = _saved(tmp_path, tqt)
        node = _node(path)
        assert node["version"] == version and ("tqt" in node["attrs"]) == tqt
        assert mg.load(path).run([x])[0].tobytes() == plan.run({"x": x})[0].tobytes()
    assert OP_VERSIONS["fake_quant"] == 2


def test_a_version_1_fake_quant_that_says_tqt_is_refused(tmp_path):
    _, path = _saved(tmp_path, True)
    refused(tmp_path, with_json(path.read_bytes(), lambda d: first(d, "fake_quant").update(
        version=1)), "tqt attribute needs version 2")
