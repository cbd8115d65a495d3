"""The plan of a graph with named dimensions: specialisations, their cache, checks, threads,
fork, training, and memory as a formula of the names."""
import inspect
import json
import math
import multiprocessing
import os
import sys
import threading

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.planner.memory.formula import Point, fit_memory, search_largest
from mgegraph.symbolic_plan import SymbolicPlan

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((4 * 4 * 4, 16)).astype(np.float32)
K1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
W2 = RNG.standard_normal((16, 5)).astype(np.float32)
W32 = RNG.standard_normal((32, 32)).astype(np.float32)


def convnet(batch):
    """conv-relu-pool, flattened with the batch kept, then two dense layers and a softmax."""
    g = mg.Graph()
    x = g.input("x", (batch, 3, 8, 8))
    h = F.max_pool2d(F.relu(F.conv2d(x, g.param("k", K1), padding=1)), 2)
    h = F.reshape(h, (h.shape[0], -1)) @ g.param("w1", W1)
    return F.softmax(F.relu(h) @ g.param("w2", W2), axis=-1)


def mlp(batch):
    g = mg.Graph()
    x = g.input("x", (batch, 32))
    w = g.param("w", W32)
    return F.relu(F.relu(x @ w) @ w)


def feed(batch, shape=(3, 8, 8), seed=1):
    return {"x": np.random.default_rng(seed).standard_normal((batch, *shape), np.float32)}


def bound(plan):
    return [b["batch"] for b, _ in plan.plans]


# -- specialisation ------------------------------------------------------------------------------
@pytest.mark.parametrize("optimize", [0, 1])
def test_each_binding_runs_bitwise_as_the_fixed_shape_plan(optimize):
    plan = mg.compile([convnet("batch")], optimize=optimize)
    assert isinstance(plan, SymbolicPlan)
    assert plan.signature() == "x: f32[batch, 3, 8, 8] -> f32[batch, 5]"
    for batch in (1, 3, 7, 3):
        fixed = mg.compile([convnet(batch)], optimize=optimize)
        (got,), (want,) = plan.run(feed(batch)), fixed.run(feed(batch))
        np.testing.assert_array_equal(got, want)
        same = plan.latest  # the same slots, instructions and memory plan
        assert (same.slots, same.instructions, same.memory) == (fixed.slots, fixed.instructions,
                                                               fixed.memory)
    assert plan.specialisations == 3 and sorted(bound(plan)) == [1, 3, 7]


def test_the_cache_drops_the_least_recently_used_plan():
    plan = mg.compile([mlp("batch")], cache_size=2)
    for batch in (1, 2, 3):
        plan.run(feed(batch, (32,)))
    assert bound(plan) == [2, 3] and plan.specialisations == 3
    plan.run(feed(2, (32,)))  # a cached run moves its plan to the end
    assert bound(plan) == [3, 2] and plan.specialisations == 3
    (again,) = plan.run(feed(1, (32,)))  # evicted: made again, dropping 3
    assert bound(plan) == [2, 1] and plan.specialisations == 4
    np.testing.assert_array_equal(again, mg.compile([mlp(1)]).run(feed(1, (32,)))[0])
    assert plan.latest is plan.plans[-1][1]
    plan.clear_cache()
    assert plan.plans == [] and plan.latest is None
    plan.run(feed(2, (32,)))
    assert plan.specialisations == 5


def test_warm_specialises_ahead_of_time():
    plan = mg.compile([mlp("batch")], warm=[{"batch": 4}, {"batch": np.int64(1)}])
    assert bound(plan) == [4, 1] and plan.specialisations == 2
    plan.run(feed(4, (32,)))
    assert plan.specialisations == 2
    assert plan.specialize({"batch": 4}) is plan.plans[-1][1]
    with pytest.raises(mg.GraphError, match="warm= and bounds= are for a graph"):
        mg.compile([mlp(2)], warm=[{"batch": 2}])


