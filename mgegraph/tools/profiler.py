"""The profiler: ``with mg.profile() as prof:`` times every instruction of every plan run inside
it, from the executor's C loop, and reports them as a table or a Chrome/Perfetto trace.

>>> with mg.profile() as prof:
...     step(x, y)                      # plans, training steps, predictors, traced functions
>>> print(prof.table(top=10))           # top ops by total time, share, GFLOP/s, bytes moved
>>> prof.save_chrome_trace("step.json") # open in https://ui.perfetto.dev or chrome://tracing

Design: a profile is process-wide, as PyTorch's profiler records every thread: while one is
active, every plan run on any thread is timed (``CpuExecutable`` asks ``active()`` once per run
and then runs the executor's timed loop, ``Executor.run_timed``) and handed to every active
profile (``record``), each run in the lane of the thread that ran it. Nested and concurrent
profiles therefore each see every run made while they are active; a run belongs to the profiles
active when it began. Timestamps are CLOCK_MONOTONIC nanoseconds, the clock of
``time.monotonic_ns``, so the C loop's and Python's agree. Only plans are timed: eager ops (one
kernel call each, outside any plan) are not recorded, and on devices other than the CPU only
once their executable records its runs too (``active`` and ``record`` are that seam).

After each recorded run the plan carries ``plan._cache["instruction_times"]``: the mean wall
seconds of each instruction over the runs the most recently entered active profile recorded
(the HTML viewer reads it; ``Profile.instruction_times`` is the same for any profile).

Design: memory stays bounded however long a profile records. Every run is folded into running
aggregates per instruction (calls, total, fastest and slowest call: all the tables print), so
the tables cover every run; a run's own record (what the Chrome trace draws) is kept only while
the kept records hold at most ``trace_limit`` instruction events, so the trace holds the first
runs and says how many later ones were aggregated only. No median is printed, so no sample of
the durations is kept (a median would need a bounded reservoir or histogram).
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import NamedTuple, Self

import numpy as np

from ..backend import install_profiler
from ..ir.errors import ProfileError
from ..ops import elementwise_table as TABLE
from ..ops.registry import get_op

# instruction events kept for the Chrome trace by default: 16 bytes of times each here, and
# about 400 bytes of JSON each in the trace (some 100 MB at most, which the viewers open)
TRACE_LIMIT = 250_000

# -- which profiles record now -------------------------------------------------------------------
_lock = threading.Lock()
_active: tuple[Profile, ...] = ()  # in the order they were entered; swapped whole, never edited


def active() -> tuple[Profile, ...]:
    """The profiles recording now; an executable asks once per run (an empty tuple: run untimed).
    """
    return _active


def record(profiles, plan, began: int, ended: int, times: np.ndarray, complete: bool) -> None:
    """Hand one timed run of ``plan`` on this thread to ``profiles`` (what ``active()`` said
    when it began). ``times``: (k, 2) int64, start and duration in CLOCK_MONOTONIC nanoseconds of
    instructions 0 .. k - 1 (those that ran, a failing one included); ``began``/``ended``: the
    run's own span; ``complete``: every instruction ran and succeeded."""
    run = Run(plan, threading.get_native_id(), threading.current_thread().name, began, ended,
              times, complete)
    for profile in profiles:
        profile._record(run)


def _activate(profile) -> None:
    global _active
    with _lock:
        _active = _active + (profile,)


def _deactivate(profile) -> None:
    global _active
    with _lock:
        _active = tuple(p for p in _active if p is not profile)


# -- what a profile holds ------------------------------------------------------------------------
class Run(NamedTuple):
    """One timed run: ``times[i]`` = (start, duration) in ns of instruction i of ``plan``.
    (A tuple: one is made per run, so it must cost little to make and to keep.)"""

    plan: object
    thread: int         # the OS thread id (a lane of the trace)
    thread_name: str
    began: int
    ended: int
    times: np.ndarray
    complete: bool


