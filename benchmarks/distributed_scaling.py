"""Data-parallel scaling from 1 to 2 processes of one thread each, per-process batch fixed
(weak scaling): mgegraph's planned all-reduce against PyTorch DistributedDataParallel (gloo).

    python benchmarks/distributed_scaling.py                       # both workloads, 30 steps
    python benchmarks/distributed_scaling.py --steps 5 mlp-train   # a smoke run
    python benchmarks/distributed_scaling.py mlp-train-eager       # eager mode's overlap
    python benchmarks/distributed_scaling.py --rounds 5 --step-only mlp-train convnet-train
                                       # the efficiency target: medians of 5 alternating rounds

Its own command, never in the test run. Each (implementation, workload, process count) is one
``mpiexec -n N`` job of this script (``--child``); rank 0 times ``--steps`` steps after two
warm-up steps, one by one, and prints the median. Efficiency is t1 / t2: the step of one
process (no communication at all) over the step of each of two processes on the same
per-process batch, the weak-scaling efficiency DDP's papers quote (1.0: communication costs
nothing). mgegraph's 2-process step is ``compile_train_step(..., all_reduce=dist.AllReduce())``.

The share of the all-reduce hidden behind the backward pass, measured from the wait kernels
(mgegraph only): under ``mg.profile()``, the time the step spends in its ``all_reduce_start``
and ``all_reduce_wait`` instructions (the communication the backward pass did not hide) against
the same buckets all-reduced alone, nothing else running (started back to back, then awaited,
as the plan sends them): hidden = 1 - exposed / alone, floored at 0. The eager rows
(``*-eager``: GradManager with ``make_allreduce_cb("mean")``, whose buckets leave during the
backward walk) count as exposed the time the step spends in the callback's sends (the ranks'
agreement, packing the bucket into one array and unpacking the sum included) and in waiting
for each bucket, the same measure without a profiler. It is printed with the executor's
progress calls (a test of each request after every instruction between its start and its
wait, the default; eager: the callback's test of the buckets under way at each gradient handed
over) and without them (``progress off``: MPI moves a bucket only inside its wait), so the
progress calls' worth is measured, not assumed. The eager rows also give the share with the
callback's progress thread (``thread on``; by default it is off: the tests at each node only;
``progress off`` has neither) and the step's time with the thread over without it,
interleaved in one process (``thread/none``, medians of 20 or more steps each).
``--async-progress`` sets ``MPIR_CVAR_ASYNC_PROGRESS=1`` (MPICH's progress thread in each
rank) for every job instead; ``--iallreduce ALGORITHM`` sets MPICH's algorithm of the
non-blocking all-reduce (``MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM``, e.g.
``sched_recursive_doubling``) for every job, to compare with MPICH's own choice.

Where the 2-process step's extra time goes (``+machine/exposed/rest(out)``, every job of 2
processes, ``--step-only`` too): in the same job, the step and the same step without the
all-reduce (mgegraph: compiled with ``all_reduce=None``; DDP: under ``no_sync()``) run
interleaved, both ranks computing at once. "machine" is that quiet step over the 1-process
step (two single-thread processes contending for the cores, caches and memory: no
communication at all); "exposed" the median time in the start and wait instructions (the
profiler's, mgegraph only: the communication the backward pass did not hide, and the wait
for a rank that is late); "rest" the step less its exposed time over the quiet step (the
mean's scaling, a schedule the waits changed, the executor's progress calls, Python), and in
brackets its part outside the instructions. DDP's exposed time is not seen (gloo works in its
own threads): its rest holds it. The parts add up to the interleaved step, whose median
differs a little from the ``2 procs ms`` timed alone. Each rank computes on one thread (the jobs
set OMP_NUM_THREADS=1: ``plan.kernels_report()`` gives 1 thread to every instruction of both
workloads' steps, and the process has one thread with CPU time), so "+machine" is what the
other process takes of the cores' time, the shared L3, the memory and the clock:
``distributed_neighbours.py`` splits it by kind of neighbour.

Beside each measured share is the best one the step's order allows (``best_hidden``): from the
step's own times (the profiler's per instruction; eager: when each bucket was ready) and each
bucket's all-reduce alone, as if messages moved by themselves at the speed they have alone: a
bucket sent when no computation is left (the first layers' gradients, last by nature) hides
nothing whatever the progress, so "12%/40%" reads: 12% hidden, of 40% possible.

``--bucket-mb`` sets every implementation's bucket size; by default each workload has its own
(``BUCKET_MB``): at MegEngine's 10 MiB the MLP's 7 MiB of gradients and the convnet's 0.37 MiB
are one bucket each, filled only when the first layer's gradient is, at the end of the
backward pass, so the best share is 0% whatever the progress; the defaults cut the MLP's into
about 8 buckets and the convnet's into 3 (the first holds the third convolution's weight,
0.28 MiB, ready before the two costliest backward convolutions).

The plan rows also give the share with ``dist.AllReduce(progress_thread=True)`` (``thread
on``: the eager callback's ``ProgressThread`` held around the plan's run, so MPI moves the
buckets during a long kernel too, not only at the executor's tests between instructions) and
the step's time with it over without (``thread/none``, interleaved in one process), as the
eager rows do.

``--rounds N`` runs every job N times, each in fresh processes, mgegraph's and DDP's jobs
alternating (mgegraph first in even rounds, DDP first in odd ones), prints each round's table,
then the medians per row and, per round, mgegraph's efficiency over DDP's (the target: at least
1) with their median. ``--step-only`` skips the hidden shares (each costs several profiled
runs per job), for the efficiency alone.

The exposed time is all the step spends in communication calls, the wait for a rank that is
late included: on a loaded machine the ranks drift apart and that wait can exceed the
all-reduce alone (a share of 0%, floored), which no progress can hide.

Under load (a shared machine) the absolute figures mean little; compare rows of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# name -> (per-process batch shape, model, mgegraph's way: a compiled step or eager code)
WORKLOADS = {"mlp-train": ((128, 784), "mlp", "plan"),
             "convnet-train": ((32, 3, 32, 32), "convnet", "plan"),
             "mlp-train-eager": ((128, 784), "mlp", "eager"),
             "convnet-train-eager": ((32, 3, 32, 32), "convnet", "eager")}
IMPLS = ("mgegraph", "torch ddp")
# name -> its bucket size in MiB unless --bucket-mb says (see the module's docstring)
BUCKET_MB = {"mlp-train": 1.0, "convnet-train": 0.05, "mlp-train-eager": 1.0,
             "convnet-train-eager": 0.05}


def _impls(workload: str) -> tuple[str, ...]:
    """Who runs ``workload``: PyTorch's DDP step is the same for the plan and eager rows, so it
    runs once, beside the plan's."""
    return IMPLS if WORKLOADS[workload][2] == "plan" else IMPLS[:1]
