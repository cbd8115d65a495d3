"""Offset assignment in one arena, after MegEngine's ``StaticMemAlloc``.

Input: buffer lifetimes over schedule steps and in-place (overwrite) specs; output: one byte
offset per buffer in a single contiguous arena. Nothing here knows about graphs or plans.

>>> plan = solve([Request("a", 0, 2, 100), Request("b", 1, 3, 64), Request("c", 2, 4, 100)])
>>> plan.offsets, plan.total, plan.lower_bound
({'a': 0, 'b': 128, 'c': 0}, 192, 192)

Design: every strategy is an *order* over blocks plus a *fit* rule (lowest offset, or the
smallest gap that fits). A block is a buffer together with everything overwriting it in place
(a chain a in b in c is one block); its members keep fixed offsets relative to its base, so the
solver places blocks, each a small set of rectangles in (time, bytes).

Design: the solver only ever looks at buffers whose lifetimes intersect the one being placed.
Those pairs are found once with NumPy (sorted by begin, the buffers that start inside a
lifetime form a contiguous run), and each order keeps only the already-placed half. Cost is
O(n log n + P) for P intersecting pairs, so a schedule with a bounded live set plans in near
linear time; everything live at once is quadratic by nature.
"""
from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ArenaError", "ArenaPlan", "Overwrite", "Request", "STRATEGIES", "dump", "load",
           "lower_bound", "solve", "verify"]


class ArenaError(ValueError):
    """A bad request list, overwrite spec or plan."""


@dataclass(frozen=True)
class Request:
    """A buffer of ``size`` bytes live over steps ``[begin, end)``."""

    key: Hashable
    begin: int
    end: int
    size: int


@dataclass(frozen=True)
class Overwrite:
    """``dst`` lives inside ``src``'s memory, at ``src``'s offset plus ``offset``."""

    src_key: Hashable
    dst_key: Hashable
    offset: int = 0


@dataclass(frozen=True)
class ArenaPlan:
    """Offsets per key, the arena size, and the numbers to judge it by."""

    offsets: dict
    total: int
    lower_bound: int
    strategy: str
    naive: int

    @property
    def ratio(self) -> float:
        """Arena bytes over the lower bound (1.0 is optimal)."""
        return self.total / self.lower_bound if self.lower_bound else 1.0


# ---------------------------------------------------------------------------------------------
# The problem, normalised: aligned sizes, blocks, and the lifetime-intersection pairs.


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass
class _Problem:
    keys: list            # request keys; a piece's id is its index here
    begin: list
    end: list
    asize: list           # aligned sizes
    blocks: list          # per block: tuple of (piece, offset relative to the block base)
    block_of: list        # piece -> block
    index: _TimeIndex     # the nonzero pieces, for "who is live with me" queries
    block_top: list       # block -> its extent above its base


def _check_requests(requests: Sequence[Request], alignment: int) -> dict:
    if not isinstance(alignment, int) or alignment < 1:
        raise ArenaError(f"alignment must be a positive int, got {alignment!r}")
    index = {}
    for i, r in enumerate(requests):
        if r.key in index:
            raise ArenaError(f"duplicate request key {r.key!r}")
        if not (isinstance(r.begin, int) and isinstance(r.end, int) and r.begin < r.end):
            raise ArenaError(f"request {r.key!r}: need int begin < end, got [{r.begin}, {r.end})")
        if not isinstance(r.size, int) or r.size < 0:
            raise ArenaError(f"request {r.key!r}: size must be an int >= 0, got {r.size!r}")
        index[r.key] = i
    return index


