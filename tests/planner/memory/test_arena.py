"""Offset assignment: exact small cases, the checker catching each kind of bad plan, seeded
fuzzing that logs arena bytes over the lower bound, and graph-shaped cases (an inference chain,
a training graph, a residual network) whose 10k-request sizes benchmarks/test_arena_speed.py
times. Every plan made here goes through verify_arena."""
import random
import statistics

import numpy as np
import pytest

from mgegraph.planner.memory import arena_place, arena_search
from mgegraph.planner.memory.arena import (STRATEGIES, ArenaError, ArenaPlan, Overwrite, Request,
                                           dump, load, lower_bound, solve, verify_arena)

ALL = [*STRATEGIES, "best"]


def checked(requests, overwrites=(), alignment=64, strategy="best") -> ArenaPlan:
    """solve, then verify_arena; a failure message carries the case as replayable JSON."""
    plan = solve(requests, overwrites, alignment, strategy)
    try:
        verify_arena(plan, requests, overwrites, alignment)
        assert plan.total >= plan.lower_bound
        assert plan.lower_bound == lower_bound(requests, overwrites, alignment)
    except (ArenaError, AssertionError) as e:
        raise AssertionError(f"{strategy}: {e}\nreplay: load({dump(requests, overwrites)!r})")
    return plan


def log_uniform_size(rng) -> int:
    return int(64 * 2 ** rng.uniform(0, 16))  # 64 B .. 4 MiB


def random_intervals(rng, n) -> list:
    """n buffers over n steps: begins uniform, lengths log-uniform from 1 step to all."""
    reqs = []
    for i in range(n):
        begin = rng.randrange(n)
        length = max(1, int(n ** rng.random()))
        reqs.append(Request(i, begin, min(n, begin + length), log_uniform_size(rng)))
    return reqs


def random_dag(rng, n) -> list:
    """Node i's output, read by 1-3 later nodes, mostly near it: a schedule's lifetimes."""
    last = list(range(1, n + 1))
    for j in range(1, n):
        for _ in range(rng.randint(1, 3)):
            i = max(0, j - 1 - int(rng.expovariate(0.3)))
            last[i] = max(last[i], j)
    return [Request(i, i, last[i] + 1, log_uniform_size(rng)) for i in range(n)]


def inference_chain(rng, n) -> tuple[list, list]:
    """An inference schedule: op i's output is read by the next op, now and then by the one
    after too, or by no other op (a workspace); sizes cycle through a few layer sizes."""
    sizes = [64 * rng.choice([16, 48, 256, 1024, 4096]) for _ in range(6)]
    life = rng.choices([1, 2, 3], [0.15, 0.75, 0.1], k=n)
    return [Request(i, i, i + life[i], sizes[i % len(sizes)]) for i in range(n)], []


def training_graph(rng, n) -> tuple[list, list]:
    """About n buffers of a forward pass over n // 5 layers, then the backward pass: activation
    i lives from step i to the mirrored backward step, so all are live at the turn; half the
    layers have a forward temporary. Each backward step makes a gradient (overwritten in place
    by up to three elementwise ops, each at the last step of the one before) and a weight
    gradient, and now and then a scalar of a few bytes."""
    layers, reqs, ow = n // 5, [], []
    widths = [64 * rng.choice([64, 256, 1024, 4096]) for _ in range(4)]
    weights = [64 * rng.choice([16, 256, 2048]) for _ in range(3)]
    for i in range(layers):
        reqs.append(Request(f"a{i}", i, 2 * layers - i, widths[i % 4]))
        if rng.random() < 0.5:
            reqs.append(Request(f"f{i}", i, i + 2, widths[(i + 1) % 4]))
    for t in range(layers, 2 * layers):
        size, src = widths[(2 * layers - 1 - t) % 4], f"g{t}"
        reqs += [Request(src, t, t + 2, size), Request(f"w{t}", t, t + 1, weights[t % 3])]
        for k in range(3):
            if rng.random() < 0.5:
                break
            reqs.append(Request(f"h{t}_{k}", t + 1 + k, t + 3 + k, size))
            ow.append(Overwrite(src, f"h{t}_{k}"))
            src = f"h{t}_{k}"
        if rng.random() < 0.3:
            reqs.append(Request(f"s{t}", t, t + rng.randint(1, 5), rng.choice([4, 8, 64])))
    return reqs, ow


