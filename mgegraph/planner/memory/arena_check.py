"""The arena's contract, and a checker of plans that shares no code with the solver's search.

Here: the request, overwrite and plan types; the checks on input that the solver and the
checker both run, which give the in-place forest (``forest``: blocks) the solver places; the
lower bound (``lower_bound``, and ``forest_bound`` of a checked forest); who is live with whom
(``forward_pairs``, which the checker tests and ``arena_place`` turns into neighbour lists);
``verify_arena``; and ``dump``/``load`` so that any failing case replays. This module imports
nothing of the solver: ``arena_place`` and ``arena_search`` build on its public names, and
``mgegraph.planner.memory.arena`` re-exports those a caller needs.

>>> reqs = [Request("a", 0, 2, 64), Request("b", 1, 3, 64)]
>>> verify_arena(ArenaPlan({"a": 0, "b": 0}, 64, 128, "hand", 128), reqs)  # doctest: +ELLIPSIS
Traceback (most recent call last):
mgegraph.planner.memory.arena_check.ArenaError: buffers 'a' at [0, 64) ... both are live

Design: ``verify_arena`` re-derives the in-place relation from the specs and tests every pair
of buffers live at one step, so a solver bug cannot hide behind a shared data structure; what
it shares with the solver (the input checks, ``forward_pairs``) only reads the input.
"""
from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ArenaError", "ArenaPlan", "Forest", "Overwrite", "Request", "aligned", "dump",
           "forest", "forest_bound", "forward_pairs", "load", "lower_bound", "verify_arena"]

_CHUNK = 1 << 22  # pairs made at once by forward_pairs


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
# Checking the input, and the in-place forest.


