"""MegEngine's data-parallel script, traced: ``mg.jit.trace`` of a step whose GradManager
all-reduces with ``make_allreduce_cb``. The recording call checks the ranks and marks each
gradient with the ``all_reduce`` op, so the trace's plan holds start/wait pairs over buckets
(as ``compile_train_step(all_reduce=...)``'s); each rank trains it beside the same model
trained eagerly with the callback, on the same batches, and reports the largest differences
of the losses and weights and the plan's collectives."""
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
from mgegraph import nn, optim

dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
STEPS = 6
mg.nn.init.manual_seed(5)
eager_model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                            nn.Linear(32, 4))
dist.bcast_list_(eager_model.parameters())
traced_model = copy.deepcopy(eager_model)


def trainer(model):
    cb = dist.make_allreduce_cb("mean", bucket_bytes=2048)
    gm = mg.autodiff.GradManager().attach(model.parameters(), callbacks=[cb])
    opt = optim.SGD(model.parameters(), 0.1, momentum=0.9)

    def step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step, cb


eager_step, _ = trainer(eager_model)
plain, traced_cb = trainer(traced_model)
traced_step = mg.jit.trace(plain)
loss_gap = 0.0
for i in range(STEPS):
    rng = np.random.default_rng([i, R])
    x = mg.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    y = mg.tensor(rng.integers(0, 4, 8).astype(np.int32))
    a, b = float(eager_step(x, y).item()), float(traced_step(x, y).item())
    loss_gap = max(loss_gap, abs(a - b))
weight_gap = max(float(np.max(np.abs(p.numpy() - q.numpy())))
                 for p, q in zip(eager_model.parameters(), traced_model.parameters()))
ops = [ins.op for ins in traced_step.plan.instructions]
same = dist.WORLD.comm.allgather_object([p.numpy().tobytes() for p in
                                         traced_model.parameters()], "check")
report(R, loss_gap=loss_gap, weight_gap=weight_gap, starts=ops.count("all_reduce_start"),
       waits=ops.count("all_reduce_wait"), blocking=ops.count("all_reduce"),
       ranks_agree=all(s == same[0] for s in same), parameters=len(traced_model.parameters()),
       callback_buckets=traced_cb.buckets)