def test_bounds_refuse_values_outside_and_bad_bounds_are_graph_errors():
    plan = mg.compile([mlp("batch")], bounds={"batch": (2, 4)})
    assert plan.bounds == {"batch": (2, 4)} and "batch in 2..4" in str(plan)
    plan.run(feed(4, (32,)))
    for batch in (1, 5):
        with pytest.raises(mg.FeedError, match=rf"batch={batch} is outside its bounds 2..4"):
            plan.run(feed(batch, (32,)))
    with pytest.raises(mg.FeedError, match="outside its bounds"):
        plan.specialize({"batch": 9})
    with pytest.raises(mg.FeedError, match="outside its bounds"):
        mg.compile([mlp("batch")], bounds={"batch": (2, 4)}, warm=[{"batch": 1}])
    y = mlp("batch")
    for bad, why in [({"n": (1, 4)}, "'n' is not a name"), ({"batch": (0, 4)}, "1 <= low"),
                     ({"batch": (5, 4)}, "1 <= low <= high"), ({"batch": 3}, r"\(low, high\)"),
                     ({"batch": (1.0, 4)}, "ints"), ({"batch": (True, 4)}, "ints")]:
        with pytest.raises(mg.GraphError, match=why):
            mg.compile([y], bounds=bad)


def test_a_broadcast_fact_between_two_inputs_is_checked_with_the_users_line():
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    line = inspect.currentframe().f_lineno + 1
    z = x + y  # broadcasting: batch and n must be equal (or one of them 1, which is refused)
    plan = mg.compile([z])
    assert f"requires batch == n  (add at {__file__}:{line})" in str(plan)
    ones = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(plan.run({"x": ones, "y": ones})[0], ones + ones)
    for n in (2, 1):
        with pytest.raises(mg.FeedError) as info:
            plan.run({"x": ones, "y": np.ones((n, 4), np.float32)})
        assert f"break batch == n (batch=3, n={n})" in str(info.value)
        assert f"add for the node made at {__file__}:{line}" in str(info.value)
    assert plan.specialisations == 1


def test_freeze_keeps_the_facts_the_rules_recorded():
    # freeze rebuilds the graph (params to consts): the facts must survive the rebuild, or a
    # binding that broadcasts where the graph meant equal sizes would run
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    plan = mg.compile([(x + y) @ g.param("w", np.ones((4, 4), np.float32))], freeze=True)
    assert "requires batch == n" in str(plan)
    with pytest.raises(mg.FeedError, match="break batch == n"):
        plan.run({"x": np.ones((3, 4), np.float32), "y": np.ones((1, 4), np.float32)})


@pytest.mark.parametrize("feeds, why", [
    ({}, r"missing \['x'\]"),
    ({"x": np.ones((2, 32), np.float32), "y": np.ones(1)}, r"extra \['y'\]"),
    ({"x": np.ones((2, 32))}, r"feed 'x' is float64\[2, 32\], the plan needs float32"),
    ({"x": np.ones((2, 32, 1), np.float32)}, "has 3 dimensions, the declared .* has 2"),
    ({"x": np.ones((0, 32), np.float32)}, r"dimension 0 \(batch\) .* is 0"),
    ({"x": np.ones((2, 31), np.float32)}, "expected 32, got 31"),
    ({"x": [[1.0] * 32]}, "must be a numpy array"),
    ([np.ones((2, 32), np.float32)], "feeds must be a dict"),
])
def test_bad_feeds_are_feed_errors(feeds, why):
    plan = mg.compile([mlp("batch")])
    plan.run(feed(2, (32,)))  # a cached shape must not let a bad feed through either
    with pytest.raises(mg.FeedError, match=why):
        plan.run(feeds)


def test_an_expression_dimension_must_match_its_name():
    g = mg.Graph()
    x = g.input("x", ("batch", "2*batch"))
    plan = mg.compile([x * 2.0])
    assert plan.run({"x": np.ones((3, 6), np.float32)})[0].shape == (3, 6)
    with pytest.raises(mg.FeedError, match=r"declared 2\*batch, batch=3: expected 6, got 5"):
        plan.run({"x": np.ones((3, 5), np.float32)})


