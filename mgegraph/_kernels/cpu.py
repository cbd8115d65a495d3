"""The CPU backend: the Cython kernels of this package, their lowerings (``lowering/``), and the
executable that carves a plan's buffers out of one NumPy arena and runs them in the C loop of
``runtime.pyx``.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from ..backend import FusionLimits, HeldPlan, KernelTable, profiling, record_run
from ..host_memory import host_arena
from ..ir.errors import NumericsError
from ..ir.types import is_float
from ..kernel_abi.status import MESSAGES, kernel_error
from ..plan import (
    Role,
    check_feeds,
    check_out,
    dead_values,
    host_buffers,
    non_finite_output,
    view_in,
)
from ..planner.passes.prologue import PLACEHOLDER
from ..weight_writes import before_writes, epoch, versions, written
from . import KERNEL_MODULES, blas_select, fused, fused_jit, lowering, runtime
from .binding import OutputPool, binding_groups, overlaps_any, readable_in_place
from .launch import Launcher
from .lowering.built import check_built
from .lowering.conv import packed_blocks, prepack_block
from .lowering.deterministic import deterministic
from .lowering.matmul import accumulates_exactly
from .measure import CpuMeasurer
from .runtime import POISON_BYTES, POISON_FLOAT32, POISON_FLOAT64, Executor

# Arena offsets are multiples of a cache line: no two buffers share one, and every vector load
# of the kernels is aligned.
ALIGNMENT = 64


class CpuBackend(KernelTable):
    """``mg.compile(device="cpu")``: kernels keyed by (op, dtype) resolved to C addresses."""

    name = "cpu"
    alignment = ALIGNMENT
    runs_prologue = True  # CpuExecutable runs plan.prologue when a weight it reads changed

    def __init__(self):
        super().__init__("cpu")
        self.fusion = FusionLimits(max_inputs=fused.LIMITS["inputs"],
                                   max_outputs=fused.LIMITS["inputs"],
                                   max_registers=fused.LIMITS["registers"],
                                   max_dims=fused.LIMITS["dims"])
        # the block a conv2d's weights are packed in by the prepack pass (or None)
        self.prepack = prepack_block
        # whether addmm of a product rounds as the ops it replaces (accumulate at level 1)
        self.exact_accumulate = accumulates_exactly
        # times the ways of a convolution or GEMM (compile(tune=...))
        self.measurer = CpuMeasurer()
        self.packed_blocks = packed_blocks  # what a measured prepack decision tries
        self.deterministic = deterministic  # the ways compile(tune="deterministic") prefers
        check_built(runtime, KERNEL_STATUS=MESSAGES)  # the statuses a failed run reports
        lowering.implement_all(self)
        self.resolve(_kernel_addresses())
        self.blas = blas_select.choice()  # OpenBLAS, or MKL where measured faster here

    def allocate(self, nbytes: int, alignment: int) -> np.ndarray:
        return host_arena(nbytes, alignment)

    def executable(self, plan) -> CpuExecutable:
        return CpuExecutable(self, plan)

    def launcher(self, kernel, launch, n_inputs: int, release_gil: bool) -> Launcher:
        """One call of ``kernel`` with ``launch``'s parameters outside a plan (eager mode):
        ``launcher((inputs..., outputs..., workspace))`` returns the kernel's status."""
        return Launcher(kernel.entry, launch.ints, launch.floats, n_inputs, release_gil)


def _kernel_addresses() -> dict[str, int]:
    table: dict[str, int] = {}
    for module in KERNEL_MODULES:
        clash = table.keys() & module.KERNELS.keys()
        if clash:
            raise ImportError(f"kernel names defined twice: {sorted(clash)}")
        table.update(module.KERNELS)
    return table


def backend() -> CpuBackend:
    return CpuBackend()


