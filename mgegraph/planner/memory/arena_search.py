"""The arena's strategies and the search that improves on them: local search over the blocks
under the arena's top, seeded restarts, and windows of time re-solved on big problems.

Its public names are what ``arena.solve`` composes: ``STRATEGIES`` (each an order and a fit
rule of ``arena_place``), ``run_strategies`` (one or more of them on a problem) and
``solve_best`` (all of them, then the search). It builds only on ``arena_place``'s public
names; the search itself (``_improve``, ``_restarts``, ``_repair``) stays private here.
"""
from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass

from .arena_place import (LOWEST, TIGHTEST, Fit, Problem, arena_size, build, by_area, by_begin,
                          by_breadth, by_size, place)

# ---------------------------------------------------------------------------------------------
# Local search. The arena's top is reached by a stack of blocks, each resting on a live
# neighbour's top, down to offset 0; only moving one of them can lower it. So the search moves
# each in turn, largest first, to the front of the order, and keeps the first change that
# lowers the top or leaves fewer pieces touching it. (Tried on the fuzz cases and dropped:
# moving a block one place up or halfway, and going top-down: all cost more for less; and
# re-placing only the blocks a move disturbs: on dense cases the ripple reaches nearly all.)
# The work is capped in estimated placement cost, so small problems get many rounds and huge
# ones none; it is deterministic, never timed.

_SEARCH_WORK = 2_000_000  # in _cost units, some 5 to a microsecond on 2 cores: 0.4 s at most


def _cost(prob: Problem) -> int:
    """The work of one placement. Measured: a block costs about ten neighbour visits, and
    each try some 300 more (setting up, scoring, finding the stack)."""
    return 300 + 10 * len(prob.blocks) + len(prob.live.cols)


def _resting_on(prob: Problem, offset: list, p: int) -> int:
    """A piece of another block, live with p, whose top is p's offset; or -1."""
    live, r = prob.live, prob.live.pos[p]
    if r < 0 or offset[p] == 0:
        return -1
    for q in live.cols[live.start[r]:live.start[r + 1]].tolist():
        q = live.piece[q]
        if offset[q] + prob.asize[q] == offset[p] and prob.block_of[q] != prob.block_of[p]:
            return q
    return -1


def _stack(prob: Problem, offset: list) -> list:
    """The blocks under the arena's top, largest first (top down on ties)."""
    p = max(range(len(offset)), key=lambda i: (offset[i] + prob.asize[i], -i))
    blocks = {}
    while p >= 0:  # offsets fall strictly on the way down, so this ends
        blocks.setdefault(prob.block_of[p], len(blocks))
        p = _resting_on(prob, offset, p)
    for k, _ in prob.pinned:
        blocks.pop(k, None)
    return sorted(blocks, key=lambda k: (-prob.block_top[k], blocks[k]))


def _score(prob: Problem, offset: list) -> tuple[int, int]:
    """Arena size, then how many pieces touch its top (fewer is a step towards a lower one)."""
    total = arena_size(prob, offset)
    return total, sum(1 for o, s in zip(offset, prob.asize) if s and o + s == total)


def _first_better(prob: Problem, order: list, fit: Fit, offset: list, budget: int):
    """The first move of a stack block to the front that scores better, as (order, offset),
    or None; and the budget left."""
    cost = _cost(prob)
    score = _score(prob, offset)
    for block in _stack(prob, offset):
        if budget < cost:
            break
        budget -= cost
        cand = [block] + [k for k in order if k != block]
        placed = place(prob, cand, fit, limit=score[0])
        if placed is not None and _score(prob, placed) < score:
            return (cand, placed), budget
    return None, budget


def _improve(prob: Problem, order: list, fit: Fit, offset: list, bound: int,
             budget: int) -> tuple[list, list, int]:
    """Local search from (order, offset): the best (order, offsets) found and the budget
    left. Each step lowers the score, so it ends even before the budget does."""
    while arena_size(prob, offset) > bound:
        found, budget = _first_better(prob, order, fit, offset, budget)
        if found is None:
            break
        order, offset = found
    return order, offset, budget


_SHAKE = 2.0  # how many places a restart moves a block, typically (tried 2, 5, 10, 20)


