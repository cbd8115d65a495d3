"""The plan verifier: ``verify_plan(plan)`` raises PlanError unless the plan's memory is sound.

One verifier per level, each with its level in its name: ``verify_graph`` (the IR, in
``planner.passes.verify``), ``verify_plan`` here (a lowered plan's memory) and
``verify_arena`` (offsets against lifetimes, in ``arena_check``). ``mg.planner.verify`` is
this one, the name the public API has always had.

Design: it trusts nothing the planner computed but the plan itself (slots with offsets and
views, instructions in order). It replays the schedule over a shadow of memory that records,
for every byte range, which slot's value it holds; every read must find the value it names and
every write may only cover bytes whose value nobody reads later, except an in-place write by
an op that allows it over exactly the input it replaces. That single rule catches overlapping
live buffers and reads of a value already overwritten; the static checks catch buffers outside
the arena and broken alignment.

>>> verify_plan(mg.compile(y))   # returns None, or raises PlanError naming the slots and steps
"""
from __future__ import annotations

from bisect import bisect_right
from contextlib import contextmanager

from ...ir.errors import GraphError
from ...ops import get_op

_INITIAL = -1  # the version of a value a run starts with (inputs, params, constants)


class PlanError(GraphError):
    """A plan whose memory plan is unsound; the message names the slots and steps."""


class _Shadow:
    """Disjoint byte ranges of one region with the (slot, step written) value each holds."""

    def __init__(self):
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.value: list[tuple[int, int]] = []

    def overlapping(self, lo: int, hi: int) -> list[int]:
        k = max(bisect_right(self.lo, lo) - 1, 0)
        found = []
        while k < len(self.lo) and self.lo[k] < hi:
            if self.hi[k] > lo:
                found.append(k)
            k += 1
        return found

    def holds(self, lo: int, hi: int):
        """The values held in [lo, hi), or None where some byte holds none."""
        covered, values = lo, set()
        for k in self.overlapping(lo, hi):
            if self.lo[k] > covered:
                return None
            covered = max(covered, self.hi[k])
            values.add(self.value[k])
        return values if covered >= hi or lo == hi else None

    def write(self, lo: int, hi: int, value) -> None:
        if lo == hi:
            return
        ks = self.overlapping(lo, hi)
        pieces = [(lo, hi, value)]
        if ks:  # the ranges are disjoint and sorted: only the ends can stick out of [lo, hi)
            first, stop = ks[0], ks[-1] + 1
            if self.lo[first] < lo:
                pieces.insert(0, (self.lo[first], lo, self.value[first]))
            if self.hi[stop - 1] > hi:
                pieces.append((hi, self.hi[stop - 1], self.value[stop - 1]))
        else:
            first = stop = bisect_right(self.lo, lo)
        self.lo[first:stop] = [p[0] for p in pieces]
        self.hi[first:stop] = [p[1] for p in pieces]
        self.value[first:stop] = [p[2] for p in pieces]


def _root(slot) -> int:
    return slot.index if slot.alias is None else slot.alias


def _place(plan, slot) -> tuple[object, int, int]:
    """(region, first byte, end byte) of a slot: the arena for planned buffers, else its own."""
    root = plan.slots[_root(slot)]
    region = "arena" if root.offset is not None else root.index
    base = (root.offset or 0) + slot.view_offset
    return region, base, base + slot.nbytes


def _check_static(plan) -> None:
    align, size = plan.memory.options.alignment, plan.memory.arena_bytes
    for s in plan.slots:
        if s.alias is not None:
            root = plan.slots[s.alias]
            if root.alias is not None or s.view_offset + s.nbytes > root.nbytes:
                raise PlanError(f"view s{s.index} [{s.view_offset}, +{s.nbytes}) does not fit "
                                f"in s{root.index} ({root.nbytes} B)")
            continue
        if s.role in ("temp", "workspace") and s.offset is None:
            raise PlanError(f"{s.role} s{s.index} has no arena offset")
        if s.offset is None:
            continue
        if s.role not in ("temp", "workspace"):
            raise PlanError(f"{s.role} s{s.index} is persistent but placed in the arena")
        if s.offset % align:
            raise PlanError(f"s{s.index} at offset {s.offset} breaks the {align}-byte alignment")
        if s.offset < 0 or s.offset + s.nbytes > size:
            raise PlanError(f"s{s.index} bytes [{s.offset}, {s.offset + s.nbytes}) fall outside "
                            f"the arena [0, {size})")