class _PlanTimes:
    """Per instruction of one plan: total, fastest and slowest ns and calls over a profile's
    runs. Kept as each run is recorded (the plan's ``instruction_times`` follows every run),
    with the common case, a run of every instruction, in one NumPy operation per figure."""

    def __init__(self, plan):
        n = len(plan.instructions)
        self.plan, self.runs, self.whole = plan, 0, 0  # whole: runs of every instruction
        self.total_ns = np.zeros(n, np.int64)
        self.partial_calls = np.zeros(n, np.int64)
        self.min_ns = np.full(n, np.iinfo(np.int64).max, np.int64)
        self.max_ns = np.zeros(n, np.int64)

    def add(self, times: np.ndarray) -> None:
        self.runs += 1
        k = len(times)
        durations = times[:, 1]
        if k == len(self.total_ns):
            self.total_ns += durations
            self.whole += 1
        else:  # a failed or interrupted run: the instructions that ran
            self.total_ns[:k] += durations
            self.partial_calls[:k] += 1
        np.minimum(self.min_ns[:k], durations, out=self.min_ns[:k])
        np.maximum(self.max_ns[:k], durations, out=self.max_ns[:k])

    def copy(self) -> _PlanTimes:
        other = _PlanTimes.__new__(_PlanTimes)
        other.plan, other.runs, other.whole = self.plan, self.runs, self.whole
        other.total_ns, other.partial_calls = self.total_ns.copy(), self.partial_calls.copy()
        other.min_ns, other.max_ns = self.min_ns.copy(), self.max_ns.copy()
        return other

    @property
    def calls(self) -> np.ndarray:
        return self.partial_calls + self.whole

    def mean_seconds(self) -> tuple[float, ...]:
        """Mean seconds per call of each instruction; 0.0 for one no recorded run reached."""
        if self.whole == self.runs:
            return tuple((self.total_ns * (1e-9 / self.runs)).tolist())
        return tuple((self.total_ns / np.maximum(self.calls, 1) * 1e-9).tolist())


@dataclass(frozen=True)
class Row:
    """One line of ``Profile.table``: an op (all its instructions), or one instruction.

    ``calls``, ``seconds`` (wall time), ``flops`` and ``nbytes`` (bytes of the buffers it reads
    and writes) are totals over the calls, or per run with ``average=True``; ``flops`` is None
    where the op's FLOPs are not known; ``share``: percent of all profiled instruction time;
    ``fastest`` and ``slowest``: seconds of its quickest and slowest single call (0.0 with no
    call). Instruction rows also name the ``plan``, the instruction ``index``, ``kernel``, the
    user's ``location`` and, where the kernel has several ways, the ``way`` it took
    (``plan.kernels_report()``: "winograd, 2 threads")."""

    op: str
    calls: float
    seconds: float
    flops: float | None
    nbytes: float
    share: float
    plan: str | None = None
    index: int | None = None
    kernel: str | None = None
    location: str | None = None
    fastest: float = 0.0
    slowest: float = 0.0
    way: str | None = None

    @property
    def mean(self) -> float:
        """Seconds per call."""
        return self.seconds / self.calls if self.calls else 0.0

    @property
    def gflops(self) -> float | None:
        """GFLOP/s over the calls, where the FLOPs are known."""
        if self.flops is None or self.seconds <= 0:
            return None
        return self.flops / self.seconds * 1e-9


# What table(sort_by=) orders by, largest first ("order": plan order, first first).
_SORT_KEYS = {
    "total": lambda r: -r.seconds,
    "mean": lambda r: -r.mean,
    "calls": lambda r: -r.calls,
    "gflops": lambda r: -(r.gflops or -1.0),
    "bytes": lambda r: -r.nbytes,
    "order": lambda r: (r.plan or "", r.index if r.index is not None else 0, r.op),
}
_BY = ("op", "instruction")


