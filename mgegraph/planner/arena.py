"""Offset assignment in one arena, after MegEngine's ``StaticMemAlloc``.

Input: buffer lifetimes over schedule steps and in-place (overwrite) specs; output: one byte
offset per buffer in a single contiguous arena. Nothing here knows about graphs or plans.

>>> plan = solve([Request("a", 0, 2, 100), Request("b", 1, 3, 64), Request("c", 2, 4, 100)])
>>> plan.offsets, plan.total, plan.lower_bound
({'a': 0, 'b': 128, 'c': 0}, 192, 192)

Design: a strategy is an *order* over blocks plus a *fit* rule (the lowest offset, or the
smallest gap that fits). A block is a buffer together with everything that overwrites it in
place (a chain a in b in c is one block); its members keep fixed offsets from the block's base,
so the solver places blocks, each a few rectangles in (time, bytes). "best" runs every
strategy, then a local search that reorders the blocks stacked under the arena's top, then
seeded restarts from shaken orders, within a fixed budget of work.

Design: placing a block only looks at the pieces live with it. Their lists are built once with
NumPy (sorted by begin, the buffers that start during one's life are a contiguous run after
it; transposing those pairs gives the ones before), so a placement costs O(n log n + P) for P
pairs of buffers live together: near linear when the live set is bounded, quadratic only when
everything is live at once. Short lists are scanned in Python, long ones in NumPy.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .arena_check import (ArenaError, ArenaPlan, Overwrite, Request, _align, _check_requests,
                          _forward_pairs, _parents, _related, _roots, dump, load, verify)

__all__ = ["ArenaError", "ArenaPlan", "Overwrite", "Request", "STRATEGIES", "dump", "load",
           "lower_bound", "solve", "verify"]


# ---------------------------------------------------------------------------------------------
# The problem, normalised. Pieces are the requests; the nonzero ones also get a *position* in
# begin order, and neighbour lists by position.

_SMALL = 256  # neighbour lists up to this long are scanned in Python; NumPy costs more below


@dataclass
class _Live:
    """Who is live with whom, for the nonzero pieces, by position."""

    pos: list             # piece -> position, or -1 for an empty piece
    piece: list           # position -> piece
    size: np.ndarray      # position -> aligned size
    start: np.ndarray     # position -> its neighbours are cols[start[r]:start[r + 1]]
    cols: np.ndarray
    small: list           # position -> its neighbours as a list when short, else None


def _neighbour_lists(begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (start, cols) of the positions live with each position; ``begin`` is sorted. Each
    list is its earlier neighbours (the forward pairs transposed) then its later ones."""
    n, index = len(begin), np.int32 if len(begin) < 2**31 else np.int64
    pairs = list(_forward_pairs(begin, end))
    rows = np.concatenate([r.astype(index) for r, _ in pairs] + [np.zeros(0, index)])
    cols = np.concatenate([c.astype(index) for _, c in pairs] + [np.zeros(0, index)])
    later, earlier = np.bincount(rows, minlength=n), np.bincount(cols, minlength=n)
    start = np.concatenate(([0], np.cumsum(later + earlier)))
    out = np.empty(len(rows) * 2, index)
    # Forward entries are grouped by row; each group goes after that row's earlier ones.
    shift = start[:-1] + earlier - np.concatenate(([0], np.cumsum(later)[:-1]))
    out[np.arange(len(rows)) + np.repeat(shift, later)] = cols
    by_col = np.argsort(cols, kind="stable")  # fast: cols is a run of ascending runs
    shift = start[:-1] - np.concatenate(([0], np.cumsum(earlier)[:-1]))
    out[np.arange(len(rows)) + np.repeat(shift, earlier)] = rows[by_col]
    return start, out


def _live(begin: list, end: list, asize: list) -> _Live:
    size = np.asarray(asize, np.int64)
    piece = np.flatnonzero(size > 0)
    piece = piece[np.argsort(np.asarray(begin, np.int64)[piece], kind="stable")]
    pos = np.full(len(begin), -1, np.int64)
    pos[piece] = np.arange(len(piece))
    start, cols = _neighbour_lists(np.asarray(begin, np.int64)[piece],
                                   np.asarray(end, np.int64)[piece])
    bounds = start.tolist()
    small = [cols[a:b].tolist() if b - a <= _SMALL else None
             for a, b in zip(bounds[:-1], bounds[1:])]
    return _Live(pos=pos.tolist(), piece=piece.tolist(), size=size[piece], start=start,
                 cols=cols, small=small)


