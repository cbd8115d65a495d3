"""The eager all-reduce callback's agreement on each bucket is a non-blocking check: a rank
goes on walking while another is slow (``ranks/overlap_checks.py``), and a bucket the ranks
fill differently is refused during the walk, naming both, with no gradient landing."""
from __future__ import annotations

from mpi_jobs import reports


def test_a_slow_rank_does_not_stop_the_others_walk():
    fast, slow = reports("overlap_checks.py", 2)
    assert len(fast["buckets"]) >= 4, fast
    # rank 1 sleeps 0.6 s after two buckets: rank 0 ends its walk first and waits for the
    # sums after it (a blocking check would hold it at its third bucket)
    assert fast["walk_s"] < 0.3 < 0.55 < fast["backward_s"], fast
    assert slow["walk_s"] > 0.55, slow
    assert fast["thread"] == slow["thread"] == [True, False], fast  # started, resting now


def test_a_bucket_filled_differently_is_refused_during_the_walk_naming_both_ranks():
    for r in reports("overlap_checks.py", 2):
        assert r["failure"] is not None and "make_allreduce_cb: rank" in r["failure"], r
        # the layers' shapes alike, rank 1's lists are rank 0's less one layer: its walk ends
        # (its last round) while rank 0 still walks, at rank 0's 7th gradient
        assert ("rank 0 has gradients 7 in all, rank 1 6 in all" in r["failure"]
                or "rank 1 has gradients 6 in all, rank 0 7 in all" in r["failure"]), r
        assert r["untouched"] and r["ranks_agree"], r