def _parents(requests, overwrites, index, alignment) -> tuple[list, list]:
    """Each piece's overwrite source and offset inside it, after checking the spec is legal."""
    parent, off = [-1] * len(requests), [0] * len(requests)
    for w in overwrites:
        if w.src_key not in index or w.dst_key not in index:
            raise ArenaError(f"{w}: unknown key")
        s, d = index[w.src_key], index[w.dst_key]
        src, dst = requests[s], requests[d]
        if parent[d] >= 0:
            raise ArenaError(f"{w}: {dst.key!r} already overwrites {requests[parent[d]].key!r}")
        if dst.begin != src.end - 1:
            raise ArenaError(f"{w}: dst must begin at src's last step {src.end - 1}, "
                             f"not {dst.begin}")
        if w.offset < 0 or w.offset % alignment or w.offset + dst.size > src.size:
            raise ArenaError(f"{w}: offset must be aligned to {alignment} and dst's "
                             f"{dst.size} bytes must fit in src's {src.size}")
        parent[d], off[d] = s, w.offset
    return parent, off


def _relative_offsets(parent: list, off: list) -> tuple[list, list]:
    """Root piece and offset from the root, following chains; a cycle is an error."""
    n = len(parent)
    root, rel = list(range(n)), [0] * n
    done = [False] * n
    for i in range(n):
        path, j = [], i
        while not done[j] and parent[j] >= 0:
            if j in path:
                raise ArenaError("overwrite specs form a cycle")
            path.append(j)
            j = parent[j]
        done[j] = True
        for k in reversed(path):  # nearest the root first
            root[k], rel[k], done[k] = root[parent[k]], rel[parent[k]] + off[k], True
    return root, rel


def _time_pairs(begin: np.ndarray, end: np.ndarray, chunk: int = 1 << 22):
    """Yield (i, j) index arrays of every pair of intervals that intersect, each pair once.

    Sorted by begin, the intervals starting inside interval i are a contiguous run after it,
    and every intersecting pair is found that way from the one that begins first.
    """
    order = np.argsort(begin, kind="stable")
    b, e = begin[order], end[order]
    stop = np.searchsorted(b, e, side="left")
    counts = stop - np.arange(len(b)) - 1
    first = 0
    while first < len(b):  # chunked so that a dense overlap does not need one huge array
        last = int(np.searchsorted(np.cumsum(counts[first:]), chunk, side="right")) + first + 1
        last = min(max(last, first + 1), len(b))
        c = counts[first:last]
        rows = np.repeat(np.arange(first, last), c)
        starts = np.cumsum(c) - c
        cols = np.arange(len(rows)) - np.repeat(starts, c) + rows + 1
        yield order[rows], order[cols]
        first = last


@dataclass
class _TimeIndex:
    """Nonzero pieces sorted by begin. The pieces live with piece p lie in the window
    ``order[lo[p]:hi[p]]``: past ``hi`` they begin after p ends, and before ``lo`` every piece
    has ended (``lo`` comes from the running maximum of the ends). A window may hold pieces
    that ended before p began, so users still test ``end > begin``."""

    order: np.ndarray     # position -> piece
    pos: list             # piece -> position, or -1 for an empty piece
    end: np.ndarray       # position -> end step
    size: np.ndarray      # position -> aligned size
    lo: list              # piece -> window start
    hi: list              # piece -> window stop


def _time_index(begin: list, end: list, asize: list) -> _TimeIndex:
    size = np.asarray(asize, np.int64)
    order = np.flatnonzero(size > 0)
    order = order[np.argsort(np.asarray(begin, np.int64)[order], kind="stable")]
    b, e = np.asarray(begin, np.int64)[order], np.asarray(end, np.int64)[order]
    pos = np.full(len(begin), -1, np.int64)
    pos[order] = np.arange(len(order))
    reach = np.maximum.accumulate(e) if len(e) else e
    lo, hi = np.zeros(len(begin), np.int64), np.zeros(len(begin), np.int64)
    lo[order] = np.searchsorted(reach, b, side="right")
    hi[order] = np.searchsorted(b, e, side="left")
    return _TimeIndex(order=order, pos=pos.tolist(), end=e, size=size[order], lo=lo.tolist(),
                      hi=hi.tolist())


