"""The communicator an all-reduce callback duplicates is given back to MPI
(``ranks/many_callbacks.py``): 3000 callbacks made one after another in a job of 2 ranks, past
MPICH's ~2000 context ids (without the frees the job fails near 2000 in MPI_Comm_idup), each
summing bitwise; ``close()`` frees at once and a closed callback refuses to be used."""
from __future__ import annotations

import pytest
from mpi_jobs import reports


def test_each_dropped_callback_frees_its_communicator():
    # the default run's short job: every dropped callback's duplicate freed (the 3000-callback
    # job below shows that MPI's context ids then last; pytest -m slow)
    for r in reports("many_callbacks.py", 2, "200", timeout=300):
        assert r["loops"] == 200 and r["wrong"] == 0 and r["freed_in_loop"] == 200, r
        assert r["freed"], r
        assert r["refused"].startswith("make_allreduce_cb: this callback was closed"), r


@pytest.mark.slow
def test_three_thousand_callbacks_do_not_use_up_mpis_communicators(request):
    if "slow" not in (request.config.getoption("markexpr") or "").replace("not slow", ""):
        pytest.skip("3000 callbacks in a job of 2 ranks (a minute): pytest -m slow")
    for r in reports("many_callbacks.py", 2, "3000", timeout=300):
        assert r["loops"] == 3000 and r["wrong"] == 0 and r["freed_in_loop"] == 3000, r
        assert r["freed"], r
        assert r["refused"].startswith("make_allreduce_cb: this callback was closed"), r
