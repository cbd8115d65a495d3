"""Placing blocks in an arena: the normalised problem (``normalise``: the checked forest with
the indexes placement needs, and who is live with whom as neighbour lists), the orders
(``by_size``, ...) and fit rules (``LOWEST``, ``TIGHTEST``) that make up a strategy, and
``place``, which puts blocks in a given order (without neighbour lists on a dense problem).

This module builds on ``arena_check``'s public names (the forest, ``forward_pairs``) and
knows nothing of strategies or search: ``arena_search`` composes its public names into them.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .arena_check import Forest, forest, forward_pairs

# ---------------------------------------------------------------------------------------------
# The problem, normalised. Pieces are the requests; the nonzero ones also get a *position* in
# begin order, and neighbour lists by position.

_SMALL = 256  # neighbour lists up to this long are scanned in Python; NumPy costs more below


def _neighbour_lists(begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (start, cols) of the positions live with each position; ``begin`` is sorted. Each
    list is its earlier neighbours (the forward pairs transposed) then its later ones."""
    n, index = len(begin), np.int32 if len(begin) < 2**31 else np.int64
    pairs = list(forward_pairs(begin, end))
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


def _entries(begin: list, end: list, asize: list) -> int:
    """How long the neighbour lists would be in all, without making them."""
    keep = np.asarray(asize) > 0
    b, e = np.asarray(begin, np.int64)[keep], np.asarray(end, np.int64)[keep]
    order = np.argsort(b, kind="stable")
    return 2 * int((np.searchsorted(b[order], e[order]) - np.arange(len(b)) - 1).sum())


@dataclass
class Live:
    """Who is live with whom, for the nonzero pieces, by position."""

    pos: list             # piece -> position, or -1 for an empty piece
    piece: list           # position -> piece
    begin: list           # position -> begin, ascending
    size: np.ndarray      # position -> aligned size
    start: np.ndarray     # position -> its neighbours are cols[start[r]:start[r + 1]]
    cols: np.ndarray
    small: list           # position -> its neighbours as a list when short, else None


def _live(begin: list, end: list, asize: list) -> Live:
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
    return Live(pos=pos.tolist(), piece=piece.tolist(), begin=np.asarray(begin)[piece].tolist(),
                size=size[piece], start=start, cols=cols, small=small)


@dataclass
class Problem(Forest):
    """A forest (``keys``, ``begin``, ``end``, ``asize``, ``blocks``: a piece's id is its index)
    with the indexes that placing its blocks needs."""

    block_of: list        # piece -> block
    block_top: list       # block -> its extent above its base
    block_begin: list     # block -> its first step, and one past its last
    block_end: list
    live: Live | None     # None when dense: see _place_dense
    pinned: tuple = ()    # (block, base) placed before any order, for a window's sub-problem


def build(keys, begin, end, asize, blocks, live=True, pinned=()) -> Problem:
    """The problem of placing ``blocks`` (with neighbour lists unless ``live`` is False);
    ``arena_search`` builds a window's sub-problem with it, ``pinned`` blocks held in place."""
    block_of = [0] * len(keys)
    for k, block in enumerate(blocks):
        for p, _ in block:
            block_of[p] = k
    return Problem(keys=keys, begin=begin, end=end, asize=asize, blocks=blocks,
                   block_of=block_of, block_top=[max(r + asize[p] for p, r in b) for b in blocks],
                   block_begin=[min(begin[p] for p, _ in b) for b in blocks],
                   block_end=[max(end[p] for p, _ in b) for b in blocks],
                   live=_live(begin, end, asize) if live else None, pinned=pinned)


def normalise(requests, overwrites, alignment) -> Problem:
    """The checked input as a problem to place; a dense one (see _place_dense) gets no lists.

    >>> normalise([Request("a", 0, 2, 100), Request("b", 1, 3, 64)], (), 64).block_top
    [128, 64]
    """
    f = forest(requests, overwrites, alignment)
    prob = build(f.keys, f.begin, f.end, f.asize, f.blocks, live=False)
    if _entries(f.begin, f.end, f.asize) <= _DENSE or not _nests(prob):
        prob.live = _live(f.begin, f.end, f.asize)
    return prob


