"""A compiled data-parallel step against one process on the concatenated batch: each rank
compiles the MLP's step with ``all_reduce=dist.AllReduce(...)`` (gradients averaged in buckets
inside the plan) and trains 20 SGD steps on its own batch, and a copy with a plain compiled
step on every rank's batch at once; it reports the largest differences of the losses and the
weights, and where the plan runs each bucket's start and wait."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import optim
from mgegraph._kernels.cpu import progress_calls
from mgegraph.demo import mlp

STEPS, BATCH = 20, 4
BUCKET_MB = float(sys.argv[1]) if len(sys.argv) > 1 else 0.02
dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()


def batch(step: int, rank: int):
    rng = np.random.default_rng([step, rank])
    return rng.standard_normal((BATCH, 64)).astype(np.float32), \
        rng.integers(0, 10, BATCH).astype(np.int32)


def loss_fn(out, y):
    return F.cross_entropy(out, y)


model = mlp()
for p in model.parameters():  # the ranks start apart: bcast_list_ must make them equal
    p.value = p.value + R
dist.bcast_list_(model.parameters())
single = copy.deepcopy(model)
opt, single_opt = optim.SGD(model.parameters(), 0.05, momentum=0.9), \
    optim.SGD(single.parameters(), 0.05, momentum=0.9)
with mg.planner.checking():  # every plan's memory verified (buckets live until their waits)
    step = mg.compile_train_step(model, loss_fn, opt, batch(0, R),
                                 all_reduce=dist.AllReduce(bucket_mb=BUCKET_MB))
    whole_batches = [batch(0, k) for k in range(N)]
    single_step = mg.compile_train_step(
        single, loss_fn, single_opt,
        (np.concatenate([b[0] for b in whole_batches]),
         np.concatenate([b[1] for b in whole_batches])))
loss_gap = 0.0
for i in range(STEPS):
    batches = [batch(i, k) for k in range(N)]
    local = step(*batches[R])
    whole = single_step(np.concatenate([b[0] for b in batches]),
                        np.concatenate([b[1] for b in batches]))
    mean = dist.functional.all_reduce_mean(mg.tensor(np.float32(local)))
    loss_gap = max(loss_gap, abs(float(mean.item()) - whole))
mine, theirs = model.state_dict(), single.state_dict()
weight_gap = max(float(np.max(np.abs(np.asarray(mine[k]) - np.asarray(theirs[k])))
                       / max(1.0, np.max(np.abs(np.asarray(theirs[k]))))) for k in mine)
ops = [ins.op for ins in step.plan.instructions]
where = {}  # bucket -> [step of its start, step of its wait]
for i, ins in enumerate(step.plan.instructions):
    if ins.op in ("all_reduce_start", "all_reduce_wait"):
        where.setdefault(dict(ins.attrs)["bucket"], []).append(i)
starts, waits = [s for s, _ in where.values()], [w for _, w in where.values()]
# what runs while each bucket travels: the instructions between its start and its wait
between = [w - s - 1 for s, w in where.values()]
report(R, loss=whole, loss_gap=loss_gap, weight_gap=weight_gap, starts=starts, waits=waits,
       between=between, progress_calls=len(progress_calls(step.plan)),
       blocking=ops.count("all_reduce"), parameters=len(mine),
       passes=dict(step.plan.passes)["bucket_grads"], plan=str(step.plan))
