"""Pooling with dilation, ceil_mode, padding that differs at the two ends and count_include_pad
in the model file: round trips bitwise, and a file written before these attributes existed
(no dilation, ceil_mode or padding_end) keeps its meaning, so the op versions stay 1."""
import json
import zipfile

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.io.graph_json import OP_VERSIONS

RNG = np.random.default_rng(0)


def pooling_plan(**window):
    g = mg.Graph()
    x = g.input("x", (2, 3, 9, 8))
    y = F.max_pool2d(x, 3, 2, **window)
    z = F.avg_pool2d(x, 3, 2, count_include_pad=True, **window)
    (dx,) = mg.grad(F.sum(y * y) + F.sum(z * z), [x])
    return mg.compile([y, z, dx])


def test_pool_modes_round_trip_bitwise(tmp_path):
    plan = pooling_plan(padding=((1, 0), (2, 1)), dilation=(2, 1), ceil_mode=True)
    mg.save(plan, tmp_path / "m.mgm")
    x = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
    for got, want in zip(mg.load(tmp_path / "m.mgm").run([x]), plan.run({"x": x})):
        assert got.tobytes() == want.tobytes()


def _strip_new_attributes(path):
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    model = json.loads(members["model.json"])
    for node in model["graph"]["nodes"]:
        for key in ("dilation", "ceil_mode", "padding_end"):
            node.get("attrs", {}).pop(key, None)
    members["model.json"] = json.dumps(model).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_a_file_without_the_new_attributes_means_what_it_meant(tmp_path):
    plan = pooling_plan(padding=1)
    mg.save(plan, tmp_path / "m.mgm")
    _strip_new_attributes(tmp_path / "m.mgm")
    x = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
    for got, want in zip(mg.load(tmp_path / "m.mgm").run([x]), plan.run({"x": x})):
        assert got.tobytes() == want.tobytes()
    assert all(OP_VERSIONS[op] == 1 for op in ("max_pool2d", "avg_pool2d",
                                               "max_pool2d_backward", "avg_pool2d_backward"))
