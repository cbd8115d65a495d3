"""The progress thread of the eager all-reduce callback (``communicator.ProgressThread``)
lets MPI move a bucket while the process makes no MPI call (``ranks/progress_thread.py``)."""
from __future__ import annotations

from mpi_jobs import reports


def test_the_progress_thread_moves_an_all_reduce_while_the_process_sleeps():
    for r in reports("progress_thread.py", 2):
        assert r["available"], r  # MPICH's binary interface, MPI_THREAD_MULTIPLE
        assert r["with_thread"] == [True] * 3, r
        assert r["without"] == [False] * 3, r  # the control: MPICH alone did not move it


def test_a_compiled_step_with_the_progress_thread_gives_the_same_bits():
    for r in reports("planned_progress_thread.py", 2):
        assert r["available"], r
        assert r["same_losses"] and r["same_weights"], r
        assert r["held"] == 6 and r["resting"], r  # held around each of the 6 runs only
