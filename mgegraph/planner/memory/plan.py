"""Memory planning of a lowered plan: schedule, liveness, in-place reuse, arena offsets.

``plan_memory`` takes slots and instructions in the user's order and returns the order to run
them in together with a ``MemoryPlan``: an offset in one arena for every temporary and
workspace, and the figures the report explains (arena, lower bound, naive total, savings).
Inputs, outputs, parameters and constants are persistent: they keep buffers of their own,
outside the arena, counted in ``persistent_bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.errors import GraphError
from ...ops.collective import EARLY_OPS, LATE_OPS
from . import arena
from .arena_check import aligned
from .inplace import choose_overwrites
from .liveness import analyze, is_arena_buffer
from .schedule import collectives_placed, dependencies, memory_aware_order

SCHEDULES = ("memory", "user")



@dataclass(frozen=True)
class MemoryOptions:
    """How ``mg.compile`` plans memory.

    ``strategy``: an arena strategy (see ``mg.planner.STRATEGIES``), "best" (all of them, the
    smallest arena wins) or "none" (no reuse: every buffer its own bytes). ``schedule``:
    "memory" (the memory-aware order when its lower bound beats the user's order) or "user".
    ``poison``: fill each buffer with NaN (integers: 0xA5 bytes) once it is dead, so a planner
    bug shows as a wrong result.

    >>> mg.compile(y, memory=MemoryOptions(schedule="user", inplace=False))
    """

    strategy: str = "best"
    schedule: str = "memory"
    inplace: bool = True
    alignment: int = 64
    poison: bool = False

    def __post_init__(self):
        strategies = ("best", "none", *arena.STRATEGIES)
        if self.strategy not in strategies:
            raise GraphError(f"memory strategy {self.strategy!r} is not one of {strategies}")
        if self.schedule not in SCHEDULES:
            raise GraphError(f"memory schedule {self.schedule!r} is not one of {SCHEDULES}")
        if self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise GraphError(f"memory alignment must be a power of two, got {self.alignment}")


PRESETS = {
    "default": MemoryOptions(),
    "debug": MemoryOptions(poison=True),
    "no_reuse": MemoryOptions(strategy="none", schedule="user", inplace=False),
}


def memory_options(value) -> MemoryOptions:
    """``memory=`` of compile: None, a preset name, an arena strategy name, or MemoryOptions."""
    if value is None:
        return PRESETS["default"]
    if isinstance(value, MemoryOptions):
        return value
    if isinstance(value, str):
        if value in PRESETS:
            return PRESETS[value]
        if value in arena.STRATEGIES:
            return MemoryOptions(strategy=value)
    raise GraphError(f"memory={value!r}: pass a MemoryOptions, None, a preset "
                     f"{sorted(PRESETS)} or a strategy {sorted(arena.STRATEGIES)}")


@dataclass(frozen=True)
class MemoryPlan:
    options: MemoryOptions
    offsets: dict[int, int]             # arena slot -> byte offset
    spans: dict[int, tuple[int, int]]   # arena slot -> steps [begin, end) it is live
    overwrites: dict[int, tuple[int, int]]  # slot -> (slot whose bytes it takes, offset)
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    persistent_bytes: int
    strategy: str                       # the arena strategy that won
    schedule: str                       # "memory" or "user": the order the plan runs in
    lower_bounds: dict[str, int] = field(default_factory=dict)  # per schedule tried

    inplace_saved_bytes: int = 0        # bytes of the buffers that took over an input's

    @property
    def reuse_saved_bytes(self) -> int:
        return self.naive_bytes - self.inplace_saved_bytes - self.arena_bytes


def _requests(slots, instructions, options):
    live = analyze(slots, instructions)
    chosen = choose_overwrites(slots, instructions, live, options.alignment) \
        if options.inplace else {}
    requests = [arena.Request(r, *live.request_span(r), slots[r].nbytes)
                for r in sorted(live.first) if is_arena_buffer(slots[r])]
    overwrites = [arena.Overwrite(src, dst, off) for dst, (src, off) in chosen.items()]
    return requests, overwrites, chosen


def peak_bytes(requests, overwrites, alignment: int) -> int:
    """The lower bound of ``arena.lower_bound`` for this planner's overwrites, which always
    put a buffer inside the one it replaces: at the handover step the pair takes the bytes
    of the larger alone. A sweep, without the solver's neighbour lists, so that comparing
    schedules stays cheap."""
    successor = {w.dst_key for w in overwrites}
    delta: dict[int, int] = {}
    for r in requests:
        begin = r.begin + (r.key in successor)
        if begin < r.end:
            size = aligned(r.size, alignment)
            delta[begin] = delta.get(begin, 0) + size
            delta[r.end] = delta.get(r.end, 0) - size
    live = best = 0
    for step in sorted(delta):
        live += delta[step]
        best = max(best, live)
    return best


def _no_reuse(requests, alignment) -> arena.ArenaPlan:
    offsets, top = {}, 0
    for r in requests:
        offsets[r.key] = top
        top += aligned(r.size, alignment)
    return arena.ArenaPlan(offsets, top, peak_bytes(requests, (), alignment), "none", top)


@dataclass(frozen=True)
class Scheduled:
    """The order a plan runs in and its buffer requests, before offsets are chosen."""

    order: list[int]
    schedule: str                      # "memory" or "user"
    bound: int                         # its lower bound: no arena can be smaller
    requests: list
    overwrites: list
    chosen: dict
    lower_bounds: dict[str, int]       # per schedule tried


def schedule(slots, instructions, options: MemoryOptions, after=()) -> Scheduled:
    """The user's order or the memory-aware one, whichever has the lower bound; ``after``
    holds extra (i, j) pairs: j runs after i."""
    orders = {"user": list(range(len(instructions)))}
    if options.schedule == "memory" and options.strategy != "none":
        order = memory_aware_order(slots, instructions, after)
        if order != orders["user"]:
            orders["memory"] = order
    if any(ins.op in EARLY_OPS | LATE_OPS for ins in instructions):
        before = dependencies(slots, instructions, after)
        orders = {name: collectives_placed(order, instructions, before)
                  for name, order in orders.items()}
    candidates = {}
    for name, order in orders.items():
        ordered = [instructions[i] for i in order]
        requests, overwrites, chosen = _requests(slots, ordered, options)
        bound = peak_bytes(requests, overwrites, options.alignment)
        candidates[name] = (bound, requests, overwrites, chosen)
    name = min(candidates, key=lambda n: (candidates[n][0], n != "user"))
    return Scheduled(orders[name], name, *candidates[name],
                     lower_bounds={n: c[0] for n, c in candidates.items()})


def place(slots, scheduled: Scheduled, options: MemoryOptions) -> MemoryPlan:
    """Offsets in one arena for a scheduled plan's requests."""
    requests, chosen = scheduled.requests, scheduled.chosen
    if options.strategy == "none":
        solved = _no_reuse(requests, options.alignment)
    else:
        solved = arena.solve(requests, scheduled.overwrites, options.alignment, options.strategy)
    persistent = sum(s.nbytes for s in slots if s.alias is None and not is_arena_buffer(s))
    return MemoryPlan(
        options=options, offsets=solved.offsets,
        spans={r.key: (r.begin, r.end) for r in requests}, overwrites=chosen,
        arena_bytes=solved.total, lower_bound_bytes=solved.lower_bound,
        naive_bytes=sum(aligned(r.size, options.alignment) for r in requests),
        persistent_bytes=persistent, strategy=solved.strategy, schedule=scheduled.schedule,
        lower_bounds=dict(scheduled.lower_bounds),
        inplace_saved_bytes=sum(aligned(slots[s].nbytes, options.alignment)
                                for s in chosen))


def plan_memory(slots, instructions, options: MemoryOptions, after=()):
    """(the order to run ``instructions`` in, its MemoryPlan)."""
    scheduled = schedule(slots, instructions, options, after)
    return scheduled.order, place(slots, scheduled, options)
