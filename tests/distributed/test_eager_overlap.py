"""The eager all-reduce callback sends each full bucket while the GradManager's backward walk
goes on (``ranks/eager_overlap.py``), with the same bits as every rank's gradient averaged in
NumPy, and a rank whose backward fails half way stops the others with its error named."""
from __future__ import annotations

from mpi_jobs import reports


def test_buckets_are_sent_during_the_walk_and_sum_bitwise():
    for r in reports("eager_overlap.py", 2):
        assert len(r["buckets"]) >= 4, r
        # the buckets of the last three layers left before the walk was over (the first
        # layer's when its last node was walked, and its bias at the end)
        assert sum(left > 0 for left in r["left"]) >= 3 and r["left"] == sorted(
            r["left"], reverse=True), r
        assert r["bitwise"], r


def test_a_rank_failing_mid_backward_stops_the_others_with_its_error():
    ranks = reports("eager_overlap.py", 2)
    assert ranks[1]["failure"] == "ValueError: rank 1's backward fails on purpose", ranks[1]
    assert ranks[0]["failure"].startswith(
        "DistributedError: make_allreduce_cb: rank 1 failed during its backward pass "
        "(ValueError: rank 1's backward fails on purpose); no gradient of this step was "
        "applied"), ranks[0]
    for r in ranks:
        assert r["sent_before_failing"] >= 2, r  # buckets were under way when it failed
        assert r["elapsed"] < 10, r  # at once, not at the 20 s timeout
        assert r["untouched"] and r["again"], r