@dataclass
class _Problem:
    keys: list            # request keys; a piece's id is its index here
    begin: list
    end: list
    asize: list           # aligned sizes
    blocks: list          # per block: tuple of (piece, offset from the block's base)
    block_of: list        # piece -> block
    block_top: list       # block -> its extent above its base
    live: _Live


def _check_block(prob: _Problem, block: tuple, parent: list, depth: list) -> None:
    """Members of one block may share bytes while live only down an overwrite chain; two
    buffers written into one source at overlapping offsets would clobber each other."""
    for _, new, live in _block_steps(prob, block):
        for p, rp in new:
            for q, rq in live:
                clash = p != q and rp < rq + prob.asize[q] and rq < rp + prob.asize[p]
                if clash and not _related(parent, depth, p, q):
                    raise ArenaError(f"overwrites put {prob.keys[p]!r} and {prob.keys[q]!r} "
                                     f"in the same bytes while both are live")


def _normalise(requests, overwrites, alignment) -> _Problem:
    index = _check_requests(requests, alignment)
    parent, off = _parents(requests, overwrites, index, alignment)
    root, rel, depth = _roots(parent, off)
    block_id = {r: k for k, r in enumerate(sorted(set(root)))}
    blocks = [[] for _ in block_id]
    for i, r in enumerate(root):
        blocks[block_id[r]].append((i, rel[i]))
    begin, end = [r.begin for r in requests], [r.end for r in requests]
    asize = [_align(r.size, alignment) for r in requests]
    prob = _Problem(keys=[r.key for r in requests], begin=begin, end=end, asize=asize,
                    blocks=[tuple(b) for b in blocks], block_of=[block_id[r] for r in root],
                    block_top=[max(rel + asize[p] for p, rel in b) for b in blocks],
                    live=_live(begin, end, asize))
    for block in prob.blocks:
        if len(block) > 1:
            _check_block(prob, block, parent, depth)
    return prob


# ---------------------------------------------------------------------------------------------
# Lower bound: the most bytes live at one step, a block's live members counted by the union
# of their byte ranges (an in-place pair shares its bytes at the handover step).


def _union_bytes(ranges: list) -> int:
    total, reach = 0, 0
    for lo, hi in sorted(ranges):
        total += max(0, hi - max(lo, reach))
        reach = max(reach, hi)
    return total


def _block_steps(prob: _Problem, block: tuple):
    """(step, newly live members, live members) at each step where a member of a block of
    several pieces begins or ends; a sweep, so a long in-place chain stays linear."""
    by_begin = sorted(block, key=lambda m: prob.begin[m[0]])
    live, i = [], 0
    for t in sorted({t for p, _ in block for t in (prob.begin[p], prob.end[p])}):
        live = [m for m in live if prob.end[m[0]] > t]
        new = []
        while i < len(by_begin) and prob.begin[by_begin[i][0]] <= t:
            new.append(by_begin[i])
            i += 1
        live += new
        yield t, new, live


def _block_profile(prob: _Problem, block: tuple) -> list:
    """(step, change in bytes live) events of one block."""
    if len(block) == 1:
        p = block[0][0]
        return [(prob.begin[p], prob.asize[p]), (prob.end[p], -prob.asize[p])]
    events, prev = [], 0
    for t, _, live in _block_steps(prob, block):
        now = _union_bytes([(rel, rel + prob.asize[p]) for p, rel in live])
        events.append((t, now - prev))
        prev = now
    return events


def _lower_bound(prob: _Problem) -> int:
    delta = {}
    for block in prob.blocks:
        for t, d in _block_profile(prob, block):
            delta[t] = delta.get(t, 0) + d
    best = live = 0
    for t in sorted(delta):
        live += delta[t]
        best = max(best, live)
    return best