def _restarts(prob: Problem, order: list, fit: Fit, offset: list, bound: int,
              budget: int) -> list:
    """Iterated local search, once every start is stuck: shake the best order so far (each
    block moves a few places, at random but seeded, so a plan is reproducible), search from
    there, keep what is better, until the budget is spent."""
    rng = random.Random(len(order))
    cost = _cost(prob)
    while budget >= cost and arena_size(prob, offset) > bound:
        budget -= cost
        keys = [i + rng.gauss(0, _SHAKE) for i in range(len(order))]
        shaken = [order[i] for i in sorted(range(len(order)), key=keys.__getitem__)]
        found = _improve(prob, shaken, fit, place(prob, shaken, fit), bound, budget)
        budget = found[2]
        if arena_size(prob, found[1]) < arena_size(prob, offset):
            order, offset = found[:2]
    return offset


# ---------------------------------------------------------------------------------------------
# Windows. On a big problem one try of the search above re-places every block, so the budget
# buys only a few; yet what holds the top up is local in time. So the search takes a piece at
# the top and re-solves the steps around it as a problem of its own (every strategy, then the
# search above), the blocks that cross the window's edges pinned where they are. It keeps the
# result when the window no longer reaches the top, and widens the window when it still does.

_WHOLE = 500            # blocks up to which the search re-places the whole problem
_WIDTHS = (4, 16, 64)   # steps a window reaches either side of its block, tried in turn
_WINDOW_WORK = 100_000  # search budget of one window


def _window(prob: Problem, offset: list, k: int, width: int) -> tuple[Problem, list]:
    """The blocks within ``width`` steps of block k as a problem, those live with them pinned
    at their offsets; and the piece ids of its pieces."""
    lo, hi = prob.block_begin[k] - width, prob.block_end[k] + width
    live, around = prob.live, set()
    for r in range(bisect.bisect_left(live.begin, lo), bisect.bisect_left(live.begin, hi)):
        around.add(prob.block_of[live.piece[r]])
    free = {j for j in around if lo <= prob.block_begin[j] and prob.block_end[j] <= hi} | {k}
    ids = sorted(free) + sorted(_touching(prob, free) - free)
    pieces = [p for j in ids for p, _ in prob.blocks[j]]
    local = {p: i for i, p in enumerate(pieces)}
    blocks = [tuple((local[p], rel) for p, rel in prob.blocks[j]) for j in ids]
    pinned = tuple((i, offset[prob.blocks[j][0][0]] - prob.blocks[j][0][1])
                   for i, j in enumerate(ids) if i >= len(free))
    sub = build([prob.keys[p] for p in pieces], [prob.begin[p] for p in pieces],
                 [prob.end[p] for p in pieces], [prob.asize[p] for p in pieces], blocks,
                 pinned=pinned)
    return sub, pieces


def _touching(prob: Problem, blocks: set) -> set:
    """The blocks with a piece live with a piece of ``blocks``."""
    live, out = prob.live, set()
    for j in blocks:
        for p, _ in prob.blocks[j]:
            r = live.pos[p]
            if r >= 0:
                out.update(prob.block_of[live.piece[q]]
                           for q in live.cols[live.start[r]:live.start[r + 1]].tolist())
    return out


def _lowered(prob: Problem, offset: list, k: int, width: int, total: int, bound: int):
    """Offsets with the window around block k re-solved below ``total``, or None."""
    sub, pieces = _window(prob, offset, k, width)
    held = [p for j, _ in sub.pinned for p, _ in sub.blocks[j]]
    if any(offset[pieces[p]] + sub.asize[p] >= total for p in held):
        return None  # a pinned piece holds the top up: only a wider window can help
    # a part's bound is no higher than the whole's
    runs = run_strategies(sub, list(STRATEGIES), bound)
    best, placed = runs[0][0], runs[0][3]
    if best >= total:
        best, _, placed = _search(sub, runs, bound, _WINDOW_WORK)
    if best >= total:
        return None
    offset = list(offset)
    for i, p in enumerate(pieces):
        offset[p] = placed[i]
    return offset


