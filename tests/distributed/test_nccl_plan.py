"""A device="cuda" data-parallel step's collectives as NCCL calls, without a GPU: the CUDA
executable of a compile_train_step plan with buckets, over a recording fake of libnccl and of
the driver's Device (nccl_fake.py), in a job of two ranks made without MPI. Checked: the exact
order of NCCL calls, streams and events, each bucket's byte range against the planned slots of
its gradients, the mean's scale after each wait, the CUDA graph capture of later runs, groups
of one process (no NCCL), and the timeout's abort."""
from __future__ import annotations

import time
import weakref

import numpy as np
import pytest
from nccl_fake import (
    COMM_STREAM,
    HANDLE,
    PLAN_STREAM,
    FakeBackend,
    data_parallel_step,
    fake_job,
)

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import communicator, optim
from mgegraph.backend import get_backend, unregister_backend
from mgegraph.cuda import collective as cuda_collective
from mgegraph.cuda.errors import DeviceUnavailableError
from mgegraph.cuda.runtime import CudaExecutable
from mgegraph.demo import mlp
from mgegraph.distributed import nccl
from mgegraph.ops.collective import bucket_layout

FLOAT32 = 7  # ncclFloat32


@pytest.fixture
def job(monkeypatch):
    """A job of two ranks (this process rank 0; no MPI: the group's MPI calls are no-ops)
    whose NCCL is the recording fake, made by init_process_group(backend="nccl")."""
    yield from fake_job(monkeypatch, "cuda-nccl-fake")


def _step(bucket_mb: float, mean: bool = True):
    return data_parallel_step("cuda-nccl-fake", bucket_mb, mean)


def _executable(plan):
    return CudaExecutable(get_backend(plan.device), plan)


def _buckets(plan, ex):
    """bucket -> (base address, bytes, member addresses and sizes) from the plan's starts."""
    found = {}
    for ins in plan.instructions:
        if ins.op == "all_reduce_start":
            slots = ins.inputs
            types = [plan.slots[s].type for s in slots]
            found[dict(ins.attrs)["bucket"]] = (
                ex.address[slots[0]], bucket_layout(types)[1],
                [(ex.address[s], plan.slots[s].nbytes) for s in slots])
    return found


def test_the_job_makes_one_nccl_communicator_from_rank_0s_unique_id(job):
    step = _step(bucket_mb=0.02)
    _executable(step.plan)
    assert [e for e in job if e[0].startswith("nccl")] == [
        ("ncclGetUniqueId",), ("ncclCommInitRank", 2, b"\x07\x07", 0)]
    assert dist.get_backend() == "nccl"


def test_each_bucket_is_reduced_in_place_on_the_communication_stream(job):
    step = _step(bucket_mb=0.02)
    plan, ex = step.plan, _executable(step.plan)
    buckets = _buckets(plan, ex)
    assert len(buckets) >= 2  # the MLP's gradients do not fit one 20 KB bucket
    del job[:]
    ex.launch()
    reduces = [e for e in job if e[0] == "ncclAllReduce"]
    # send == recv (in place), count = the bucket's bytes / 4, float32, sum, the fake comm
    assert reduces == [("ncclAllReduce", base, base, nbytes // 4, FLOAT32, 0, HANDLE,
                        COMM_STREAM) for base, nbytes, _ in buckets.values()]
    for base, nbytes, members in buckets.values():
        # every gradient of the bucket lies inside the reduced bytes, in order, none twice
        assert all(base <= a and a + n <= base + nbytes for a, n in members)
        assert [a for a, _ in members] == sorted({a for a, _ in members})


