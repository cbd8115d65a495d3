"""A plan for a graph with named dimensions: one fixed-shape plan per binding of the names.

``mg.compile`` of a graph whose inputs name a dimension (``g.input("x", ("batch", 784))``)
returns a ``SymbolicPlan``. Its first run with a new binding (``batch=7``, read from the fed
shapes) specialises: the graph is made again with the numbers (``ir.specialize``) and compiled
with the options given, so it gets every pass, the schedule and the memory plan a fixed-shape
graph gets; the plan is kept in a bounded cache (least recently used first out), and later
runs with that binding run it directly. ``warm=`` specialises ahead of time, ``bounds=``
refuses bindings outside a range, as TensorRT's optimisation profiles do.

Design: the symbolic plan owns one copy of each param the graph did not share, and every
specialisation uses that array in place, so a training step specialised for batch 32 and for
a last batch of 7 updates one set of weights. Runs check the facts the shape rules recorded
(``graph.constraints``: two inputs' ``batch`` agree) before they specialise or run, so a
binding that would broadcast where the graph meant equal sizes is a ``FeedError``.

Threads: a cached run finds its plan by the fed shapes without taking the cache's lock (the
plan's own executable serialises runs of one binding); a new binding is compiled outside that
lock, so runs of other bindings go on meanwhile, and a second thread asking for the same
binding waits for the first one's plan.

Memory: every plan made is measured (arena, lower bound, persistent bytes); ``memory_formula``
fits them as lines in a name (``arena = 0.77 MiB * batch + 0.25 MiB``, exact or not),
``largest_batch(budget)`` gives the largest batch whose arena fits, checked by compiling, and
``memory_report`` shows both with each cached plan's own report.
"""
from __future__ import annotations

import functools
import json
import math
import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from .host_memory import aligned_copy
from .ir.dims import bare_name, bind_shape, bindings_text, shape_text
from .ir.errors import FeedError, GraphError
from .ir.graph import Graph, Var
from .ir.specialize import specialize
from .planner.memory.formula import Point, fit_memory, search_largest
from .planner.memory.report import human, memory_summary

DEFAULT_CACHE_SIZE = 16
MAX_POINTS = 256  # bindings whose measured memory is kept for the formula, oldest out first
MAX_CHECKS = 24  # plans largest_batch compiles at most to check its answer

_LIVE: weakref.WeakSet = weakref.WeakSet()