def _normalise(requests, overwrites, alignment) -> _Problem:
    index = _check_requests(requests, alignment)
    parent, off = _parents(requests, overwrites, index, alignment)
    root, rel = _relative_offsets(parent, off)
    block_id = {r: k for k, r in enumerate(sorted(set(root)))}
    blocks = [[] for _ in block_id]
    for i, r in enumerate(root):
        blocks[block_id[r]].append((i, rel[i]))
    begin, end = [r.begin for r in requests], [r.end for r in requests]
    asize = [_align(r.size, alignment) for r in requests]
    return _Problem(keys=[r.key for r in requests], begin=begin, end=end, asize=asize,
                    blocks=[tuple(b) for b in blocks], block_of=[block_id[r] for r in root],
                    index=_time_index(begin, end, asize),
                    block_top=[max(rel + asize[p] for p, rel in b) for b in blocks])


# ---------------------------------------------------------------------------------------------
# Lower bound: the most bytes live at one step, a block's live members counted by the union
# of their byte ranges (an in-place pair shares its bytes at the handover step).


def _union_bytes(ranges: list) -> int:
    total, reach = 0, None
    for lo, hi in sorted(ranges):
        if reach is None or lo >= reach:
            total, reach = total + hi - lo, hi
        elif hi > reach:
            total, reach = total + hi - reach, hi
    return total


def _block_profile(prob: _Problem, block: tuple) -> list:
    """(step, change in bytes) events for one block."""
    if len(block) == 1:
        p = block[0][0]
        return [(prob.begin[p], prob.asize[p]), (prob.end[p], -prob.asize[p])]
    steps = sorted({t for p, _ in block for t in (prob.begin[p], prob.end[p])})
    events, prev = [], 0
    for t in steps:
        now = _union_bytes([(rel, rel + prob.asize[p]) for p, rel in block
                            if prob.begin[p] <= t < prob.end[p]])
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
# Orders over blocks. Each returns block ids; ties fall back to the block id so that a plan
# never depends on dict or hash order.


def _block_stats(prob: _Problem) -> tuple[list, list, list]:
    size = [max((rel + prob.asize[p] for p, rel in b), default=0) for b in prob.blocks]
    begin = [min(prob.begin[p] for p, _ in b) for b in prob.blocks]
    end = [max(prob.end[p] for p, _ in b) for b in prob.blocks]
    return size, begin, end


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
    """Index of the largest ``values[lo:hi]`` per query (the first on ties): a sparse table."""
    table, width = [np.arange(len(values))], 1
    while 2 * width <= len(values):
        a, b = table[-1][:-width], table[-1][width:]
        table.append(np.where(values[a] >= values[b], a, b))
        width *= 2
    level = np.log2(hi - lo).astype(np.int64)
    picks = []
    for j in range(len(table)):  # queries grouped by level, since tables differ in length
        m = level == j
        a, b = table[j][lo[m]], table[j][hi[m] - (1 << j)]
        picks.append((np.flatnonzero(m), np.where(values[a] >= values[b], a, b)))
    out = np.empty(len(lo), np.int64)
    for where, pick in picks:
        out[where] = pick
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
# Fit rules. For a block at base B, each (member p at rel, placed live neighbour q at offset o)
# forbids B in the open interval (o - rel - size_p, o - rel + size_q). Sorted by lower end, one
# sweep finds every feasible B; all are multiples of the alignment, as every size, offset and
# rel is. Each rule has a list form (few neighbours) and a NumPy form (many).


def _lowest(intervals: list) -> int:
    cur = 0
    for lo, hi in intervals:
        if lo >= cur:
            break
        if hi > cur:
            cur = hi
    return cur