def test_a_name_only_inside_expressions_is_refused_at_compile():
    g = mg.Graph()
    x = g.input("x", ("2*batch", 4))
    with pytest.raises(mg.GraphError, match="batch appears only inside expressions"):
        mg.compile([x * 2.0])


def test_str_says_what_the_cache_holds():
    plan = mg.compile([mlp("batch")], cache_size=3)
    assert "cache: 0 of 3 specialised plans (0 made)" in str(plan)
    plan.run(feed(2, (32,)))
    plan.run(feed(5, (32,)))
    text = str(plan)
    assert text.startswith("symbolic plan device=cpu: x: f32[batch, 32] -> f32[batch, 32]")
    assert "cache: 2 of 3 specialised plans (2 made)" in text
    for batch in (2, 5):
        p = plan.specialize({"batch": batch})
        assert (f"batch={batch}: {len(p.instructions)} instructions, arena "
                f"{p.arena_bytes}B") in text
    assert "arena = " in text and repr(plan) == ("<SymbolicPlan x: f32[batch, 32] -> "
                                                 "f32[batch, 32]>")


# -- threads and fork ----------------------------------------------------------------------------
def test_two_threads_run_at_two_batch_sizes_at_once():
    plan = mg.compile([convnet("batch")])
    want = {b: mg.compile([convnet(b)]).run(feed(b, seed=b))[0] for b in (2, 6)}
    errors = []

    def serve(batch):
        try:
            for _ in range(20):
                np.testing.assert_array_equal(plan.run(feed(batch, seed=batch))[0], want[batch])
        except Exception as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)
    threads = [threading.Thread(target=serve, args=(b,)) for b in (2, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and plan.specialisations == 2


def _blocking_compile(plan):
    """Make ``plan``'s compiles wait for ``release`` (in this process only)."""
    started, release, compile_fixed = threading.Event(), threading.Event(), plan._compile_fixed
    parent = os.getpid()

    def blocked(outputs):
        if os.getpid() == parent:
            started.set()
            assert release.wait(60)
        return compile_fixed(outputs)
    plan._compile_fixed = blocked
    return started, release


def test_a_cached_run_goes_on_while_another_binding_specialises():
    plan = mg.compile([mlp("batch")], warm=[{"batch": 2}])
    started, release = _blocking_compile(plan)
    making = threading.Thread(target=plan.run, args=(feed(5, (32,)),))
    making.start()
    assert started.wait(60)
    cached = threading.Thread(target=plan.run, args=(feed(2, (32,)),))
    cached.start()
    cached.join(60)
    finished_first = not cached.is_alive()
    release.set()
    making.join(60)
    assert finished_first and sorted(bound(plan)) == [2, 5] and plan.specialisations == 2


_FORKED = None


def _run_forked(batch):
    return _FORKED.run(feed(batch, (32,)))[0]


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_a_forked_child_runs_the_plan_even_mid_specialisation():
    global _FORKED
    _FORKED = plan = mg.compile([mlp("batch")], warm=[{"batch": 3}])
    want = {b: mg.compile([mlp(b)]).run(feed(b, (32,)))[0] for b in (3, 4)}
    started, release = _blocking_compile(plan)
    making = threading.Thread(target=plan.specialize, args=({"batch": 4},))
    making.start()
    assert started.wait(60)  # the fork happens while a thread of the parent compiles batch=4
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            got = pool.map_async(_run_forked, [3, 4]).get(timeout=120)
    finally:
        release.set()
        making.join(60)
        _FORKED = None
    for batch, result in zip((3, 4), got):
        np.testing.assert_array_equal(result, want[batch])


# -- weights: frozen, trained ------------------------------------------------------------------
def test_freeze_copies_the_weights_once_for_every_specialisation():
    g = mg.Graph()
    w = np.ones((32, 4), np.float32)
    x = g.input("x", ("batch", 32))
    plan = mg.compile([x @ g.param("w", w, share=True)], freeze=True, optimize=0)
    a, b = plan.specialize({"batch": 1}), plan.specialize({"batch": 3})
    (const,) = a.values.values()
    assert b.values[next(iter(b.values))] is const  # one copy, shared by the specialisations
    assert not np.shares_memory(const, w)
    w[...] = 2.0  # later changes of the weights are not seen
    np.testing.assert_array_equal(plan.run({"x": np.ones((3, 32), np.float32)})[0],
                                  np.full((3, 4), 32.0, np.float32))


def train_plan(batch, w, share):
    g = mg.Graph()
    x, t = g.input("x", (batch, 6)), g.input("t", (batch,), "int64")
    wv = g.param("w", w, share=share)
    loss = F.cross_entropy(F.tanh(x @ wv) * 3.0, t)
    (dw,) = mg.grad(loss, [wv])
    g.assign(wv, wv - 0.5 * dw)
    return mg.compile([loss])


def batches(sizes):
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal((b, 6), np.float32),
             "t": rng.integers(0, 3, b).astype(np.int64)} for b in sizes]


