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
seeded restarts from shaken orders, within a fixed budget of work; on a big problem the search
re-solves windows of time around the top instead of the whole.

Design: placing a block only looks at the pieces live with it. Their lists are built once with
NumPy (sorted by begin, the buffers that start during one's life are a contiguous run after
it; transposing those pairs gives the ones before), so a placement costs O(n log n + P) for P
pairs of buffers live together: near linear when the live set is bounded, quadratic only when
everything is live at once. Short lists are scanned in Python, long ones in NumPy. A problem
with millions of such pairs whose long lives nest (a training graph) is placed without lists,
from the byte ranges taken at each step (see _place_dense).

The parts, each building only on the public names of the one before: ``arena_check`` (the
types, the input checks that give the in-place forest, the lower bound, the checker
``verify_arena``, dump and replay; it knows nothing of the solver), ``arena_place`` (the
normalised problem, orders, fit rules, placement) and ``arena_search`` (the strategies, local
search, restarts and windows, and ``solve_best``). Here is only ``solve``, which composes
them, and the names a caller needs, re-exported.
"""
from collections.abc import Iterable, Sequence

from .arena_check import (ArenaError, ArenaPlan, Overwrite, Request, dump, forest_bound, load,
                          lower_bound, verify_arena)
from .arena_place import arena_size, normalise
from .arena_search import STRATEGIES, Strategy, run_strategies, solve_best

__all__ = ["STRATEGIES", "ArenaError", "ArenaPlan", "Overwrite", "Request", "Strategy", "dump",
           "load", "lower_bound", "solve", "verify_arena"]


def solve(requests: Sequence[Request], overwrites: Iterable[Overwrite] = (),
          alignment: int = 64, strategy: str = "best") -> ArenaPlan:
    """Assign every request an aligned offset in one arena.

    ``strategy`` is a name in STRATEGIES, or "best": run them all, keep the smallest arena
    (the first on a tie), then try to improve on it by local search within a fixed budget of
    work (by windows of time on a big problem; a dense one gets two strategies and no search);
    when that wins, the plan's strategy reads e.g. "greedy_by_size+search".

    >>> solve([Request("x", 0, 1, 10), Request("y", 1, 2, 10)]).offsets
    {'x': 0, 'y': 0}
    """
    requests, overwrites = list(requests), tuple(overwrites)
    if strategy != "best" and strategy not in STRATEGIES:
        raise ArenaError(f"unknown strategy {strategy!r}; pick 'best' or one of "
                         f"{sorted(STRATEGIES)}")
    prob = normalise(requests, overwrites, alignment)
    bound = forest_bound(prob)
    if strategy == "best":
        name, offset = solve_best(prob, bound)
    else:
        _, name, _, offset = run_strategies(prob, [strategy], bound)[0]
    return ArenaPlan(offsets=dict(zip(prob.keys, offset)), total=arena_size(prob, offset),
                     lower_bound=bound, strategy=name, naive=sum(prob.asize))
