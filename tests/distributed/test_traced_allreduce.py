"""``mg.jit.trace`` of MegEngine's data-parallel step (a GradManager with ``make_allreduce_cb``)
makes a plan whose gradients are all-reduced by start/wait pairs over buckets, as a compiled
step's, and trains as the eager step does (``ranks/traced_train.py``)."""
from __future__ import annotations

import pytest
from mpi_jobs import reports


@pytest.mark.parametrize("n", [2, 4])
def test_a_traced_data_parallel_step_buckets_its_all_reduce_and_matches_eager(n):
    for r in reports("traced_train.py", n):
        assert r["loss_gap"] < 1e-6 and r["weight_gap"] < 1e-6, r
        # 6 gradients in buckets of 2 KiB: several buckets, each a start and a wait
        assert 1 < r["starts"] == r["waits"] < r["parameters"] and r["blocking"] == 0, r
        assert r["ranks_agree"], r