def residual_net(rng, n) -> tuple[list, list]:
    """n // 4 blocks of three ops, each output read by the next op; a block's input is also
    read 2-4 blocks on (a skip), and its last op writes in place of the one before."""
    sizes, reqs, ow = [64 * rng.choice([64, 256, 1024]) for _ in range(3)], [], []
    for b in range(n // 4):
        size, s0 = sizes[b // 8 % 3], 4 * b
        reqs.append(Request(f"in{b}", s0, s0 + 4 * rng.randint(2, 4), size))
        reqs += [Request(f"c{b}_{k}", s0 + k, s0 + k + 2, size) for k in range(3)]
        ow.append(Overwrite(f"c{b}_1", f"c{b}_2"))
    return reqs, ow


SHAPES = {"inference_chain": inference_chain, "training_graph": training_graph,
          "residual_net": residual_net}


# ---------------------------------------------------------------------------------------------
# Exact small cases.


@pytest.mark.parametrize("strategy", ALL)
def test_chain_has_known_optimum(strategy):
    # a -> b -> c: a and c never live together, so they share bytes; b sits beside both.
    reqs = [Request("a", 0, 2, 100), Request("b", 1, 3, 64), Request("c", 2, 4, 100)]
    plan = checked(reqs, strategy=strategy)
    assert (plan.total, plan.lower_bound, plan.naive) == (192, 192, 320)
    assert plan.offsets["a"] == plan.offsets["c"] != plan.offsets["b"]


def test_greedy_by_size_offsets_exactly():
    reqs = [Request("a", 0, 2, 100), Request("b", 1, 3, 64), Request("c", 2, 4, 100)]
    plan = checked(reqs, strategy="greedy_by_size")
    assert plan.offsets == {"a": 0, "b": 128, "c": 0}
    assert plan.strategy == "greedy_by_size"


@pytest.mark.parametrize("strategy", ALL)
def test_disjoint_lifetimes_share_offset_zero(strategy):
    reqs = [Request("x", 0, 1, 1000), Request("y", 1, 2, 640), Request("z", 5, 9, 64)]
    plan = checked(reqs, strategy=strategy)
    assert plan.offsets == {"x": 0, "y": 0, "z": 0}
    assert plan.total == plan.lower_bound == 1024


def chain_requests(seed: int) -> list:
    """Each buffer read by the next op only, or now and then by one a few steps on."""
    rng = random.Random(seed)
    return [Request(i, i, i + (2 if rng.random() < 0.7 else rng.randint(3, 6)),
                    log_uniform_size(rng)) for i in range(rng.randint(2, 300))]


def test_lower_bound_is_met_on_chains():
    for seed in range(40):
        reqs = chain_requests(seed)
        plan = checked(reqs)
        assert plan.total == plan.lower_bound, dump(reqs)


def test_empty_and_single():
    assert checked([]).total == 0
    plan = checked([Request(0, 0, 1, 10)])
    assert (plan.offsets, plan.total, plan.lower_bound, plan.naive) == ({0: 0}, 64, 64, 64)


def test_best_is_no_worse_than_any_strategy():
    rng = random.Random(7)
    for _ in range(20):
        reqs = random_intervals(rng, rng.randint(2, 80))
        best = checked(reqs)
        assert all(best.total <= checked(reqs, strategy=s).total for s in STRATEGIES)
        assert best.strategy.split("+")[0] in STRATEGIES


def test_solve_is_deterministic():
    reqs = random_intervals(random.Random(3), 150)
    assert solve(reqs).offsets == solve(list(reqs)).offsets


# ---------------------------------------------------------------------------------------------
# In place, alignment, empty buffers.


@pytest.mark.parametrize("strategy", ALL)
def test_in_place_chain_shares_one_block(strategy):
    # a -> relu -> b -> relu -> c, each in place of the last; w is live throughout.
    reqs = [Request("a", 0, 2, 256), Request("b", 1, 3, 256), Request("c", 2, 4, 256),
            Request("w", 0, 4, 64)]
    ow = [Overwrite("a", "b"), Overwrite("b", "c")]
    plan = checked(reqs, ow, strategy=strategy)
    assert plan.offsets["a"] == plan.offsets["b"] == plan.offsets["c"]
    assert plan.total == plan.lower_bound == 320
    assert plan.naive == 832


def test_in_place_at_an_offset_frees_the_rest_of_the_source():
    # dst lives in the top half of src; once src dies, z can take the bottom half.
    reqs = [Request("src", 0, 2, 256), Request("dst", 1, 4, 64), Request("z", 2, 4, 128)]
    ow = [Overwrite("src", "dst", offset=128)]
    plan = checked(reqs, ow)
    assert plan.offsets["dst"] == plan.offsets["src"] + 128
    assert plan.total == plan.lower_bound == 256


def test_lower_bound_counts_an_in_place_pair_once():
    reqs = [Request("a", 0, 2, 128), Request("b", 1, 3, 128)]
    assert lower_bound(reqs) == 256
    assert lower_bound(reqs, [Overwrite("a", "b")]) == 128


def test_split_into_disjoint_halves():
    reqs = [Request("x", 0, 2, 256), Request("lo", 1, 3, 128), Request("hi", 1, 4, 128)]
    ow = [Overwrite("x", "lo", 0), Overwrite("x", "hi", 128)]
    plan = checked(reqs, ow)
    assert plan.total == 256
    with pytest.raises(ArenaError, match="same bytes while both are live"):
        solve(reqs, [Overwrite("x", "lo", 0), Overwrite("x", "hi", 64)])


@pytest.mark.parametrize("alignment", [1, 64, 256, 4096])
def test_alignment(alignment):
    reqs = [Request(i, i % 3, i % 3 + 2, size) for i, size in enumerate([1, 100, 64, 3000, 7])]
    plan = checked(reqs, alignment=alignment)
    assert all(o % alignment == 0 for o in plan.offsets.values())
    assert plan.naive == sum(-(-r.size // alignment) * alignment for r in reqs)


def test_zero_size_buffers_need_no_space():
    reqs = [Request("e", 0, 5, 0), Request("x", 0, 2, 64), Request("y", 1, 3, 64),
            Request("in_x", 1, 2, 0)]
    plan = checked(reqs, [Overwrite("x", "in_x", 64)])
    assert plan.offsets["e"] == 0 and plan.offsets["in_x"] == plan.offsets["x"] + 64
    assert plan.total == plan.lower_bound == 128


# ---------------------------------------------------------------------------------------------
# The checker catches each kind of bad plan, and solve each kind of bad input.


def plan_of(offsets, total=256):
    return ArenaPlan(offsets=offsets, total=total, lower_bound=0, strategy="hand", naive=0)


TWO = [Request("a", 0, 2, 128), Request("b", 1, 3, 128)]


def test_verify_accepts_a_good_hand_plan():
    verify_arena(plan_of({"a": 0, "b": 128}), TWO)
    verify_arena(plan_of({"a": 0, "b": 0}, total=128), TWO, [Overwrite("a", "b")])


@pytest.mark.parametrize("offsets, total, overwrites, message", [
    ({"a": 0, "b": 64}, 256, (), "'a' at \\[0, 128\\).*'b' at \\[64, 192\\).*share bytes"),
    ({"a": 0, "b": 192}, 256, (), "'b': bytes \\[192, 320\\) fall outside the arena"),
    ({"a": -64, "b": 128}, 256, (), "'a': bytes \\[-64, 64\\) fall outside"),
    ({"a": 0, "b": 100}, 256, (), "'b': offset 100 is not a multiple of 64"),
    ({"a": 0, "b": 128}, 256, [Overwrite("a", "b")], "not honoured: 'b' is at 128, not 0"),
    ({"a": 0}, 256, (), "'b' has no offset"),
])
def test_verify_rejects(offsets, total, overwrites, message):
    with pytest.raises(ArenaError, match=message):
        verify_arena(plan_of(offsets, total), TWO, overwrites)


def test_verify_tells_a_chain_from_siblings():
    # a -> b -> c in place, each live one step: a and c overlap in time and bytes, legally.
    reqs = [Request("a", 0, 2, 64), Request("b", 1, 2, 64), Request("c", 1, 3, 64)]
    chain = [Overwrite("a", "b"), Overwrite("b", "c")]
    verify_arena(plan_of({"a": 0, "b": 0, "c": 0}, 64), reqs, chain)
    siblings = [Overwrite("a", "b"), Overwrite("a", "c")]
    with pytest.raises(ArenaError, match="'b'.*'c'.*share bytes"):
        verify_arena(plan_of({"a": 0, "b": 0, "c": 0}, 64), reqs, siblings)


@pytest.mark.parametrize("requests, overwrites, message", [
    ([Request("a", 0, 1, 8), Request("a", 1, 2, 8)], (), "duplicate request key 'a'"),
    ([Request("a", 2, 2, 8)], (), "need int begin < end"),
    ([Request("a", 0, 1, -1)], (), "size must be an int >= 0"),
    (TWO, [Overwrite("a", "zz")], "unknown key"),
    (TWO, [Overwrite("b", "a")], "dst must begin at src's last step 2"),
    ([Request("a", 0, 2, 64), Request("b", 1, 3, 128)], [Overwrite("a", "b")], "must fit"),
    (TWO, [Overwrite("a", "b", 32)], "aligned to 64"),
    ([*TWO, Request("c", 1, 2, 8)], [Overwrite("a", "c"), Overwrite("b", "c")],
     "'c' already overwrites 'a'"),
    ([Request("a", 0, 1, 64), Request("b", 0, 1, 64)],
     [Overwrite("a", "b"), Overwrite("b", "a")], "cycle"),
])
def test_solve_rejects_bad_input(requests, overwrites, message):
    with pytest.raises(ArenaError, match=message):
        solve(requests, overwrites)


def test_solve_rejects_unknown_strategy_and_alignment():
    with pytest.raises(ArenaError, match="unknown strategy 'fastest'.*greedy_by_size"):
        solve(TWO, strategy="fastest")
    with pytest.raises(ArenaError, match="alignment must be a positive int"):
        solve(TWO, alignment=0)


# ---------------------------------------------------------------------------------------------
# Replay, and the internals that two code paths must agree on.


def test_dump_load_round_trip_replays_the_same_plan():
    reqs = random_intervals(random.Random(11), 60) + [Request("x", 3, 6, 256),
                                                      Request("in", 5, 9, 64)]
    ow = [Overwrite("x", "in", 128)]
    again = load(dump(reqs, ow))
    assert again == (reqs, ow)
    assert checked(*again).offsets == checked(reqs, ow).offsets


def test_neighbour_lists_match_brute_force():
    rng = random.Random(5)
    for _ in range(50):
        n = rng.randint(0, 60)
        begin = sorted(rng.randrange(30) for _ in range(n))
        end = [b + rng.randint(1, 10) for b in begin]
        start, cols = arena_place._neighbour_lists(np.array(begin), np.array(end))
        for r in range(n):
            want = [q for q in range(n) if q != r and begin[q] < end[r] and begin[r] < end[q]]
            assert cols[start[r]:start[r + 1]].tolist() == want


def test_numpy_and_python_scans_agree(monkeypatch):
    rng = random.Random(2)
    cases = [random_intervals(rng, rng.randint(2, 120)) for _ in range(15)]
    want = [[solve(c, strategy=s).offsets for s in STRATEGIES] for c in cases]
    monkeypatch.setattr(arena_place, "_SMALL", -1)  # every neighbour scan goes through NumPy
    assert [[solve(c, strategy=s).offsets for s in STRATEGIES] for c in cases] == want


# ---------------------------------------------------------------------------------------------
# Seeded fuzzing. Ratios are arena bytes over the lower bound, logged per strategy; these are
# the first cases of the longer runs in benchmarks/test_arena_speed.py, which log 200 each.


def fuzz_ratios(make, record_property, label, cases=40):
    rng = random.Random(2024)
    ratios = {s: [] for s in ALL}
    for _ in range(cases):
        reqs = make(rng, rng.randint(2, 200))
        for s in ALL:
            ratios[s].append(checked(reqs, strategy=s).ratio)
    for s, r in ratios.items():
        line = f"{label} {s}: mean {statistics.mean(r):.4f} max {max(r):.4f}"
        print(line)
        record_property(f"{label}_{s}", line)
    return ratios


def test_fuzz_random_intervals(record_property):
    ratios = fuzz_ratios(random_intervals, record_property, "intervals")
    assert statistics.mean(ratios["best"]) <= 1.10


def test_fuzz_random_dags(record_property):
    ratios = fuzz_ratios(random_dag, record_property, "dags")
    assert statistics.mean(ratios["best"]) <= 1.10


def in_place_case(rng, n) -> tuple[list, list]:
    """Random intervals, 40% of them overwritten in place at some offset, chains included."""
    reqs, ow, i = random_intervals(rng, n), [], 0
    while i < len(reqs):  # a dst may be overwritten in turn: chains
        src, i = reqs[i], i + 1
        if rng.random() < 0.4:
            size = rng.randint(0, src.size)
            offset = rng.randrange(0, src.size - size + 1) // 64 * 64
            dst = Request(f"in{src.key}", src.end - 1, src.end + rng.randint(0, 5), size)
            reqs.append(dst)
            ow.append(Overwrite(src.key, dst.key, offset))
    return reqs, ow


def test_fuzz_in_place(cases=12):
    rng = random.Random(99)
    for _ in range(cases):
        reqs, ow = in_place_case(rng, rng.randint(2, 80))
        for s in ALL:
            checked(reqs, ow, strategy=s)


def test_ten_thousand_requests():
    rng = random.Random(10_000)
    reqs = []
    for i in range(10_000):  # a schedule's worth: most buffers short-lived, a few long
        begin = rng.randrange(10_000)
        reqs.append(Request(i, begin, begin + max(1, int(256 ** rng.random())),
                            log_uniform_size(rng)))
    checked(reqs, strategy="greedy_by_size")


# ---------------------------------------------------------------------------------------------
# Graph-shaped cases, and the two paths that only big problems take: the placement without
# neighbour lists (dense problems) and the search by windows of time (big sparse ones).


@pytest.mark.parametrize("shape", SHAPES)
def test_graph_shapes(shape):
    reqs, ow = SHAPES[shape](random.Random(1), 2_000)
    plans = {s: checked(reqs, ow, strategy=s) for s in ALL}
    assert plans["best"].total == min(p.total for p in plans.values())
    if shape == "inference_chain":
        assert plans["best"].total == plans["best"].lower_bound


def test_training_graphs_are_placed_without_lists_at_scale():
    reqs, ow = training_graph(random.Random(0), 10_000)
    assert arena_place.normalise(reqs, ow, 64).live is None
    plan = checked(reqs, ow, strategy="greedy_by_size")
    assert plan.total == plan.lower_bound


def test_only_nested_long_lives_count_as_dense(monkeypatch):
    nested = [Request(i, i, 100 - i, 64 * (1 + i % 3)) for i in range(40)]
    assert arena_place._nests(arena_place.normalise(nested, (), 64))
    # On the skyline w goes above y, though x has died and left it room at 0.
    monkeypatch.setattr(arena_place, "_LONG", 0)
    crossing = [Request("x", 0, 10, 256), Request("y", 5, 30, 128), Request("w", 12, 20, 128)]
    assert not arena_place._nests(arena_place.normalise(crossing, (), 64))


def dense_cases():
    rng = random.Random(31)
    yield from ((random_intervals(rng, rng.randint(2, 120)), ()) for _ in range(6))
    yield from (in_place_case(rng, rng.randint(2, 80)) for _ in range(6))
    yield training_graph(rng, 300)
    yield residual_net(rng, 300)


def test_dense_placement_is_legal(monkeypatch):
    monkeypatch.setattr(arena_place, "_DENSE", -1)
    monkeypatch.setattr(arena_place, "_nests", lambda prob: True)
    monkeypatch.setattr(arena_place, "_LONG", 3)  # many long buffers, on the skyline
    for reqs, ow in dense_cases():
        assert arena_place.normalise(reqs, ow, 64).live is None
        for s in ALL:
            checked(reqs, ow, strategy=s)


def test_dense_placement_equals_lists_when_nothing_is_long(monkeypatch):
    # Then it places every block by the same rule against the same placed neighbours.
    monkeypatch.setattr(arena_place, "_LONG", 1 << 30)
    for reqs, ow in dense_cases():
        prob = arena_place.normalise(reqs, ow, 64)
        for strategy in STRATEGIES.values():
            order = strategy.order(prob)
            assert arena_place._place_dense(prob, order, strategy.fit) == \
                arena_place.place(prob, order, strategy.fit)


def test_runs_per_step_match_the_union_of_live_ranges():
    rng = random.Random(8)
    for _ in range(30):
        steps, height, arrive, leave, live = 12, [0] * 12, [[] for _ in range(12)], \
            [[] for _ in range(13)], []
        for _ in range(rng.randint(0, 20)):  # a skyline of touching ranges, as the solver makes
            b = rng.randrange(steps)
            e = rng.randint(b + 1, steps)
            o = max(height[b:e])
            size = rng.choice([64, 128])
            height[b:e] = [o + size] * (e - b)  # flat on top: ranges at one step stay disjoint
            arrive[b].append((o, o + size))
            leave[e].append((o, o + size))
            live.append((b, e, o, o + size))
        for t, runs in enumerate(arena_place._runs_per_step(arrive, leave)):
            covered = {x for b, e, lo, hi in live if b <= t < e for x in range(lo, hi)}
            assert {x for lo, hi in runs for x in range(lo, hi)} == covered
            assert all(hi < lo2 for (_, hi), (lo2, _) in zip(runs, runs[1:]))  # merged


def test_windows_meet_the_bound_on_chains(monkeypatch):
    monkeypatch.setattr(arena_search, "_WHOLE", -1)  # every search goes by windows
    for seed in range(20):
        reqs = chain_requests(seed)
        plan = checked(reqs)
        assert plan.total == plan.lower_bound, dump(reqs)


def test_windows_keep_plans_legal(monkeypatch):
    monkeypatch.setattr(arena_search, "_WHOLE", -1)
    rng = random.Random(12)
    for _ in range(12):
        reqs, ow = in_place_case(rng, rng.randint(2, 120))
        best = checked(reqs, ow)
        assert all(best.total <= checked(reqs, ow, strategy=s).total for s in STRATEGIES)