def _tightest(intervals: list) -> int:
    """The feasible B with the least room around it (the smallest gap that fits); the top of
    the arena only when no gap fits, as in XLA's heap simulator."""
    cur, best, slack = 0, -1, None
    for lo, hi in intervals:
        if lo >= cur and (slack is None or lo - cur < slack):
            best, slack = cur, lo - cur
        if hi > cur:
            cur = hi
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
    small: object   # sorted list of (lo, hi) -> base
    large: object   # lo, hi arrays -> base


LOWEST, TIGHTEST = _Fit(_lowest, _lowest_np), _Fit(_tightest, _tightest_np)


# ---------------------------------------------------------------------------------------------
# Placement: blocks in a given order, each at the base its fit rule picks.

_SMALL = 256  # windows up to this many pieces are scanned in Python; NumPy costs more below it


class _Arena:
    """Offsets so far, by piece and by time-index position (mirrored as a list and an array,
    for the Python and the NumPy scans)."""

    def __init__(self, prob: _Problem):
        self.prob, self.offset = prob, [-1] * len(prob.keys)
        n = len(prob.index.order)
        self.by_pos, self.by_pos_np = [-1] * n, np.full(n, -1, np.int64)
        self.end, self.size = prob.index.end.tolist(), prob.index.size.tolist()

    def put(self, block: tuple, base: int) -> None:
        pos = self.prob.index.pos
        for p, rel in block:
            self.offset[p] = base + rel
            if pos[p] >= 0:
                self.by_pos[pos[p]] = self.by_pos_np[pos[p]] = base + rel

    def intervals(self, p: int, rel: int) -> list:
        """Forbidden (lo, hi) for the block base, from placed pieces live with piece p."""
        ix, b, s = self.prob.index, self.prob.begin[p], self.prob.asize[p] + rel
        off, end, size = self.by_pos, self.end, self.size
        return [(off[r] - s, off[r] - rel + size[r]) for r in range(ix.lo[p], ix.hi[p])
                if off[r] >= 0 and end[r] > b]

    def intervals_np(self, p: int, rel: int) -> tuple[np.ndarray, np.ndarray]:
        ix, b = self.prob.index, self.prob.begin[p]
        w = slice(ix.lo[p], ix.hi[p])
        off = self.by_pos_np[w]
        live = (off >= 0) & (ix.end[w] > b)
        o = off[live] - rel
        return o - self.prob.asize[p], o + ix.size[w][live]

    def base(self, block: tuple, fit: _Fit) -> int:
        ix = self.prob.index
        members = [(p, rel) for p, rel in block if ix.pos[p] >= 0]
        if sum(ix.hi[p] - ix.lo[p] for p, _ in members) <= _SMALL:
            intervals = [iv for p, rel in members for iv in self.intervals(p, rel)]
            intervals.sort()
            return fit.small(intervals)
        parts = [self.intervals_np(p, rel) for p, rel in members]
        lo, hi = parts[0] if len(parts) == 1 else map(np.concatenate, zip(*parts))
        return fit.large(lo, hi) if len(lo) else 0


def _place(prob: _Problem, order: list, fit: _Fit, limit: int | None = None) -> list | None:
    """Offsets per piece, placing blocks in ``order``; None as soon as the arena reaches
    ``limit`` bytes (a search candidate that cannot win)."""
    arena, top = _Arena(prob), prob.block_top
    for k in order:
        block = prob.blocks[k]
        base = arena.base(block, fit)
        if limit is not None and base + top[k] >= limit:
            return None
        arena.put(block, base)
    return arena.offset


def _total(prob: _Problem, offset: list) -> int:
    return max((o + s for o, s in zip(offset, prob.asize)), default=0)


# ---------------------------------------------------------------------------------------------
# Local search. The arena's top is reached by a stack of blocks, each resting on the next
# (its base is the top of a live neighbour) down to offset 0. Only moving one of them can
# lower the top, so the search promotes each in turn to an earlier place in the order and keeps
# the first change that shrinks the arena. Its effort is capped in units of placement work, so
# small problems get many rounds and huge ones none; it is deterministic.

