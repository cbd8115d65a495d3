"""GEMM accumulation: which adds of a product become addmm, the IR after the pass, results
against the unoptimised graph, and SGD's update computed in place into its weight."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.backend import get_backend
from mgegraph.planner.passes.accumulate import accumulate

RNG = np.random.default_rng(1)
CPU = get_backend("cpu")


def runs(op):
    return CPU.impl(op) is not None


def feeds_for(g):
    return {name: RNG.standard_normal(v.shape).astype(v.dtype)
            for name, v in g.inputs.items()}


def same_as_unoptimised(r, outputs, feeds, rtol=1e-5):
    got = mg.compile(r.outputs, optimize=0).run(feeds)
    want = mg.compile(outputs, optimize=0).run(feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


def ops_of(graph):
    return [n.op.name for n in graph.nodes if n.op.category != "source"]


def two_matrices(dtype="float32"):
    g = mg.Graph()
    return g, g.input("c", (6, 5), dtype), g.input("a", (6, 4), dtype), g.input("b", (4, 5), dtype)


def test_a_scaled_product_subtracted_becomes_one_addmm():
    g, c, a, b = two_matrices()
    s = g.input("s", (), "float32")
    y = c - F.matmul(a, b) * s
    r = accumulate(g, [y], runs)
    assert str(r.graph).splitlines()[-1] == \
        "%4:f32[6,5] = addmm[alpha=-1.0, transpose_a=False, transpose_b=False] %0 %1 %2 %3"
    assert r.stats == {"fused": 1}
    same_as_unoptimised(r, [y], feeds_for(g))


@pytest.mark.parametrize("form", ["c+ab", "ab+c", "c-ab", "c+s*ab", "c-ab*s", "c+ab^T"])
def test_every_form_of_an_added_product(form):
    g, c, a, b = two_matrices()
    s = g.input("s", (1, 1), "float32")
    mm = F.matmul(a, F.transpose(b, (1, 0)), transpose_b=True) if form == "c+ab^T" \
        else F.matmul(a, b)
    y = {"c+ab": lambda: c + mm, "ab+c": lambda: mm + c, "c-ab": lambda: c - mm,
         "c+s*ab": lambda: c + s * mm, "c-ab*s": lambda: c - mm * s,
         "c+ab^T": lambda: c + mm}[form]()
    r = accumulate(g, [y], runs)
    assert ops_of(r.graph)[-1] == "addmm" and "matmul" not in ops_of(r.graph)
    same_as_unoptimised(r, [y], feeds_for(g))


@pytest.mark.parametrize("case", ["product used twice", "product is an output", "ab-c",
                                  "c broadcast", "batched", "scale of many values",
                                  "scaled product used twice", "integers", "c elementwise"])
def test_what_is_left_alone(case):
    dtype = "int32" if case == "integers" else "float32"
    g, c, a, b = two_matrices(dtype)
    mm = F.matmul(a, b)
    outputs = {
        "product used twice": lambda: [c + mm, F.relu(mm)],
        "product is an output": lambda: [c + mm, mm],
        "ab-c": lambda: [mm - c],
        "c broadcast": lambda: [g.input("row", (5,), "float32") + mm],
        "batched": lambda: [g.input("c3", (2, 6, 5), "float32")
                            + F.matmul(g.input("a3", (2, 6, 4), "float32"), b)],
        "scale of many values": lambda: [c + mm * g.input("v", (6, 5), "float32")],
        "scaled product used twice": lambda: [c + mm * 2.0, (mm * 2.0) * 3.0],
        "integers": lambda: [c + mm],
        "c elementwise": lambda: [c * 0.9 + mm],  # momentum's mu * v + dw: fuse takes the add
    }[case]()
    if case == "scaled product used twice":  # the same mul node read twice
        t = mm * 2.0
        outputs = [c + t, t * 3.0]
    r = accumulate(g, outputs, runs)
    assert r.stats == {"fused": 0} and "addmm" not in ops_of(r.graph)


def test_nothing_is_made_for_a_target_without_addmm():
    g, c, a, b = two_matrices()
    y = c + F.matmul(a, b)
    assert accumulate(g, [y], None).stats == {"fused": 0}
    assert accumulate(g, [y], lambda op: op != "addmm").stats == {"fused": 0}


def test_the_pipeline_reports_it_and_the_plan_runs_addmm():
    g, c, a, b = two_matrices()
    y = F.relu(c + F.matmul(a, b))
    # level 1 keeps eager's rounding: only products on the tiles (6 x 5 over k = 4 is one on
    # AVX2, whose rule takes a short k, and not on AVX-512)
    from mgegraph._kernels.lowering.matmul import accumulates_exactly
    exact = accumulates_exactly(F.matmul(a, b).node)
    assert dict(mg.compile([y]).passes)["accumulate"] == {"fused": int(exact)}
    plan = mg.compile([y], optimize=2)
    assert dict(plan.passes)["accumulate"] == {"fused": 1}
    assert [i.op for i in plan.instructions].count("addmm") == 1
    feeds = feeds_for(g)
    np.testing.assert_allclose(plan.run(feeds)[0],
                               mg.compile([y], optimize=0).run(feeds)[0], rtol=1e-5, atol=1e-5)


def test_exact_restricts_the_pass_to_the_products_it_vouches_for():
    g, c, a, b = two_matrices()
    y = c + F.matmul(a, b)
    assert accumulate(g, [y], runs, exact=lambda mm: False).stats == {"fused": 0}
    assert accumulate(g, [y], runs, exact=lambda mm: mm.op.name == "matmul").stats == \
        {"fused": 1}


# -- level 1: where the addmm runs on the CPU's tiles it rounds as the mul and sub it replaces ----
needs_tiles = pytest.mark.skipif("avx512" not in __import__("mgegraph._kernels.conv").
                                 _kernels.conv.blocked_isas(),
                                 reason="the addmm tiles need AVX-512")


@needs_tiles
@pytest.mark.parametrize("form", ["c - s * ab", "c + ab * s", "ab + c", "c - ab"])
@pytest.mark.parametrize("transpose_a", [False, True])
def test_level_1_absorbs_products_on_the_tiles_bitwise(form, transpose_a):
    from mgegraph._kernels.lowering.matmul import accumulates_exactly
    g = mg.Graph()
    c = g.input("c", (40, 130), "float32")  # a partial column block, a short row tile
    a = g.input("a", (24, 40) if transpose_a else (40, 24), "float32")
    b, s = g.input("b", (24, 130), "float32"), g.input("s", (), "float32")
    ab = F.matmul(a, b, transpose_a=transpose_a)
    assert accumulates_exactly(ab.node)
    y = {"c - s * ab": lambda: c - s * ab, "c + ab * s": lambda: c + ab * s,
         "ab + c": lambda: ab + c, "c - ab": lambda: c - ab}[form]()
    out = F.relu(y)  # c reads y elsewhere: addmm writes its own buffer, not c's
    plan = mg.compile([out, c * 1.0])
    assert dict(plan.passes)["accumulate"] == {"fused": 1}
    feeds = feeds_for(g)
    feeds["c"][3, 7], feeds["a"][2, 1] = np.inf, np.nan  # carried as the unfused ops carry them
    got = plan.run(feeds)[0]
    want = mg.compile([out], optimize=0).run(feeds)[0]
    assert got.tobytes() == want.tobytes()


@needs_tiles
def test_a_level_1_sgd_step_on_the_tiles_gives_the_unfused_weights_bitwise():
    def step(optimize):
        nn.init.manual_seed(5)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
        x = np.random.default_rng(2).standard_normal((48, 64)).astype(np.float32)
        y = np.random.default_rng(3).integers(0, 64, 48).astype(np.int64)
        s = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1),
                                  example_batch=(x, y), optimize=optimize)
        return model, s, x, y

    fused_model, fused, x, y = step(1)
    plain_model, plain, _, _ = step(0)
    assert [i.op for i in fused.plan.instructions].count("addmm") == 2
    for _ in range(3):
        fused(x, y), plain(x, y)
    for a, b in zip(fused_model.parameters(), plain_model.parameters()):
        assert a.value.tobytes() == b.value.tobytes()


def sgd_step(optimize, momentum=0.0):
    nn.init.manual_seed(3)
    model = nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 10))
    x = RNG.standard_normal((16, 24)).astype(np.float32)
    y = RNG.integers(0, 10, 16).astype(np.int64)
    step = mg.compile_train_step(model, F.cross_entropy,
                                 optim.SGD(model.parameters(), lr=0.05, momentum=momentum),
                                 example_batch=(x, y), optimize=optimize)
    return model, step, x, y


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_steps_update_the_weights_in_place_as_unfused_steps_do(momentum):
    fused_model, fused, x, y = sgd_step(2, momentum)
    plain_model, plain, _, _ = sgd_step(0, momentum)
    if momentum == 0.0:
        plan = fused.plan
        updates = [i for i in plan.instructions if i.op == "addmm"]
        assert len(updates) == 2
        # each writes its weight's own buffer: no product in the arena, no copy after it
        assert all(plan.slots[i.outputs[0]].role == "param" for i in updates)
        assert not any(i.op == "assign" for i in plan.instructions)
    for _ in range(4):
        fused(x, y), plain(x, y)
    for a, b in zip(fused_model.parameters(), plain_model.parameters()):
        np.testing.assert_allclose(a.value, b.value, rtol=1e-5, atol=1e-6)


def test_a_weight_read_as_an_operand_of_its_own_update_is_not_overwritten_early():
    # w <- w - lr * (w @ x): the GEMM reads w throughout, so it may not write into w
    g = mg.Graph()
    w0 = RNG.standard_normal((8, 8)).astype(np.float32)
    w = g.param("w", w0)
    x = g.input("x", (8, 8), "float32")
    loss = F.sum(w)  # read before the update: nothing else keeps the update out of w's bytes
    g.assign(w, w - F.matmul(w, x) * 0.1)
    plan = mg.compile([loss], optimize=2)
    assert any(i.op == "addmm" for i in plan.instructions)
    xv = RNG.standard_normal((8, 8)).astype(np.float32)
    (before,) = plan.run({"x": xv})  # the loss reads w as the run began
    (after,) = plan.run({"x": xv})   # ... and here as the first run's update left it
    want = w0.astype(np.float64) - 0.1 * (w0.astype(np.float64) @ xv)
    np.testing.assert_allclose(before, w0.sum(), rtol=1e-5)
    np.testing.assert_allclose(after, want.sum(), rtol=1e-4)