WARMUP = 2


# -- one rank of a job -------------------------------------------------------------------------
def _rank_batch(shape, rank: int):
    rng = np.random.default_rng([7, rank])
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.integers(0, 10, shape[0]).astype(np.int64))


def _timed_steps(step, steps: int) -> float:
    """The median seconds of ``steps`` calls of ``step`` after the warm-up ones."""
    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(steps):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def _mgegraph_rank(workload: str, steps: int, bucket_mb: float, shares: bool) -> dict:
    import workloads as W

    import mgegraph as mg
    import mgegraph.distributed as dist
    import mgegraph.functional as F
    from mgegraph import optim

    shape, kind, way = WORKLOADS[workload]
    if way == "eager":
        return _mgegraph_eager_rank(kind, shape, steps, bucket_mb, shares)
    dist.init_process_group(timeout=120)
    n, rank = dist.get_world_size(), dist.get_rank()
    mg.nn.init.manual_seed(W.SEED)
    x, y = _rank_batch(shape, rank)

    def compiled(all_reduce=dist.AllReduce(bucket_mb)):
        model = W._mlp_module() if kind == "mlp" else W._convnet()
        dist.bcast_list_(model.parameters())
        step = mg.compile_train_step(model, F.cross_entropy,
                                     optim.SGD(model.parameters(), lr=0.01), (x, y),
                                     all_reduce=all_reduce)
        return step

    step = compiled(dist.AllReduce(bucket_mb) if n > 1 else None)
    dist.group_barrier()
    result = {"step_s": _timed_steps(lambda: step(x, y), steps)}
    if n > 1:
        result["split"] = _plan_split(step, compiled(None), x, y, max(steps, 20))
    if n > 1 and shares:
        result["progress"] = _hidden_share(step, x, y, steps)
        result["no_progress"] = _hidden_share(_without_progress(compiled, x, y), x, y,
                                                    steps)
        threaded = compiled(dist.AllReduce(bucket_mb, progress_thread=True))
        result["thread_on"] = _hidden_share(threaded, x, y, steps)
        result["thread_ratio"] = _interleaved_ratio(lambda: threaded(x, y),
                                                    lambda: step(x, y), max(steps, 20))
    return result