def test_a_start_forks_the_communication_stream_and_its_wait_joins_it(job):
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    del job[:]
    ex.launch()
    for bucket, (started, reduced) in ex.collectives.events.items():
        record = job.index(("record", started, PLAN_STREAM))
        fork = job.index(("wait_event", COMM_STREAM, started))
        reduce_ = next(i for i, e in enumerate(job) if e[0] == "ncclAllReduce"
                       and e[1] == _buckets(step.plan, ex)[bucket][0])
        done = job.index(("record", reduced, COMM_STREAM))
        join = job.index(("wait_event", PLAN_STREAM, reduced))
        assert record < fork < reduce_ < done < join
        # the first kernel after the join scales the bucket by 1/2 (the mean of two ranks)
        after = next(e for e in job[join:] if e[0] == "launch")
        assert after[1] == "mg_collective_scale_f32"
        assert after[2] == (_buckets(step.plan, ex)[bucket][0],)
    # kernels run between a start and its wait: the reduction overlaps the backward pass
    first_start = job.index(("wait_event", COMM_STREAM, ex.collectives.events[0][0]))
    last_join = max(i for i, e in enumerate(job) if e[:2] == ("wait_event", PLAN_STREAM))
    assert any(e[0] == "launch" for e in job[first_start:last_join])


def test_later_runs_replay_one_captured_graph_with_the_nccl_calls_in_it(job):
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    ex.launch()
    del job[:]
    ex.launch()   # the second run is captured
    assert job[0] == ("begin_capture",)
    capture_end = job.index(("end_capture",))
    assert sum(e[0] == "ncclAllReduce" for e in job[:capture_end]) == len(ex.collectives.events)
    assert job[capture_end + 1] == ("replay", "graph")
    del job[:]
    ex.launch()   # and later runs only replay it
    assert [e for e in job if e[0] != "record"] == [("replay", "graph")]


def test_a_sum_is_not_scaled_and_a_blocking_all_reduce_runs_on_the_plans_stream(job):
    step = _step(bucket_mb=0, mean=False)
    ex = _executable(step.plan)
    del job[:]
    ex.launch()
    assert not any(e[0] == "launch" and "scale" in e[1] for e in job)
    reduces = [e for e in job if e[0] == "ncclAllReduce"]
    assert reduces and all(e[7] == PLAN_STREAM and e[1] != e[2] for e in reduces)
    assert not ex.collectives.events  # no bucket: nothing forked


def test_a_wait_past_the_timeout_aborts_the_communicator_and_names_the_rank(job, monkeypatch):
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    monkeypatch.setattr(type(ex.device), "query", lambda self, event: False)  # never done
    with pytest.raises(dist.CollectiveTimeout, match=r"rank 0 of group \[0,1\].*waited 0.2 s"):
        ex.launch()
    assert ("ncclCommAbort", HANDLE) in job
    with pytest.raises(nccl.NcclError, match="aborted"):
        ex.launch()


def test_a_group_of_one_process_makes_no_nccl_call(monkeypatch):
    log = []
    monkeypatch.setattr(communicator, "_GROUPS", {})
    monkeypatch.setitem(communicator._GROUPS, "0",
                        communicator.Communicator(None, (0,), 0, timeout=5.0))
    monkeypatch.setattr(cuda_collective, "_provider", None)  # none needed
    mg.register_backend("cuda-nccl-alone", lambda: FakeBackend(log, "cuda-nccl-alone"))
    try:
        from mgegraph.ops.collective import all_reduce
        g = mg.Graph()
        x = g.input("x", (8,), np.float32)
        y = all_reduce(F.exp(x), group="0", scale=0.5) + 1.0
        plan = mg.compile([y], device="cuda-nccl-alone")
        _executable(plan).launch()
    finally:
        unregister_backend("cuda-nccl-alone")
    assert not any(e[0].startswith("nccl") for e in log)
    assert any(e[0] == "launch" and e[1] == "mg_collective_scale_f32" for e in log)


def test_a_cuda_plan_without_an_nccl_backend_says_what_to_call(monkeypatch):
    monkeypatch.setattr(cuda_collective, "_provider", None)
    with pytest.raises(dist.DistributedError, match=r"init_process_group\(\).*nccl"):
        cuda_collective.communicator("0,1", 0)


