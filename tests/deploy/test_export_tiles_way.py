"""A plan whose float32 GEMMs took the executor's "tiles" way, exported to C: on an AVX2 CPU
that way is gemm_tile.h's panels, the C runtime's own GEMM, so model_run gives the executor's
outputs bitwise, on 1 and 2 threads each side (linear's epilogue, weights the exporter packs and
operands packed per call, a transposed A, batches)."""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels.lowering import matmul as lowering
from mgegraph.deploy import export_c

from .cbuild import make, model_run
from .test_export_gemm_packed import bits

pytestmark = pytest.mark.skipif(lowering.tiles_isa() is None, reason="no tiles way on this CPU")
GEMMS = ("matmul_f32", "linear_f32")


def gemms_plan(tiles_rule=None):
    """linear (weight, bias, relu) -> matmul by a weight -> matmul by an input -> a transposed
    A's product of 12 rows and a batched product over k = 12 (both of which the fitted AVX2
    rule takes), each of two inputs (a product's bits are the executor's only where its
    operands' are): the plan (on ``tiles_rule``, else the fitted rule) and its feeds."""
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((37, 300), dtype=np.float32),
             "y": rng.standard_normal((45, 70), dtype=np.float32),
             "z": rng.standard_normal((37, 12), dtype=np.float32),
             "u": rng.standard_normal((37, 70), dtype=np.float32),
             "p": rng.standard_normal((3, 9, 12), dtype=np.float32),
             "q": rng.standard_normal((3, 12, 33), dtype=np.float32)}
    g = mg.Graph()
    x, y, z, u, p, q = (g.input(name, v.shape, "float32") for name, v in feeds.items())
    w1 = g.param("w1", rng.standard_normal((70, 300), dtype=np.float32) * 0.1)
    b1 = g.param("b1", rng.standard_normal(70, dtype=np.float32))
    w2 = g.param("w2", rng.standard_normal((70, 45), dtype=np.float32))
    h = F.relu(F.linear(x, w1, b1)) @ w2 @ y       # (37, 70)
    outs = [h, F.matmul(z, u, transpose_a=True), F.matmul(p, q)]
    rule = lowering.tiles_rule
    if tiles_rule is not None:
        lowering.tiles_rule = tiles_rule
    try:
        return mg.compile(outs, freeze=True), feeds
    finally:
        lowering.tiles_rule = rule


def test_gemms_on_the_tiles_way_give_the_executors_bits_in_c(tmp_path):
    forced = lambda dtype, m, n, k, tb, ta=False: lowering.tiles_apply(dtype, m, n, k)  # noqa: E731
    with threadpool_limits(2):
        plan, feeds = gemms_plan(forced)
    gemms = [i for i in plan.instructions if i.kernel in GEMMS]
    assert len(gemms) == 5 and all(i.ints[6] for i in gemms)  # every one on the tiles
    want = []
    for threads in (1, 2):
        with threadpool_limits(threads):
            want.append(plan.run(feeds))
    exported = export_c(plan, tmp_path / "c")
    make(exported.directory)
    for threads in (1, 2):
        done, got = model_run(exported.directory, feeds, exported.input_names,
                              options=["--threads", str(threads)])
        assert done.returncode == 0, done.stderr
        for c_out, executor_1, executor_2 in zip(got, *want):
            np.testing.assert_array_equal(bits(executor_1), bits(executor_2))
            np.testing.assert_array_equal(bits(c_out), bits(executor_1))


def test_the_fitted_rule_plans_are_the_executors_bits_where_the_rule_takes_the_tiles(tmp_path):
    plan, feeds = gemms_plan()
    want = plan.run(feeds)
    exported = export_c(plan, tmp_path / "c")
    make(exported.directory)
    done, got = model_run(exported.directory, feeds, exported.input_names)
    assert done.returncode == 0, done.stderr
    on_tiles = {i.outputs[0] for i in plan.instructions if i.kernel in GEMMS and i.ints[6]}
    assert len(on_tiles) >= (2 if lowering.tiles_isa() == "avx2" else 0)
    for slot, c_out, executor in zip(plan.outputs, got, want):
        if slot in on_tiles:
            np.testing.assert_array_equal(bits(c_out), bits(executor))
        else:
            np.testing.assert_allclose(c_out, executor, rtol=1e-4, atol=1e-4)
