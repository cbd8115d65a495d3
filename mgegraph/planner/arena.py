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
                    index=_time_index(begin, end, asize))


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
# Placement. For a block at base B, each (member p at rel, placed neighbour q at offset o)
# forbids B in the open interval (o - rel - size_p, o - rel + size_q). Sorted by their lower
# ends, one sweep finds every feasible B (all multiples of the alignment, since every size,
# offset and rel is one).


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


def _neighbours(prob: _Problem) -> list:
    """Per piece, the pieces of other blocks live at some step with it."""
    cols = prob.cols.tolist()
    bounds = np.searchsorted(prob.rows, np.arange(len(prob.keys) + 1)).tolist()
    return [cols[bounds[p]:bounds[p + 1]] for p in range(len(prob.keys))]


def _place(prob: _Problem, order: list, fit, limit: int | None = None) -> list | None:
    """Offsets per piece, placing blocks in ``order`` with the ``fit`` rule; None as soon as
    the arena would reach ``limit`` bytes (a search candidate that cannot win)."""
    asize, nbrs, offset = prob.asize, prob.neighbours, [-1] * len(prob.keys)
    for k in order:
        block = prob.blocks[k]
        if len(block) == 1:  # the common case, kept lean: rel is 0
            p = block[0][0]
            s = asize[p]
            intervals = [(offset[q] - s, offset[q] + asize[q]) for q in nbrs[p] if offset[q] >= 0]
        else:
            intervals = [(offset[q] - rel - asize[p], offset[q] - rel + asize[q])
                         for p, rel in block for q in nbrs[p] if offset[q] >= 0]
        intervals.sort()
        base = fit(intervals)
        for p, rel in block:
            offset[p] = base + rel
            if limit is not None and base + rel + asize[p] >= limit:
                return None
    return offset


def _total(prob: _Problem, offset: list) -> int:
    return max((o + s for o, s in zip(offset, prob.asize)), default=0)


# ---------------------------------------------------------------------------------------------
# Strategies and the solver.


@dataclass(frozen=True)
class Strategy:
    """An order over blocks and a fit rule; ``solve`` tries them in the order of STRATEGIES."""

    order: object
    fit: object


STRATEGIES = {
    # TFLite / "Efficient Memory Management for DNN Inference": largest first, lowest offset.
    "greedy_by_size": Strategy(_by_size, _lowest),
    # TFLite's own greedy by size takes the smallest gap rather than the lowest one.
    "greedy_by_size_tight": Strategy(_by_size, _tightest),
    # XLA heap simulator / MegEngine best fit: in order of allocation, the smallest gap.
    "best_fit": Strategy(_by_begin, _tightest),
    "greedy_by_breadth": Strategy(_by_breadth, _tightest),
    "greedy_by_area": Strategy(_by_area, _lowest),
}


def _run(prob: _Problem, name: str) -> list:
    strategy = STRATEGIES[name]
    return _place(prob, strategy.order(prob), strategy.fit)


def solve(requests: Sequence[Request], overwrites: Iterable[Overwrite] = (),
          alignment: int = 64, strategy: str = "best") -> ArenaPlan:
    """Assign every request an aligned offset in one arena.

    ``strategy`` is a name in STRATEGIES, or "best" to try them all and keep the smallest
    arena (the first in STRATEGIES on a tie; it stops early once one meets the lower bound).

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
    best = None
    for name in names:
        offset = _run(prob, name)
        total = _total(prob, offset)
        if best is None or total < best[0]:
            best = (total, name, offset)
        if total == bound:
            break
    total, name, offset = best
    return ArenaPlan(offsets=dict(zip(prob.keys, offset)), total=total, lower_bound=bound,
                     strategy=name, naive=sum(prob.asize))


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