class Profile:
    """Records every plan run while it is active (``with mg.profile() as prof:``); see the
    module's docstring for the threads and nesting. ``warmup``: the first runs of each plan
    inside the profile are left out (a first run faults its pages in). ``trace_limit``: the
    most instruction events whose runs are kept whole for ``runs`` and the Chrome trace (the
    first runs; 0 keeps none); every run counts in the tables whatever it is.

    >>> with mg.profile(warmup=1) as prof:
    ...     for _ in range(11):
    ...         plan.run(feeds)
    >>> print(prof.table(average=True))   # per run of each plan, over the last 10
    """

    def __init__(self, warmup: int = 0, trace_limit: int = TRACE_LIMIT):
        for name, value in (("warmup", warmup), ("trace_limit", trace_limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ProfileError(f"mg.profile({name}=...) takes a count >= 0, got {value!r}")
        self.warmup, self.trace_limit = warmup, trace_limit
        self.began: int | None = None   # CLOCK_MONOTONIC ns when the profile was entered
        self.ended: int | None = None
        self._lock = threading.Lock()
        self._runs: list[Run] = []      # the first runs, up to trace_limit events in all
        self._kept_events = 0
        self._run_count = 0             # every recorded run, kept or aggregated only
        self._threads: dict[int, str] = {}  # OS thread id -> name, of every recorded run
        self._plans: dict[int, _PlanTimes] = {}  # id(plan) -> its times, in first-run order
        # id(plan) -> (plan, runs seen, warmup ones included); the plan keeps its id unique
        self._seen: dict[int, tuple[object, int]] = {}

    def __enter__(self) -> Self:
        if self.began is not None:
            raise ProfileError("this profile was already entered: a profile records one "
                               "window; make a new mg.profile() for another")
        self.began = time.monotonic_ns()
        _activate(self)
        return self

    def __exit__(self, *exc) -> bool:
        _deactivate(self)
        self.ended = time.monotonic_ns()
        return False

    def _record(self, run: Run) -> None:
        key = id(run.plan)
        with self._lock:
            seen = self._seen.get(key, (run.plan, 0))[1] + 1
            self._seen[key] = (run.plan, seen)
            if seen <= self.warmup:
                return
            times = self._plans.get(key)
            if times is None:
                times = self._plans[key] = _PlanTimes(run.plan)
            times.add(run.times)
            self._run_count += 1
            self._threads.setdefault(run.thread, run.thread_name)
            if self._kept_events + len(run.times) <= self.trace_limit \
                    and len(self._runs) == self._run_count - 1:  # the first runs, no gaps
                self._runs.append(run)
                self._kept_events += len(run.times)
            run.plan._cache["instruction_times"] = times.mean_seconds()

    # -- reading -----------------------------------------------------------------------------
    @property
    def runs(self) -> tuple[Run, ...]:
        """The recorded runs kept whole (the first ones, up to ``trace_limit`` instruction
        events), in the order they ended; ``run_count`` counts them all."""
        with self._lock:
            return tuple(self._runs)

    @property
    def run_count(self) -> int:
        """How many runs this profile recorded (the tables cover them all)."""
        with self._lock:
            return self._run_count

    def instruction_times(self, plan) -> tuple[float, ...] | None:
        """Mean wall seconds of each of ``plan``'s instructions over the runs this profile
        recorded (0.0 where none reached it), or None when it recorded none of ``plan``.

        >>> prof.instruction_times(plan)[0]   # seconds of instruction 0
        """
        with self._lock:
            times = self._plans.get(id(plan))
            return None if times is None else times.mean_seconds()

    def profiled_seconds(self) -> float:
        """Total wall time of every recorded instruction (what shares are percents of)."""
        with self._lock:
            return sum(int(t.total_ns.sum()) for t in self._plans.values()) * 1e-9

    def instructions(self, average: bool = False) -> list[Row]:
        """One Row per instruction of every plan recorded, in plan order; ``average``: per run
        of its plan instead of totals."""
        with self._lock:  # a copy: runs on other threads may be adding to them
            plans = [t.copy() for t in self._plans.values()]
        labels = _labels([t.plan for t in plans])
        rows = [_instruction_row(t, labels[id(t.plan)], i, average)
                for t in plans for i in range(len(t.plan.instructions))]
        total = sum(r.seconds for r in rows)
        return [_with_share(r, total) for r in rows]

    def ops(self, average: bool = False) -> list[Row]:
        """One Row per op (summing its instructions over all plans), by total time."""
        groups: dict[str, list[Row]] = {}
        for row in self.instructions(average):
            groups.setdefault(row.op, []).append(row)
        rows = [_sum_rows(op, rows) for op, rows in groups.items()]
        return sorted(rows, key=_SORT_KEYS["total"])

    def table(self, top: int | None = 20, sort_by: str = "total", by: str = "op",
              average: bool = False) -> str:
        """The report as text: one line per op (``by="op"``) or per instruction
        (``by="instruction"``: plan, index, kernel and the user's line), the ``top`` first by
        ``sort_by`` ("total", "mean", "calls", "gflops", "bytes" or "order"); ``average``:
        figures per run of each plan instead of totals over the profile.

        >>> print(prof.table(top=5, by="instruction"))
        """
        _check_table_args(top, sort_by, by)
        rows = self.ops(average) if by == "op" else self.instructions(average)
        rows = [r for r in rows if r.calls] if by == "instruction" else rows
        rows.sort(key=_SORT_KEYS[sort_by])
        shown = rows if top is None else rows[:top]
        seconds = sum(r.seconds for r in rows)
        lines = self._header(average, seconds) + _format_rows(shown, by)
        if len(shown) < len(rows):
            rest = rows[len(shown):]
            lines.append(f"... {len(rest)} more {by}s: {sum(r.share for r in rest):.1f}% "
                         f"of the time")
        return "\n".join(lines)

    def _header(self, average: bool, seconds: float) -> list[str]:
        with self._lock:
            plans, count, threads = list(self._plans.values()), self._run_count, len(self._threads)
        if not count:
            return ["mg.profile: no plan ran inside this profile"]
        labels = _labels([t.plan for t in plans])
        what = "per run of each plan" if average else "in total"
        head = (f"mg.profile: {count} run(s) of {len(plans)} plan(s) from {threads} calling "
                f"thread(s); instructions took {seconds * 1e3:.3f} ms {what}")
        listed = "; ".join(f"{labels[id(t.plan)]}: {len(t.plan.instructions)} instructions, "
                           f"{t.runs} run(s)" for t in plans)
        return [head, f"  {listed}"]

    # -- the Chrome / Perfetto trace ---------------------------------------------------------
    def chrome_trace(self) -> dict:
        """The trace-event JSON object (``save_chrome_trace`` writes it): a complete event
        (``"ph": "X"``, microseconds from the profile's start) per instruction of every kept
        run (``runs``), category "instruction", inside one per run (category "run"), in the
        lane of the thread that ran it, with thread-name metadata. ``otherData`` counts the
        runs recorded and those in the trace, with a note when later runs are left out."""
        with self._lock:
            runs, plans = list(self._runs), [t.plan for t in self._plans.values()]
            count = self._run_count
        origin = self.began if self.began is not None else 0
        pid = os.getpid()
        labels = _labels(plans)
        events = _metadata(pid, runs)
        for number, run in enumerate(runs):
            events += _run_events(run, number, labels[id(run.plan)], origin, pid)
        other = {"producer": "mgegraph.profile", "runs": count, "runs_in_trace": len(runs)}
        if len(runs) < count:
            other["note"] = (f"the first {len(runs)} of {count} runs (trace_limit="
                             f"{self.trace_limit} instruction events); the later runs were "
                             "aggregated into the tables only")
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}

    def save_chrome_trace(self, path) -> None:
        """Write the trace (``chrome_trace``) as JSON to ``path``: open it in
        https://ui.perfetto.dev or chrome://tracing.

        >>> prof.save_chrome_trace("step.json")
        """
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)