def _mgegraph_eager_rank(kind: str, shape, steps: int, bucket_mb: float, shares: bool
                         ) -> dict:
    """The eager step (GradManager, ``make_allreduce_cb("mean")`` on 2 processes, SGD), and
    on 2 processes its hidden share, with the callback's progress tests and without."""
    import workloads as W

    import mgegraph as mg
    import mgegraph.distributed as dist
    import mgegraph.functional as F
    from mgegraph import communicator, optim

    dist.init_process_group(timeout=120)
    n = dist.get_world_size()
    mg.nn.init.manual_seed(W.SEED)
    model = W._mlp_module() if kind == "mlp" else W._convnet()
    dist.bcast_list_(model.parameters())
    allreduce = (dist.make_allreduce_cb("mean", bucket_bytes=max(1, int(bucket_mb * 2**20)))
                 if n > 1 else None)
    gm = mg.autodiff.GradManager().attach(model.parameters(), callbacks=allreduce)
    opt = optim.SGD(model.parameters(), lr=0.01)
    x, y = (mg.tensor(a) for a in _rank_batch(shape, dist.get_rank()))
    y = y.astype("int32")

    def step():
        with gm:
            gm.backward(F.cross_entropy(model(x), y))
        opt.step().clear_grad()

    dist.group_barrier()
    result = {"step_s": _timed_steps(step, steps)}
    if n > 1 and shares:
        result["progress"] = _eager_hidden_share(step, allreduce, steps)
        thread = communicator.ProgressThread()
        allreduce.progress_thread = thread
        result["thread_on"] = _eager_hidden_share(step, allreduce, steps)
        allreduce.progress_thread = None
        kept, communicator.Pending.test = communicator.Pending.test, lambda self: False
        try:
            result["no_progress"] = _eager_hidden_share(step, allreduce, steps)
        finally:
            communicator.Pending.test = kept

        def threaded():
            allreduce.progress_thread = thread
            try:
                step()
            finally:
                allreduce.progress_thread = None

        result["thread_ratio"] = _interleaved_ratio(threaded, step, max(steps, 20))
        thread.close()
    return result