@pytest.mark.parametrize("share", [True, False])
def test_a_training_step_at_two_batch_sizes_updates_one_set_of_weights(share):
    w0 = np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32)
    w_sym, w_fixed = w0.copy(), w0.copy()
    plan = train_plan("batch", w_sym, share)
    fixed = {b: train_plan(b, w_fixed, True) for b in (4, 2)}
    steps = batches([4, 2, 4])
    losses = [plan.run(f)[0] for f in steps]
    want = [fixed[f["x"].shape[0]].run(f)[0] for f in steps]
    np.testing.assert_array_equal(losses, want)
    graph = plan.source.graph
    weights = graph.values[graph.params["w"].id]
    assert (weights is w_sym) == share
    np.testing.assert_array_equal(weights, w_fixed)
    assert not np.array_equal(w_fixed, w0) and plan.specialisations == 2
    if not share:
        np.testing.assert_array_equal(w_sym, w0)  # the caller's array stays as it was


# -- memory as a formula -----------------------------------------------------------------------
def chain(batch):
    g = mg.Graph()
    x = g.input("x", (batch, 256))
    w = g.param("w", np.eye(256, dtype=np.float32))
    return F.relu(F.tanh(x @ w) @ w) @ w


def test_the_memory_formula_needs_two_values_then_fits_them():
    plan = mg.compile([chain("batch")])
    f = plan.memory_formula()
    assert f.arena is None and "plan.specialize({'batch': ...})" in f.needs
    assert "no formula yet" in plan.memory_report()
    with pytest.raises(mg.GraphError, match="needs|are needed"):
        plan.largest_batch(2**20)
    plan.specialize({"batch": 64})
    assert "measured: batch=64" in plan.memory_report()
    for batch in (128, 256):
        plan.specialize({"batch": batch})
    f = plan.memory_formula()
    arenas = {p.bindings[0][1]: p.arena for p in f.points}
    assert f.name == "batch" and sorted(arenas) == [64, 128, 256]
    for batch, arena in arenas.items():
        assert arena == plan.specialize({"batch": batch}).arena_bytes
        assert abs(f.arena.at(batch) - arena) <= f.arena.max_error + 1e-6
    assert f.arena.exact == (f.arena.max_error <= 64)


def test_largest_batch_is_checked_by_compiling_it():
    plan = mg.compile([chain("batch")], cache_size=4)
    for batch in (64, 128, 256):
        plan.specialize({"batch": batch})
    budget = 3 * 2**20 + 12345
    best = plan.largest_batch(budget)
    arena = {b: mg.compile([chain(b)]).arena_bytes for b in (best, best + 1)}
    assert arena[best] <= budget < arena[best + 1]
    assert plan.specialisations == 3 and len(plan.plans) == 3  # checks are not cached
    assert plan.largest_batch(16) is None  # no batch fits 16 bytes
    capped = mg.compile([chain("batch")], bounds={"batch": (1, 100)},
                        warm=[{"batch": 32}, {"batch": 64}])
    assert capped.largest_batch(2**30) == 100
    text = plan.memory_report(top=2, budget_bytes=budget)
    assert f"the largest batch whose arena fits 3.01 MiB: batch = {best}" in text


