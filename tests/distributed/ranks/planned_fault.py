"""A compiled data-parallel step one rank of which goes wrong (``sys.argv[1]``): ``mismatch``
(a model of other shapes: refused at the first step) or ``hang`` (rank 1 sleeps far past the
others' 2 s collective timeout after the first step: rank 0's plan waits for its bucket and
times out inside the run). The test checks that the job ends within its timeout with the
error named."""
from __future__ import annotations

import sys
import time

import numpy as np

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import nn, optim

MODE = sys.argv[1]
dist.init_process_group(timeout=2.0)
R, N = dist.get_rank(), dist.get_world_size()
width = 3 if MODE == "mismatch" and R == 1 else 2
model = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))
x, y = np.ones((2, 4), np.float32), np.zeros(2, np.int32)
step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), 0.1), (x, y),
                             all_reduce=dist.AllReduce(bucket_mb=1))
print(f"rank {R} compiled", flush=True)
for i in range(3):
    if MODE == "hang" and R == 1 and i == 1:
        time.sleep(120)
    step(x, y)
print(f"rank {R} finished", flush=True)