# ---------------------------------------------------------------------------------------------
# Orders over blocks. Ties fall back to the block id, so a plan never depends on hash order.


def _block_stats(prob: Problem) -> tuple[list, list, list]:
    return prob.block_top, prob.block_begin, prob.block_end


def by_size(prob: Problem) -> list:
    size, begin, end = _block_stats(prob)
    return sorted(range(len(size)), key=lambda k: (-size[k], begin[k] - end[k], begin[k], k))


def by_begin(prob: Problem) -> list:
    size, begin, end = _block_stats(prob)
    return sorted(range(len(size)), key=lambda k: (begin[k], -size[k], begin[k] - end[k], k))


def by_area(prob: Problem) -> list:
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


def by_breadth(prob: Problem) -> list:
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
class Fit:
    small: Callable   # (ids sorted by offset, at, top, size) -> base
    large: Callable   # (lo, hi) arrays -> base


LOWEST, TIGHTEST = Fit(_lowest, _lowest_np), Fit(_tightest, _tightest_np)


# ---------------------------------------------------------------------------------------------
# Placement: blocks in a given order, each at the base its fit rule picks.


class _Arena:
    """Offsets so far by position, as lists (for the loops) and an array (for NumPy)."""

    def __init__(self, prob: Problem):
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

    def base(self, block: tuple, fit: Fit) -> int:
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


def place(prob: Problem, order: list, fit: Fit, limit: int | None = None) -> list | None:
    """Offsets per piece, placing blocks in ``order``; None as soon as a block would end
    above ``limit`` bytes (a search candidate that cannot win)."""
    if prob.live is None:
        return _place_dense(prob, order, fit)
    arena, top, blocks = _Arena(prob), prob.block_top, prob.blocks
    offset = [-1] * len(prob.keys)
    for k, base in prob.pinned:
        arena.put(blocks[k], base)
        for p, rel in blocks[k]:
            offset[p] = base + rel
    for k in order:
        block = blocks[k]
        base = arena.base(block, fit)
        if limit is not None and base + top[k] > limit:
            return None
        arena.put(block, base)
        for p, rel in block:
            offset[p] = base + rel
    return offset


def arena_size(prob: Problem, offset: list) -> int:
    """The bytes an arena needs for ``offset`` (the top of its highest piece)."""
    return max((o + s for o, s in zip(offset, prob.asize)), default=0)


# ---------------------------------------------------------------------------------------------
# Dense problems. With thousands of buffers live at once (a training graph's saved activations)
# the neighbour lists hold tens of millions of pairs and cost seconds to make and to scan. So a
# dense problem keeps, per step, the byte ranges taken there, and places in two passes over the
# strategy's order: first the long-lived single buffers, each on top of what is live during its
# life (a skyline: exact when they are all live together, as nested activations are); then
# everything else by the fit rule against the ranges taken at each of its steps, which for a
# short life is a few merged runs rather than thousands of neighbours. With nothing long the
# two placements agree exactly. Only problems whose long lives nest (_nests) go this way, and
# they get no search, which needs the lists: on the training graphs measured the first
# strategy already meets the bound, in 0.15 s at 10k requests against 2 s with lists.

_DENSE = 4_000_000  # neighbour-list entries beyond which lists cost more than they save
_LONG = 16          # steps (distinct begin/end points) beyond which a buffer is placed first