def _plan_split(step, quiet, x, y, steps: int) -> dict:
    """The 2-process step against ``quiet``, the same step compiled without the all-reduce
    (its own model: the weights of ``step`` stay the ranks' common ones), interleaved in this
    process under ``mg.profile()`` (step, quiet, step, ...: both ranks compute at once, as
    in the real step, and the load falls on both alike). Medians over the runs: of each step
    (``step_s``, ``quiet_s``), of the time in the step's start and wait instructions
    (``exposed_s``: the communication the backward pass did not hide, a late rank's lag
    included) and of the step less that (``rest_s``: that over ``quiet_s``), which splits
    into the other instructions' extra time (``kernels_s``: the mean's scaling, a schedule the
    waits changed) and the time outside the instructions (``outside_s``: the executor's
    progress calls and check points, Python)."""
    import mgegraph as mg

    ways = {step: lambda: step(x, y), quiet: lambda: quiet(x, y)}
    with mg.profile(warmup=WARMUP) as prof:
        walls = _interleaved(tuple(ways.values()), steps)
    walls = {w: walls[call] for w, call in ways.items()}
    comm = [ins.op in ("all_reduce_start", "all_reduce_wait") for ins in step.plan.instructions]
    inside = {step: [], quiet: []}
    exposed = []
    for run in prof.runs:  # (a plan's prologue runs are recorded too: left out)
        way = {id(step.plan): step, id(quiet.plan): quiet}.get(id(run.plan))
        seconds = run.times[:, 1] * 1e-9
        if way is not None:
            inside[way].append(seconds.sum())
        if way is step:
            exposed.append(seconds[comm].sum())
    wall = {w: np.array(walls[w]) for w in walls}
    med = statistics.median
    rest = med(wall[step] - exposed) - med(wall[quiet])
    kernels = med(np.array(inside[step]) - exposed) - med(inside[quiet])
    return {"step_s": med(wall[step]), "quiet_s": med(wall[quiet]), "exposed_s": med(exposed),
            "rest_s": rest, "kernels_s": kernels, "outside_s": rest - kernels}


def _interleaved(ways, steps: int) -> dict:
    """{way: its ``steps`` times after the warm-up ones}: the calls ``ways`` interleaved in
    this process (a, b, a, b, ...: load on a shared machine falls on all alike). Every rank
    calls it alike (the steps' collectives match)."""
    times = {way: [] for way in ways}
    for _ in range(WARMUP + steps):
        for way in ways:
            begin = time.perf_counter()
            way()
            times[way].append(time.perf_counter() - begin)
    return {way: seconds[WARMUP:] for way, seconds in times.items()}


def _interleaved_ratio(first, second, steps: int) -> float:
    """The median time of ``first()`` over that of ``second()``, the two interleaved."""
    times = _interleaved((first, second), steps)
    return statistics.median(times[first]) / statistics.median(times[second])


def _eager_hidden_share(step, allreduce, steps: int) -> dict:
    """1 - (time the step spends on the callback's communication: packing and starting
    buckets, the ranks' checks, the progress tests, waiting for and unpacking the sums) / (its
    buckets all-reduced alone): the measure of ``_hidden_share`` for the eager callback, its
    calls timed in place of the plan's kernels; with the best share its bucket order allows."""
    from mgegraph.distributed import helper

    watch = _Exposure()
    timed = [(helper._Bucket, "send"), (helper._Bucket, "result"),
             (helper.AllreduceCallback, "progress"), (helper.AllreduceCallback, "_flush")]
    kept = [getattr(owner, name) for owner, name in timed] + [helper.AllreduceCallback._send]
    for owner, name in timed:
        setattr(owner, name, watch.timed(getattr(owner, name)))
    helper.AllreduceCallback._send = watch.marking(helper.AllreduceCallback._send)
    try:
        for _ in range(WARMUP):
            step()
        exposed, bounds = 0.0, []
        for _ in range(steps):
            watch.begin()
            step()
            exposed += watch.seconds
            bounds.append(watch.events())
    finally:
        for (owner, name), method in zip(timed, kept):
            setattr(owner, name, method)
        helper.AllreduceCallback._send = kept[-1]
    comm = allreduce.group.comm
    alone = _alone_each(comm, watch.sizes, steps)
    result = _against_alone(comm, list(watch.sizes.values()), exposed / steps, steps)
    result["best"] = statistics.median(best_hidden(events, alone) for events in bounds)
    return result


