"""The ranks' agreement on each bucket never blocks the backward walk: an MLP of 4 layers
whose weights fill a bucket each, with a node between the second and third layers whose
backward sleeps on rank 1 (``Sleeps``). Rank 0 reports how long its walk took (until the
manager resolves the futures) and the whole backward: with a blocking check per bucket it
would wait at its next bucket for rank 1's sleep; here it finishes its walk and waits only
for the sums. Then rank 1 skips the last layer at one step, so its walk ends while rank 0's
goes on: the check of that round refuses it, every rank raising a DistributedError naming
both, no gradient landing, and the next step trains as before. The callback's progress thread
is on (``progress_thread=True``): started with the first bucket, resting after each pass."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.autodiff import Function
from mgegraph.distributed import helper

SLEEP = 0.6
dist.init_process_group(timeout=20)
R = dist.get_rank()
WALK_ENDS: list = []  # when the manager resolved the first future of each backward pass


def recording_flush(flush):
    def flushing(callback, backward_pass):
        WALK_ENDS.append(time.monotonic())
        return flush(callback, backward_pass)
    return flushing


helper.AllreduceCallback._flush = recording_flush(helper.AllreduceCallback._flush)


class Sleeps(Function):
    """Identity whose backward sleeps on rank 1 while ``armed``."""

    armed = False

    def forward(self, x):
        return x

    def backward(self, dy):
        if Sleeps.armed and R == 1:
            time.sleep(SLEEP)
        return dy


rng = np.random.default_rng(5)
layers = [nn.Linear(64, 64) for _ in range(4)]
for layer in layers:
    layer.weight.value = rng.standard_normal(layer.weight.shape).astype(np.float32) * 0.1
params = [p for layer in layers for p in (layer.weight, layer.bias)]
allreduce = dist.make_allreduce_cb("mean", bucket_bytes=64 * 64 * 4, progress_thread=True)
gm = mg.autodiff.GradManager().attach(params, callbacks=[allreduce])
x = mg.tensor(np.random.default_rng([1, R]).standard_normal((16, 64)).astype(np.float32))


def step(skip_last: bool = False) -> tuple[float, float]:
    """(seconds of the backward walk, seconds of the whole backward) of one step."""
    with gm:
        h = x
        for i, layer in enumerate(layers[:3] if skip_last else layers):
            h = F.relu(layer(h))
            if i == 1:
                h = Sleeps()(h)
        loss = F.sum(h * h)
        WALK_ENDS.clear()
        begin = time.monotonic()
        gm.backward(loss)
    return WALK_ENDS[0] - begin, time.monotonic() - begin


step()  # the first pass compares the full lists (blocking)
Sleeps.armed = True
walk_s, backward_s = step()
Sleeps.armed = False
before = [p.grad.numpy().copy() for p in params]
failure = None
try:
    step(skip_last=R == 1)
except dist.DistributedError as exc:
    failure = str(exc)
untouched = all(np.array_equal(p.grad.numpy(), b) for p, b in zip(params, before))
step()
grads_after = [p.grad.numpy() for p in params]
every = [dist.WORLD.comm.allgather(g) for g in grads_after]
poller = allreduce.progress_thread  # it ran while buckets were under way, and rests now
report(R, walk_s=walk_s, backward_s=backward_s, buckets=allreduce.buckets, failure=failure,
       untouched=untouched, ranks_agree=all(np.array_equal(e[0], e[1]) for e in every),
       thread=[poller._thread is not None, poller._wanted.is_set()])
