"""The end of a job's NCCL communicators (``group.end_nccl``, at interpreter exit too), without
a GPU, over the recording fakes of libnccl and the driver (nccl_fake.py): every CUDA plan with
collectives closed first (graph, both streams' work awaited, memory), then ncclCommDestroy,
once; nothing after a failed init, nothing in a forked child."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_jobs import _env
from nccl_fake import COMM_STREAM, HANDLE, PLAN_STREAM, data_parallel_step, fake_job

from mgegraph.cuda.errors import DeviceUnavailableError
from mgegraph.distributed import group, nccl

HERE = Path(__file__).resolve().parent


@pytest.fixture
def job(monkeypatch):
    yield from fake_job(monkeypatch, "cuda-nccl-end-fake")


def _step():
    return data_parallel_step("cuda-nccl-end-fake", bucket_mb=0.02)


def _names(log) -> list:
    return [e[0] if e[0] != "record" else ("record", e[2]) for e in log]


def test_plans_close_and_their_work_ends_before_the_communicator_is_destroyed(job):
    step = _step()
    ex = step.plan.executable()
    ex.launch()
    ex.launch()  # captured: the graph holds NCCL calls, destroyed before the communicator
    done = ex.collectives.done
    del job[:]
    group.end_nccl()
    assert job[-1] == ("ncclCommDestroy", HANDLE)
    assert [e for e in job if e[0].startswith("nccl")] == [("ncclCommDestroy", HANDLE)]
    assert job.index(("destroy_graph", "graph")) < job.index(("record", done, COMM_STREAM)) \
        < job.index(("wait_event", PLAN_STREAM, done)) \
        < job.index(("record", done, PLAN_STREAM)) < job.index(("destroy_stream", COMM_STREAM))
    assert [e[0] for e in job].count("free") == 2  # arena and persistent block, before it
    with pytest.raises(DeviceUnavailableError, match="closed"):
        ex.launch()


def test_a_second_end_and_a_later_close_do_nothing_and_a_new_plan_makes_a_new_communicator(
        job):
    step = _step()
    ex = step.plan.executable()
    comm = ex.collectives.comms["0,1"]
    group.end_nccl()
    del job[:]
    group.end_nccl()
    ex.close()
    comm.destroy()
    comm.abort()
    assert job == []
    with pytest.raises(nccl.NcclError, match="destroyed"):
        comm.all_reduce(0x100, 0x100, 4, np.float32, PLAN_STREAM)
    again = _step()
    again.plan.executable().launch()
    assert ("ncclCommInitRank", 2, b"\x07\x07", 0) in job


def test_a_failed_init_leaves_nothing_to_end(job, monkeypatch):
    def refused(self, handle, size, uid, rank):
        self.log.append(("ncclCommInitRank", size, rank))
        return 2  # ncclSystemError

    from nccl_fake import FakeNccl  # (its class, patched for this test only)
    monkeypatch.setattr(FakeNccl, "ncclCommInitRank", refused)
    step = _step()
    with pytest.raises(nccl.NcclError, match="ncclCommInitRank"):
        step.plan.executable()
    assert group._job.nccl == {}
    del job[:]
    group.end_nccl()
    assert job == []


def test_an_aborted_communicator_is_not_awaited_nor_destroyed(job):
    step = _step()
    ex = step.plan.executable()
    ex.collectives.comms["0,1"].abort()
    del job[:]
    group.end_nccl()
    assert ("ncclCommDestroy", HANDLE) not in job and not any(e[0] == "record" for e in job)
    assert ("destroy_stream", COMM_STREAM) in job


def test_a_forked_child_neither_ends_nor_uses_its_parents_communicator(job):
    step = _step()
    comm = step.plan.executable().collectives.comms["0,1"]
    comm.pid = os.getpid() + 1  # as the child sees the communicator its parent made
    del job[:]
    comm.destroy()
    comm.abort()
    assert job == []
    with pytest.raises(nccl.NcclError, match="fork"):
        comm.all_reduce(0x100, 0x100, 4, np.float32, PLAN_STREAM)


# a process that makes a plan of the fake job and exits with it open (``{fork}``: what it
# does before), printing its pid and each end the fakes record
EXITING = """
import os, sys
sys.path.insert(0, {here!r})
import pytest
import nccl_fake
import test_nccl_end as t

class Printing(list):
    def append(self, entry):
        if entry[0] in ("ncclCommDestroy", "destroy_stream", "free"):
            print(os.getpid(), entry[0], flush=True)
        super().append(entry)

next(nccl_fake.fake_job(pytest.MonkeyPatch(), "cuda-nccl-end-fake", Printing()))
step = t._step()
step.plan.executable().launch()
{fork}
print(os.getpid(), "exiting", flush=True)
"""


def _exit_lines(fork: str) -> list[list[str]]:
    done = subprocess.run([sys.executable, "-c", EXITING.format(here=str(HERE), fork=fork)],
                          capture_output=True, text=True, env=_env(), timeout=300, check=True)
    return [line.split(" ", 1) for line in done.stdout.splitlines()]


def test_at_exit_the_plans_close_then_the_communicator_is_destroyed_once():
    lines = _exit_lines("")
    events = [what for _, what in lines]
    assert events[0] == "exiting"
    assert events.count("ncclCommDestroy") == 1 and events[-1] == "ncclCommDestroy"
    assert events.index("destroy_stream") < events.index("free") < events.index(
        "ncclCommDestroy")


def test_a_forked_child_exits_without_ending_its_parents_communicator():
    lines = _exit_lines("if os.fork() == 0:\n    sys.exit(0)\nos.wait()")
    destroyed = [pid for pid, what in lines if what == "ncclCommDestroy"]
    exited = {pid for pid, what in lines if what == "exiting"}
    assert len(exited) == 1 and destroyed == list(exited)  # the parent's, once; not the child's