def aligned(n: int, alignment: int) -> int:
    """``n`` bytes rounded up to a multiple of ``alignment``: what a buffer takes in an arena.

    >>> aligned(100, 64)
    128
    """
    return -(-n // alignment) * alignment


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
    """Each request's overwrite source (or -1) and offset inside it, once the spec is legal."""
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


def _roots(parent: list, off: list) -> tuple[list, list, list]:
    """Root of each request's chain, offset from the root and depth; a cycle is an error (one
    needs all its members live for a single step, but is not impossible)."""
    n = len(parent)
    root, rel, depth, done = list(range(n)), [0] * n, [0] * n, [False] * n
    for i in range(n):
        path, seen, j = [], set(), i
        while not done[j] and parent[j] >= 0:
            if j in seen:
                raise ArenaError("overwrite specs form a cycle")
            path.append(j)
            seen.add(j)
            j = parent[j]
        done[j] = True
        for k in reversed(path):  # nearest the root first
            p = parent[k]
            root[k], rel[k], depth[k], done[k] = root[p], rel[p] + off[k], depth[p] + 1, True
    return root, rel, depth


def _related(parent: list, depth: list, a: int, b: int) -> bool:
    """Whether one of a, b overwrites the other, directly or down a chain."""
    if depth[a] > depth[b]:
        a, b = b, a
    for _ in range(depth[b] - depth[a]):
        b = parent[b]
    return a == b


@dataclass
class Forest:
    """The requests as pieces (a piece's id is its index), grouped into blocks: a buffer with
    everything that overwrites it in place, each member at a fixed offset from the block's
    base. The solver places blocks (its problem, ``arena_place.Problem``, is a Forest with
    indexes added); the lower bound counts each block's bytes once."""

    keys: list
    begin: list
    end: list
    asize: list           # aligned sizes
    blocks: list          # per block: tuple of (piece, offset from the block's base)


def forest(requests: list, overwrites: tuple, alignment: int) -> Forest:
    """The checked input as blocks; ArenaError on anything malformed.

    >>> forest([Request("a", 0, 2, 8), Request("b", 1, 2, 8)], (Overwrite("a", "b"),), 64).blocks
    [((0, 0), (1, 0))]
    """
    index = _check_requests(requests, alignment)
    parent, off = _parents(requests, overwrites, index, alignment)
    root, rel, depth = _roots(parent, off)
    block_id = {r: k for k, r in enumerate(sorted(set(root)))}
    blocks = [[] for _ in block_id]
    for i, r in enumerate(root):
        blocks[block_id[r]].append((i, rel[i]))
    made = Forest(keys=[r.key for r in requests], begin=[r.begin for r in requests],
                  end=[r.end for r in requests],
                  asize=[aligned(r.size, alignment) for r in requests],
                  blocks=[tuple(b) for b in blocks])
    for block in made.blocks:
        if len(block) > 1:
            _check_block(made, block, parent, depth)
    return made


def _check_block(prob: Forest, block: tuple, parent: list, depth: list) -> None:
    """Members of one block may share bytes while live only down an overwrite chain; two
    buffers written into one source at overlapping offsets would clobber each other."""
    for _, new, live in _block_steps(prob, block):
        for p, rp in new:
            for q, rq in live:
                clash = p != q and rp < rq + prob.asize[q] and rq < rp + prob.asize[p]
                if clash and not _related(parent, depth, p, q):
                    raise ArenaError(f"overwrites put {prob.keys[p]!r} and {prob.keys[q]!r} "
                                     f"in the same bytes while both are live")


# ---------------------------------------------------------------------------------------------
# Lower bound: the most bytes live at one step, a block's live members counted by the union
# of their byte ranges (an in-place pair shares its bytes at the handover step).


def _union_bytes(ranges: list) -> int:
    total, reach = 0, 0
    for lo, hi in sorted(ranges):
        total += max(0, hi - max(lo, reach))
        reach = max(reach, hi)
    return total


def _block_steps(prob: Forest, block: tuple):
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


def _block_profile(prob: Forest, block: tuple) -> list:
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


def forest_bound(prob: Forest) -> int:
    """The lower bound of a checked forest (or of the solver's problem, which is one)."""
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
    return forest_bound(forest(list(requests), tuple(overwrites), alignment))


# ---------------------------------------------------------------------------------------------
# Pairs of buffers live at one step: the checker tests them, the solver lists them.


def forward_pairs(begin: np.ndarray, end: np.ndarray):
    """Every pair of positions live at one step, once each, as (rows, cols) chunks with
    row < col; ``begin`` is sorted. The positions live with r that begin no earlier are the
    run from r + 1 up to the first that begins at or after r's end, so nothing is tested."""
    counts = np.searchsorted(begin, end, side="left") - np.arange(len(begin)) - 1
    first = 0
    while first < len(begin):  # in chunks, so that checking a dense case stays small
        last = first + 1 + int(np.searchsorted(np.cumsum(counts[first:]), _CHUNK))
        c = counts[first:last]
        rows = np.repeat(np.arange(first, first + len(c)), c)
        yield rows, np.arange(len(rows)) - np.repeat(np.cumsum(c) - c, c) + rows + 1
        first = last


# ---------------------------------------------------------------------------------------------
# The checker: every pair of buffers live at one step, in chunks, with NumPy.


def _check_offsets(plan: ArenaPlan, requests, alignment) -> list:
    offset = []
    for r in requests:
        if r.key not in plan.offsets:
            raise ArenaError(f"buffer {r.key!r} has no offset")
        o, s = plan.offsets[r.key], aligned(r.size, alignment)
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


def _overlap_error(requests, offset, size, a, b) -> ArenaError:
    ra, rb = requests[a], requests[b]
    return ArenaError(
        f"buffers {ra.key!r} at [{offset[a]}, {offset[a] + size[a]}) live [{ra.begin}, "
        f"{ra.end}) and {rb.key!r} at [{offset[b]}, {offset[b] + size[b]}) live "
        f"[{rb.begin}, {rb.end}) share bytes while both are live")


def _check_overlaps(requests, offset, parent, depth, alignment) -> None:
    size = np.array([aligned(r.size, alignment) for r in requests], np.int64)
    piece = np.flatnonzero(size > 0)
    piece = piece[np.argsort([requests[i].begin for i in piece], kind="stable")]
    begin = np.array([requests[i].begin for i in piece], np.int64)
    end = np.array([requests[i].end for i in piece], np.int64)
    off = np.asarray(offset, np.int64)
    for rows, cols in forward_pairs(begin, end):
        a, b = piece[rows], piece[cols]
        shared = (off[a] < off[b] + size[b]) & (off[b] < off[a] + size[a])
        for i, j in zip(a[shared].tolist(), b[shared].tolist()):
            if not _related(parent, depth, i, j):
                raise _overlap_error(requests, offset, size.tolist(), i, j)


def verify_arena(plan: ArenaPlan, requests: Sequence[Request],
                 overwrites: Iterable[Overwrite] = (), alignment: int = 64) -> None:
    """Raise ArenaError unless ``plan`` is a legal placement of ``requests``.

    Legal: every offset aligned, every buffer inside [0, total), every overwrite honoured, and
    no two buffers live at one step share a byte unless one overwrites the other (directly or
    down a chain).

    >>> verify_arena(ArenaPlan({"a": 0, "b": 64}, 128, 128, "hand", 128),
    ...              [Request("a", 0, 2, 64), Request("b", 1, 2, 64)])
    """
    requests, overwrites = list(requests), tuple(overwrites)
    index = _check_requests(requests, alignment)
    parent, off = _parents(requests, overwrites, index, alignment)
    _, _, depth = _roots(parent, off)  # rejects cycles
    offset = _check_offsets(plan, requests, alignment)
    _check_overwrites(plan, overwrites)
    _check_overlaps(requests, offset, parent, depth, alignment)


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
