"""A plan made runnable on one GPU: its device memory, its compiled kernels, its runs.

The logic is in the pure functions of launches.py (``persistent_layout``, ``slot_addresses``,
``plan_calls``) and abi.py (``pack``); this class calls the driver with what they give.

Errors: the plan's status word (8 bytes after the persistent block) is zeroed by the first
operation of every run (a memset, inside the CUDA graph too), set by a failing kernel
(``mg_fail``, mg_abi.cuh) and read back with the outputs; a non-zero word raises the CPU's
``KernelError`` for the failing instruction and the run's outputs are not returned.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..backend import HeldPlan, on_host_read
from ..ir.errors import KernelError, NumericsError
from ..kernel_abi.status import kernel_error
from ..plan import Role, check_feeds, dead_values, non_finite_output
from ..weight_writes import before_writes, versions, written
from .abi import STATUS_BYTES, decode
from .abi import pack as pack_args
from .collective import Collectives, track
from .errors import DeviceUnavailableError
from .kernel import CommStep
from .launches import persistent_layout, plan_calls, rendered_source, slot_addresses
from .nvrtc import EXACT_OPTIONS

# hosts arrays whose newest value is on a device: id(array) -> the executable holding it
_STALE: dict[int, object] = {}


def fetch(*arrays) -> None:
    """Copy the device's value of each shared param array (an ``nn.Parameter``'s ``value``)
    back into it, where a CUDA training step updated it since (``state_dict()`` and
    ``mg.save`` call it through ``backend.on_host_read``).

    >>> mgegraph.cuda.fetch(*[p.value for p in model.parameters()])   # doctest: +SKIP
    """
    for array in arrays:
        owner = _STALE.get(id(array))
        if owner is not None:
            owner.pull()


# state_dict() and mg.save() read weights through the host: bring a training step's home first
on_host_read(lambda arrays: fetch(*arrays))


class CudaExecutable:
    """The plan's two device allocations (arena, persistent), its modules and MgArgs, and the
    pinned buffers feeds and outputs go through. ``use_graph``: replay the launches as one
    CUDA graph after the first run (the default; False launches them one by one)."""

    plan = HeldPlan()  # weakly: the plan owns this executable
    timed = False  # no per-instruction times yet: a profile does not see these runs
    writes_out = False  # outputs come back as new arrays; Plan.run copies into out= arrays

    def __init__(self, backend, plan):
        self.plan, self.backend = plan, backend
        device = self.device = backend.gpu()
        device.activate()
        self.calls, texts = plan_calls(plan, backend)
        self.functions = self._functions(texts)
        offsets, total = persistent_layout(plan)
        self.arena = backend.allocate(plan.memory.arena_bytes, plan.memory.options.alignment)
        self._open = True  # close() frees what is made from here on
        self.persistent = device.alloc(total + STATUS_BYTES)
        self.status = self.persistent + total  # the status word (a multiple of 256 bytes in)
        self.address = slot_addresses(plan, self.arena, self.persistent, offsets)
        self.args = [pack_args([self.address[s] for s in c.slots],
                               plan.instructions[c.index].ints,
                               plan.instructions[c.index].floats, self.status, c.index)
                     for c in self.calls]
        self.status_host = device.pinned(STATUS_BYTES)
        self.staging = {s: device.pinned(plan.slots[s].nbytes)
                        for s in list(plan.feeds.values()) + list(plan.outputs)}
        self.shared = {s: plan.values[s] for s in plan.shared}
        self._seen = {s: None for s in self.shared}
        self._assigned = _assigned(plan)
        for s, value in plan.values.items():
            if s not in plan.shared:
                device.to_device(self.address[s], np.ascontiguousarray(value))
        # memory="debug": dead arena values are overwritten with 0xFF bytes (NaN as floats) after
        # their last reader, as the CPU executor poisons them, so a read of one shows
        self.poison = poison_after(plan, self.calls, self.address) \
            if plan.memory.options.poison else {}
        # NCCL calls (cuda/collective.py): None for a plan without collectives
        self.collectives = Collectives(plan, self.calls, device) \
            if any(isinstance(c.step, CommStep) for c in self.calls) else None
        if self.collectives is not None:  # closed before its communicators end
            track(self)
        self.use_graph = self.collectives is None or self.collectives.captures
        self._graph, self._lock = None, threading.Lock()
        device.synchronize()

    def _functions(self, texts) -> list:
        b = self.backend
        rendered = b.module("rendered.cu", rendered_source(texts), EXACT_OPTIONS) \
            if texts else None
        return [None if isinstance(c.step, CommStep) else  # an NCCL call, not a kernel
                self.device.function(rendered if c.source is None else b.module(c.source),
                                     c.step.entry) for c in self.calls]

    def __del__(self):
        self.close()

    def close(self) -> None:
        """Give the device back what this executable holds (once; the finaliser calls it, and
        the end of the process group's NCCL, ``collective.close_plans``, before it destroys the
        communicators): the captured graph first (it names the collectives' events and NCCL
        calls), then the collectives' stream and events once both streams' work has ended,
        then the memory that work reads."""
        if not self.__dict__.pop("_open", False):
            return  # closed already, or made no allocation
        device, graph = self.device, getattr(self, "_graph", None)
        collectives = getattr(self, "collectives", None)
        releases = ([lambda: device.destroy_graph(graph)] if graph is not None else []) + \
            ([collectives.close] if collectives is not None else []) + \
            [lambda: device.free(self.arena), lambda: device.free(getattr(self, "persistent", 0))]
        for release in releases:
            with contextlib.suppress(Exception):  # at interpreter exit the driver may be gone
                release()

    # -- runs ------------------------------------------------------------------------------
    def run(self, feeds: dict) -> list[np.ndarray]:
        self._check_open()
        if self._assigned:  # work pending elsewhere reads these weights as they are now
            before_writes()
        with self._lock:
            return self._run(feeds)

    def _run(self, feeds: dict) -> list[np.ndarray]:
        plan, device = self.plan, self.device
        check_feeds(plan, feeds)
        device.activate()
        self._upload_written()
        for name, slot in plan.feeds.items():
            stage = self.staging[slot].view(plan.slots[slot].type.dtype)
            np.copyto(stage.reshape(plan.slots[slot].type.shape), feeds[name], casting="no")
            device.to_device(self.address[slot], self.staging[slot])
        if plan.check_numerics:
            self._launch_checking()
        else:
            self._launch_all()
        for slot in plan.outputs:
            device.to_host(self.staging[slot], self.address[slot])
        device.to_host(self.status_host, self.status)
        self._synchronize()
        self._mark_updated()  # the assigns before a failure did run on the device
        self._check_status()
        return [self.staging[s].view(plan.slots[s].type.dtype).reshape(
            plan.slots[s].type.shape).copy() for s in plan.outputs]

    def launch(self) -> None:
        """Run the instructions on what the device buffers hold now, and wait: no feed in, no
        output out (what benchmarks time alone, like the CPU's ``executor.run()``)."""
        self._check_open()
        with self._lock:
            self.device.activate()
            self._launch_all()
            self.device.to_host(self.status_host, self.status)
            self._synchronize()
            self._check_status()

    def _check_open(self) -> None:
        if "_open" not in self.__dict__:
            raise DeviceUnavailableError(f"this {self.backend.name} executable was closed: its "
                                         "device memory is gone; make the plan's executable again")

    def _synchronize(self) -> None:
        """Wait for the run; with collectives, never past their group's timeout."""
        if self.collectives is None:
            self.device.synchronize()
        else:
            self.collectives.synchronize()

    def _launch(self, k: int) -> None:
        """Enqueue launch ``k`` (a kernel, or an NCCL call)."""
        call = self.calls[k]
        if isinstance(call.step, CommStep):
            self.collectives.run(call, [self.address[s] for s in call.slots])
        else:
            self.device.launch(self.functions[k], call.step, self.args[k])

    def _check_status(self) -> None:
        """Raise the KernelError of the status word read back last, if a kernel set it."""
        error = status_error(self.plan, int(self.status_host.view(np.uint64)[0]))
        if error is not None:
            raise error

    def _launch_all(self) -> None:
        device = self.device
        if self._graph is not None:
            device.replay(self._graph)
            return
        if self.use_graph and self.calls and self._ran_once():
            device.begin_capture()
            self._launch_each()
            self._graph = device.end_capture()
            device.replay(self._graph)
            return
        self._launch_each()

    def _ran_once(self) -> bool:
        first = not getattr(self, "_warm", False)
        self._warm = True
        return not first

    def _launch_each(self) -> None:
        self.device.memset(self.status, 0, STATUS_BYTES)  # captured: zeroed by every replay
        for k in range(len(self.calls)):
            self._launch(k)
            for address, nbytes in self.poison.get(k, ()):
                self.device.memset(address, 0xFF, nbytes)

    def _launch_checking(self) -> None:
        """check_numerics: an instruction at a time, its float outputs read back."""
        plan, by_ins = self.plan, {}
        for k, call in enumerate(self.calls):
            by_ins.setdefault(call.index, []).append(k)
        self.device.memset(self.status, 0, STATUS_BYTES)
        for index, ks in by_ins.items():
            for k in ks:
                self._launch(k)
            self.device.to_host(self.status_host, self.status)
            self._synchronize()
            self._check_status()  # a kernel's error before the NaN it may have written
            for s in plan.instructions[index].outputs:
                message = non_finite_output(plan, index, s, self._read(s))
                if message is not None:
                    raise NumericsError(f"{message} (on {self.backend.name})")

    def _read(self, slot: int) -> np.ndarray:
        t = self.plan.slots[slot].type
        out = np.empty(t.shape, t.dtype)
        self.device.to_host(out, self.address[slot])
        self.device.synchronize()
        return out

    # -- shared params: on the device between runs ---------------------------------------------
    def _upload_written(self) -> None:
        """Upload each shared param the host wrote since this executable last saw it."""
        arrays = list(self.shared.values())
        for (s, value), seen in zip(self.shared.items(), versions(arrays)):
            if self._seen[s] != seen:
                owner = _STALE.get(id(value))
                if owner is not None and owner is not self:  # another plan's update
                    owner.pull()
                self.device.to_device(self.address[s], np.ascontiguousarray(value))
                self._seen[s] = seen

    def _mark_updated(self) -> None:
        """The shared params this run assigned are newer on the device: their host arrays say
        so (``written``, for other plans and prologues) and ``fetch`` can bring them back."""
        for s in self._assigned:
            array = self.shared[s]
            written(array)
            _STALE[id(array)] = self
            (self._seen[s],) = versions([array])

    def pull(self) -> None:
        """Copy every shared param this plan updates from the device into its host array."""
        with self._lock:
            self.device.activate()
            for s in self._assigned:
                array = self.shared[s]
                host = np.empty(array.shape, array.dtype)
                self.device.to_host(host, self.address[s])
                self.device.synchronize()
                array[...] = host
                _STALE.pop(id(array), None)


def status_error(plan, word: int) -> KernelError | None:
    """The KernelError a status word reports (the CPU's words: op, kernel, the user's line and
    what went wrong), or None for 0.

    >>> status_error(plan, 0) is None   # doctest: +SKIP
    True
    """
    failure = decode(word)
    if failure is None:
        return None
    index, code = failure
    return kernel_error(plan.instructions[index], code)


def poison_after(plan, calls, address: dict[int, int]) -> dict[int, list[tuple[int, int]]]:
    """memory="debug": the index of the last launch of each instruction -> (address, bytes) of
    the arena values whose last reader it is."""
    last_launch = {call.index: k for k, call in enumerate(calls)}
    after: dict[int, list[tuple[int, int]]] = {}
    for step, slot in dead_values(plan):
        if step in last_launch:
            after.setdefault(last_launch[step], []).append((address[slot],
                                                            plan.slots[slot].nbytes))
    return after


def _assigned(plan) -> list[int]:
    """The shared param slots a run of ``plan`` writes (its assigns)."""
    slots = {s for ins in plan.instructions for s in ins.outputs}
    roots = {plan.slots[s].alias if plan.slots[s].alias is not None else s for s in slots}
    return sorted(s for s in roots if s in plan.shared and plan.slots[s].role == Role.PARAM)
