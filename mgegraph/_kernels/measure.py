"""The CPU's measurer (``backend.Measurer``): how ``compile(tune="measure")`` times the ways a
kernel can run an instruction (``OpImpl.candidates``: a convolution's paths, a GEMM's, their
threads) on the instruction's own shapes.

Design: each way runs through an eager ``Launcher`` on buffers of the node's types, 64-byte
aligned as the arena's, the inputs random values in [-1, 1) (a kernel's time does not depend on
them; no denormals; made for each measurement and dropped after it), one workspace of the
largest size the ways ask for. Every way is called once, untimed (its first call warms its code
and the caches; the buffers are written first, so no way pays their page faults), then all take
turns, call by call, so that a burst of load on the machine hits them all; after the first
round a way over twice the fastest stops (it cannot win), the others run until each ran
``ROUNDS`` timed calls or the budget is spent; a way's time is its fastest call (load only adds
time).
"""
from __future__ import annotations

import functools
import hashlib
import platform
import time
from pathlib import Path

import numpy as np

from ..host_memory import aligned_empty
from . import blas_select, conv, linalg, parallel
from .launch import Launcher

ROUNDS = 4        # timed calls of each way still in the running, at most
MIN_ROUNDS = 2    # timed calls of each, even past the budget
HOPELESS = 2.0    # a way this many times the fastest in the first round: not timed further


@functools.cache
def _build_key() -> str:
    """The CPU model, its tiles' instruction sets, the BLAS and a hash of the kernels' build
    (a rebuilt conv or linalg module may change which way wins)."""
    digest = hashlib.sha256()
    for module in (conv, linalg):
        digest.update(Path(module.__file__).read_bytes())
    return "|".join([blas_select.cpu_model(), platform.machine(), ",".join(conv.blocked_isas()),
                     blas_select.choice().name, digest.hexdigest()[:16]])


def _random(t, rng) -> np.ndarray:
    """Values in [-1, 1) (no denormals; drawn in place, a few ms for ResNet's 2.4 million
    weights, where float64 normal draws took tens), small integers, or True."""
    array = aligned_empty(t.shape, t.dtype)
    if t.dtype in (np.float32, np.float64):
        rng.random(out=array, dtype=array.dtype)  # in place: no temporaries to fill
        array *= 2
        array -= 1
    elif t.dtype.kind == "b":
        array[...] = True
    else:
        array[...] = rng.integers(-3, 4, t.shape)
    return array


def _zeroed(shape, dtype) -> np.ndarray:
    array = aligned_empty(shape, dtype)
    array[...] = 0
    return array


class CpuMeasurer:
    """Times candidate launches of a node on this CPU."""

    def machine(self) -> str:
        return f"{_build_key()}|threads={parallel.max_threads()}"

    def time(self, kernel, node, launches, budget: float) -> list[float | None]:
        rng = np.random.default_rng(0)
        inputs = [_random(v.type, rng) for v in node.inputs]
        # zeroed: their page faults paid here, not by the first way's call
        outputs = [_zeroed(v.type.shape, v.type.dtype) for v in node.outputs]
        workspace = _zeroed((max(launch.workspace for launch in launches),), np.uint8)
        calls = []
        for launch in launches:
            buffers = (*inputs, *outputs, *((workspace,) if launch.workspace else ()))
            run = Launcher(kernel.entry, launch.ints, launch.floats, len(inputs), True)
            calls.append(functools.partial(run, buffers))
        return _race(calls, budget)


def _race(calls, budget: float) -> list[float | None]:
    """Each call's fastest time (None where its kernel refused), measured in turns: one call
    each untimed (the first pays cold caches and lazy binding), then rounds; after the first
    round a way over HOPELESS times the fastest stops."""
    running = [i for i, call in enumerate(calls) if call() == 0]
    best: list[float | None] = [None] * len(calls)
    deadline = time.perf_counter() + budget
    for round_ in range(ROUNDS):
        if round_ >= MIN_ROUNDS and time.perf_counter() > deadline:
            break
        for i in running:
            began = time.perf_counter()
            calls[i]()
            took = time.perf_counter() - began
            best[i] = took if best[i] is None else min(best[i], took)
        if round_ == 0 and running:
            fastest = min(best[i] for i in running)
            running = [i for i in running if best[i] <= HOPELESS * fastest]
    return best