def test_memory_report_formats():
    plan = mg.compile([chain("batch")], warm=[{"batch": 8}, {"batch": 16}])
    data = plan.memory_report(format="dict", budget_bytes=2**20)
    assert json.loads(plan.memory_report(format="json", budget_bytes=2**20)) == data
    assert data["names"] == ["batch"] and data["formula"]["name"] == "batch"
    assert [p["bindings"] for p in data["plans"]] == [{"batch": 8}, {"batch": 16}]
    summary = data["plans"][0]["summary"]
    assert summary["arena_bytes"] == plan.specialize({"batch": 8}).arena_bytes
    assert data["largest"]["budget_bytes"] == 2**20 and data["largest"]["value"] >= 16
    text = plan.memory_report(top=1)
    assert text.count("memory plan: arena") == 2 and "-- batch=8" in text
    assert "arena       = " in text and "measured at batch = 8, 16" in text
    with pytest.raises(ValueError, match="format 'svg'"):
        plan.memory_report(format="svg")


def test_fit_memory_on_two_names_fits_the_one_that_varies():
    points = [Point((("batch", b), ("seq", 16)), 100 * b + 64, 90 * b, 10) for b in (1, 2, 4)]
    points.append(Point((("batch", 1), ("seq", 32)), 500, 400, 10))
    f = fit_memory(points, alignment=64)
    assert f.name == "batch" and f.fixed == (("seq", 16),) and len(f.points) == 3
    assert f.arena.exact and round(f.arena.slope) == 100 and round(f.arena.intercept) == 64
    assert f.largest(1000) == 9 and f.largest(1000, high=5) == 5 and f.largest(10) is None
    assert "at seq=16" in "\n".join(f.lines())
    lone = fit_memory(points[-1:], alignment=64, names={"batch", "seq"})
    assert lone.arena is None and "batch, seq" in lone.needs
    flat = fit_memory([Point((("b", v),), 640, 640, 0) for v in (1, 2)], alignment=64)
    assert flat.largest(1000) == math.inf and flat.largest(1000, high=7) == 7


def test_search_largest_finds_the_edge_of_a_piecewise_arena():
    def arena(v):  # a workspace that jumps at 50, as a kernel's path changing with the size
        return 1000 * v + (20_000 if v >= 50 else 0)
    calls = []
    found = search_largest(lambda v: calls.append(v) or arena(v), 75_000, 1, None, guess=75,
                           known={1: arena(1), 2: arena(2)})
    assert found == 55 and arena(55) <= 75_000 < arena(56) and len(calls) <= 8
    assert search_largest(arena, 500, 1, None, guess=3) is None
    assert search_largest(arena, 10**9, 1, 70, guess=3) == 70


def test_specialisations_share_one_prologue_and_see_a_weight_write():
    weight = W32.copy()
    g = mg.Graph()
    x = g.input("x", ("batch", 32))
    y = x @ (g.param("w", weight, share=True) * 2.0)  # w * 2 reads only a weight: the prologue
    plan = mg.compile([y])
    # (at 4 rows or more both pack the weight the same way: the same prologue)
    small, large = plan.specialize({"batch": 5}), plan.specialize({"batch": 9})
    assert small.prologue is not None and small.prologue is large.prologue
    targets = [s for s in small.slots if (s.name or "").startswith("prologue:")]
    assert targets and all(small.values[s.index] is large.values[s.index] for s in targets)
    for step in range(2):
        for batch in (5, 9):
            xs = feed(batch, (32,), seed=batch)["x"]
            np.testing.assert_allclose(plan.run({"x": xs})[0], xs @ (weight * 2.0), rtol=1e-5)
        weight *= -1.0  # a write every specialisation must see
        mg.weight_writes.written(weight)
