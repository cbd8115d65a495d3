"""The eager all-reduce callback overlaps the backward walk: an MLP of 4 layers whose gradients
are sent in small buckets. Each rank records, at every bucket's send, how many tape nodes the
walk had not reached yet (more than none: the send happened during the walk), checks the
averaged gradients bitwise against NumPy's (g0 + g1 + ...) / N of every rank's own gradient,
then lets rank 1's backward fail half way (a ``Function`` whose backward raises there) with
buckets under way: rank 1 gets its own error, the others a DistributedError naming it within
their timeout, no gradient lands anywhere, and the next step trains on as before."""
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

dist.init_process_group(timeout=20)
R, N = dist.get_rank(), dist.get_world_size()
COMM = dist.WORLD.comm
LEFT: list = []  # tape nodes not yet walked at each bucket's send
TAPE: list = []  # the tape being walked (the GradManager's list, popped by the walk)


def recording_sends(send):
    def sending(bucket, *args):
        LEFT.append(len(TAPE[0]) if TAPE else -1)
        return send(bucket, *args)
    return sending


helper._Bucket.send = recording_sends(helper._Bucket.send)  # the callback's bucket sends


class FailsOn(Function):
    """Identity whose backward raises on rank ``rank`` while ``armed``."""

    armed = False

    def forward(self, x):
        return x

    def backward(self, dy):
        if FailsOn.armed and R == 1:
            raise ValueError("rank 1's backward fails on purpose")
        return dy


def model():
    rng = np.random.default_rng(7)
    layers = [nn.Linear(32, 32) for _ in range(4)]
    for layer in layers:
        layer.weight.value = rng.standard_normal(layer.weight.shape).astype(np.float32) * 0.2
        layer.bias.value = rng.standard_normal(layer.bias.shape).astype(np.float32) * 0.1
    return layers


def forward(layers, x):
    h = x
    for i, layer in enumerate(layers):
        h = F.relu(layer(h))
        if i == 1:
            h = FailsOn()(h)
    return F.sum(h * h)


def step(gm, layers, x):
    with gm:
        TAPE[:] = [gm._tape]
        loss = forward(layers, x)
        gm.backward(loss)
    TAPE.clear()


def params(layers):
    return [p for layer in layers for p in (layer.weight, layer.bias)]


x = mg.tensor(np.random.default_rng([3, R]).standard_normal((8, 32)).astype(np.float32))
layers, alone = model(), model()
allreduce = dist.make_allreduce_cb("mean", bucket_bytes=4096)
gm = mg.autodiff.GradManager().attach(params(layers), callbacks=[allreduce])
step(gm, layers, x)
left, LEFT[:] = list(LEFT), []

# every rank's own gradient, averaged in NumPy: what MPI's sum of two numbers gives bitwise
step(mg.autodiff.GradManager().attach(params(alone)), alone, x)
bitwise = True
for mine, own in zip(params(layers), params(alone)):
    every = COMM.allgather(np.ascontiguousarray(own.grad.numpy()))
    want = (np.add.reduce(every, dtype=np.float32) / N).astype(np.float32) if N == 2 else None
    bitwise &= want is None or mine.grad.numpy().tobytes() == want.tobytes()
    np.testing.assert_allclose(mine.grad.numpy(), every.mean(0), rtol=1e-6, atol=1e-6)

before = [p.grad.numpy().copy() for p in params(layers)]
FailsOn.armed, failure, start = True, None, time.monotonic()
try:
    step(gm, layers, x)
except Exception as exc:  # noqa: BLE001 - the report says which
    failure = f"{type(exc).__name__}: {exc}"
elapsed = time.monotonic() - start
sent_before_failing = len(LEFT)
untouched = all(np.array_equal(p.grad.numpy(), b) for p, b in zip(params(layers), before))
FailsOn.armed = False
step(gm, layers, x)  # the job goes on: the same gradients again, added to .grad
again = all(np.allclose(p.grad.numpy(), 2 * b, rtol=1e-6) for p, b in zip(params(layers),
                                                                       before))
report(R, left=left, buckets=allreduce.buckets, bitwise=bitwise, failure=failure,
       elapsed=elapsed, sent_before_failing=sent_before_failing, untouched=untouched,
       again=again)