def profile(warmup: int = 0, trace_limit: int = TRACE_LIMIT) -> Profile:
    """A profile to use as a context manager: every plan run inside it, on any thread, is
    timed instruction by instruction (``warmup``: runs of each plan to leave out first;
    ``trace_limit``: instruction events of the first runs kept for the Chrome trace).

    >>> with mg.profile() as prof:
    ...     plan.run({"x": x})
    >>> print(prof.table())
    """
    return Profile(warmup, trace_limit)


# -- rows ----------------------------------------------------------------------------------------
def _instruction_row(times: _PlanTimes, label: str, i: int, average: bool) -> Row:
    plan = times.plan
    ins = plan.instructions[i]
    scale = 1.0 / times.runs if average else 1.0
    called = bool(times.calls[i])
    calls = float(times.calls[i]) * scale
    flops = instruction_flops(plan, i)
    return Row(ins.op, calls, float(times.total_ns[i]) * 1e-9 * scale,
               None if flops is None else flops * calls, instruction_bytes(plan, i) * calls,
               0.0, label, i, ins.kernel, ins.location,
               float(times.min_ns[i]) * 1e-9 if called else 0.0, float(times.max_ns[i]) * 1e-9,
               ins.choice.path if ins.choice is not None else None)


def _with_share(row: Row, total: float) -> Row:
    return replace(row, share=100.0 * row.seconds / total if total > 0 else 0.0)