def _repair(prob: Problem, offset: list, bound: int, budget: int) -> list:
    """Lower the top one window at a time until it meets ``bound``, a piece at the top resists
    every width, or the budget is spent."""
    total = arena_size(prob, offset)
    while budget > 0 and total > bound:
        p = next(i for i, (o, s) in enumerate(zip(offset, prob.asize)) if o + s == total)
        for width in _WIDTHS:
            budget -= _WINDOW_WORK
            found = _lowered(prob, offset, prob.block_of[p], width, total, bound)
            if found is not None:
                offset, total = found, arena_size(prob, found)
                break
        else:
            break
    return offset


# ---------------------------------------------------------------------------------------------
# Strategies, and "best": all of them, then the search.


@dataclass(frozen=True)
class Strategy:
    """An order over blocks and a fit rule; "best" tries them in the order of STRATEGIES."""

    order: Callable
    fit: Fit


STRATEGIES = {
    # TFLite / "Efficient Memory Management for DNN Inference": largest first, lowest offset.
    "greedy_by_size": Strategy(by_size, LOWEST),
    # TFLite's own greedy by size takes the smallest gap rather than the lowest one.
    "greedy_by_size_tight": Strategy(by_size, TIGHTEST),
    # XLA heap simulator / MegEngine best fit: in order of allocation, the smallest gap.
    "best_fit": Strategy(by_begin, TIGHTEST),
    # TFLite: from the step with the most bytes live down, largest first, smallest gap.
    "greedy_by_breadth": Strategy(by_breadth, TIGHTEST),
    # Largest size x lifetime first, lowest offset.
    "greedy_by_area": Strategy(by_area, LOWEST),
}

# What "best" runs on a dense problem, at some 0.15 s each for 10k requests: on 14 training
# graphs no other strategy did better than these two (by area ties by size at twice the time).
_DENSE_BEST = ("greedy_by_size", "greedy_by_breadth")


def run_strategies(prob: Problem, names: list, bound: int) -> list:
    """(total, name, order, offsets) of each strategy, smallest arena first (the first named
    on ties); it stops early once one meets the lower bound."""
    runs = []
    for name in names:
        strategy = STRATEGIES[name]
        pinned = {k for k, _ in prob.pinned}
        order = [k for k in strategy.order(prob) if k not in pinned]
        offset = place(prob, order, strategy.fit)
        runs.append((arena_size(prob, offset), len(runs), name, order, offset))
        if runs[-1][0] == bound:
            break
    return [run[:1] + run[2:] for run in sorted(runs, key=lambda run: run[:2])]


def _search(prob: Problem, runs: list, bound: int, budget: int) -> tuple[int, str, list]:
    """Local search from each run in turn, then restarts from the best result, all within
    one budget; returns (total, name of the start, offsets)."""
    best = None
    for total, name, order, offset in runs:
        if total == bound or budget < _cost(prob):
            break
        order, offset, budget = _improve(prob, order, STRATEGIES[name].fit, offset, bound,
                                         budget)
        if best is None or arena_size(prob, offset) < best[0]:
            best = arena_size(prob, offset), name, order, offset
    if best is None:
        return runs[0][0], runs[0][1], runs[0][3]
    total, name, order, offset = best
    offset = _restarts(prob, order, STRATEGIES[name].fit, offset, bound, budget)
    return arena_size(prob, offset), name, offset


def solve_best(prob: Problem, bound: int) -> tuple[str, list]:
    """(name, offsets) of "best": every strategy (``_DENSE_BEST`` on a dense problem), the
    smallest arena (the first named on a tie), then local search from there within a fixed
    budget of work (by windows of time on a big problem; none on a dense one, which has no
    neighbour lists); a win of the search is named e.g. "greedy_by_size+search"."""
    names = list(STRATEGIES) if prob.live is not None else list(_DENSE_BEST)
    runs = run_strategies(prob, names, bound)
    total, name, _, offset = runs[0]
    if total == bound or prob.live is None:
        return name, offset
    if len(prob.blocks) <= _WHOLE:
        _, start, searched = _search(prob, runs, bound, _SEARCH_WORK)
    else:
        start, searched = name, _repair(prob, offset, bound, _SEARCH_WORK)
    if arena_size(prob, searched) < total:
        return start + "+search", searched
    return name, offset