class _Exposure:
    """The eager step's time in the callback's communication (nested calls counted once), and
    when each bucket was ready in the step's compute time (wall time less that time), as the
    events of ``best_hidden``: every bucket awaited when the walk is over."""

    def __init__(self):
        self.sizes: dict[int, int] = {}  # bucket key -> float32 values
        self.begin()

    def begin(self) -> None:
        self.seconds, self._depth, self._start = 0.0, 0, time.perf_counter()
        self._events, self._computed, self._keys = [], 0.0, []

    def timed(self, method):
        def run(*args, **kwargs):
            self._depth += 1
            begin = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds += time.perf_counter() - begin
        return run

    def marking(self, send):
        def run(callback, buckets, closing):
            computed = time.perf_counter() - self._start - self.seconds
            self._events.append(("compute", computed - self._computed))
            self._computed = computed
            for bucket in buckets:
                key = len(self._keys)
                self.sizes[key] = bucket.nbytes // 4
                self._keys.append(key)
                self._events.append(("start", key))
            return send(callback, buckets, closing)
        return run

    def events(self) -> list:
        """The step's events, its buckets awaited once its walk was over (the last send)."""
        return self._events + [("wait", key) for key in self._keys]


def _without_progress(compiled, x, y):
    """The step compiled again, its executable made (at its first run) while the CPU executor
    makes no progress calls: what the comparison needs, not an option users have."""
    from mgegraph._kernels import cpu  # lazy: the benchmark's own switch of the CPU executor

    kept, cpu.progress_calls = cpu.progress_calls, lambda plan: []
    try:
        step = compiled()
        step(x, y)
    finally:
        cpu.progress_calls = kept
    return step


