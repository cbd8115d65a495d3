"""A job one rank of which goes wrong (``sys.argv[1]``): ``raise`` (an exception nothing
catches), ``hang`` (sleeps far past the others' 2 s collective timeout), ``mismatch`` (a
model of other shapes; ``traced``: the same in an ``mg.jit.trace``d step) or ``branch`` (a
layer skipped at the second step). The test checks
that the whole job ends within its timeout with the error named."""
from __future__ import annotations

import sys
import time

import numpy as np

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import nn

MODE = sys.argv[1]
dist.init_process_group(timeout=2.0)
R, N = dist.get_rank(), dist.get_world_size()
x = dist.functional.all_reduce_sum(mg.tensor(np.ones(3, np.float32)))  # everyone is up
print(f"rank {R} started", flush=True)
if MODE == "raise" and R == 1:
    raise ValueError("rank 1 fails on purpose")
if MODE == "hang" and R == 1:
    time.sleep(120)
width = 3 if MODE in ("mismatch", "traced") and R == 1 else 2
first, second = nn.Linear(4, width), nn.Linear(width, 2)
gm = mg.autodiff.GradManager().attach(first.parameters() + second.parameters(),
                                      callbacks=[dist.make_allreduce_cb("mean")])


def train_step(x, skip: bool):
    with gm:
        y = first(x)
        if not skip:  # the branch one rank skips
            y = second(y)
        gm.backward(F.sum(y))


if MODE == "traced":  # the mismatch, in a traced step
    train_step = mg.jit.trace(train_step)
for step in range(2):
    train_step(mg.tensor(np.ones((2, 4), np.float32)), MODE == "branch" and R == 1 and step == 1)
dist.functional.all_reduce_sum(x)
print(f"rank {R} finished", flush=True)
