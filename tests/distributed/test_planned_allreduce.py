"""The gradient all-reduce as planned graph ops: the bucketing pass and the memory plan on a
graph without MPI (a group of one process, whose sum is the value), then a compiled
data-parallel step on 2 processes against one process on the whole batch, and its faults."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from mpi_jobs import reports, run

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import communicator
from mgegraph._kernels import collective
from mgegraph._kernels.cpu import progress_calls
from mgegraph.io.graph_json import node_version
from mgegraph.ir.graph import Graph
from mgegraph.ops.collective import BUCKET_ALIGNMENT, all_reduce, bucket_layout
from mgegraph.planner.passes.bucket_grads import bucket_grads


@pytest.fixture
def alone(monkeypatch):
    """The group "0" of this process alone, without MPI (its all-reduce is the value)."""
    monkeypatch.setitem(communicator._GROUPS, "0",
                        communicator.Communicator(None, (0,), 0, timeout=5.0))
    return "0"


def _step_like(group: str, bucket_bytes: int):
    """A graph shaped like a training step: four 'gradients' written one after another (a
    backward pass), each marked for all_reduce, then an 'update' reading the reduced values."""
    g = Graph()
    x = g.input("x", (16, 8), np.float32)
    grads = [F.exp(x), F.sin(x), F.reshape(F.sum(x, axis=1), (16, 1)) * 3.0, F.cos(x)]
    marked = [all_reduce(v, group=group, scale=0.5, bucket_bytes=bucket_bytes) for v in grads]
    update = marked[0] + marked[1] + marked[2] + marked[3]
    return g, x, grads, marked, update


def _expected(x):
    return 0.5 * (np.exp(x) + np.sin(x) + 3.0 * x.sum(1, keepdims=True) + np.cos(x))


# -- the pass alone ---------------------------------------------------------------------------
def test_bucket_grads_packs_the_marks_in_write_order_up_to_the_bucket_size(alone):
    g, _, grads, _, update = _step_like(alone, bucket_bytes=2 * 512)
    res = bucket_grads(g, [update])
    ops = [n.op.name for n in res.graph.nodes]
    assert "all_reduce" not in ops and ops.count("all_reduce_start") == 2
    assert res.stats == {"buckets": 2, "values": 4, "bytes": 512 * 3 + 64, "left_alone": 0}
    starts = [n for n in res.graph.nodes if n.op.name == "all_reduce_start"]
    # exp and sin fill the first bucket (1024 B); the (16,1) sum joins cos in the second
    assert [len(n.inputs) for n in starts] == [2, 2]
    assert [n.attr["bucket"] for n in starts] == [0, 1]


def test_each_start_follows_its_last_value_and_each_wait_precedes_the_first_reader(alone):
    g, _, _, _, update = _step_like(alone, bucket_bytes=1 << 20)
    nodes = bucket_grads(g, [update]).graph.nodes
    names = [n.op.name for n in nodes]
    start, wait = names.index("all_reduce_start"), names.index("all_reduce_wait")
    # everything the start reads is written before it, and the node just before it is the
    # last of them (cos): the start is as early as its values allow
    written = {v.id: i for i, n in enumerate(nodes) for v in n.outputs}
    assert max(written[v.id] for v in nodes[start].inputs) == start - 1
    readers = [i for i, n in enumerate(nodes) if any(v.id in {o.id for o in nodes[wait].outputs}
                                                     for v in n.inputs)]
    assert min(readers) == wait + 1


def test_what_cannot_live_in_a_bucket_stays_a_blocking_all_reduce(alone):
    g = Graph()
    x = g.input("x", (4, 4), np.float32)
    shared = F.exp(x)                       # read by the mark and by the output below
    view = F.reshape(F.sin(x), (16,))       # a view of sin's bytes
    marks = [all_reduce(shared, group=alone, bucket_bytes=4096),
             all_reduce(view, group=alone, bucket_bytes=4096),
             all_reduce(F.cos(x), group=alone, bucket_bytes=0),  # no bucket asked for
             all_reduce(x, group=alone, bucket_bytes=4096)]       # an input
    returned = all_reduce(F.tan(x), group=alone, bucket_bytes=4096)  # the caller gets it
    res = bucket_grads(g, [-m for m in marks] + [shared, returned])
    assert res.stats == {"buckets": 0, "left_alone": 5} and not res.changed


def test_a_mark_after_its_buckets_wait_is_not_reduced_a_second_time(alone):
    # the first result is read before the second mark is made: the wait comes there, and
    # the later marks of the bucket must take its results, not reduce them again
    g = Graph()
    xs = [g.input(f"x{i}", (5,), np.float32) for i in range(3)]
    values = [-x for x in xs]
    outs = [-all_reduce(v, group=alone, bucket_bytes=4096) for v in values]
    res = bucket_grads(g, outs)
    ops = [n.op.name for n in res.graph.nodes]
    assert res.stats["buckets"] == 1 and "all_reduce" not in ops, ops
    assert ops.count("all_reduce_wait") == 1


def test_a_deterministic_mark_is_never_bucketed_and_saves_as_version_2(alone, tmp_path):
    g = Graph()
    x = g.input("x", (4, 4), np.float32)
    marks = [all_reduce(F.exp(x), group=alone, bucket_bytes=4096, deterministic=True),
             all_reduce(F.sin(x), group=alone, bucket_bytes=4096)]
    res = bucket_grads(g, [-m for m in marks])
    assert res.stats["left_alone"] == 1 and res.stats["values"] == 1, res.stats
    versions = [node_version(n) for n in g.nodes if n.op.name == "all_reduce"]
    assert versions == [2, 1]


def test_bucket_layout_puts_each_value_on_a_cache_line():
    types = [mg.ir.types.TensorType((3,), np.dtype(np.float32)),
             mg.ir.types.TensorType((5, 2), np.dtype(np.float32))]
    assert bucket_layout(types) == ((0, BUCKET_ALIGNMENT), BUCKET_ALIGNMENT + 40)


# -- the plan: memory and results -------------------------------------------------------------
@pytest.mark.parametrize("bucket_bytes", [0, 600, 1 << 20])
def test_a_planned_bucket_gives_the_unbucketed_results_and_passes_the_memory_checker(
        alone, bucket_bytes):
    g, x, _, _, update = _step_like(alone, bucket_bytes)
    feed = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    with mg.planner.checking():  # verify_plan replays the memory of every plan
        for memory in (None, "debug", "no_reuse"):
            plan = mg.compile([update], memory=memory)
            np.testing.assert_allclose(plan.run({"x": feed})[0], _expected(feed), rtol=1e-6,
                                       atol=1e-6)
    blocking = mg.compile([update], optimize=0)  # no passes: one blocking all-reduce each
    assert [ins.op for ins in blocking.instructions].count("all_reduce") == 4
    np.testing.assert_array_equal(blocking.run({"x": feed})[0], plan.run({"x": feed})[0])


def test_a_buckets_values_are_views_of_one_buffer_live_until_its_wait(alone):
    g, _, _, _, update = _step_like(alone, bucket_bytes=1 << 20)
    plan = mg.compile([update])
    (start,) = [i for i, ins in enumerate(plan.instructions) if ins.op == "all_reduce_start"]
    (wait,) = [i for i, ins in enumerate(plan.instructions) if ins.op == "all_reduce_wait"]
    members = [plan.slots[s] for s in plan.instructions[start].inputs]
    (root,) = {s.alias for s in members}
    offsets, nbytes = bucket_layout([s.type for s in members])
    assert [s.view_offset for s in members] == list(offsets)
    assert plan.slots[root].name == "bucket0" and plan.slots[root].nbytes == nbytes
    begin, end = plan.memory.spans[root]
    assert begin < start and end > wait  # written before the start, read after the wait
    assert plan.instructions[wait].outputs == plan.instructions[start].inputs  # in place
    assert "all_reduce_start[bucket=0" in str(plan) and "bucket0" in str(plan)
    assert "bucket_grads buckets 1, values 4" in plan.passes_report()


def test_the_executor_tests_each_buckets_request_between_its_start_and_its_wait(alone):
    g, x, _, _, update = _step_like(alone, bucket_bytes=1024)
    plan = mg.compile([update])
    ops = [ins.op for ins in plan.instructions]
    starts = [i for i, op in enumerate(ops) if op == "all_reduce_start"]
    waits = [i for i, op in enumerate(ops) if op == "all_reduce_wait"]
    expected = sorted((step, collective.PROGRESS, start) for start, wait in zip(starts, waits)
                      for step in range(start, wait - 1))
    assert progress_calls(plan) == expected and expected, str(plan)
    feed = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(plan.run({"x": feed})[0], _expected(feed), rtol=1e-6, atol=1e-6)
    assert progress_calls(mg.compile([F.exp(x)])) == []  # nothing for a plan without them


def test_a_step_with_all_reduce_needs_the_process_group():
    model = mg.nn.Linear(4, 2)
    opt = mg.optim.SGD(model.parameters(), 0.1)
    with pytest.raises(dist.DistributedError, match=r"compile_train_step\(all_reduce=\.\.\.\) "
                                                    r"needs the process group"):
        mg.compile_train_step(model, F.cross_entropy, opt,
                              (np.ones((2, 4), np.float32), np.zeros(2, np.int32)),
                              all_reduce=dist.AllReduce())
    with pytest.raises(dist.DistributedError, match="bucket_mb must be a number >= 0"):
        dist.AllReduce(bucket_mb=-1)


# -- on 2 and 4 processes ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_the_planned_kernels_match_numpy_on_every_dtype_they_take(n):
    for r in reports("planned_collectives.py", n):
        assert r["checks"] == 36, r  # 4 dtypes, blocking and bucketed, sum and mean, 3 shapes


@pytest.mark.parametrize("n", [2, 4])
def test_a_deterministic_all_reduce_sums_in_rank_order_bitwise(n):
    ranks = reports("deterministic.py", n)
    for r in ranks:
        # 15 kernel cases against ((x0 + x1) + ...) in NumPy, the gradient of a classifier
        # against one process adding each rank's gradient in rank order, and the eager
        # callback's bucket, all bitwise
        assert r["checks"] == 17, r
    if n == 4:  # MPI's own sum adds in another order there: the option is what fixes the bits
        assert all(r["mpi_sum_other_bits"] for r in ranks), ranks


@pytest.mark.parametrize("bucket_mb", ["0.02", "0"])
def test_a_planned_data_parallel_step_matches_one_process_on_the_whole_batch(bucket_mb):
    for r in reports("planned_train.py", 2, bucket_mb):
        assert r["loss_gap"] < 1e-5 and r["weight_gap"] < 1e-5, r
        if bucket_mb == "0":  # no buckets: a blocking all-reduce per gradient
            assert r["blocking"] == r["parameters"] and not r["starts"], r
            continue
        assert r["passes"] == {"buckets": 5, "values": 6, "bytes": 203328, "left_alone": 0}, r
        assert r["blocking"] == 0 and len(r["starts"]) == 5, r
        # every bucket travels while other instructions run (the rest of the backward pass),
        # its request tested by the executor after each of them but the last
        assert min(r["between"]) > 0, r
        assert r["progress_calls"] == sum(r["between"]), r


def _failed_job(mode: str) -> tuple[str, float]:
    start = time.monotonic()
    done = run("planned_fault.py", 2, mode, timeout=120)
    assert done.returncode != 0, done.stdout
    assert "rank 0 finished" not in done.stdout and "rank 1 finished" not in done.stdout
    return done.stdout + done.stderr, time.monotonic() - start


def test_a_rank_with_another_model_is_refused_at_the_first_planned_step_naming_both():
    output, _ = _failed_job("mismatch")
    assert ("rank 0 has batch inputs and gradients #2 of 6 as float32[2], rank 1 #2 of 6 as "
            "float32[3]" in output or "rank 1 has batch inputs and gradients #2 of 6 as "
            "float32[3], rank 0 #2 of 6 as float32[2]" in output), output


def test_a_hung_rank_makes_the_planned_wait_time_out():
    output, elapsed = _failed_job("hang")
    assert "CollectiveKernelTimeout: all_reduce_wait of group [0,1]" in output, output
    assert "timed out waiting for the other ranks" in output
    assert elapsed < 100  # rank 1 sleeps 120 s: the abort ended it


def test_the_memory_report_shows_each_bucket_and_when_it_is_sent_and_awaited(alone):
    g, _, _, _, update = _step_like(alone, bucket_bytes=1024)
    plan = mg.compile([update])
    steps = {(ins.op, dict(ins.attrs)["bucket"]): i for i, ins in enumerate(plan.instructions)
             if ins.op.startswith("all_reduce_")}
    text = plan.memory_report()
    assert "gradient buckets (2): all-reduced in place, live until their wait" in text
    bucket = plan.slots[plan.instructions[steps["all_reduce_start", 0]].inputs[0]].alias
    assert (f"bucket0 s{bucket}: 2 values, 1.00 KiB, group [0], sent at step "
            f"{steps['all_reduce_start', 0]}, awaited at step {steps['all_reduce_wait', 0]}"
            ) in text, text
    summary = json.loads(plan.memory_report(format="json"))
    assert [(b["values"], b["sent"], b["awaited"]) for b in summary["buckets"]] == [
        (2, steps["all_reduce_start", 0], steps["all_reduce_wait", 0]),
        (2, steps["all_reduce_start", 1], steps["all_reduce_wait", 1])]