def test_a_deterministic_reduction_gathers_into_the_workspace_then_sums_in_rank_order(job):
    rng = np.random.default_rng(0)
    model = mlp()
    batch = (rng.standard_normal((4, 64)).astype(np.float32),
             rng.integers(0, 10, 4).astype(np.int32))
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), 0.1),
                                 batch, device="cuda-nccl-fake",
                                 all_reduce=dist.AllReduce(deterministic=True))
    plan = step.plan
    ex = _executable(plan)
    del job[:]
    ex.launch()
    reductions = [ins for ins in plan.instructions if ins.op == "all_reduce"]
    gathers = [e for e in job if e[0] == "ncclAllGather"]
    assert len(gathers) == len(reductions) == len(list(model.parameters()))
    for ins, gather in zip(reductions, gathers):
        x, y, workspace = ins.inputs[0], ins.outputs[0], ins.workspace
        nbytes = plan.slots[x].nbytes
        assert plan.slots[workspace].nbytes >= 2 * nbytes  # both ranks' values
        # send x, receive into the workspace, as bytes (ncclUint8), on the plan's stream
        assert gather == ("ncclAllGather", ex.address[x], ex.address[workspace], nbytes, 1,
                          HANDLE, PLAN_STREAM)
        at = job.index(gather)
        assert job[at + 1] == ("launch", "mg_collective_rank_sum_f32",
                               (ex.address[workspace], ex.address[y]))
        assert job[at + 2] == ("launch", "mg_collective_scale_f32", (ex.address[y],))


def _released(log) -> list:
    return [e for e in log if e[0] in ("destroy_graph", "synchronize_stream", "destroy_event",
                                        "destroy_stream", "free")]


def test_dropping_the_plan_destroys_its_graph_stream_and_events_once_in_order(job):
    step = _step(bucket_mb=0.02)
    ex = step.plan.executable()
    ex.launch()
    ex.launch()  # captured: a graph to destroy too
    events = [e for pair in ex.collectives.events.values() for e in pair]
    done, arena, persistent = ex.collectives.done, ex.arena, ex.persistent
    closed = weakref.ref(ex)
    del job[:], ex, step
    assert closed() is None  # no cycle holds it: dropped with the plan, not at a gc pass
    assert ("record", done, COMM_STREAM) in job  # the communication stream's end, awaited
    assert _released(job) == (
        [("destroy_graph", "graph"), ("synchronize_stream", COMM_STREAM)]
        + [("destroy_event", e) for e in events + [done]]
        + [("destroy_stream", COMM_STREAM), ("free", arena), ("free", persistent)])


def test_close_is_done_once_and_a_closed_executable_refuses_to_run(job):
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    ex.close()
    released = _released(job)
    assert [e[0] for e in released].count("destroy_stream") == 1
    ex.close()
    del ex
    assert _released(job) == released
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    ex.close()
    with pytest.raises(DeviceUnavailableError, match="closed"):
        ex.launch()


def test_a_plan_dropped_mid_run_waits_for_its_communication_stream_first(job, monkeypatch):
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    ex.launch()
    busy = iter([False] * 3)  # the stream's NCCL calls end after three polls

    def query(self, event):
        job.append(("query", event))
        return next(busy, True)

    monkeypatch.setattr(type(ex.device), "query", query)
    done = ex.collectives.done
    del job[:]
    ex.close()
    polls = [i for i, e in enumerate(job) if e == ("query", done)]
    assert len(polls) == 4
    assert polls[-1] < job.index(("synchronize_stream", COMM_STREAM)) \
        < job.index(("destroy_stream", COMM_STREAM)) < min(
            i for i, e in enumerate(job) if e[0] == "free")


def test_a_plan_whose_run_timed_out_is_closed_without_waiting_again(job, monkeypatch):
    step = _step(bucket_mb=0.02)
    ex = _executable(step.plan)
    monkeypatch.setattr(type(ex.device), "query", lambda self, event: False)  # never done
    with pytest.raises(dist.CollectiveTimeout):
        ex.launch()
    started = time.monotonic()
    ex.close()  # the communicator was aborted: its kernels are gone, nothing to wait for
    assert time.monotonic() - started < 0.1
    assert ("destroy_stream", COMM_STREAM) in job
