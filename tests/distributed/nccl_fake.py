"""A recording stand-in for libnccl.so.2 (what ``mgegraph.distributed.nccl.library()`` returns)
and for the CUDA driver Device, so NCCL's binding and a CUDA plan's collectives run here
without a GPU: every call is appended to one ``log`` in order, with its arguments as the
binding passed them (device addresses, counts, ncclDataType_t, streams, events)."""
from __future__ import annotations

import ctypes
import itertools
import sys

import numpy as np

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph import communicator, optim
from mgegraph.backend import unregister_backend
from mgegraph.cuda import collective as cuda_collective
from mgegraph.cuda.backend import CudaBackend
from mgegraph.demo import mlp
from mgegraph.distributed import group, nccl

HANDLE = 0xC0FFEE  # the ncclComm_t the fake makes
PLAN_STREAM, COMM_STREAM = 0x51, 0x52  # stream handles: the plan's, the first one made


class FakeNccl:
    """libnccl's functions used by the binding; ``async_error``: what ncclCommGetAsyncError
    reports (0: none)."""

    def __init__(self, log: list, async_error: int = 0):
        self.log, self.async_error = log, async_error

    def _record(self, name, *args):
        self.log.append((name, *args))
        return 0

    def __getattr__(self, name):  # the collectives and groups: recorded, ncclSuccess
        if not name.startswith("nccl"):
            raise AttributeError(name)
        return lambda *args: self._record(name, *args)

    def ncclGetVersion(self, code):
        code._obj.value = 23203
        return 0

    def ncclGetUniqueId(self, uid):
        ctypes.memmove(ctypes.addressof(uid._obj), b"\x07" * 128, 128)
        return self._record("ncclGetUniqueId")

    def ncclCommInitRank(self, handle, size, uid, rank):
        handle._obj.value = HANDLE
        return self._record("ncclCommInitRank", size, bytes(uid)[:2], rank)

    def ncclCommGetAsyncError(self, comm, result):
        result._obj.value = self.async_error
        return 0

    def ncclGetErrorString(self, result):
        return {6: b"remote process exited or there was a network error"}.get(result, b"error")

    def ncclGetLastError(self, comm):
        return b""


class FakeDevice:
    """The driver Device's methods a CUDA executable calls, recorded in ``log`` (streams are
    handles, events names; addresses come from a bump allocator)."""

    def __init__(self, log: list):
        self.log, self.index, self.arch = log, 0, "sm_90"
        self.stream = PLAN_STREAM
        self._top, self._events = 0x1000_0000, itertools.count()
        self._streams = itertools.count(COMM_STREAM)

    def alloc(self, nbytes):
        base = self._top
        self._top += -(-max(nbytes, 1) // 256) * 256
        return base

    def pinned(self, nbytes):
        return np.zeros(nbytes, np.uint8)

    def new_stream(self):
        return next(self._streams)

    def new_event(self):
        return f"event{next(self._events)}"

    def record(self, event, stream):
        self.log.append(("record", event, stream))

    def wait_event(self, stream, event):
        self.log.append(("wait_event", stream, event))

    def query(self, event):
        return True

    def synchronize_stream(self, stream):
        self.log.append(("synchronize_stream", stream))

    def destroy_stream(self, stream):
        self.log.append(("destroy_stream", stream))

    def destroy_event(self, event):
        self.log.append(("destroy_event", event))

    def destroy_graph(self, graph):
        self.log.append(("destroy_graph", graph))

    def free(self, address):
        self.log.append(("free", address))

    def launch(self, function, step, args):
        self.log.append(("launch", step.entry, tuple(args.bufs[:args.n_bufs])))

    def copy(self, dst, src, nbytes):
        self.log.append(("copy", dst, src, nbytes))

    def begin_capture(self):
        self.log.append(("begin_capture",))

    def end_capture(self):
        self.log.append(("end_capture",))
        return "graph"

    def replay(self, graph):
        self.log.append(("replay", graph))

    def function(self, module, entry):
        return entry

    def activate(self, *args):
        pass

    memset = to_device = to_host = synchronize = activate


class FakeBackend(CudaBackend):
    """The CUDA backend's kernel table over a FakeDevice (no compiler, no GPU)."""

    def __init__(self, log: list, name: str):
        super().__init__(device=None, name=name)
        self.fake = FakeDevice(log)

    def gpu(self):
        return self.fake

    def module(self, source, text=None, extra=()):
        return source


def pretend_two_ranks(monkeypatch, timeout: float) -> None:
    """``dist.init_process_group(backend="nccl")`` in a job that believes it has two ranks
    (this process rank 0; no MPI: the group's MPI calls do nothing), undone after the test."""
    def world(seconds):
        comm = communicator.Communicator(None, (0, 1), 0, seconds)
        communicator._GROUPS[comm.key] = comm
        return comm

    monkeypatch.setattr(communicator, "_GROUPS", {})
    monkeypatch.setattr(communicator, "world", world)
    monkeypatch.setattr(group, "_job", None)
    monkeypatch.setattr(group.WORLD, "proc_ranks", None)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # a job of two sets its own
    monkeypatch.setattr(cuda_collective, "_provider", None)
    dist.init_process_group(backend="nccl", timeout=timeout)


def fake_job(monkeypatch, backend: str, log: list | None = None):
    """A job of two ranks (``pretend_two_ranks``) whose NCCL is a FakeNccl over one log (a
    new list, or ``log``), which it yields, with a FakeBackend over that log registered as
    ``backend``; for a fixture."""
    log = [] if log is None else log
    monkeypatch.setattr(nccl, "library", lambda: FakeNccl(log))
    monkeypatch.setattr(cuda_collective, "_OPEN", type(cuda_collective._OPEN)())
    pretend_two_ranks(monkeypatch, timeout=0.2)
    mg.register_backend(backend, lambda: FakeBackend(log, backend))
    yield log
    unregister_backend(backend)


def data_parallel_step(backend: str, bucket_mb: float, mean: bool = True):
    """A compile_train_step of the demo MLP on ``backend`` (a fake job's), its gradients
    all-reduced in buckets of ``bucket_mb`` MiB."""
    rng = np.random.default_rng(0)
    model = mlp()
    batch = (rng.standard_normal((4, 64)).astype(np.float32),
             rng.integers(0, 10, 4).astype(np.int32))
    return mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), 0.1),
                                 batch, device=backend,
                                 all_reduce=dist.AllReduce(bucket_mb=bucket_mb, mean=mean))
