"""A compiled data-parallel step with ``dist.AllReduce(progress_thread=True)`` (the progress
thread held around each run of the plan) against the same step without it: the MLP trained 6
SGD steps from the same weights on the same batches, losses and weights compared bitwise; it
reports how often the thread was held and whether it rests between runs."""
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
from mgegraph import communicator, optim
from mgegraph.demo import mlp

dist.init_process_group(timeout=60)
R = dist.get_rank()
held = []
hold = communicator.ProgressThread.hold
communicator.ProgressThread.hold = lambda self: (held.append(1), hold(self))[1]


def batch(step: int):
    rng = np.random.default_rng([step, R])
    return rng.standard_normal((4, 64)).astype(np.float32), \
        rng.integers(0, 10, 4).astype(np.int32)


def compiled(model, all_reduce):
    opt = optim.SGD(model.parameters(), 0.05, momentum=0.9)
    return mg.compile_train_step(model, F.cross_entropy, opt, batch(0), all_reduce=all_reduce)


plain_model = mlp()
dist.bcast_list_(plain_model.parameters())
threaded_model = copy.deepcopy(plain_model)
with_thread = dist.AllReduce(bucket_mb=0.02, progress_thread=True)
plain = compiled(plain_model, dist.AllReduce(bucket_mb=0.02))
threaded = compiled(threaded_model, with_thread)
same_losses = True
for i in range(6):
    same_losses &= np.float32(plain(*batch(i))).tobytes() == \
        np.float32(threaded(*batch(i))).tobytes()
resting = not with_thread._poller._wanted.is_set()
mine, theirs = plain_model.state_dict(), threaded_model.state_dict()
same_weights = all(np.asarray(mine[k]).tobytes() == np.asarray(theirs[k]).tobytes()
                   for k in mine)
report(R, same_losses=bool(same_losses), same_weights=same_weights, held=len(held),
       resting=resting, available=with_thread._poller.available)
