"""Which forward values to keep: candidate remat plans, each judged by its planned arena.

Design: candidates come from one family, Chen et al. (2016)'s segments generalised from chains
to any graph. Walking the forward nodes in order, a segment grows until its crossing bytes plus
the checkpoints kept so far pass a limit; it is then cut at the last *candidate boundary* (a
point of the order where at most one buffer crosses from before to after: between layers of a
chain, between residual blocks of a ResNet) and the buffers crossing there become checkpoints.
The top segment, live when the backward starts anyway, is kept (``Split.always_kept`` too).
Sweeping the limit gives segments that shrink towards the loss (more checkpoints are live
there), so each value is recomputed at most once. Each segment plan also comes *mirrored*
(``remat.recomputations``): only dear clones (GEMMs, convolutions: ``OpDef.cheap`` in the
registry) are held, cheap values are remade at each use, and segments are sized by their dear
bytes only, so they grow longer for the same memory. A second flavour keeps the outputs of dear
ops and recomputes only cheap ones; partial-depth plans keep everything (or, mirrored, every
dear output) above a point of the forward order. Nothing decides on an estimate: a
candidate is rebuilt, lowered and scheduled, its lower bound read, and its arena solved
(workspaces included), unless its floor (the kept bytes live across the loss) or its bound
shows that it cannot win.

>>> s = split(graph, outputs); judge = Judge(s, outputs, lower, memory_options)
>>> chosen = choose(judge, candidates(s), RematOptions("auto"), graph_flops(graph))
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ...ir.errors import GraphError
from ..memory.plan import place, schedule
from ..memory.report import human
from .remat import (
    Rematerialized,
    RematOptions,
    Split,
    recomputations,
    recompute_cost,
    recomputed_nodes,
    rematerialize,
    root,
)

# Segment limits tried: from the largest crossing buffer to all of them, each GRID_STEP times
# the last, or coarser so that at most GRID_POINTS are tried (each candidate is planned, and a
# 300-layer step takes 0.2 s to plan); and FINE_STEP apart within FINE_SPAN of sqrt(2 * total
# * largest), where a chain of equal buffers has its smallest peak (segments of k, k-1, ...,
# 1 layers with k(k+1)/2 = n).
GRID_STEP, GRID_POINTS, FINE_STEP, FINE_SPAN = 1.15, 16, 1.03, 1.4
# Partial-depth plans: everything above these fractions of the crossing bytes (counted from the
# loss down) is kept, with PARTIAL_LIMITS segment limits (doubling) below.
KEEP_ABOVE, PARTIAL_LIMITS = (0.06, 0.09, 0.12, 0.18, 0.25, 0.5, 0.75), 3


@dataclass(frozen=True)
class Candidate:
    name: str
    kept: frozenset[int]
    extra_flops: float
    segments: bool        # whole segments, each dear value recomputed once ("sqrt" family)
    mirror: bool = False  # cheap clones remade at each use (``remat.recomputations``)
    groups: tuple = field(default=(), compare=False, repr=False)  # its recomputations
    # bytes of the kept buffers live across the loss: a lower bound on its arena, known
    # before the candidate is built
    floor: int = field(default=0, compare=False)


# -- candidate boundaries ------------------------------------------------------------------------
def _bytes(v) -> int:
    return v.type.nbytes


def crossing_cuts(s: Split) -> list[frozenset[int]]:
    """Per forward position p, the buffers (root ids) made at or before p that forward nodes
    after p read: what a cut after p must keep."""
    last_use: dict[int, int] = {}
    for p, node in enumerate(s.forward):
        for u in node.inputs:
            r = root(u)
            if s.is_forward_value(r):
                last_use[r.id] = p
    live: set[int] = set()
    cuts = []
    for p, node in enumerate(s.forward):
        live -= {rid for rid in live if last_use[rid] <= p}
        live |= {v.id for v in node.outputs if root(v) is v and last_use.get(v.id, -1) > p}
        cuts.append(frozenset(live))
    return cuts


def boundaries(cuts: list[frozenset[int]]) -> set[int]:
    """Positions where at most one buffer crosses; every position when fewer than two do."""
    found = {p for p, c in enumerate(cuts) if len(c) <= 1}
    return found if len(found) >= 2 else set(range(len(cuts)))


# -- the family ----------------------------------------------------------------------------------
def _keep_dear(s: Split, kept: set[int]) -> set[int]:
    """``kept`` plus the outputs of every dear node a recomputation would otherwise clone."""
    while True:
        dear = [n for n in recomputed_nodes(s, kept) if not n.op.cheap(n)]
        if not dear:
            return kept
        kept |= {root(v).id for n in dear for v in n.outputs}


def segment_plan(s: Split, cuts, allowed: set[int], limit: int, keep_dear: bool,
                 stop: int | None = None, mirror: bool = False) -> frozenset:
    """The kept set of segments grown up to ``limit`` bytes (crossing bytes of the open segment
    plus the checkpoints so far), cut at the last allowed boundary; no cut after forward
    position ``stop``, so everything above the last cut before it is kept. With ``mirror``,
    only the outputs of dear ops count and are kept at the top: the cheap ones are remade at
    each use."""
    kept, kept_bytes = set(s.always_kept), 0
    segment: list[int] = []
    seg_bytes, last_cut = 0, None
    for p, node in enumerate(s.forward):
        dear = not node.op.cheap(node)
        for v in node.outputs:
            if v.id in s.crossing:
                if keep_dear and dear:
                    kept.add(v.id)
                    kept_bytes += _bytes(v)
                elif dear or not mirror:
                    segment.append(v.id)
                    seg_bytes += _bytes(v)
        if p in allowed and (stop is None or p <= stop):
            last_cut = p
        if seg_bytes + kept_bytes > limit and last_cut is not None:
            new = cuts[last_cut] - kept
            kept |= new
            kept_bytes += sum(_bytes(s.values[r]) for r in new)
            segment = [r for r in segment if r not in kept and _made_after(s, r, last_cut)]
            seg_bytes = sum(_bytes(s.crossing[r]) for r in segment)
            last_cut = None
    kept |= set(segment)  # the top segment: live when the backward starts anyway
    return frozenset(_keep_dear(s, kept) if keep_dear else kept)


def _made_after(s: Split, rid: int, p: int) -> bool:
    return s.positions[id(s.crossing[rid].node)] > p


def cheap_plan(s: Split) -> frozenset:
    """Keep the outputs of dear ops only: every cheap value is recomputed."""
    return frozenset(_keep_dear(s, set(s.always_kept)))


def limits(sizes: list[int]) -> list[tuple[int, bool]]:
    """(segment limit, whether the dear-ops-kept flavour is tried too), ascending."""
    if not sizes:
        return []
    low, top = max(sizes), sum(sizes)
    step = max(GRID_STEP, (top / low) ** (1 / GRID_POINTS))
    found, limit = {}, float(low)
    while limit < top * step:
        found[int(limit)] = True
        limit *= step
    best = (2 * top * low) ** 0.5
    limit = best / FINE_SPAN
    while limit < best * FINE_SPAN:
        found.setdefault(int(limit), False)
        limit *= FINE_STEP
    return sorted(found.items())


def partial_depths(s: Split) -> list[tuple[int, int, str]]:
    """(stop position, segment limit, label) of plans that recompute only below a point of
    the forward order and keep everything above it: less memory saved for less compute, the
    points between keeping all and recomputing all the way down."""
    sizes = [_bytes(v) for v in s.crossing.values()]
    if not sizes:
        return []
    top, low, out, above = sum(sizes), max(sizes), [], 0
    fractions = list(KEEP_ABOVE)
    for p in range(len(s.forward) - 1, -1, -1):
        above += sum(_bytes(v) for v in s.forward[p].outputs if v.id in s.crossing)
        while fractions and above >= fractions[0] * top:
            rest = top - above
            first = (2 * rest * low) ** 0.5
            for k in range(PARTIAL_LIMITS):
                out.append((p, int(first * 2 ** k), f"{fractions[0]:.0%} above kept"))
            fractions.pop(0)
    return out


def candidates(s: Split) -> list[Candidate]:
    """The family, fewest extra FLOPs first; the first keeps everything. Candidates that
    recompute the same nodes at the same places are one (mirroring often changes nothing)."""
    found = {(frozenset(s.crossing) | s.always_kept, False): ("none", False)}
    for mirror in (False, True):
        found.setdefault((cheap_plan(s), mirror), ("cheap", False))
    cuts = crossing_cuts(s)
    allowed = boundaries(cuts)
    for limit, both in limits([_bytes(v) for v in s.crossing.values()]):
        label = f"segments {human(limit)}"
        found.setdefault((segment_plan(s, cuts, allowed, limit, False), False), (label, True))
        found.setdefault((segment_plan(s, cuts, allowed, limit, False, mirror=True), True),
                         (label, True))
        if both:
            found.setdefault((segment_plan(s, cuts, allowed, limit, True), False),
                             (label + " (dear ops kept)", False))
    for stop, limit, label in partial_depths(s):
        for mirror in (False, True):
            found.setdefault((segment_plan(s, cuts, allowed, limit, False, stop, mirror), mirror),
                             (f"segments {human(limit)}, {label}", False))
    out, seen = [], set()
    for (kept, mirror), (name, segments) in found.items():
        groups = tuple(recomputations(s, kept, mirror))
        key = tuple((index, tuple(map(id, nodes))) for index, nodes in groups)
        if key not in seen:
            seen.add(key)
            flops = sum(recompute_cost(n) for _, nodes in groups for n in nodes)
            floor = sum(_bytes(s.crossing[r]) for r in s.across_loss & (kept | s.always_kept))
            out.append(Candidate(name + (" mirrored" if mirror else ""), kept, flops, segments,
                                 mirror, groups, floor))
    return sorted(out, key=lambda c: (c.extra_flops, -len(c.kept), c.name))


# -- judging candidates by their plans ----------------------------------------------------------
@dataclass
class Judged:
    """A candidate rebuilt, lowered and scheduled; its arena solved on demand."""

    candidate: Candidate
    remat: Rematerialized
    lowered: object
    scheduled: object
    _memory: object = field(default=None, repr=False)

    @property
    def bound(self) -> int:
        return self.scheduled.bound

    def memory(self, options):
        if self._memory is None:
            self._memory = place(self.lowered.slots, self.scheduled, options)
        return self._memory

    def arena(self, options) -> int:
        return self.memory(options).arena_bytes


class Judge:
    """Plans candidates of one graph, each at most once."""

    def __init__(self, s: Split, outputs, lower, options):
        self.s, self.outputs, self.lower, self.options = s, outputs, lower, options
        self.done: dict[tuple[frozenset, bool], Judged] = {}  # (kept, mirror) -> plan

    def __call__(self, c: Candidate) -> Judged:
        if (c.kept, c.mirror) not in self.done:
            r = rematerialize(self.s, self.outputs, c.kept, c.groups)
            low = self.lower(r.graph, r.outputs, r.clones)
            sched = schedule(low.slots, low.instructions, self.options, low.after)
            self.done[c.kept, c.mirror] = Judged(c, r, low, sched)
        return self.done[c.kept, c.mirror]

    def arena(self, c: Candidate) -> int:
        return self(c).arena(self.options)


def smallest_peak(judge: Judge, pool: list[Candidate]) -> Candidate:
    """The candidate of ``pool`` with the smallest arena (fewest FLOPs on ties).

    Building a candidate gives its scheduled lower bound and solving its arena costs as much
    again, so both go in order of what is known: candidates are built in order of their floor
    and solved in order of their bound, whichever is lower next, until neither the floor of
    the next unbuilt candidate nor the bound of the next unsolved one can beat the best arena.
    """
    unbuilt = sorted(pool, key=lambda c: (c.floor, c.extra_flops))[::-1]
    unsolved: list = []  # heap of (bound, extra FLOPs, order built, candidate)
    best, best_arena = None, None
    while unbuilt or unsolved:
        next_floor = unbuilt[-1].floor if unbuilt else None
        if unsolved and (next_floor is None or unsolved[0][0] < next_floor):
            bound, flops, _, c = heapq.heappop(unsolved)
            if best is not None and bound > best_arena:
                break
            a = judge.arena(c)
            if best is None or (a, flops) < (best_arena, best.extra_flops):
                best, best_arena = c, a
        elif best is not None and next_floor > best_arena:
            break
        else:
            c = unbuilt.pop()
            heapq.heappush(unsolved, (judge(c).bound, c.extra_flops, len(pool) - len(unbuilt), c))
    return best


def within_budget(judge: Judge, pool: list[Candidate], budget: int) -> Candidate | None:
    """The candidate with the fewest extra FLOPs whose arena fits ``budget``: the first such in
    ``pool``'s order (fewest FLOPs first), so a looser budget never costs more compute."""
    for c in pool:
        if c.floor <= budget and judge(c).bound <= budget and judge.arena(c) <= budget:
            return c
    return None


def choose(judge: Judge, pool: list[Candidate], options: RematOptions, base_flops: float):
    """The candidate ``options`` asks for; GraphError when a budget cannot be met."""
    if options.mode == "sqrt":
        return smallest_peak(judge, [c for c in pool if c.segments or c.name == "none"])
    if options.mode == "auto":
        limit = options.overhead * base_flops
        return smallest_peak(judge, [c for c in pool if c.extra_flops <= limit])
    chosen = within_budget(judge, pool, options.budget)
    if chosen is None:
        least = judge.arena(smallest_peak(judge, pool))
        raise GraphError(f"remat budget {human(options.budget)} ({options.budget} B) cannot be "
                         f"met: the smallest peak reachable is {human(least)} ({least} B), "
                         f"arena with workspaces")
    return chosen
