"""Making many all-reduce callbacks in one job: each duplicates the group's communicator at its
first backward pass, and MPI has few (MPICH: about 2000 context ids), so a job that made a
callback per step would fail after ~2000 steps if the duplicates were not freed. Each rank
makes ``argv[1]`` callbacks in a loop (a GradManager and a backward pass each; dropped at the
end of the iteration), checks each step's gradient against NumPy, then checks that ``close()``
frees a callback's communicator at once (MPI's handle is COMM_NULL after) and that a closed
callback refuses to be used."""
from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph as mg
import mgegraph.communicator as communicator
import mgegraph.distributed as dist
from mgegraph.communicator import load_mpi

dist.init_process_group(timeout=20)
R, N = dist.get_rank(), dist.get_world_size()
LOOPS = int(sys.argv[1])
w = mg.Parameter(np.zeros(3, np.float32))
x = mg.tensor(np.full(3, 1.0 + R, np.float32))


def step(callback) -> np.ndarray:
    gm = mg.autodiff.GradManager().attach([w], callbacks=[callback])
    w.grad = None
    with gm:
        gm.backward((w * x).sum())
    return w.grad.numpy()


# each duplicate's free counted: a short job shows that every dropped callback gives its copy
# back
frees, free = 0, communicator._free_mpi_communicator


def counted_free(comm) -> None:
    global frees
    frees += 1
    free(comm)


communicator._free_mpi_communicator = counted_free
start, wrong = time.monotonic(), 0
for _ in range(LOOPS):
    wrong += not np.array_equal(step(dist.make_allreduce_cb("sum")),
                                np.full(3, N * (N + 1) / 2, np.float32))
elapsed = time.monotonic() - start
gc.collect()  # a few callbacks sit in reference cycles until the collector runs
freed_in_loop = frees

callback = dist.make_allreduce_cb("sum")
step(callback)
duplicate = callback._comm.comm
callback.close()
refused = None
try:
    step(callback)
except dist.DistributedError as exc:
    refused = str(exc)
report(R, loops=LOOPS, wrong=wrong, elapsed=elapsed, freed_in_loop=freed_in_loop,
       freed=duplicate == load_mpi().COMM_NULL, refused=refused)