def lower_bound(requests: Sequence[Request], overwrites: Iterable[Overwrite] = (),
                alignment: int = 64) -> int:
    """The most aligned bytes live at any one step; no arena can be smaller.

    >>> lower_bound([Request("a", 0, 2, 64), Request("b", 1, 3, 64), Request("c", 2, 3, 1)])
    128
    """
    return _lower_bound(_normalise(list(requests), tuple(overwrites), alignment))


# ---------------------------------------------------------------------------------------------
# Orders over blocks. Ties fall back to the block id, so a plan never depends on hash order.


def _block_stats(prob: _Problem) -> tuple[list, list, list]:
    begin = [min(prob.begin[p] for p, _ in b) for b in prob.blocks]
    end = [max(prob.end[p] for p, _ in b) for b in prob.blocks]
    return prob.block_top, begin, end


def _by_size(prob: _Problem) -> list:
    size, begin, end = _block_stats(prob)
    return sorted(range(len(size)), key=lambda k: (-size[k], begin[k] - end[k], begin[k], k))


def _by_begin(prob: _Problem) -> list:
    size, begin, end = _block_stats(prob)
    return sorted(range(len(size)), key=lambda k: (begin[k], -size[k], begin[k] - end[k], k))


def _by_area(prob: _Problem) -> list:
    size, begin, end = _block_stats(prob)
    return sorted(range(len(size)), key=lambda k: (-size[k] * (end[k] - begin[k]), -size[k], k))


