"""Offset assignment: exact small cases, the checker catching each kind of bad plan, and seeded
fuzzing that logs arena bytes over the lower bound. Every plan made here goes through verify."""
import random
import statistics
import time

import numpy as np
import pytest

from mgegraph.planner import arena
from mgegraph.planner.arena import (STRATEGIES, ArenaError, ArenaPlan, Overwrite, Request, dump,
                                    load, lower_bound, solve, verify)

ALL = [*STRATEGIES, "best"]


def checked(requests, overwrites=(), alignment=64, strategy="best") -> ArenaPlan:
    """solve, then verify; a failure message carries the case as replayable JSON."""
    plan = solve(requests, overwrites, alignment, strategy)
    try:
        verify(plan, requests, overwrites, alignment)
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


def test_lower_bound_is_met_on_chains():
    for seed in range(40):
        rng = random.Random(seed)
        n = rng.randint(2, 300)
        # Each buffer read by the next op only, or now and then by one a few steps on.
        reqs = [Request(i, i, i + (2 if rng.random() < 0.7 else rng.randint(3, 6)),
                        log_uniform_size(rng)) for i in range(n)]
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
    verify(plan_of({"a": 0, "b": 128}), TWO)
    verify(plan_of({"a": 0, "b": 0}, total=128), TWO, [Overwrite("a", "b")])


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
        verify(plan_of(offsets, total), TWO, overwrites)


def test_verify_tells_a_chain_from_siblings():
    # a -> b -> c in place, each live one step: a and c overlap in time and bytes, legally.
    reqs = [Request("a", 0, 2, 64), Request("b", 1, 2, 64), Request("c", 1, 3, 64)]
    chain = [Overwrite("a", "b"), Overwrite("b", "c")]
    verify(plan_of({"a": 0, "b": 0, "c": 0}, 64), reqs, chain)
    siblings = [Overwrite("a", "b"), Overwrite("a", "c")]
    with pytest.raises(ArenaError, match="'b'.*'c'.*share bytes"):
        verify(plan_of({"a": 0, "b": 0, "c": 0}, 64), reqs, siblings)


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
        start, cols = arena._neighbour_lists(np.array(begin), np.array(end))
        for r in range(n):
            want = [q for q in range(n) if q != r and begin[q] < end[r] and begin[r] < end[q]]
            assert cols[start[r]:start[r + 1]].tolist() == want


def test_numpy_and_python_scans_agree(monkeypatch):
    rng = random.Random(2)
    cases = [random_intervals(rng, rng.randint(2, 120)) for _ in range(15)]
    want = [[solve(c, strategy=s).offsets for s in STRATEGIES] for c in cases]
    monkeypatch.setattr(arena, "_SMALL", -1)  # every neighbour scan goes through NumPy
    assert [[solve(c, strategy=s).offsets for s in STRATEGIES] for c in cases] == want


# ---------------------------------------------------------------------------------------------
# Seeded fuzzing. Ratios are arena bytes over the lower bound, logged per strategy.


def fuzz_ratios(make, record_property, label):
    rng = random.Random(2024)
    ratios = {s: [] for s in ALL}
    for _ in range(200):
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


def test_fuzz_in_place():
    rng = random.Random(99)
    for _ in range(30):
        reqs, ow, i = random_intervals(rng, rng.randint(2, 80)), [], 0
        while i < len(reqs):  # a dst may be overwritten in turn: chains
            src, i = reqs[i], i + 1
            if rng.random() < 0.4:
                size = rng.randint(0, src.size)
                offset = rng.randrange(0, src.size - size + 1) // 64 * 64
                dst = Request(f"in{src.key}", src.end - 1, src.end + rng.randint(0, 5), size)
                reqs.append(dst)
                ow.append(Overwrite(src.key, dst.key, offset))
        for s in ALL:
            checked(reqs, ow, strategy=s)


def test_ten_thousand_requests(record_property):
    rng = random.Random(10_000)
    reqs = []
    for i in range(10_000):  # a schedule's worth: most buffers short-lived, a few long
        begin = rng.randrange(10_000)
        reqs.append(Request(i, begin, begin + max(1, int(256 ** rng.random())),
                            log_uniform_size(rng)))
    start = time.perf_counter()
    plan = solve(reqs, strategy="greedy_by_size")
    took = time.perf_counter() - start
    verify(plan, reqs)
    assert plan.total >= plan.lower_bound
    line = f"10k greedy_by_size: {took:.2f} s, ratio {plan.ratio:.4f}"
    print(line)
    record_property("ten_thousand", line)
