"""Data-parallel training against one process on the concatenated batch: each rank trains the
model (its weights first made to differ, then given rank 0's by bcast_list_) for 20 SGD steps
on its own batch, with gradients averaged by make_allreduce_cb in small buckets, and also
trains a copy on every rank's batch at once; it reports the largest differences of the losses
and the weights (relative to each array's largest value). ``cnn``: the demo's CNN, its batch
norms SyncBatchNorm in the data-parallel model and BatchNorm in the single-process one (so the
running statistics are compared too)."""
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
from mgegraph.demo import cnn, mlp

KIND, STEPS, BATCH = sys.argv[1], 20, 4
dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()


def batch(step: int, rank: int):
    rng = np.random.default_rng([step, rank])
    shape = (BATCH, 64) if KIND == "mlp" else (BATCH, 1, 8, 8)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, 10, BATCH)


def synced(model: nn.Module) -> nn.Module:
    """``model`` with each BatchNorm2d a SyncBatchNorm holding the same state."""
    for i in range(len(model.layer_keys)):
        if isinstance(model[i], nn.BatchNorm2d):
            sync = nn.SyncBatchNorm(model[i].num_features)
            sync.load_state_dict(model[i].state_dict())
            model[i] = sync
    assert any(isinstance(model[i], nn.SyncBatchNorm) for i in range(len(model.layer_keys)))
    return model


def train_step(model, opt, gm, x, y) -> float:
    with gm:
        loss = F.cross_entropy(model(mg.tensor(x)), mg.tensor(y.astype(np.int32)))
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


model = mlp() if KIND == "mlp" else cnn()
for p in model.parameters():  # the ranks start apart: bcast_list_ must make them equal
    p.value = p.value + R
dist.bcast_list_(model.parameters())
single = copy.deepcopy(model)
model = synced(model) if KIND == "cnn" else model
opt, single_opt = optim.SGD(model.parameters(), 0.05, momentum=0.9), \
    optim.SGD(single.parameters(), 0.05, momentum=0.9)
allreduce = dist.make_allreduce_cb("mean", bucket_bytes=16384)
gm = mg.autodiff.GradManager().attach(model.parameters(), callbacks=[allreduce])
single_gm = mg.autodiff.GradManager().attach(single.parameters())
loss_gap = 0.0
for step in range(STEPS):
    batches = [batch(step, k) for k in range(N)]
    local = train_step(model, opt, gm, *batches[R])
    whole = train_step(single, single_opt, single_gm, np.concatenate([b[0] for b in batches]),
                       np.concatenate([b[1] for b in batches]))
    mean = dist.functional.all_reduce_mean(local.detach())
    loss_gap = max(loss_gap, abs(float(mean.item()) - float(whole.item())))
mine, theirs = model.state_dict(), single.state_dict()
assert mine.keys() == theirs.keys(), (sorted(mine), sorted(theirs))
# relative to each array's largest value (a running variance grows to tens)
weight_gap = max(float(np.max(np.abs(np.asarray(mine[k]) - np.asarray(theirs[k])))
                       / max(1.0, np.max(np.abs(np.asarray(theirs[k]))))) for k in mine)
report(R, loss=float(whole.item()), loss_gap=loss_gap, weight_gap=weight_gap,
       buckets=allreduce.buckets, parameters=len(mine))