def _range_argmax(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Index of the largest of ``values[lo:hi]`` per query (the first on ties): a sparse
    table, one level per power of two."""
    table, width = [np.arange(len(values))], 1
    while 2 * width <= len(values):
        a, b = table[-1][:-width], table[-1][width:]
        table.append(np.where(values[a] >= values[b], a, b))
        width *= 2
    level, out = np.log2(hi - lo).astype(np.int64), np.empty(len(lo), np.int64)
    for j, t in enumerate(table):  # queries grouped by level, as the levels differ in length
        m = level == j
        a, b = t[lo[m]], t[hi[m] - (1 << j)]
        out[m] = np.where(values[a] >= values[b], a, b)
    return out


def _by_breadth(prob: _Problem) -> list:
    """TFLite's greedy by breadth: visit steps from the most bytes live to the least and take
    the blocks live at each, largest first. A block is thus taken at the widest step of its
    life, which a range-max query finds without walking every step."""
    size, begin, end = (np.asarray(v, np.int64) for v in _block_stats(prob))
    steps = np.unique(np.concatenate([begin, end]))
    lo, hi = np.searchsorted(steps, begin), np.searchsorted(steps, end)
    delta = np.zeros(len(steps), np.int64)
    np.add.at(delta, lo, size)
    np.add.at(delta, hi, -size)
    breadth = np.cumsum(delta)
    widest = _range_argmax(breadth, lo, hi).tolist()
    b, s = breadth.tolist(), size.tolist()
    return sorted(range(len(s)), key=lambda k: (-b[widest[k]], widest[k], -s[k], k))


# ---------------------------------------------------------------------------------------------
# Fit rules. For a block at base B, each (member p at rel, placed neighbour q at offset o)
# forbids B in the open interval (o - rel - size_p, o - rel + size_q). Sorted by lower end, one
# sweep finds every feasible B; all are multiples of the alignment, as every size, offset and
# rel is. Each rule comes as a Python loop (few neighbours) and in NumPy (many). The loop takes
# neighbour ids sorted by offset with lookups ``at`` and ``top``: sorting ints by key is about
# twice as fast as sorting (lo, hi) tuples, and this is the solver's inner loop.


def _lowest(ids: list, at: list, top: list, s: int) -> int:
    cur = 0
    for q in ids:
        if at[q] - s >= cur:
            break
        if top[q] > cur:
            cur = top[q]
    return cur


def _tightest(ids: list, at: list, top: list, s: int) -> int:
    """The feasible B with the least room around it (the smallest gap that fits); the top of
    the arena only when no gap fits, as in XLA's heap simulator."""
    cur, best, slack = 0, -1, None
    for q in ids:
        lo = at[q] - s
        if lo >= cur and (slack is None or lo - cur < slack):
            best, slack = cur, lo - cur
        if top[q] > cur:
            cur = top[q]
    return best if best >= 0 else cur


def _sweep(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sorted lower ends, the sweep's position before each, and its final position."""
    order = lo.argsort(kind="stable")
    lo, reach = lo[order], np.maximum.accumulate(hi[order].clip(0))
    cur = np.empty_like(reach)
    cur[0], cur[1:] = 0, reach[:-1]
    return lo, cur, int(reach[-1])


def _lowest_np(lo: np.ndarray, hi: np.ndarray) -> int:
    lo, cur, top = _sweep(lo, hi)
    fits = lo >= cur
    k = fits.argmax()
    return int(cur[k]) if fits[k] else top


def _tightest_np(lo: np.ndarray, hi: np.ndarray) -> int:
    lo, cur, top = _sweep(lo, hi)
    slack = lo - cur
    slack[slack < 0] = np.iinfo(np.int64).max
    k = slack.argmin()
    return int(cur[k]) if lo[k] >= cur[k] else top


@dataclass(frozen=True)
class _Fit:
    small: Callable   # (ids sorted by offset, at, top, size) -> base
    large: Callable   # (lo, hi) arrays -> base


LOWEST, TIGHTEST = _Fit(_lowest, _lowest_np), _Fit(_tightest, _tightest_np)


# ---------------------------------------------------------------------------------------------
# Placement: blocks in a given order, each at the base its fit rule picks.


class _Arena:
    """Offsets so far by position, as lists (for the loops) and an array (for NumPy)."""

    def __init__(self, prob: _Problem):
        n, live = len(prob.live.piece), prob.live
        self.prob, self.pos, self.small = prob, live.pos, live.small
        self.at, self.top, self.at_np = [-1] * n, [-1] * n, np.full(n, -1)
        self.size = live.size.tolist()

    def put(self, block: tuple, base: int) -> None:
        for p, rel in block:
            r = self.pos[p]
            if r >= 0:
                self.at[r] = self.at_np[r] = base + rel
                self.top[r] = base + rel + self.size[r]

    def base(self, block: tuple, fit: _Fit) -> int:
        r = self.pos[block[0][0]]
        if len(block) == 1 and r >= 0 and self.small[r] is not None:
            at = self.at  # the common case, kept lean
            ids = [q for q in self.small[r] if at[q] >= 0]
            ids.sort(key=at.__getitem__)
            return fit.small(ids, at, self.top, self.size[r])
        members = [(self.pos[p], rel) for p, rel in block if self.pos[p] >= 0]
        if all(self.small[r] is not None for r, _ in members):
            lo, hi = self._intervals_small(members)
            return fit.small(sorted(range(len(lo)), key=lo.__getitem__), lo, hi, 0)
        lo, hi = self._intervals(members)
        return fit.large(lo, hi) if len(lo) else 0

    def _intervals_small(self, members: list) -> tuple[list, list]:
        """Forbidden (lo, hi) for a block's base from its members' placed neighbours."""
        at, top, lo, hi = self.at, self.top, [], []
        for r, rel in members:
            s = self.size[r] + rel
            for q in self.small[r]:
                if at[q] >= 0:
                    lo.append(at[q] - s)
                    hi.append(top[q] - rel)
        return lo, hi

    def _intervals(self, members: list) -> tuple[np.ndarray, np.ndarray]:
        """The same, with NumPy, for long neighbour lists."""
        live, parts = self.prob.live, []
        for r, rel in members:
            nb = live.cols[live.start[r]:live.start[r + 1]]
            at = self.at_np[nb]
            placed = at >= 0
            o = at[placed] - rel
            parts.append((o - self.size[r], o + live.size[nb[placed]]))
        return parts[0] if len(parts) == 1 else tuple(map(np.concatenate, zip(*parts)))


def _place(prob: _Problem, order: list, fit: _Fit, limit: int | None = None) -> list | None:
    """Offsets per piece, placing blocks in ``order``; None as soon as a block would end
    above ``limit`` bytes (a search candidate that cannot win)."""
    arena, top, blocks = _Arena(prob), prob.block_top, prob.blocks
    offset = [-1] * len(prob.keys)
    for k in order:
        block = blocks[k]
        base = arena.base(block, fit)
        if limit is not None and base + top[k] > limit:
            return None
        arena.put(block, base)
        for p, rel in block:
            offset[p] = base + rel
    return offset


def _total(prob: _Problem, offset: list) -> int:
    return max((o + s for o, s in zip(offset, prob.asize)), default=0)


# ---------------------------------------------------------------------------------------------
# Local search. The arena's top is reached by a stack of blocks, each resting on a live
# neighbour's top, down to offset 0; only moving one of them can lower it. So the search moves
# each in turn, largest first, to the front of the order, and keeps the first change that
# lowers the top or leaves fewer pieces touching it. (Tried on the fuzz cases and dropped:
# moving a block one place up or halfway, and going top-down: all cost more for less; and
# re-placing only the blocks a move disturbs: on dense cases the ripple reaches nearly all.)
# The work is capped in estimated placement cost, so small problems get many rounds and huge
# ones none; it is deterministic, never timed.

_SEARCH_WORK = 2_000_000  # in _cost units, about 11 to a microsecond here: 0.2 s at most


def _cost(prob: _Problem) -> int:
    """The work of one placement. Measured: a block costs about ten neighbour visits, and
    each try some 300 more (setting up, scoring, finding the stack)."""
    return 300 + 10 * len(prob.blocks) + len(prob.live.cols)


def _resting_on(prob: _Problem, offset: list, p: int) -> int:
    """A piece of another block, live with p, whose top is p's offset; or -1."""
    live, r = prob.live, prob.live.pos[p]
    if r < 0 or offset[p] == 0:
        return -1
    for q in live.cols[live.start[r]:live.start[r + 1]].tolist():
        q = live.piece[q]
        if offset[q] + prob.asize[q] == offset[p] and prob.block_of[q] != prob.block_of[p]:
            return q
    return -1


def _stack(prob: _Problem, offset: list) -> list:
    """The blocks under the arena's top, largest first (top down on ties)."""
    p = max(range(len(offset)), key=lambda i: (offset[i] + prob.asize[i], -i))
    blocks = {}
    while p >= 0:  # offsets fall strictly on the way down, so this ends
        blocks.setdefault(prob.block_of[p], len(blocks))
        p = _resting_on(prob, offset, p)
    return sorted(blocks, key=lambda k: (-prob.block_top[k], blocks[k]))


def _score(prob: _Problem, offset: list) -> tuple[int, int]:
    """Arena size, then how many pieces touch its top (fewer is a step towards a lower one)."""
    total = _total(prob, offset)
    return total, sum(1 for o, s in zip(offset, prob.asize) if s and o + s == total)


def _first_better(prob: _Problem, order: list, fit: _Fit, offset: list, budget: int):
    """The first move of a stack block to the front that scores better, as (order, offset),
    or None; and the budget left."""
    cost = _cost(prob)
    score = _score(prob, offset)
    for block in _stack(prob, offset):
        if budget < cost:
            break
        budget -= cost
        cand = [block] + [k for k in order if k != block]
        placed = _place(prob, cand, fit, limit=score[0])
        if placed is not None and _score(prob, placed) < score:
            return (cand, placed), budget
    return None, budget


def _improve(prob: _Problem, order: list, fit: _Fit, offset: list, bound: int,
             budget: int) -> tuple[list, list, int]:
    """Local search from (order, offset): the best (order, offsets) found and the budget
    left. Each step lowers the score, so it ends even before the budget does."""
    while _total(prob, offset) > bound:
        found, budget = _first_better(prob, order, fit, offset, budget)
        if found is None:
            break
        order, offset = found
    return order, offset, budget


_SHAKE = 2.0  # how many places a restart moves a block, typically (tried 2, 5, 10, 20)


def _restarts(prob: _Problem, order: list, fit: _Fit, offset: list, bound: int,
              budget: int) -> list:
    """Iterated local search, once every start is stuck: shake the best order so far (each
    block moves a few places, at random but seeded, so a plan is reproducible), search from
    there, keep what is better, until the budget is spent."""
    rng = random.Random(len(order))
    cost = _cost(prob)
    while budget >= cost and _total(prob, offset) > bound:
        budget -= cost
        keys = [i + rng.gauss(0, _SHAKE) for i in range(len(order))]
        shaken = [order[i] for i in sorted(range(len(order)), key=keys.__getitem__)]
        found = _improve(prob, shaken, fit, _place(prob, shaken, fit), bound, budget)
        budget = found[2]
        if _total(prob, found[1]) < _total(prob, offset):
            order, offset = found[:2]
    return offset


# ---------------------------------------------------------------------------------------------
# Strategies and the solver.


@dataclass(frozen=True)
class Strategy:
    """An order over blocks and a fit rule; "best" tries them in the order of STRATEGIES."""

    order: Callable
    fit: _Fit


STRATEGIES = {
    # TFLite / "Efficient Memory Management for DNN Inference": largest first, lowest offset.
    "greedy_by_size": Strategy(_by_size, LOWEST),
    # TFLite's own greedy by size takes the smallest gap rather than the lowest one.
    "greedy_by_size_tight": Strategy(_by_size, TIGHTEST),
    # XLA heap simulator / MegEngine best fit: in order of allocation, the smallest gap.
    "best_fit": Strategy(_by_begin, TIGHTEST),
    # TFLite: from the step with the most bytes live down, largest first, smallest gap.
    "greedy_by_breadth": Strategy(_by_breadth, TIGHTEST),
    # Largest size x lifetime first, lowest offset.
    "greedy_by_area": Strategy(_by_area, LOWEST),
}


def _runs(prob: _Problem, names: list, bound: int) -> list:
    """(total, name, order, offsets) of each strategy, smallest arena first (the first named
    on ties); it stops early once one meets the lower bound."""
    runs = []
    for name in names:
        strategy = STRATEGIES[name]
        order = strategy.order(prob)
        offset = _place(prob, order, strategy.fit)
        runs.append((_total(prob, offset), len(runs), name, order, offset))
        if runs[-1][0] == bound:
            break
    return [run[:1] + run[2:] for run in sorted(runs, key=lambda run: run[:2])]


def _search(prob: _Problem, runs: list, bound: int) -> tuple[int, str, list]:
    """Local search from each run in turn, then restarts from the best result, all within
    one budget; returns (total, name of the start, offsets)."""
    budget, best = _SEARCH_WORK, None
    for total, name, order, offset in runs:
        if total == bound or budget < _cost(prob):
            break
        order, offset, budget = _improve(prob, order, STRATEGIES[name].fit, offset, bound,
                                         budget)
        if best is None or _total(prob, offset) < best[0]:
            best = _total(prob, offset), name, order, offset
    if best is None:
        return runs[0][0], runs[0][1], runs[0][3]
    total, name, order, offset = best
    offset = _restarts(prob, order, STRATEGIES[name].fit, offset, bound, budget)
    return _total(prob, offset), name, offset


def solve(requests: Sequence[Request], overwrites: Iterable[Overwrite] = (),
          alignment: int = 64, strategy: str = "best") -> ArenaPlan:
    """Assign every request an aligned offset in one arena.

    ``strategy`` is a name in STRATEGIES, or "best": run them all, keep the smallest arena
    (the first on a tie), then try to improve on it by local search within a fixed budget of
    work; when that wins, the plan's strategy reads e.g. "greedy_by_size+search".

    >>> solve([Request("x", 0, 1, 10), Request("y", 1, 2, 10)]).offsets
    {'x': 0, 'y': 0}
    """
    requests, overwrites = list(requests), tuple(overwrites)
    if strategy != "best" and strategy not in STRATEGIES:
        raise ArenaError(f"unknown strategy {strategy!r}; pick 'best' or one of "
                         f"{sorted(STRATEGIES)}")
    prob = _normalise(requests, overwrites, alignment)
    bound = _lower_bound(prob)
    names = list(STRATEGIES) if strategy == "best" else [strategy]
    runs = _runs(prob, names, bound)
    name, offset = runs[0][1], runs[0][3]
    if strategy == "best":
        total, start, searched = _search(prob, runs, bound)
        if total < runs[0][0]:
            name, offset = start + "+search", searched
    return ArenaPlan(offsets=dict(zip(prob.keys, offset)), total=_total(prob, offset),
                     lower_bound=bound, strategy=name, naive=sum(prob.asize))