class CpuExecutable:
    """A plan's memory on the CPU and the executor that runs it: made once per plan.

    ``buffers`` maps each slot to its array (arena views, persistent buffers, views of both);
    ``executor.run()`` runs every instruction on what the buffers hold (the benchmarks time it
    alone); ``run(feeds)`` copies the feeds in, runs, and returns copies of the outputs.

    Threads: ``run`` holds a lock, so calls from several threads on one plan are correct and run
    one at a time. A pool of executables (an arena per call) was measured and showed no clear
    win on 2 cores (two threads x 200 mlp-infer b128 runs: one locked plan 23 s / 44 s, two
    plans in parallel 39 s / 36 s, on a loaded machine): the GEMM and fused kernels already use
    every core, and assigned (``share=True``) params need the lock anyway so that two training
    steps never interleave their writes. A run also stops with
    KeyboardInterrupt at the next check point (``_check_points``) when Ctrl-C is pressed.

    Weights: a run that assigns shared params says so (``weight_writes.written``) when it ends, and
    the plan's prologue (``plan.prologue``: what reads only weights) runs when the executable is
    made and again before a run after one of the weights it reads was written, so
    ``executor.run()`` alone sees the weights as they were at the last ``run``.

    Generated bodies: a large fused instruction runs a loop generated and compiled for its
    program when the executable is made (``_kernels/fused_jit.py``); ``generated`` holds the
    indices of those instructions.

    Profiling: while an ``mg.profile()`` is active, ``run`` takes the executor's timed loop
    (``run_timed``; a plan with ``check_numerics`` times its one-by-one runs) and hands each
    instruction's start and duration to the active profiles, for a failed or interrupted run
    too (the instructions that ran); otherwise ``executor.run()``, which times nothing.
    """

    def __init__(self, backend: CpuBackend, plan):
        self.plan = plan
        arena = backend.allocate(plan.memory.arena_bytes, plan.memory.options.alignment)
        buffers = host_buffers(plan, arena)
        generated = [fused_jit.kernel_for(ins.kernel, ins.ints) for ins in plan.instructions]
        # the instructions that run a body generated for their program (fused_jit.py)
        self.generated = frozenset(i for i, g in enumerate(generated) if g is not None)
        kernels = [g or backend.kernel_by_name(ins.kernel)
                   for g, ins in zip(generated, plan.instructions)]
        poison = _poison_list(plan, buffers) if plan.memory.options.poison else []
        progress = progress_calls(plan)
        checks = sorted(set(_check_points(plan)) | {step for step, _, _ in progress})
        self.executor = Executor(
            kernels,
            [[buffers[b].ctypes.data for b in ins.buffers] for ins in plan.instructions],
            [list(ins.ints) for ins in plan.instructions],
            [list(ins.floats) for ins in plan.instructions],
            (buffers, arena), poison, checks, progress)
        self.buffers = buffers
        self._lock = threading.Lock()
        self._assigned = _assigned_shared(plan, buffers)
        self._prologue = None if plan.prologue is None else _Prologue.of(backend, plan.prologue)
        self._feed_group, self._output_group, groups = binding_groups(plan)
        self.executor.set_bindings(groups)
        self._own = {s: buffers[s].ctypes.data for s in (*self._feed_group, *self._output_group)}
        self._bound_feeds: dict[int, np.ndarray] = {}  # what a bound feed group reads now
        self._pool = OutputPool()
        self._no_out = (None,) * len(plan.outputs)
        self._shared = [plan.values[s] for s in sorted(plan.shared)]

    plan = HeldPlan()  # weakly: the plan owns this executable
    writes_out = True  # run(feeds, out=...) writes the outputs into the caller's arrays
    # feeds read and outputs written in place (False: every feed copied in and every output
    # copied out, the path the benchmarks measure binding against)
    in_place = True
    timed = True  # while a profile is active, runs take the executor's timed loop

    def run(self, feeds: dict, out=None) -> list[np.ndarray]:
        """Run on ``feeds``; returns arrays the caller owns: the ``out=`` arrays where given
        (one entry per output, None for a fresh array). Feeds are read in place where they
        can be and outputs written where they are returned (see ``binding``)."""
        if self._assigned:  # work pending elsewhere reads these weights as they are now
            before_writes()
        with self._lock:  # one arena, one set of feed and output buffers: one run at a time
            return self._run(feeds, out)

    def _run(self, feeds: dict, out=None) -> list[np.ndarray]:
        plan = self.plan
        check_feeds(plan, feeds)
        given = out is not None
        out = check_out(plan, out) if given else self._no_out
        if self._prologue is not None:
            self._prologue.refresh()
        # a plan checking numerics inspects its own buffers instruction by instruction
        bindable = self.in_place and not plan.check_numerics
        writes = [a for a in out if a is not None] + self._assigned if given else self._assigned
        for name, slot in plan.feeds.items():
            self._feed(slot, feeds[name], bindable, writes)
        results = self._bind_outputs(out, writes) if bindable else {}
        profiles = profiling()
        try:
            if profiles:
                failure = self._run_profiled(profiles)
            else:
                failure = self._run_checking_numerics() if plan.check_numerics \
                    else self.executor.run()
        finally:  # a failed run may have written some (the C loop stops where it failed)
            for array in self._assigned:
                written(array)
            for slot in results:
                self.executor.bind(self._output_group[slot], self._own[slot])
        if failure is not None:
            index, status = failure
            raise kernel_error(plan.instructions[index], status)
        self._pool.keep({s: a for s, a in results.items()
                         if not (given and any(a is g for g in out))})
        return self._collect(out, results)

    def _feed(self, slot: int, value, bindable: bool, writes: list) -> None:
        """Point the feed's slot at ``value`` where it can be read in place, else copy it in."""
        group = self._feed_group.get(slot)
        if group is not None and bindable and readable_in_place(value) \
                and not (writes and overlaps_any(value, writes)):
            if self._bound_feeds.get(slot) is not value:
                self.executor.bind(group, value)
                self._bound_feeds[slot] = value
            return
        if self._bound_feeds.pop(slot, None) is not None:
            self.executor.bind(group, self._own[slot])
        np.copyto(self.buffers[slot], value, casting="no")

    def _bind_outputs(self, out: list, writes: list) -> dict[int, np.ndarray]:
        """slot -> the array each bindable output is written into this run: the caller's
        ``out=`` array where it is C-contiguous, aligned and overlaps nothing the run reads,
        else a pooled or fresh array."""
        results, reads = {}, None
        for slot, given in zip(self.plan.outputs, out):
            group = self._output_group.get(slot)
            if group is None or slot in results:
                continue
            if given is not None:
                if reads is None:
                    reads = list(self._bound_feeds.values()) + self._shared
                if not (given.flags.c_contiguous and given.flags.aligned) \
                        or overlaps_any(given, reads):
                    continue  # written into the plan's buffer, then copied into ``given``
                results[slot] = given
            else:
                results[slot] = self._pool.take(slot, self.plan.slots[slot].type)
            self.executor.bind(group, results[slot])
        return results

    def _collect(self, out: list, results: dict) -> list[np.ndarray]:
        """The arrays to return, each the caller's alone: where the run wrote them, else copies
        of the plan's buffers (into the ``out=`` array where one was given); a slot returned
        twice is copied the second time."""
        returned, seen = [], set()
        for slot, given in zip(self.plan.outputs, out):
            value = results.get(slot)
            if value is None or slot in seen:
                source = self._written(slot, results)
                value = source.copy() if given is None else given
                if given is not None:
                    np.copyto(given, source, casting="no")
            seen.add(slot)
            returned.append(value)
        return returned

    def _run_profiled(self, profiles):
        """The run, timed, recorded by ``profiles`` however it ends; returns what the untimed
        run would (None, or the failing instruction's (index, status))."""
        executor, failure, complete = self.executor, None, False
        began = time.monotonic_ns()
        try:
            failure = self._run_checking_numerics() if self.plan.check_numerics \
                else executor.run_timed()
            complete = failure is None
        finally:  # the failing instruction ran and is timed too (ran counts the successes)
            ended = time.monotonic_ns()
            times = np.empty((executor.ran + (failure is not None), 2), np.int64)
            executor.copy_times(times)
            record_run(profiles, self.plan, began, ended, times, complete)
        return failure

    def _written(self, slot: int, results: dict) -> np.ndarray:
        """Where this run left ``slot``: the plan's buffer, or (the slot or a view of it) in
        the array its root was bound to (an output's, or a feed read in place)."""
        info = self.plan.slots[slot]
        root = slot if info.alias is None else info.alias
        bound = results.get(root, self._bound_feeds.get(root))
        if bound is None:
            return self.buffers[slot]
        return bound if root == slot else view_in(bound, info)

    def _run_checking_numerics(self):
        """``executor.run()`` one instruction at a time (a plan compiled with
        ``check_numerics=True``): a NumericsError at the first float output holding a NaN or
        an infinity; a kernel's own failure is returned as (index, status), as ``run`` does.
        ``run_one`` poisons a ``memory="debug"`` plan's dead values as the C loop does, so a
        read of one shows up as the NaN it makes."""
        plan, buffers = self.plan, self.buffers
        bad_feeds = [name for name, slot in plan.feeds.items()  # (copied in: never bound here)
                     if is_float(buffers[slot].dtype) and not np.isfinite(buffers[slot]).all()]
        for i, ins in enumerate(plan.instructions):
            status = self.executor.run_one(i)
            if status != 0:
                return i, status
            for s in ins.outputs:
                message = non_finite_output(plan, i, s, buffers[s])
                if message is not None:
                    raise NumericsError(message + (
                        f"; feed(s) {', '.join(map(repr, bad_feeds))} already held NaN/inf"
                        if bad_feeds else "; every feed was finite"))
        return None


