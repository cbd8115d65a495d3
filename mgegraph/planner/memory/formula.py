"""Memory as a formula of a named dimension, fitted over plans specialised at its values.

A plan compiled for a graph with named dimensions (``mg.compile`` of ``g.input("x", ("batch",
784))``) makes one fixed-shape plan per binding; each has its own arena, lower bound and
persistent bytes. ``fit_memory`` fits each of the three as ``slope * name + intercept`` by least
squares over the bindings measured, for the one name that varies among them (the others held
at one value each), and says whether the line is exact: whether it gives every measured value
within the arena's alignment. ``MemoryFormula.largest`` answers the question of a user sizing
a server: the largest value of the name whose arena fits a budget.

Design: the arena of a plan is not linear in the batch in general (a convolution's path, a GEMM's
workspace or the allocator's placement may change with the size), so the fit states its largest
error and the points it saw, and a caller that needs a guarantee compiles the value the line
predicts (``SymbolicPlan.largest_batch`` does). This module holds numbers only: it imports no
plan.

>>> f = fit_memory([Point((("batch", 1),), 1024, 1024, 0), Point((("batch", 4),), 4096, 4096, 0)],
...                alignment=64)
>>> f.arena.text("batch"), f.largest(3000)
('1.00 KiB * batch + 0 B', 2)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir.dims import bindings_text
from .report import human

QUANTITIES = ("arena", "lower_bound", "persistent")


@dataclass(frozen=True)
class Point:
    """What one specialised plan measured: its ``bindings`` ((name, value) pairs, sorted) and
    its arena, lower bound and persistent bytes."""

    bindings: tuple
    arena: int
    lower_bound: int
    persistent: int

    def value(self, quantity: str) -> int:
        return getattr(self, quantity)


@dataclass(frozen=True)
class Line:
    """``bytes = slope * value + intercept``, fitted by least squares; ``max_error`` is the
    largest distance of a measured point from it, ``exact`` whether that is within the
    alignment."""

    slope: float
    intercept: float
    max_error: float
    exact: bool

    def at(self, value: int) -> float:
        return self.slope * value + self.intercept

    def text(self, name: str) -> str:
        sign, intercept = ("-", -self.intercept) if self.intercept < 0 else ("+", self.intercept)
        return f"{human(round(self.slope))} * {name} {sign} {human(round(intercept))}"

    def as_dict(self) -> dict:
        return {"slope": self.slope, "intercept": self.intercept, "max_error": self.max_error,
                "exact": self.exact}


@dataclass(frozen=True)
class MemoryFormula:
    """Arena, lower bound and persistent bytes as lines in ``name`` (None when the points do
    not show one: ``needs`` then says what would), with the other names held at ``fixed``."""

    name: str | None
    fixed: tuple  # (name, value) of the other names, the same at every point fitted
    points: tuple[Point, ...]  # the points fitted (all points measured when there is no line)
    alignment: int
    arena: Line | None = None
    lower_bound: Line | None = None
    persistent: Line | None = None
    needs: str | None = None

    def largest(self, budget_bytes: int, low: int = 1, high: int | None = None) -> int | None:
        """The largest value in ``low..high`` whose arena the line puts within
        ``budget_bytes`` (None: none does; ``high`` when the arena does not grow)."""
        if self.arena is None:
            raise ValueError(f"no memory formula: {self.needs}")
        a, b = self.arena.slope, self.arena.intercept
        if a <= 0:  # the arena does not grow with the name
            return (high if high is not None else math.inf) if b <= budget_bytes else None
        # a hair of tolerance: a line that is exact at budget must not round one value down
        value = math.floor((budget_bytes - b) / a + 1e-9)
        if high is not None:
            value = min(value, high)
        return value if value >= low else None

    def as_dict(self) -> dict:
        return {"name": self.name, "fixed": dict(self.fixed), "alignment": self.alignment,
                "points": [{"bindings": dict(p.bindings), "arena_bytes": p.arena,
                            "lower_bound_bytes": p.lower_bound,
                            "persistent_bytes": p.persistent} for p in self.points],
                **{q: None if getattr(self, q) is None else getattr(self, q).as_dict()
                   for q in QUANTITIES}, "needs": self.needs}

    def lines(self) -> list[str]:
        """The formula as report lines."""
        if self.arena is None:
            return [f"no formula yet: {self.needs}"]
        at = f" at {bindings_text(self.fixed)}" if self.fixed else ""
        values = ", ".join(str(dict(p.bindings)[self.name]) for p in self.points)
        out = []
        for q, label in zip(QUANTITIES, ("arena", "lower bound", "persistent")):
            line = getattr(self, q)
            how = ("exact" if line.exact else
                   f"approximate: up to {human(round(line.max_error))} off")
            out.append(f"{label:<11} = {line.text(self.name)}{at}  ({how})")
        out.append(f"  measured at {self.name} = {values}; exact: each measured value within "
                   f"the {self.alignment}-byte alignment of the line")
        return out


def fit_memory(points, alignment: int, names=None) -> MemoryFormula:
    """The formula the ``points`` show: the name taking the most distinct values among points
    whose other names agree; ``names`` (all the plan's names) only words the message when
    there is none."""
    points = tuple(sorted(points, key=lambda p: p.bindings))
    group = _largest_group(points)
    if group is None:
        return MemoryFormula(None, (), points, alignment, needs=_needs(points, names))
    name, fixed, chosen = group
    xs = [dict(p.bindings)[name] for p in chosen]
    lines = {q: _fit(xs, [p.value(q) for p in chosen], alignment) for q in QUANTITIES}
    return MemoryFormula(name, fixed, chosen, alignment, **lines)


def _largest_group(points) -> tuple | None:
    """(name, the other names' values, the points) with the most distinct values of the name,
    at least two; None when no name takes two values with the others the same."""
    best = None
    for name in sorted({n for p in points for n, _ in p.bindings}):
        groups: dict[tuple, dict[int, Point]] = {}
        for p in points:
            others = tuple((n, v) for n, v in p.bindings if n != name)
            groups.setdefault(others, {}).setdefault(dict(p.bindings)[name], p)
        for others, by_value in groups.items():
            if len(by_value) >= 2 and (best is None or len(by_value) > len(best[2])):
                best = (name, others, tuple(by_value[v] for v in sorted(by_value)))
    return best


def _fit(xs: list[int], ys: list[int], alignment: int) -> Line:
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread
    intercept = mean_y - slope * mean_x
    error = max(abs(slope * x + intercept - y) for x, y in zip(xs, ys))
    return Line(slope, intercept, error, error <= alignment)


def _needs(points, names) -> str:
    names = sorted(names or {n for p in points for n, _ in p.bindings})
    example = names[0] if names else "batch"
    held = "; ".join(bindings_text(p.bindings) for p in points) or "none"
    return (f"plans at two values of one name ({', '.join(names) or example}), the other "
            f"names the same, are needed; measured: {held}. plan.specialize({{{example!r}: "
            f"...}}) adds one")


def search_largest(arena_of, budget_bytes: int, low: int, high: int | None, guess: int,
                   max_checks: int = 24, known: dict | None = None) -> int | None:
    """The largest value ``v`` measured to fit (``arena_of(v) <= budget_bytes``) whose next
    value ``v + 1`` is measured not to (or ``v == high``), in ``low..high``, searched from
    ``guess``. Each next value is where the line through the two measured points nearest the
    budget crosses it, kept above the largest value that fits and below the smallest larger
    one that does not (their middle after three compiles with both known), so an arena linear
    in pieces takes a few calls of ``arena_of`` (each a compile). ``known``: arenas measured
    before ({value: bytes}). None when ``low`` does not fit; after ``max_checks`` calls, the
    largest value measured to fit.

    >>> search_largest(lambda v: 100 * v + 50, 1000, 1, None, guess=3)
    9
    """
    arenas, calls = dict(known or {}), 0
    value = max(guess, low) if high is None else min(max(guess, low), high)
    while True:
        if value not in arenas:
            arenas[value], calls = arena_of(value), calls + 1
        good, bad = _bracket(arenas, budget_bytes)
        if good is None and bad == low:
            return None
        if good is not None and (good == high or bad == good + 1) or calls >= max_checks:
            return good
        value = _next_value(arenas, budget_bytes, good, bad, low, high, bisect=calls > 3)


def _bracket(arenas: dict, budget: int) -> tuple:
    """(the largest value that fits, the smallest larger one that does not); None if none."""
    good = max((v for v, a in arenas.items() if a <= budget), default=None)
    bad = min((v for v, a in arenas.items() if a > budget and (good is None or v > good)),
              default=None)
    return good, bad


def _next_value(arenas: dict, budget: int, good, bad, low: int, high, bisect: bool) -> int:
    """A value not measured yet strictly between ``good`` and ``bad`` (``low`` and ``high``
    where one is missing)."""
    bottom = low if good is None else good + 1
    top = high if bad is None else bad - 1
    if bisect and good is not None and bad is not None:
        return (good + bad) // 2
    value = _secant(arenas, budget)
    if bad is None and (value is None or value < bottom):  # fits yet: double
        value = 2 * good
    elif good is None and (value is None or value > top):  # none fits yet: halve
        value = (low + bad) // 2
    elif value is None:
        value = (good + bad) // 2
    value = max(bottom, value)
    return value if top is None else min(top, value)


def _secant(arenas: dict, budget: int) -> int | None:
    """Where the line through the two measured points nearest the budget reaches it."""
    nearest = sorted(arenas, key=lambda v: (abs(arenas[v] - budget), v))[:2]
    if len(nearest) < 2 or arenas[nearest[0]] == arenas[nearest[1]]:
        return None
    (x1, a1), (x2, a2) = ((v, arenas[v]) for v in nearest)
    return math.floor(x1 + (budget - a1) * (x2 - x1) / (a2 - a1) + 1e-9)