def _sum_rows(op: str, rows: list[Row]) -> Row:
    flops = None if any(r.flops is None for r in rows) else sum(r.flops for r in rows)
    called = [r for r in rows if r.calls]
    return Row(op, sum(r.calls for r in rows), sum(r.seconds for r in rows), flops,
               sum(r.nbytes for r in rows), sum(r.share for r in rows),
               fastest=min((r.fastest for r in called), default=0.0),
               slowest=max((r.slowest for r in rows), default=0.0))


def _check_table_args(top, sort_by, by) -> None:
    if sort_by not in _SORT_KEYS:
        raise ProfileError(f"table(sort_by={sort_by!r}): sort by one of {', '.join(_SORT_KEYS)}")
    if by not in _BY:
        raise ProfileError(f"table(by={by!r}): group by one of {', '.join(_BY)}")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ProfileError(f"table(top={top!r}): give a count of rows >= 1, or None for all")


def _format_rows(rows: list[Row], by: str) -> list[str]:
    first = f"{'plan:#':<14}{'op':<24}" if by == "instruction" else f"{'op':<26}"
    lines = [f"{first}{'calls':>8}{'total ms':>12}{'mean us':>11}{'share':>8}{'GFLOP/s':>10}"
             f"{'MB moved':>11}" + ("  kernel / location" if by == "instruction" else "")]
    for r in rows:
        gflops = "-" if r.gflops is None else f"{r.gflops:.2f}"
        name = (f"{f'{r.plan}:{r.index}':<14}{r.op[:23]:<24}" if by == "instruction"
                else f"{r.op[:25]:<26}")
        way = f" ({r.way})" if r.way else ""
        where = (f"  {r.kernel}{way} {os.path.basename(r.location)}" if by == "instruction"
                 else "")
        lines.append(f"{name}{r.calls:>8g}{r.seconds * 1e3:>12.3f}{r.mean * 1e6:>11.2f}"
                     f"{r.share:>7.1f}%{gflops:>10}{r.nbytes / 1e6:>11.2f}{where}")
    return lines


def _labels(plans) -> dict[int, str]:
    """id(plan) -> "plan0", "plan1", ... in order; a prologue is named after its plan's."""
    parent = {id(p.prologue): p for p in plans if p.prologue is not None}
    labels: dict[int, str] = {}
    for p in plans:
        if id(p) not in parent:
            labels[id(p)] = f"plan{len(labels)}"
    for p in plans:
        if id(p) in parent:
            labels[id(p)] = labels.get(id(parent[id(p)]), "plan?") + ".prologue"
    return labels


# -- trace events --------------------------------------------------------------------------------
def _metadata(pid: int, runs: list[Run]) -> list[dict]:
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
               "args": {"name": "mgegraph"}}]
    threads = {r.thread: r.thread_name for r in runs}
    for order, (tid, name) in enumerate(threads.items()):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": order}})
    return events