def _hidden_share(step, x, y, steps: int) -> dict:
    """1 - (time in the step's start and wait kernels) / (its buckets all-reduced alone)."""
    import mgegraph as mg
    from mgegraph import communicator

    for _ in range(WARMUP):
        step(x, y)
    with mg.profile() as prof:
        for _ in range(steps):
            step(x, y)
    times = prof.instruction_times(step.plan)
    exposed = sum(t for t, ins in zip(times, step.plan.instructions)
                  if ins.op in ("all_reduce_start", "all_reduce_wait"))
    buckets = json.loads(step.plan.memory_report(format="json"))["buckets"]
    world = communicator.by_key(_group_of(step.plan))
    result = _against_alone(world, [b["bytes"] // 4 for b in buckets], exposed, steps)
    alone = _alone_each(world, {b["bucket"]: b["bytes"] // 4 for b in buckets}, steps)
    result["best"] = best_hidden(_plan_events(step.plan, times), alone)
    return result  # the means per step already


def _plan_events(plan, times) -> list:
    """The plan's instructions as ``best_hidden``'s events: each start and wait by bucket,
    every other instruction its mean time."""
    events = []
    for ins, seconds in zip(plan.instructions, times):
        if ins.op in ("all_reduce_start", "all_reduce_wait"):
            events.append(("start" if ins.op == "all_reduce_start" else "wait",
                           dict(ins.attrs)["bucket"]))
        else:
            events.append(("compute", seconds))
    return events


def best_hidden(events, alone: dict) -> float:
    """The largest share of a step's all-reduce that its order of sends and waits lets the
    computation hide: ``events`` in the step's order, ("compute", seconds), ("start", bucket)
    or ("wait", bucket); ``alone``: each bucket's all-reduce alone, in seconds.

    The model: the buckets travel one after another (one link), each taking its time alone
    from its start or the end of the one before, whichever is later, while the computation
    goes on at full speed (messages moving by themselves, taking no core from it); a wait
    holds the computation until its bucket has arrived. The share hidden is 1 - (the time the
    waits held it) / (the buckets' time alone). A bucket started after the last computation
    (the first layers' gradients, at the end of the backward pass by nature) cannot hide at
    all; what the measured share lacks of this bound is what the real progress lost.

    >>> best_hidden([("compute", 2.0), ("start", 0), ("compute", 1.0), ("wait", 0)], {0: 3.0})
    0.3333333333333333
    """
    clock = link = computed = 0.0
    arrives = {}
    for kind, value in events:
        if kind == "compute":
            clock, computed = clock + value, computed + value
        elif kind == "start":
            link = arrives[value] = max(clock, link) + alone[value]
        else:
            clock = max(clock, arrives[value])
    total = sum(alone[key] for key in arrives)
    return 1.0 - (clock - computed) / total if total > 0 else 0.0


def _alone_each(world, sizes: dict, steps: int) -> dict:
    """{bucket: median seconds of its float32 all-reduce of ``sizes[bucket]`` values alone}."""
    alone = {}
    for key, size in sizes.items():
        buffer, times = np.ones(size, np.float32), []
        for _ in range(WARMUP + steps):
            world.barrier()
            begin = time.perf_counter()
            world.start_allreduce(buffer).wait()
            times.append(time.perf_counter() - begin)
        alone[key] = statistics.median(times[WARMUP:])
    return alone


def _against_alone(world, sizes: list[int], exposed_s: float, steps: int) -> dict:
    """The hidden share of a step whose communication showed for ``exposed_s`` seconds,
    against all-reducing float32 buckets of ``sizes`` alone, nothing else running."""
    buffers = [np.ones(size, np.float32) for size in sizes]
    alone = []
    for _ in range(WARMUP + steps):
        world.barrier()
        begin = time.perf_counter()
        for pending in [world.start_allreduce(b) for b in buffers]:
            pending.wait()
        alone.append(time.perf_counter() - begin)
    alone_s = statistics.median(alone[WARMUP:])
    return {"hidden": max(0.0, 1.0 - exposed_s / alone_s), "exposed_s": exposed_s,
            "alone_s": alone_s}


def _group_of(plan) -> str:
    (group,) = {dict(ins.attrs)["group"] for ins in plan.instructions
                if ins.op == "all_reduce_start"}
    return group


def _torch_rank(workload: str, steps: int, bucket_mb: float) -> dict:
    import torch
    import torch.distributed as tdist
    import workloads as W

    torch.set_num_threads(1)
    n = int(os.environ.get("PMI_SIZE", "1"))
    rank = int(os.environ.get("PMI_RANK", "0"))
    shape, kind, _ = WORKLOADS[workload]
    torch.manual_seed(W.SEED)
    t = torch.nn
    model = (t.Sequential(t.Linear(784, 1024), t.ReLU(), t.Linear(1024, 1024), t.ReLU(),
                          t.Linear(1024, 10)) if kind == "mlp" else W._torch_convnet(torch))
    if n > 1:
        tdist.init_process_group("gloo", rank=rank, world_size=n)
        # broadcasts rank 0's weights
        model = t.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = (torch.from_numpy(a) for a in _rank_batch(shape, rank))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    if n > 1:
        tdist.barrier()
    result = {"step_s": _timed_steps(step, steps)}
    if n > 1:
        result["split"] = _ddp_split(model, step, max(steps, 20))
        tdist.destroy_process_group()
    return result


def _ddp_split(model, step, steps: int) -> dict:
    """DDP's step against the same step under ``model.no_sync()`` (no all-reduce), interleaved
    in this process as ``_plan_split`` does: ``exposed_s`` is unknown (None; gloo works in its
    own threads), so ``rest_s`` is all of the difference, the communication's exposed part
    included."""
    def quiet():
        with model.no_sync():
            step()

    times = _interleaved((step, quiet), steps)
    step_s, quiet_s = (statistics.median(times[w]) for w in (step, quiet))
    return {"step_s": step_s, "quiet_s": quiet_s, "exposed_s": None,
            "rest_s": step_s - quiet_s}


def child(impl: str, workload: str, steps: int, bucket_mb: float, shares: bool) -> None:
    sys.path.insert(0, str(HERE))
    result = (_mgegraph_rank(workload, steps, bucket_mb, shares) if impl == "mgegraph"
              else _torch_rank(workload, steps, bucket_mb))
    if int(os.environ.get("PMI_RANK", "0")) == 0:
        print("RESULT " + json.dumps(result), flush=True)


# -- the jobs and the table --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(impl: str, workload: str, n: int, steps: int, async_progress: bool,
        bucket_mb: float, shares: bool = True, iallreduce: str | None = None) -> dict | str:
    """Rank 0's result of one job, or why it failed; ``iallreduce``: MPICH's algorithm for
    the non-blocking all-reduce (``MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM``), None its own."""
    from mgegraph.distributed.launcher import mpiexec  # lazy: after the path is set

    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    if async_progress:
        env["MPIR_CVAR_ASYNC_PROGRESS"] = "1"
    if iallreduce:
        env["MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM"] = iallreduce
    command = [mpiexec(), "-n", str(n), sys.executable, __file__, "--child", impl, workload,
               "--steps", str(steps), "--bucket-mb", str(bucket_mb)] + \
        ([] if shares else ["--step-only"])
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        return f"failed ({done.returncode}): {(done.stderr or done.stdout)[-300:]}"
    return json.loads(lines[-1][len("RESULT "):])


def table(results: dict, workloads: list[str], buckets: dict) -> list[str]:
    lines = [f"{'workload':20} {'implementation':12} {'bucket MiB':>10} {'1 proc ms':>9} "
             f"{'2 procs ms':>10} "
             f"{'efficiency':>10} {'+machine/exposed/rest(out) ms':>30} "
             f"{'all-reduce alone ms':>19} {'hidden/best (exposed ms)':>24} "
             f"{'progress off':>24} {'thread on (eager)':>24} {'thread/none':>11}"]
    for workload in workloads:
        for impl in _impls(workload):
            one, two = results[workload, impl, 1], results[workload, impl, 2]
            if isinstance(one, str) or isinstance(two, str):
                lines.append(f"{workload:20} {impl:12} {buckets[workload]:10g} "
                             f"{one if isinstance(one, str) else two}")
                continue
            share = (f"{two['progress']['alone_s'] * 1e3:19.2f} {_share(two['progress'])} "
                     f"{_share(two['no_progress'])}" if "progress" in two else "")
            if "thread_ratio" in two:
                share += f" {_share(two['thread_on'])} {two['thread_ratio']:11.2f}"
            lines.append(f"{workload:20} {impl:12} {buckets[workload]:10g} "
                         f"{one['step_s'] * 1e3:9.2f} "
                         f"{two['step_s'] * 1e3:10.2f} {one['step_s'] / two['step_s']:10.2f} "
                         f"{_split(one, two):>30} {share}")
    return lines


def _split(one: dict, two: dict) -> str:
    """Where the 2-process step's time beyond the 1-process one goes (``_plan_split``):
    "+60.1/3.2/1.0(0.4)": the machine (the same step without communication, on 2 processes at
    once, over the 1-process step), the exposed communication, the rest, and of the rest the
    time outside the instructions ("-" for DDP's exposed part, which its rest holds)."""
    split = two.get("split")
    if split is None:
        return "-"
    exposed = "-" if split["exposed_s"] is None else f"{split['exposed_s'] * 1e3:.1f}"
    outside = f"({split['outside_s'] * 1e3:.1f})" if "outside_s" in split else ""
    return (f"+{(split['quiet_s'] - one['step_s']) * 1e3:.1f}/{exposed}/"
            f"{split['rest_s'] * 1e3:.1f}{outside}")


def _share(measured: dict) -> str:
    """The measured hidden share, the best the step's order allows (``best_hidden``) and the
    exposed milliseconds: "12%/40% (0.52)"."""
    text = (f"{measured['hidden']:.0%}/{measured['best']:.0%} "
            f"({measured['exposed_s'] * 1e3:.2f})")
    return f"{text:>24}"


def run_rounds(workloads: list[str], buckets: dict, args) -> list[dict]:
    """Each round's results, every job a fresh ``mpiexec``: at each process count the
    implementations alternate, mgegraph first in even rounds and DDP first in odd ones, so a
    drift of the machine's load falls on both alike. A round's table is printed as it ends."""
    rounds = []
    for r in range(args.rounds):
        results = {}
        for w in workloads:
            for n in (1, 2):
                for impl in _impls(w)[::1 if r % 2 == 0 else -1]:
                    results[w, impl, n] = job(impl, w, n, args.steps, args.async_progress,
                                              buckets[w], not args.step_only, args.iallreduce)
        print(f"round {r + 1} of {args.rounds}\n" + "\n".join(table(results, workloads, buckets)),
              flush=True)
        rounds.append(results)
    return rounds


def _efficiency(result: dict, workload: str, impl: str) -> float | None:
    one, two = result[workload, impl, 1], result[workload, impl, 2]
    if isinstance(one, str) or isinstance(two, str):
        return None
    return one["step_s"] / two["step_s"]


def summary(rounds: list[dict], workloads: list[str]) -> list[str]:
    """Medians over the rounds of each row's step times and efficiency, and each round's
    efficiency of mgegraph over DDP's (the target: at least 1), with their median."""
    lines = [f"medians of {len(rounds)} rounds",
             f"{'workload':20} {'implementation':12} {'1 proc ms':>9} {'2 procs ms':>10} "
             f"{'efficiency':>10} {'rounds':>6} {'+machine/exposed/rest(out) ms':>30}"]
    for w in workloads:
        per_round = {impl: [_efficiency(r, w, impl) for r in rounds] for impl in _impls(w)}
        for impl, efficiencies in per_round.items():
            ok = [r for r, e in zip(rounds, efficiencies) if e is not None]
            if not ok:
                lines.append(f"{w:20} {impl:12} failed in every round")
                continue
            one, two = (statistics.median(r[w, impl, n]["step_s"] for r in ok) for n in (1, 2))
            lines.append(f"{w:20} {impl:12} {one * 1e3:9.2f} {two * 1e3:10.2f} "
                         f"{statistics.median(e for e in efficiencies if e):10.2f} "
                         f"{len(ok):6} {_median_split(ok, w, impl):>30}")
        if len(per_round) == 2:
            ratios = [a / b for a, b in zip(*per_round.values()) if a and b]
            text = " ".join(f"{x:.2f}" for x in ratios)
            lines.append(f"{w:20} efficiency mgegraph / DDP per round: {text or '-'}" +
                         (f"; median {statistics.median(ratios):.2f}" if ratios else ""))
    return lines


def _median_split(rounds: list[dict], workload: str, impl: str) -> str:
    """``_split``'s column with each part the median over ``rounds``."""
    splits = [(r[workload, impl, 1], r[workload, impl, 2].get("split")) for r in rounds]
    splits = [(one, split) for one, split in splits if split is not None]
    if not splits:
        return "-"
    median = {key: statistics.median(split[key] for _, split in splits)
              for key in splits[0][1] if splits[0][1][key] is not None}
    median["quiet_s"] = statistics.median(split["quiet_s"] - one["step_s"]
                                          for one, split in splits)
    median.setdefault("exposed_s", None)
    return _split({"step_s": 0.0}, {"split": median})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", choices=[[], *WORKLOADS], default=[])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="bucket size of every implementation and workload, MiB (default: "
                             "each workload's, BUCKET_MB)")
    parser.add_argument("--async-progress", action="store_true",
                        help="MPIR_CVAR_ASYNC_PROGRESS=1 in every rank (MPICH's progress "
                             "thread)")
    parser.add_argument("--iallreduce", default=None, metavar="ALGORITHM",
                        help="MPICH's algorithm of MPI_Iallreduce in every job "
                             "(MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM: sched_recursive_doubling, "
                             "tsp_recexch_single_buffer, ...; default: MPICH's choice)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of every job, each in fresh processes, the "
                             "implementations alternating; medians over them at the end")
    parser.add_argument("--step-only", action="store_true",
                        help="time the steps only: no hidden shares (each costs several "
                             "profiled runs per job)")
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.steps, args.bucket_mb, not args.step_only)
        return
    sys.path.insert(0, str(ROOT))
    workloads = args.workloads or list(WORKLOADS)
    buckets = {w: args.bucket_mb or BUCKET_MB[w] for w in workloads}
    rounds = run_rounds(workloads, buckets, args)
    if args.rounds > 1:
        print("\n".join(summary(rounds, workloads)))


if __name__ == "__main__":
    main()