def _assigned_shared(plan, buffers) -> list[np.ndarray]:
    """The shared param arrays a run of ``plan`` writes (its assigns)."""
    slots = {s for ins in plan.instructions for s in ins.outputs}
    roots = {plan.slots[s].alias if plan.slots[s].alias is not None else s for s in slots}
    return [buffers[s] for s in sorted(roots)
            if s in plan.shared and plan.slots[s].role == Role.PARAM]


_PROLOGUES_LOCK = threading.Lock()


class _Prologue:
    """A plan's prologue and the write counts of the weights it read at its last run.

    Its executable is made for a run and dropped after it: the arena of a prologue holds a
    weight and what it becomes side by side (bnfold's scaled weight and its packed copy, 18 MiB
    for ResNet-18's largest), which is not kept while no weight changes."""

    def __init__(self, backend, plan):
        self.backend, self.plan = backend, plan
        self.weights = [plan.values[s] for s in sorted(plan.shared)
                        if not (plan.slots[s].name or "").startswith(PLACEHOLDER)]
        self.epoch, self.seen = None, None
        self._lock = threading.Lock()
        self.refresh()

    @classmethod
    def of(cls, backend, plan) -> _Prologue:
        """The one state of the prologue ``plan``: the specialisations of a symbolic plan
        share a prologue (its arrays), so it runs once for all of them, not per executable."""
        with _PROLOGUES_LOCK:
            state = plan._cache.get("cpu_prologue")
            if state is None:
                state = plan._cache["cpu_prologue"] = cls(backend, plan)
            return state

    def refresh(self) -> None:
        """Run the prologue when a weight it reads was written since it last ran."""
        now = epoch()
        if now == self.epoch:
            return
        with self._lock:  # two executables sharing it: one runs it, the other waits
            if now == self.epoch:
                return
            seen = versions(self.weights)
            if seen != self.seen:  # (counts taken before the run: a write during it is next)
                self.run()
            self.epoch, self.seen = now, seen

    def run(self) -> None:
        CpuExecutable(self.backend, self.plan).run({})


