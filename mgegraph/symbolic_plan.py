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
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from .host_memory import aligned_copy
from .ir.dims import bare_name, bind_shape, shape_text
from .ir.errors import FeedError, GraphError
from .ir.graph import Graph, Var
from .ir.specialize import specialize

DEFAULT_CACHE_SIZE = 16

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
        self._plans: OrderedDict[tuple, object] = OrderedDict()  # bindings key -> Plan
        self._by_shapes: dict[tuple, tuple] = {}  # fed shapes -> bindings key
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
        return self.plan_for_feeds(feeds).run(feeds, out=out)

    def plan_for_feeds(self, feeds: dict):
        """The specialised plan the shapes of ``feeds`` bind (made if it is not cached)."""
        try:
            shapes = tuple(feeds[name].shape for name in self.graph.inputs)
        except (KeyError, AttributeError, TypeError):
            shapes = None
        with self._lock:
            key = self._by_shapes.get(shapes) if shapes is not None else None
            if key is not None and key in self._plans:
                self._plans.move_to_end(key)
                return self._plans[key]
        bindings = self.bind(feeds)
        plan = self.specialize(bindings)
        if shapes is not None:
            with self._lock:
                self._by_shapes[shapes] = _key(bindings)
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
        (and cached, the least recently used one dropped when the cache is full)."""
        bindings = {name: int(value) if isinstance(value, np.integer) else value
                    for name, value in dict(bindings).items()}
        self._check(bindings)
        key = _key(bindings)
        with self._lock:  # one thread specialises; a second asking for it waits for it
            plan = self._plans.get(key)
            if plan is None:
                graph, outputs = specialize(self.graph, self.outputs, bindings)
                plan = self._compile_fixed(outputs)
                self.specialisations += 1
                self._plans[key] = plan
                while len(self._plans) > self.cache_size:
                    dropped, _ = self._plans.popitem(last=False)
                    self._by_shapes = {s: k for s, k in self._by_shapes.items() if k != dropped}
            self._plans.move_to_end(key)
            return plan

    # -- what it holds ----------------------------------------------------------------------
    @property
    def plans(self) -> list[tuple[dict, object]]:
        """The cached plans with their bindings, least recently used first."""
        with self._lock:
            return [(dict(key), plan) for key, plan in self._plans.items()]

    @property
    def latest(self):
        """The most recently used specialised plan (None before the first run)."""
        with self._lock:
            return next(reversed(self._plans.values()), None)

    def clear_cache(self) -> None:
        with self._lock:
            self._plans.clear()
            self._by_shapes.clear()

    def __str__(self) -> str:
        lines = [f"symbolic plan device={self.options.get('device', 'cpu')}: "
                 f"{self.signature()}"]
        if self.bounds:
            lines.append("  bounds: " + ", ".join(f"{n} in {lo}..{hi}" for n, (lo, hi)
                                                  in sorted(self.bounds.items())))
        for fact in self.graph.constraints:
            lines.append(f"  requires {fact}  ({fact.op} at {fact.location})")
        held = self.plans
        lines.append(f"  cache: {len(held)} of {self.cache_size} specialised plans "
                     f"({self.specialisations} made)")
        for bindings, plan in held:
            bound = ", ".join(f"{n}={v}" for n, v in sorted(bindings.items()))
            lines.append(f"    {bound}: {len(plan.instructions)} instructions, arena "
                         f"{plan.memory.arena_bytes}B")
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


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_in_child)
