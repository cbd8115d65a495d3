"""A CUDA plan's collectives at run time: the NCCL calls of its ``CommStep``s
(cuda/kernels/collective.py), on the plan's stream and a communication stream of its own.

    start   record S on the plan's stream; the communication stream waits for S, runs
            ncclAllReduce over the bucket's bytes in place, records R
    wait    the plan's stream waits for R (what follows reads the reduced bucket)
    all_reduce, all_gather   on the plan's stream (blocking: nothing overlaps them)

so a bucket's reduction runs beside the rest of the backward pass, and the plan's stream never
reads a bucket before its reduction ended. The communicators come from a provider that
``mgegraph.distributed`` installs (``install_communicators``; this layer cannot import it):
``provider(group key, GPU index)`` gives an object with NcclCommunicator's methods
(distributed/nccl.py: ``all_reduce``, ``all_gather``, ``wait``, ``captures``).

Design: CUDA graphs. The plan's first run launches as it goes; later runs replay one captured
graph (runtime.py), NCCL calls included: NCCL 2.9.6 on lets a collective be captured, and the
events above fork the communication stream from the captured plan stream and join it back, so
the graph holds the overlap as a fork and a join. With an older NCCL the plan is not captured.
A run never ends in ``cuStreamSynchronize`` here: ``synchronize`` records an event and lets
the communicator poll it (NCCL's asynchronous error, the group's timeout, then abort), so a
peer that died makes this rank raise, naming itself, instead of hanging on the GPU.
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

from ..communicator import CollectiveTimeout, DistributedError
from ..kernel_abi.status import CollectiveKernelTimeout
from .kernel import CommStep

_provider = None  # (group key, GPU index) -> communicator, installed by mgegraph.distributed
# the open executables that run collectives, by when they were made: what ``close_plans``
# closes before the communicators end (weakly: a dropped plan closes itself)
_OPEN: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_made = itertools.count()


def install_communicators(provider) -> None:
    """Make ``provider(key, device)`` the maker of CUDA plans' communicators (what
    ``dist.init_process_group`` does for the NCCL backends)."""
    global _provider
    _provider = provider


def communicator(key: str, device: int):
    """The communicator of group ``key`` on GPU ``device``; a DistributedError saying what to
    call where there is no provider."""
    if _provider is None:
        raise DistributedError(
            f"a device='cuda' plan reduces over group [{key}] with NCCL, but no process group "
            "provides NCCL communicators: call dist.init_process_group() (backend 'auto' or "
            "'nccl'; 'mpi' runs collectives on the CPU only) and install nvidia-nccl-cu12")
    return _provider(key, device)


def track(executable) -> None:
    """Count ``executable`` (a CUDA executable with collectives) among those ``close_plans``
    closes."""
    _OPEN[next(_made)] = executable


def close_plans() -> None:
    """Close every open executable with collectives, oldest first (``close()``: its graph,
    its collectives' work awaited, its memory): what must be over before the communicators
    those collectives ran on are destroyed."""
    for key in sorted(_OPEN.keys()):
        executable = _OPEN.pop(key, None)
        if executable is not None:
            executable.close()


def group_of(plan, call) -> str:
    return dict(plan.instructions[call.index].attrs)["group"]


class Collectives:
    """The communicators, communication stream and events of one CUDA executable's
    collectives (``calls``: the plan's launches; ``device``: a driver Device)."""

    def __init__(self, plan, calls, device):
        # what the runs read of the plan, kept here: the plan owns the executable that owns
        # this, so a reference to the plan would be a cycle that outlives a dropped plan
        self.device = device
        steps = [c for c in calls if isinstance(c.step, CommStep)]
        self.groups = {c.index: group_of(plan, c) for c in steps}
        self.itemsizes = {c.index: _itemsize(plan, c) for c in steps}
        keys = sorted({self.groups[c.index] for c in steps if c.step.action != "copy"})
        self.comms = {key: communicator(key, device.index) for key in keys}
        buckets = sorted({c.step.bucket for c in steps if c.step.action == "start"})
        self.stream = device.new_stream() if buckets else None
        self.events = {b: (device.new_event(), device.new_event()) for b in buckets}
        self.done = device.new_event()

    @property
    def captures(self) -> bool:
        """Whether the plan's launches, these calls included, may be replayed as a graph."""
        return all(comm.captures for comm in self.comms.values())

    def run(self, call, addresses: list[int]) -> None:
        """Enqueue ``call``'s NCCL call (addresses: its buffers' device addresses)."""
        step, device = call.step, self.device
        if step.action == "copy":
            if addresses[0] != addresses[1]:
                device.copy(addresses[1], addresses[0], step.count * self.itemsizes[call.index])
            return
        comm = self.comms[self.groups[call.index]]
        if step.action == "start":
            started, reduced = self.events[step.bucket]
            device.record(started, device.stream)
            device.wait_event(self.stream, started)
            comm.all_reduce(addresses[0], addresses[0], step.count, step.dtype, self.stream)
            device.record(reduced, self.stream)
        elif step.action == "wait":
            device.wait_event(device.stream, self.events[step.bucket][1])
        elif step.action == "all_reduce":
            comm.all_reduce(addresses[0], addresses[1], step.count, step.dtype, device.stream)
        elif step.action == "all_gather":
            comm.all_gather(addresses[0], addresses[1], step.count, step.dtype, device.stream)
        else:
            raise ValueError(f"unknown collective step {step.action!r}")

    def synchronize(self) -> None:
        """Wait for everything enqueued on the plan's stream, never past a group's timeout."""
        device = self.device
        device.record(self.done, device.stream)
        if not self.comms:
            device.synchronize()
            return
        try:
            for comm in self.comms.values():
                comm.wait(lambda: device.query(self.done), "a device='cuda' plan's collectives")
        except CollectiveTimeout as exc:
            raise CollectiveKernelTimeout(str(exc)) from exc
        device.synchronize()  # finished: returns at once


    def close(self) -> None:
        """Destroy the communication stream and the events, after the work of both streams
        has ended (a plan dropped mid-run: its NCCL calls still write into the arena, which is
        freed next, and its communicators may be destroyed next), waiting at most the groups'
        timeouts (then aborting, as a run's wait does); an ended communicator's kernels are
        gone (aborted) or were awaited, so nothing is awaited on it."""
        if self.done is None:
            return  # closed already
        device, stream, self.stream = self.device, self.stream, None
        live = [comm for comm in self.comms.values() if not comm.ended]
        if live:
            if stream is not None:  # the plan's stream's end comes after the other's
                device.record(self.done, stream)
                device.wait_event(device.stream, self.done)
            device.record(self.done, device.stream)
            with contextlib.suppress(DistributedError):  # aborted by the wait: kernels gone
                for comm in live:
                    comm.wait(lambda: device.query(self.done), "closing a plan's streams")
        if stream is not None:
            device.synchronize_stream(stream)
        for event in [e for pair in self.events.values() for e in pair] + [self.done]:
            device.destroy_event(event)
        self.events, self.done = {}, None
        if stream is not None:
            device.destroy_stream(stream)


def _itemsize(plan, call) -> int:
    return plan.slots[call.slots[0]].type.dtype.itemsize