# Bytes an instruction touches (its buffers' sizes) between two checks for Ctrl-C: about a
# millisecond of work, so taking the GIL back there costs nothing measurable.
CHECK_BYTES = 1 << 20


def _check_points(plan) -> list[int]:
    """The steps after which the executor lets Python handle pending signals."""
    points, work = [], 0
    for step, ins in enumerate(plan.instructions[:-1]):
        work += sum(plan.slots[b].nbytes for b in ins.buffers)
        if work >= CHECK_BYTES:
            points.append(step)
            work = 0
    return points


def progress_calls(plan) -> list[tuple[int, int, int]]:
    """(step, kernel address, start) for the executor: after every step from a collective's
    start up to the one before its wait, a test of the start's request (collective.pyx's
    ``all_reduce_progress``), so the bucket travels during the backward pass; none for a plan
    without collectives."""
    starts = {ins.buffers[-1]: i for i, ins in enumerate(plan.instructions)
              if ins.op == "all_reduce_start"}  # by the request's slot
    if not starts:
        return []
    from . import collective  # lazy: the collectives' module, only for plans that have them
    calls = [(step, collective.PROGRESS, start)
             for wait, ins in enumerate(plan.instructions)
             if ins.op == "all_reduce_wait" and ins.buffers[0] in starts
             for start in (starts[ins.buffers[0]],) for step in range(start, wait - 1)]
    return sorted(calls)


# NaN in float buffers; 0xFF bytes in the others (workspaces are bytes: NaN as floats too)
_POISON_KIND = {np.dtype(np.float32): POISON_FLOAT32, np.dtype(np.float64): POISON_FLOAT64}


def _poison_list(plan, buffers) -> list[tuple[int, int, int, int]]:
    """(step, address, bytes, poison kind) of each dead arena value, for the executor."""
    return [(step, buffers[s].ctypes.data, plan.slots[s].nbytes,
             _POISON_KIND.get(plan.slots[s].type.dtype, POISON_BYTES))
            for step, s in dead_values(plan)]
