"""group_norm in the model file: version 2 where a node has an epilogue activation, version 1
without the attribute (what readers from before it run) where it has none, and a version 1
node that names one refused."""
import json

import numpy as np
from test_model_file import first, members, refused, with_json

import mgegraph as mg
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ops.builder import apply


def _saved(tmp_path, act):
    g = mg.Graph()
    x, w = g.input("x", (2, 4, 3)), g.input("w", (4,))
    y = apply("group_norm", (x, w, w), groups=2, activation=act)
    plan = mg.compile([y])
    mg.save(plan, tmp_path / "m.mgm")
    return plan, tmp_path / "m.mgm"


def test_the_model_file_writes_version_2_only_with_an_activation(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    w = np.linspace(-2, 2, 4, dtype=np.float32)
    for act, version in (("none", 1), ("relu", 2)):
        plan, path = _saved(tmp_path, act)
        node = next(n for n in json.loads(members(path.read_bytes())["model.json"])["graph"]
                    ["nodes"] if n["op"] == "group_norm")
        assert node["version"] == version and ("activation" in node["attrs"]) == (version == 2)
        got = mg.load(path).run([x, w])[0]
        assert got.tobytes() == plan.run({"x": x, "w": w})[0].tobytes()
    assert OP_VERSIONS["group_norm"] == 2
    refused(tmp_path, with_json(path.read_bytes(), lambda d: first(d, "group_norm").update(
        version=1)), "activation attribute needs version 2")
