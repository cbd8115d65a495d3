"""sort, topk, cumsum, cumprod and cumprod's gradient in the model file: a training-style plan
(forward and backward) round trips bitwise, and every op has a model-file version."""
import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(3)


def test_every_sorting_op_has_a_version():
    for op in ("sort", "topk", "cumsum", "cumprod", "cumprod_backward"):
        assert OP_VERSIONS[op] == 1


def sorting_plan():
    """Sorts, scans and the gradient of them all (tests/deploy runs it in C too)."""
    g = mg.Graph()
    x = g.input("x", (3, 11))
    values, indices = F.sort(x, descending=True)
    top, where = F.topk(x, 4)
    scan = apply("cumsum", (x,), axis=1, exclusive=True, reverse=True)
    prod = F.cumprod(x, 0)
    loss = F.sum(values * top[:, :1]) + F.sum(scan * scan) + F.sum(prod)
    (dx,) = mg.grad(loss, [x])
    return mg.compile([values, indices, top, where, F.argsort(x), scan, prod, dx])


def test_sorting_and_scans_round_trip_bitwise(tmp_path):
    plan = sorting_plan()
    assert {"sort", "topk", "cumsum", "cumprod", "cumprod_backward"} <= {
        node.op.name for node in plan.source.graph.nodes}
    mg.save(plan, tmp_path / "m.mgm")
    data = RNG.standard_normal((3, 11)).astype(np.float32)
    data[1, 4] = 0.0
    got, want = mg.load(tmp_path / "m.mgm").run([data]), plan.run({"x": data})
    assert len(got) == len(want) == 8
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