class SymbolicPlan:
    """Plans for every binding of a graph's named dimensions, made when first fed.

    >>> plan = mg.compile([y])                 # y's graph has g.input("x", ("batch", 784))
    >>> plan.run({"x": np.zeros((7, 784), np.float32)})   # specialises for batch=7
    >>> print(plan)                            # the signature and what the cache holds
    """

    def __init__(self, graph: Graph, outputs: list[Var], compile_fixed, options: dict,
                 cache_size: int = DEFAULT_CACHE_SIZE, warm=(), bounds=None):
        if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 1:
            raise GraphError(f"compile(cache_size={cache_size!r}): the number of specialised "
                             "plans kept is an int >= 1")
        self.graph, self.outputs = _owning_params(graph), list(outputs)
        self.options = dict(options)
        self.cache_size = cache_size
        self.names = graph.dim_names
        self.bounds = _check_bounds(bounds, self.names)
        self._unbound_names_check()
        self._compile_fixed = compile_fixed
        self._feed_names = tuple(self.graph.inputs)
        self._plans: OrderedDict[tuple, object] = OrderedDict()  # bindings key -> Plan
        # fed shapes -> (bindings key, Plan): replaced whole, never changed, so a run reads it
        # without the lock
        self._by_shapes: dict[tuple, tuple] = {}
        self._making: dict[tuple, threading.Event] = {}  # bindings key -> set once made
        # bindings key -> the memory its plan measured, cached or not (the memory formula)
        self._measured: OrderedDict[tuple, Point] = OrderedDict()
        self._alignment = None  # the arena's, once a plan was made
        self._lock = threading.RLock()
        self.specialisations = 0  # how many plans this object made (a cache miss each)
        _LIVE.add(self)
        for bindings in warm or ():
            self.specialize(bindings)

    # -- what it takes and gives ------------------------------------------------------------
    @property
    def input_types(self) -> dict:
        """Each input's name and its (symbolic) type, in the graph's order."""
        return {name: v.type for name, v in self.graph.inputs.items()}

    @property
    def output_types(self) -> list:
        return [v.type for v in self.outputs]

    @property
    def constraints(self):
        """The facts the shape rules recorded, checked at each new binding."""
        return self.graph.constraints

    def signature(self) -> str:
        """``x: f32[batch, 784] -> f32[batch, 10]``."""
        ins = ", ".join(f"{name}: {t}" for name, t in self.input_types.items())
        return f"{ins} -> {', '.join(map(str, self.output_types))}"

    # -- running ----------------------------------------------------------------------------
    def run(self, feeds: dict, out=None) -> list[np.ndarray]:
        """Run on ``feeds`` with the plan specialised for their shapes (made on first use)."""
        # Design: the fast path is one dict lookup keyed on the fed shapes and no lock, so a
        # cached run costs what the fixed-shape plan's does; anything unusual (a shape not seen,
        # a missing feed, a feed without a shape) takes plan_for_feeds, which says what is wrong
        try:
            hit = self._by_shapes.get(tuple([feeds[name].shape for name in self._feed_names]))
        except (KeyError, AttributeError, TypeError):
            hit = None
        if hit is None:
            return self.plan_for_feeds(feeds).run(feeds, out=out)
        key, plan = hit
        try:
            self._plans.move_to_end(key)  # one C call, atomic under the GIL
        except KeyError:  # another thread evicted it just now: the plan itself still runs
            pass
        return plan.run(feeds, out=out)

    def plan_for_feeds(self, feeds: dict):
        """The specialised plan the shapes of ``feeds`` bind (made if it is not cached)."""
        try:
            shapes = tuple(feeds[name].shape for name in self._feed_names)
        except (KeyError, AttributeError, TypeError):
            shapes = None
        hit = self._by_shapes.get(shapes) if shapes is not None else None
        if hit is not None:
            with self._lock:
                if hit[0] in self._plans:
                    self._plans.move_to_end(hit[0])
                    return hit[1]
        bindings = self.bind(feeds)
        plan = self.specialize(bindings)
        if shapes is not None:
            with self._lock:
                key = _key(bindings)
                if self._plans.get(key) is plan:  # not evicted meanwhile
                    self._by_shapes = {**self._by_shapes, shapes: (key, plan)}
        return plan

    def bind(self, feeds: dict) -> dict[str, int]:
        """The names' values the fed shapes give, checked against the declared shapes, the
        bounds and the recorded facts (a ``FeedError`` otherwise)."""
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds must be a dict of input name to array, got "
                            f"{type(feeds).__name__}")
        if feeds.keys() != self.graph.inputs.keys():
            missing = sorted(set(self.graph.inputs) - set(feeds))
            extra = sorted(set(feeds) - set(self.graph.inputs))
            raise FeedError(f"feeds do not match the plan's inputs {sorted(self.graph.inputs)}:"
                            f" missing {missing}, extra {extra}")
        bindings: dict[str, int] = {}
        for name, var in self.graph.inputs.items():
            value = feeds[name]
            if not isinstance(value, (np.ndarray, np.generic)):
                raise FeedError(f"feed {name!r} must be a numpy array, got "
                                f"{type(value).__name__}")
            if value.dtype != var.dtype:
                raise FeedError(f"feed {name!r} is {value.dtype}{list(value.shape)}, the plan "
                                f"needs {var.dtype}{shape_text(var.shape)}")
            bind_shape(var.shape, value.shape, bindings, what=f"feed {name!r}")
        self._check(bindings)
        return bindings

    def _check(self, bindings: dict[str, int]) -> None:
        missing = sorted(self.names - bindings.keys())
        if missing:
            raise FeedError(f"no value for {', '.join(missing)} (the plan's names are "
                            f"{', '.join(sorted(self.names))})")
        extra = sorted(bindings.keys() - self.names)
        if extra:
            raise FeedError(f"{', '.join(extra)} is not a name of this plan's inputs (they are "
                            f"{', '.join(sorted(self.names))})")
        for name, value in bindings.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise FeedError(f"{name}={value!r}: a named dimension is an int >= 1")
            low, high = self.bounds.get(name, (1, None))
            if value < low or (high is not None and value > high):
                raise FeedError(f"{name}={value} is outside its bounds {low}..{high} "
                                f"(compile(bounds=...))")
        self.graph.constraints.check(bindings)

    def specialize(self, bindings: dict):
        """The plan for ``bindings`` ({name: int}, every name), from the cache or made now
        (and cached, the least recently used one dropped when the cache is full).

        One thread makes a binding's plan; another asking for the same binding waits for it,
        while runs of other bindings go on (the cache's lock is not held while compiling)."""
        bindings = _plain(bindings)
        self._check(bindings)
        key = _key(bindings)
        while True:
            with self._lock:
                plan = self._plans.get(key)
                if plan is not None:
                    self._plans.move_to_end(key)
                    return plan
                making = self._making.get(key)
                mine = making is None
                if mine:
                    making = self._making[key] = threading.Event()
            if mine:
                break
            making.wait()  # made (then cached) or failed (then this thread tries itself)
        try:
            plan = self._make(bindings)
            with self._lock:
                self.specialisations += 1
                self._store(key, plan)
        finally:
            with self._lock:
                self._making.pop(key, None)
            making.set()
        return plan

    def _make(self, bindings: dict):
        """A fixed-shape plan for ``bindings``, not cached; its memory is measured."""
        _, outputs = specialize(self.graph, self.outputs, bindings)
        plan = self._compile_fixed(outputs)
        with self._lock:
            self._alignment = plan.memory.options.alignment
            self._measured.pop(_key(bindings), None)
            self._measured[_key(bindings)] = _point(bindings, plan)
            while len(self._measured) > MAX_POINTS:
                self._measured.popitem(last=False)
        return plan

    def _store(self, key: tuple, plan) -> None:
        """Cache ``plan`` (the lock held), the least recently used dropped past cache_size."""
        self._plans[key] = plan
        dropped = set()
        while len(self._plans) > self.cache_size:
            dropped.add(self._plans.popitem(last=False)[0])
        if dropped:
            self._by_shapes = {s: hit for s, hit in list(self._by_shapes.items())
                               if hit[0] not in dropped}

    # -- memory as a formula of the names --------------------------------------------------
    def memory_formula(self):
        """The arena, lower bound and persistent bytes as lines in one name, fitted over every
        binding measured so far (the cached plans and any made before); see
        ``mgegraph.planner.memory.formula``. With fewer than two values of a name its
        ``needs`` says what to specialise.

        >>> plan.specialize({"batch": 1}); plan.specialize({"batch": 8})
        >>> f = plan.memory_formula(); f.arena.slope, f.arena.intercept, f.arena.exact
        """
        with self._lock:
            points, alignment = list(self._measured.values()), self._alignment
        return fit_memory(points, alignment or 0, self.names)

    def largest_batch(self, budget_bytes: int, check: bool = True):
        """The largest value of the formula's name (the batch) whose arena fits
        ``budget_bytes``, within its bounds; None when none does, ``math.inf`` when the arena
        does not grow with it and no bound caps it.

        With ``check`` (the default) the answer is compiled: a plan at the value whose arena
        fits and, unless the value is its upper bound, one at the next whose arena does not
        (``planner.memory.formula.search_largest`` searches from the line's prediction when
        it is off). Those plans are measured, not cached. Without it the line alone answers.

        >>> plan.largest_batch(64 * 2**20)      # the largest batch with an arena <= 64 MiB
        """
        formula = self.memory_formula()
        if formula.arena is None:
            raise GraphError(f"largest_batch: no memory formula yet: {formula.needs}")
        low, high = self.bounds.get(formula.name, (1, None))
        guess = formula.largest(budget_bytes, low, high)
        if not check or guess == math.inf:
            return guess
        known = {dict(p.bindings)[formula.name]: p.arena for p in formula.points}
        return search_largest(functools.partial(self._arena_at, formula), budget_bytes, low,
                              high, low if guess is None else guess, MAX_CHECKS, known)

    def _arena_at(self, formula, value: int) -> int:
        """The arena of the plan at ``{formula.name: value}`` and the other names as fitted:
        measured before, or compiled now (not cached)."""
        bindings = {**dict(formula.fixed), formula.name: value}
        self._check(bindings)
        with self._lock:
            point = self._measured.get(_key(bindings))
        return (point or _point(bindings, self._make(bindings))).arena

    def memory_report(self, format: str = "text", top: int = 10, budget_bytes: int | None = None):
        """The memory of the specialisations and the formula they show: text, ``"json"``,
        or ``"dict"`` (the JSON's data). The formula gives arena, lower bound and persistent
        bytes as lines in a name with the bindings they were measured at; ``budget_bytes``
        adds the largest value whose arena fits (``largest_batch``, checked by compiling);
        then each cached plan's own report (``Plan.memory_report``, ``top`` buffers each).

        >>> print(plan.memory_report(budget_bytes=64 * 2**20))
        """
        if format not in ("text", "json", "dict"):
            raise ValueError(f"memory_report format {format!r} is not one of "
                             "('text', 'json', 'dict')")
        formula, held = self.memory_formula(), self.plans
        largest = None
        if budget_bytes is not None and formula.arena is not None:
            largest = self.largest_batch(budget_bytes)
            formula = self.memory_formula()  # with the points the check compiled
        if format != "text":
            data = {"signature": self.signature(), "names": sorted(self.names),
                    "bounds": {n: list(b) for n, b in self.bounds.items()},
                    "formula": formula.as_dict(),
                    "largest": None if budget_bytes is None else
                    {"budget_bytes": budget_bytes, "name": formula.name,
                     "value": None if largest == math.inf else largest,
                     "unbounded": largest == math.inf},
                    "plans": [{"bindings": b, "summary": memory_summary(p)} for b, p in held]}
            return data if format == "dict" else json.dumps(data, indent=1)
        return "\n".join(self._report_lines(formula, held, budget_bytes, largest, top))

    def _report_lines(self, formula, held, budget, largest, top) -> list[str]:
        lines = [f"symbolic plan memory: {self.signature()}"] + formula.lines()
        if budget is not None and formula.arena is not None:
            what = (f"every {formula.name}" if largest == math.inf else
                    f"no {formula.name}" if largest is None else
                    f"{formula.name} = {largest} (checked by compiling it)")
            lines.append(f"the largest {formula.name} whose arena fits {human(budget)}: {what}")
        lines.append(f"cached specialisations: {len(held)} of {self.cache_size}")
        for bindings, plan in held:
            lines.append(f"-- {bindings_text(bindings)}")
            lines += ["  " + line for line in plan.memory_report(top=top).splitlines()]
        return lines

    # -- what it holds ----------------------------------------------------------------------
    @property
    def plans(self) -> list[tuple[dict, object]]:
        """The cached plans with their bindings, least recently used first."""
        with self._lock:  # list() copies in C, so a lock-free run's move_to_end cannot interleave
            return [(dict(key), plan) for key, plan in list(self._plans.items())]

    @property
    def latest(self):
        """The most recently used specialised plan (None before the first run)."""
        with self._lock:
            held = list(self._plans.values())
        return held[-1] if held else None

    def clear_cache(self) -> None:
        """Drop every specialised plan (and its memory); the measured memory stays."""
        with self._lock:
            self._plans.clear()
            self._by_shapes = {}

    def __str__(self) -> str:
        lines = [f"symbolic plan device={self.options.get('device', 'cpu')}: "
                 + self.signature()]
        if self.bounds:
            lines.append("  bounds: " + ", ".join(f"{n} in {lo}..{hi}" for n, (lo, hi)
                                                  in sorted(self.bounds.items())))
        for fact in self.graph.constraints:
            lines.append(f"  requires {fact}  ({fact.op} at {fact.location})")
        held = self.plans
        lines.append(f"  cache: {len(held)} of {self.cache_size} specialised plans "
                     f"({self.specialisations} made)")
        for bindings, plan in held:
            lines.append(f"    {bindings_text(bindings)}: {len(plan.instructions)} "
                         f"instructions, arena "
                         f"{plan.memory.arena_bytes}B")
        formula = self.memory_formula()
        if formula.arena is not None:
            lines.append(f"  arena = {formula.arena.text(formula.name)}"
                         f"{' (exact)' if formula.arena.exact else ' (approximate)'}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<SymbolicPlan {self.signature()}>"

    def _unbound_names_check(self) -> None:
        """Every name must be some input's dimension on its own, or no feed could bind it."""
        bare = {bare_name(d) for v in self.graph.inputs.values() for d in v.shape}
        alone = sorted(self.names - bare)
        if alone:
            raise GraphError(f"compile(): {', '.join(alone)} appears only inside expressions "
                             "of the inputs' shapes; name it as a dimension of its own in one "
                             "input so that a feed can bind it")


def _key(bindings: dict) -> tuple:
    return tuple(sorted(bindings.items()))


def _plain(bindings: dict) -> dict:
    return {name: int(value) if isinstance(value, np.integer) else value
            for name, value in dict(bindings).items()}


def _point(bindings: dict, plan) -> Point:
    return Point(_key(bindings), plan.arena_bytes, plan.lower_bound_bytes,
                 plan.persistent_bytes)


def _check_bounds(bounds, names: frozenset) -> dict:
    checked = {}
    for name, pair in dict(bounds or {}).items():
        if name not in names:
            raise GraphError(f"compile(bounds=...): {name!r} is not a name of the inputs' "
                             f"shapes ({', '.join(sorted(names))})")
        try:
            low, high = pair
        except (TypeError, ValueError):
            raise GraphError(f"compile(bounds=...): {name}'s bounds are (low, high), got "
                             f"{pair!r}") from None
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high))
        if not ok or not 1 <= low <= high:
            raise GraphError(f"compile(bounds=...): {name}'s bounds need ints 1 <= low <= "
                             f"high, got {pair!r}")
        checked[name] = (low, high)
    return checked


def _owning_params(graph: Graph) -> Graph:
    """``graph`` (a snapshot) with every param it does not share replaced by a private copy
    that all specialisations share: one set of weights, however many shapes run."""
    for var in graph.params.values():
        if var.id not in graph.shared:
            graph.values[var.id] = aligned_copy(graph.values[var.id])
            graph.shared.add(var.id)
    return graph


def _reset_locks_in_child() -> None:
    # a fork while another thread held a plan's lock would leave the child waiting forever
    for plan in list(_LIVE):
        plan._lock = threading.RLock()
        plan._making = {}  # a parent's thread that was specialising is not in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_in_child)