_SEARCH_WORK = 3_000_000


def _resting_on(prob: _Problem, offset: list, p: int) -> int:
    """A placed piece live with p whose top is p's offset, or -1."""
    ix = prob.index
    for r in range(ix.lo[p], ix.hi[p]):
        q = int(ix.order[r])
        if prob.end[q] > prob.begin[p] and offset[q] + prob.asize[q] == offset[p] and q != p:
            return q
    return -1


def _stack(prob: _Problem, offset: list, total: int) -> list:
    """The blocks under the arena's top, from the top down."""
    p = max(range(len(offset)), key=lambda i: (offset[i] + prob.asize[i], -i))
    blocks = []
    while p >= 0 and prob.block_of[p] not in blocks:
        blocks.append(prob.block_of[p])
        p = _resting_on(prob, offset, p) if offset[p] > 0 else -1
    return blocks


def _moves(order: list, block: int):
    i = order.index(block)
    for j in sorted({0, i // 2, i - 1}):
        if 0 <= j < i:
            yield order[:j] + [block] + order[j:i] + order[i + 1:]


def _improve(prob: _Problem, order: list, fit: _Fit, offset: list, bound: int):
    """A better (order, offsets) than the given ones, or None."""
    budget = _SEARCH_WORK // (len(prob.blocks) + sum(prob.index.hi) - sum(prob.index.lo) + 1)
    total, improved = _total(prob, offset), False
    while total > bound and budget > 0:
        for cand in (c for b in _stack(prob, offset, total) for c in _moves(order, b)):
            budget -= 1
            placed = _place(prob, cand, fit, limit=total)
            if placed is not None or budget <= 0:
                break
        if placed is None:
            break
        order, offset, total, improved = cand, placed, _total(prob, placed), True
    return (order, offset) if improved else None


# ---------------------------------------------------------------------------------------------
# Strategies and the solver.


@dataclass(frozen=True)
class Strategy:
    """An order over blocks and a fit rule; "best" tries them in the order of STRATEGIES."""

    order: object
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


def _best(prob: _Problem, names: list, bound: int, search: bool) -> tuple[str, list]:
    """The strategy with the smallest arena (first on ties) and its offsets."""
    best = None
    for name in names:
        strategy = STRATEGIES[name]
        order = strategy.order(prob)
        offset = _place(prob, order, strategy.fit)
        total = _total(prob, offset)
        if best is None or total < best[0]:
            best = (total, name, order, offset)
        if total == bound:
            break
    total, name, order, offset = best
    better = _improve(prob, order, STRATEGIES[name].fit, offset, bound) if search else None
    return (name, offset) if better is None else (name + "+search", better[1])


def solve(requests: Sequence[Request], overwrites: Iterable[Overwrite] = (),
          alignment: int = 64, strategy: str = "best") -> ArenaPlan:
    """Assign every request an aligned offset in one arena.

    ``strategy`` is a name in STRATEGIES, or "best": try them all, keep the smallest arena
    (the first in STRATEGIES on a tie), then improve it by local search; the plan's strategy
    then reads e.g. "greedy_by_size+search".

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
    name, offset = _best(prob, names, bound, search=strategy == "best")
    return ArenaPlan(offsets=dict(zip(prob.keys, offset)), total=_total(prob, offset),
                     lower_bound=bound, strategy=name, naive=sum(prob.asize))


# ---------------------------------------------------------------------------------------------
# The checker. Independent of the solver's internals on purpose: it re-derives the in-place
# relation from the specs and tests every pair of buffers live at the same step.


def _ancestors(parent: list, i: int) -> set:
    seen = set()
    while parent[i] >= 0 and i not in seen:
        seen.add(i)
        i = parent[i]
    return seen | {i}


def _check_offsets(plan: ArenaPlan, requests, alignment) -> list:
    offset = []
    for r in requests:
        if r.key not in plan.offsets:
            raise ArenaError(f"buffer {r.key!r} has no offset")
        o, s = plan.offsets[r.key], _align(r.size, alignment)
        if not isinstance(o, int) or o % alignment:
            raise ArenaError(f"buffer {r.key!r}: offset {o!r} is not a multiple of {alignment}")
        if o < 0 or o + s > plan.total:
            raise ArenaError(f"buffer {r.key!r}: bytes [{o}, {o + s}) fall outside the arena "
                             f"[0, {plan.total})")
        offset.append(o)
    return offset


def _check_overwrites(plan: ArenaPlan, overwrites) -> None:
    for w in overwrites:
        want = plan.offsets[w.src_key] + w.offset
        if plan.offsets[w.dst_key] != want:
            raise ArenaError(f"{w} not honoured: {w.dst_key!r} is at "
                             f"{plan.offsets[w.dst_key]}, not {want}")


def _check_overlaps(requests, offset, parent, alignment) -> None:
    size = np.array([_align(r.size, alignment) for r in requests], np.int64)
    live = np.flatnonzero(size > 0)
    off = np.asarray(offset, np.int64)
    begin = np.array([r.begin for r in requests], np.int64)[live]
    end = np.array([r.end for r in requests], np.int64)[live]
    for i, j in _time_pairs(begin, end):
        i, j = live[i], live[j]
        bad = (off[i] < off[j] + size[j]) & (off[j] < off[i] + size[i])
        for a, b in zip(i[bad].tolist(), j[bad].tolist()):
            if a not in _ancestors(parent, b) and b not in _ancestors(parent, a):
                ra, rb = requests[a], requests[b]
                raise ArenaError(
                    f"buffers {ra.key!r} [{off[a]}, {off[a] + size[a]}) live "
                    f"[{ra.begin}, {ra.end}) and {rb.key!r} [{off[b]}, {off[b] + size[b]}) "
                    f"live [{rb.begin}, {rb.end}) overlap in bytes while both are live")


def verify(plan: ArenaPlan, requests: Sequence[Request], overwrites: Iterable[Overwrite] = (),
           alignment: int = 64) -> None:
    """Raise ArenaError unless ``plan`` is a legal placement of ``requests``.

    Legal: every offset aligned, every buffer inside [0, total), every overwrite honoured, and
    no two buffers live at one step share a byte unless one overwrites the other (directly or
    down a chain).

    >>> reqs = [Request("a", 0, 2, 64), Request("b", 1, 2, 64)]
    >>> verify(solve(reqs), reqs)
    """
    requests, overwrites = list(requests), tuple(overwrites)
    index = _check_requests(requests, alignment)
    parent, _ = _parents(requests, overwrites, index, alignment)
    _relative_offsets(parent, [0] * len(parent))  # rejects cycles
    offset = _check_offsets(plan, requests, alignment)
    _check_overwrites(plan, overwrites)
    _check_overlaps(requests, offset, parent, alignment)


# ---------------------------------------------------------------------------------------------
# Replay: a failing case from a log becomes a test.


def dump(requests: Sequence[Request], overwrites: Iterable[Overwrite] = ()) -> str:
    """The case as JSON text (keys must be JSON values: str, int, ...).

    >>> load(dump([Request("a", 0, 1, 8)]))
    ([Request(key='a', begin=0, end=1, size=8)], [])
    """
    return json.dumps({
        "requests": [[r.key, r.begin, r.end, r.size] for r in requests],
        "overwrites": [[w.src_key, w.dst_key, w.offset] for w in overwrites],
    })


def load(text: str) -> tuple[list, list]:
    """The (requests, overwrites) that ``dump`` wrote."""
    data = json.loads(text)
    return ([Request(*r) for r in data["requests"]],
            [Overwrite(*w) for w in data.get("overwrites", [])])