def _run_events(run: Run, number: int, label: str, origin: int, pid: int) -> list[dict]:
    plan = run.plan
    lane = {"pid": pid, "tid": run.thread}
    events = [{"name": f"{label} run", "cat": "run", "ph": "X", **lane,
               "ts": (run.began - origin) / 1e3, "dur": (run.ended - run.began) / 1e3,
               "args": {"plan": label, "run": number, "instructions": len(plan.instructions),
                        "complete": run.complete}}]
    for i, (start, dur) in enumerate(run.times.tolist()):
        ins = plan.instructions[i]
        events.append({"name": ins.op, "cat": "instruction", "ph": "X", **lane,
                       "ts": (start - origin) / 1e3, "dur": dur / 1e3,
                       "args": {"plan": label, "run": number, "instruction": i,
                                "kernel": ins.kernel, "location": ins.location,
                                "inputs": [_slot(plan, s) for s in ins.inputs],
                                "outputs": [_slot(plan, s) for s in ins.outputs],
                                "flops": instruction_flops(plan, i),
                                "bytes": instruction_bytes(plan, i)}})
    return events


def _slot(plan, s: int) -> str:
    return f"s{s} {plan.slots[s].type}"


# -- what an instruction costs -------------------------------------------------------------------
class _Value:
    """A slot seen as the Var the op's FLOPs rule reads (type, shape, size)."""

    def __init__(self, type):
        self.type, self.shape, self.size, self.ndim = type, type.shape, type.size, type.ndim


class _NodeView:
    """An instruction seen as the node it was lowered from, for the op's FLOPs rule."""

    def __init__(self, plan, ins):
        self.inputs = [_Value(plan.slots[s].type) for s in ins.inputs]
        self.outputs = [_Value(plan.slots[s].type) for s in ins.outputs]
        self.attrs, self.attr = ins.attrs, dict(ins.attrs)


def instruction_flops(plan, index: int) -> float | None:
    """FLOPs of one run of ``plan.instructions[index]`` where the op registry knows them: the
    op's own formula (GEMMs, convolutions, batch norm), an elementwise op's FLOPs per element
    from its table (a fused group: the sum over its program's steps); None for the others
    (reductions, movement, and nn ops whose registry cost is only a planner's estimate).

    >>> instruction_flops(plan, 0)   # a 128x784 @ 784x1024 matmul: 2 * 128 * 784 * 1024
    """
    return _costs(plan)[index][0]


def instruction_bytes(plan, index: int) -> int:
    """Bytes ``plan.instructions[index]`` reads and writes: its input and output slots' sizes
    (a workspace is scratch the kernel may touch only in part, so it is not counted)."""
    return _costs(plan)[index][1]


def _costs(plan) -> tuple[tuple[float | None, int], ...]:
    """(FLOPs, bytes) of each instruction, computed once per plan (a plan is frozen)."""
    costs = plan._cache.get("instruction_costs")
    if costs is None:
        costs = plan._cache["instruction_costs"] = tuple(
            (_flops(plan, ins), sum(plan.slots[s].nbytes for s in ins.inputs + ins.outputs))
            for ins in plan.instructions)
    return costs


def _flops(plan, ins) -> float | None:
    op = get_op(ins.op)
    if ins.op == "fused_elementwise":
        per = sum(TABLE.BY_NAME[step[0]].flops for step in dict(ins.attrs)["code"]
                  if step[0] in TABLE.BY_NAME)
        flops = per * plan.slots[ins.outputs[0]].type.size
    elif op.flops is not None:
        flops = float(op.flops(_NodeView(plan, ins)))
    elif op.category == "elementwise":
        flops = op.flops_per_element * sum(plan.slots[s].type.size for s in ins.outputs)
    else:
        return None
    return flops if flops > 0 else None


# executables reach the profiles through the backend seam (mgegraph.backend.profiling)
install_profiler(active, record)