def _last_reads(plan) -> dict[int, int]:
    last = {s: len(plan.instructions) for s in plan.outputs}  # outputs are read after the run
    for step, ins in enumerate(plan.instructions):
        for s in ins.inputs:
            last[_root(plan.slots[s])] = max(last.get(_root(plan.slots[s]), step), step)
    return last


def _check_read(plan, shadows, step, s) -> None:
    slot = plan.slots[s]
    region, lo, hi = _place(plan, slot)
    held = shadows.setdefault(region, _Shadow()).holds(lo, hi)
    want = _root(slot)
    if held is None:
        raise PlanError(f"step {step} ({plan.instructions[step].op}) reads s{s} before all of "
                        f"its bytes were written")
    wrong = sorted(v for v in held if v[0] != want)
    if wrong:
        other, when = wrong[0]
        raise PlanError(f"step {step} ({plan.instructions[step].op}) reads s{s}, but step "
                        f"{when} overwrote its bytes with s{other}")


def _may_overwrite(plan, ins, out, victim) -> bool:
    """An in-place write: out covers exactly an input of ins that lives in victim's bytes
    (any output of an elementwise op, such as a fused update; output 0 of others)."""
    op = get_op(ins.op)
    if not op.inplace or (out != ins.outputs[0] and op.category != "elementwise"):
        return False
    allowed = ins.inputs if op.category == "elementwise" else ins.inputs[:1]
    out_place = _place(plan, plan.slots[out])
    return any(_root(plan.slots[s]) == victim and _place(plan, plan.slots[s]) == out_place
               for s in allowed)


def _rewrites_input(ins, s) -> bool:
    """Whether ``ins`` writes ``s`` as the very input it reads (a collective's wait: MPI
    reduced those bytes in place, ``OpDef.in_place_from``)."""
    first = get_op(ins.op).in_place_from
    return first is not None and s in ins.inputs[first:]


def _check_write(plan, shadows, last, step, s) -> None:
    ins, slot = plan.instructions[step], plan.slots[s]
    region, lo, hi = _place(plan, slot)
    shadow = shadows.setdefault(region, _Shadow())
    if _rewrites_input(ins, s):
        shadow.write(lo, hi, (_root(slot), step))
        return
    for k in shadow.overlapping(lo, hi):
        victim, written = shadow.value[k]
        if victim == _root(slot) and written != _INITIAL and slot.alias is None:
            raise PlanError(f"step {step} ({ins.op}) writes s{s} a second time")
        needed = last.get(victim, -1)
        if needed > step:
            raise PlanError(f"step {step} ({ins.op}) writes s{s} over bytes "
                            f"[{shadow.lo[k]}, {shadow.hi[k]}) of s{victim}, which step "
                            f"{needed} still reads")
        if needed == step and not _may_overwrite(plan, ins, s, victim):
            raise PlanError(f"step {step} ({ins.op}) writes s{s} over s{victim} while reading "
                            f"it, and {ins.op} may not run in place that way")
    # a kernel writes a view only inside a bucket (planner/memory/buckets.py): the value is
    # its root's, which every read through the bucket's views names
    shadow.write(lo, hi, (_root(slot), step))


def verify_plan(plan) -> None:
    """Raise PlanError unless no two live buffers share bytes, every buffer is inside the
    arena and aligned, and every read finds the value it names (in-place included)."""
    _check_static(plan)
    shadows: dict[object, _Shadow] = {}
    for s in plan.slots:
        if s.alias is None and s.role in ("input", "param", "const"):
            region, lo, hi = _place(plan, s)
            shadows.setdefault(region, _Shadow()).write(lo, hi, (s.index, _INITIAL))
    last = _last_reads(plan)
    for step, ins in enumerate(plan.instructions):
        for s in ins.inputs:
            _check_read(plan, shadows, step, s)
        for s in ins.outputs + (() if ins.workspace is None else (ins.workspace,)):
            _check_write(plan, shadows, last, step, s)
    for s in plan.outputs:
        _check_read(plan, shadows, len(plan.instructions), s)


_CHECKING = [False]


@contextmanager
def checking(enabled: bool = True):
    """Within the block, ``mg.compile`` verifies every plan it makes (the test suite's mode,
    like JAX's ``enable_checks``).

    >>> with mg.planner.checking():
    ...     plan = mg.compile(y)   # raises PlanError on an unsound plan
    """
    before = _CHECKING[0]
    _CHECKING[0] = enabled
    try:
        yield
    finally:
        _CHECKING[0] = before


def checks_enabled() -> bool:
    return _CHECKING[0]
