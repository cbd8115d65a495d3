"""The best share of a step's all-reduce its order of sends and waits can hide
(``benchmarks/distributed_scaling.py``'s ``best_hidden``), on steps worked out by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from distributed_scaling import best_hidden  # noqa: E402


def test_a_bucket_sent_after_the_last_computation_hides_nothing():
    # the first layer's gradients complete the bucket at the end of the backward pass
    events = [("compute", 5.0), ("start", 0), ("wait", 0), ("compute", 1.0)]
    assert best_hidden(events, {0: 2.0}) == 0.0


def test_a_bucket_hides_behind_the_computation_after_its_start():
    events = [("compute", 1.0), ("start", 0), ("compute", 1.5), ("wait", 0)]
    assert best_hidden(events, {0: 2.0}) == pytest.approx(0.75)  # 1.5 of 2 s hidden
    assert best_hidden(events, {0: 1.0}) == 1.0


def test_buckets_share_one_link_in_the_order_sent():
    # bucket 1 is ready at 1 s but the link is busy with bucket 0 until 3 s: it arrives at 5,
    # after the computation (4 s), so 1 s of the 4 s of communication shows
    events = [("start", 0), ("compute", 1.0), ("start", 1), ("compute", 3.0), ("wait", 0),
              ("wait", 1)]
    assert best_hidden(events, {0: 3.0, 1: 2.0}) == pytest.approx(1 - 1 / 5)


def test_a_wait_holds_the_computation_after_it():
    # bucket 0 is awaited early (2 s late), bucket 1 then starts 2 s later than it could
    events = [("start", 0), ("compute", 1.0), ("wait", 0), ("start", 1), ("compute", 1.0),
              ("wait", 1)]
    assert best_hidden(events, {0: 3.0, 1: 1.0}) == pytest.approx(1 - 2 / 4)


def test_no_bucket_means_nothing_to_hide():
    assert best_hidden([("compute", 1.0)], {}) == 0.0


def test_the_split_column_adds_the_machine_exposed_and_rest_parts():
    from distributed_scaling import _split, summary

    one = {"step_s": 0.100}
    ours = {"step_s": 0.150, "split": {"step_s": 0.150, "quiet_s": 0.130, "exposed_s": 0.012,
                                       "rest_s": 0.008, "kernels_s": 0.005, "outside_s": 0.003}}
    ddp = {"step_s": 0.150, "split": {"step_s": 0.150, "quiet_s": 0.140, "exposed_s": None,
                                      "rest_s": 0.010}}
    assert _split(one, ours) == "+30.0/12.0/8.0(3.0)"
    assert _split(one, ddp) == "+40.0/-/10.0"
    assert _split(one, {"step_s": 0.150}) == "-"  # a job without the split (an old result)
    later = {**ours, "split": {**ours["split"], "quiet_s": 0.150, "exposed_s": 0.020}}
    rounds = [{("mlp-train", "mgegraph", 1): one, ("mlp-train", "mgegraph", 2): two,
               ("mlp-train", "torch ddp", 1): one, ("mlp-train", "torch ddp", 2): ddp}
              for two in (ours, later, later)]
    rows = [r for r in summary(rounds, ["mlp-train"]) if r.startswith("mlp-train ")]
    assert rows[0].endswith("+50.0/20.0/8.0(3.0)")  # each part's median over the rounds
    assert rows[1].endswith("+40.0/-/10.0")