def _runs_per_step(arrive: list, leave: list) -> list:
    """Per step, the sorted byte runs that the long buffers cover. Those live at one step are
    disjoint, so a run is tiled by its buffers: one leaving splits it in two, one arriving
    merges with the runs it touches."""
    los, his, out = [], [], []
    for gone, new in zip(leave, arrive):
        for a, c in gone:
            i = bisect.bisect_right(los, a) - 1
            parts = [(x, y) for x, y in ((los[i], a), (c, his[i])) if x < y]
            los[i:i + 1], his[i:i + 1] = [x for x, _ in parts], [y for _, y in parts]
        for a, c in new:
            i = bisect.bisect_left(los, a)
            left, right = i > 0 and his[i - 1] == a, i < len(los) and los[i] == c
            if left and right:
                his[i - 1] = his.pop(i)
                del los[i]
            elif left:
                his[i - 1] = c
            elif right:
                los[i] = a
            else:
                los.insert(i, a)
                his.insert(i, c)
        out.append(list(zip(los, his)))
    return out


def _steps(prob: Problem) -> tuple[list, list, list, int]:
    """Begin and end of each piece as step numbers 0, 1, ...; which blocks go first; steps."""
    steps = np.unique(np.asarray(prob.begin + prob.end, np.int64))
    b = np.searchsorted(steps, prob.begin).tolist()
    e = np.searchsorted(steps, prob.end).tolist()
    first = [len(bl) == 1 and prob.asize[bl[0][0]] > 0 and e[bl[0][0]] - b[bl[0][0]] > _LONG
             for bl in prob.blocks]
    return b, e, first, len(steps)


def _skyline(prob: Problem, order: list, steps: tuple, offset: list) -> np.ndarray:
    """Puts the long buffers, in ``order``, each on top of those live during its life; returns
    the height reached at each step."""
    b, e, first, n = steps
    sky = np.zeros(n, np.int64)
    for k in order:
        if first[k]:
            p = prob.blocks[k][0][0]
            h = sky[b[p]:e[p]]
            offset[p] = o = int(h.max())
            np.maximum(h, o + prob.asize[p], out=h)
    return sky


def _nests(prob: Problem) -> bool:
    """Whether the skyline of the long buffers, largest first, is no higher than the most of
    them live at once: then it is optimal for them (as for nested activations), while on
    long lives that cross at random it can take twice the bytes, and the lists are worth it."""
    steps = b, e, first, n = _steps(prob)
    sky = _skyline(prob, by_size(prob), steps, [0] * len(prob.keys))
    delta = np.zeros(n + 1, np.int64)
    for k in np.flatnonzero(first).tolist():
        p = prob.blocks[k][0][0]
        delta[b[p]] += prob.asize[p]
        delta[e[p]] -= prob.asize[p]
    return int(sky.max(initial=0)) <= int(np.cumsum(delta).max())


def _place_dense(prob: Problem, order: list, fit: Fit) -> list:
    offset = [0] * len(prob.keys)
    steps = b, e, first, n = _steps(prob)
    _skyline(prob, order, steps, offset)
    size, blocks = prob.asize, prob.blocks
    arrive, leave = [[] for _ in range(n)], [[] for _ in range(n + 1)]
    for k in np.flatnonzero(first).tolist():
        p = blocks[k][0][0]
        arrive[b[p]].append((offset[p], offset[p] + size[p]))
        leave[e[p]].append((offset[p], offset[p] + size[p]))
    taken = _runs_per_step(arrive, leave)
    for k in order:
        if not first[k]:
            _put_dense(blocks[k], fit, taken, b, e, size, offset)
    return offset


def _put_dense(block: tuple, fit: Fit, taken: list, b: list, e: list, size: list,
               offset: list) -> None:
    lo, hi, members = [], [], [(p, rel) for p, rel in block if size[p]]
    for p, rel in members:
        for t in range(b[p], e[p]):
            for a, c in taken[t]:
                lo.append(a - rel - size[p])
                hi.append(c - rel)
    base = fit.small(sorted(range(len(lo)), key=lo.__getitem__), lo, hi, 0)
    for p, rel in block:
        offset[p] = o = base + rel
        for t in range(b[p], e[p]) if size[p] else ():
            bisect.insort(taken[t], (o, o + size[p]))


