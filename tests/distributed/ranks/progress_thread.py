"""``communicator.ProgressThread`` moves a non-blocking all-reduce on while the main thread
makes no MPI call: each rank starts a 4 MiB all-reduce (many steps of MPICH's algorithm, each
needing a progress call), sleeps, and tests it once. Without the thread the first test finds
it unfinished (MPICH moved it only inside the start and that test); with it, done. Three
tries each, then the thread is closed, so the job ends as usual."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import report

import mgegraph.distributed as dist
from mgegraph import communicator

dist.init_process_group(timeout=20)
COMM = dist.WORLD.comm
poller = communicator.ProgressThread()
x = np.full(1 << 20, 1.0 + COMM.rank, np.float32)


def done_at_first_test(thread: bool) -> bool:
    COMM.barrier()
    pending = COMM.start_allreduce(x)
    if thread:
        poller.hold()
    time.sleep(0.3)  # no MPI call from this thread
    done = pending.test()
    total = pending.wait()
    poller.release()
    assert np.all(total == 3.0), total[:4]
    return done


report(COMM.rank, available=poller.available,
       without=[done_at_first_test(False) for _ in range(3)],
       with_thread=[done_at_first_test(True) for _ in range(3)])
poller.close()
