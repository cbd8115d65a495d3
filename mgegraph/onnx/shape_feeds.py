"""An ONNX model whose graph inputs decide shapes (a Reshape's target, Slice's starts, a
Reduce's axes), run as ONNX Runtime runs it: those inputs are fed with the others.

Design: mgegraph plans fix every shape that is not a named dimension, so a value that decides
a shape must be known when the plan is made. ``ShapeFedPlan.run`` reads those inputs' (small)
values from the feeds first and imports the model with them bound, as ``constants=`` binds
them, then compiles; the plans are kept in a bounded cache keyed by the values (least recently
used first out), so a stream of requests with the same shape values imports once. Which inputs
decide shapes is learnt from the importer (``OnnxImportError.needs_constant``): the first import
names the first one, and each import with values names any further one. A value the model
cannot take (a negative size, a shape over the import limits) is a ``FeedError`` naming it.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..compiler import compile as _compile
from ..ir.errors import FeedError, GraphError
from . import ImportLimits, OnnxImportError, checks
from .importer import import_graph

DEFAULT_CACHE_SIZE = 16


def import_model(model, *, constants=None, input_shapes=None, limits=None,
                 values_cache_size: int = DEFAULT_CACHE_SIZE, **compile_options):
    """A compiled plan of ``model``, or a :class:`ShapeFedPlan` when some graph input not
    bound by ``constants`` decides a shape."""
    limits = ImportLimits() if limits is None else limits
    proto = checks.read_model(model, limits)
    constants = dict(constants or {})
    try:
        _, outputs = import_graph(proto, constants=constants, input_shapes=input_shapes,
                                  limits=limits)
    except OnnxImportError as exc:
        fed = [n for n in exc.needs_constant if n not in constants]
        if not fed:
            raise
        return ShapeFedPlan(proto, fed, constants, input_shapes, limits, compile_options,
                            values_cache_size)
    return _compile(outputs, **compile_options)


class ShapeFedPlan:
    """Plans of an ONNX model for each set of values fed to its shape-deciding inputs.

    >>> plan = mgegraph.onnx.import_model(model)     # Reshape's target is a graph input
    >>> plan.shape_inputs
    ('shape',)
    >>> (y,) = plan.run({"x": x, "shape": np.array([4, -1])})
    """

    def __init__(self, model, shape_inputs, constants: dict, input_shapes, limits,
                 compile_options: dict, cache_size: int = DEFAULT_CACHE_SIZE):
        if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 1:
            raise GraphError(f"values_cache_size={cache_size!r}: the number of plans kept is an "
                             "int >= 1")
        self._model, self._constants = model, constants
        self._input_shapes, self._limits = input_shapes, limits
        self.options = dict(compile_options)
        self.inputs = tuple(vi.name for vi in model.graph.input if vi.name not in constants)
        self.shape_inputs = tuple(shape_inputs)
        self.cache_size = cache_size
        self.specialisations = 0  # plans this object made (a cache miss each)
        self._plans: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.RLock()

    def run(self, feeds: dict, out=None) -> list[np.ndarray]:
        """Run on ``feeds`` (every graph input, the shape-deciding ones too)."""
        plan = self.plan_for_feeds(feeds)
        rest = {k: v for k, v in feeds.items() if k not in self.shape_inputs}
        return plan.run(rest, out=out)

    def plan_for_feeds(self, feeds: dict):
        """The plan for the values ``feeds`` give the shape inputs (imported if not cached)."""
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds must be a dict of input name to array, got "
                            f"{type(feeds).__name__}")
        with self._lock:  # one thread imports; a second asking for the same values waits
            while True:
                values = self._values(feeds)
                key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in values.items())
                plan = self._plans.get(key)
                if plan is not None:
                    self._plans.move_to_end(key)
                    return plan
                plan = self._make(values)
                if plan is not None:
                    self._plans[key] = plan
                    while len(self._plans) > self.cache_size:
                        self._plans.popitem(last=False)
                    return plan

    def _values(self, feeds: dict) -> dict:
        values = {}
        for name in self.shape_inputs:
            if name not in feeds:
                raise FeedError(f"no feed for {name!r}, a graph input whose value decides a "
                                f"shape (the model's inputs are {list(self.inputs)})")
            value = feeds[name]
            if not isinstance(value, (np.ndarray, np.generic)):
                raise FeedError(f"feed {name!r} must be a numpy array, got "
                                f"{type(value).__name__}")
            if value.size > self._limits.max_int_list:
                raise FeedError(f"feed {name!r} decides a shape and has {value.size} values, "
                                f"over the limit of {self._limits.max_int_list} "
                                "(ImportLimits.max_int_list)")
            values[name] = np.array(value, order="C")  # a copy: the key and the import read it
        return values

    def _make(self, values: dict):
        """The compiled plan for ``values``, or None when the import named a further input
        that decides a shape (then ``shape_inputs`` holds it and the caller reads it too)."""
        try:
            _, outputs = import_graph(self._model, constants={**self._constants, **values},
                                      input_shapes=self._input_shapes, limits=self._limits)
        except OnnxImportError as exc:
            further = [n for n in exc.needs_constant if n not in self.shape_inputs]
            if further:
                self.shape_inputs += tuple(further)
                return None
            fed = ", ".join(f"{n}={v.tolist()}" for n, v in values.items())
            raise FeedError(f"the model cannot take the values fed to its shape inputs ({fed}):"
                            f" {exc}") from exc
        self.specialisations += 1
        return _compile(outputs, **self.options)

    @property
    def plans(self) -> list[tuple[dict, object]]:
        """The cached plans with the values they were made for, least recently used first."""
        with self._lock:
            return [({n: np.frombuffer(raw, dtype).reshape(shape) for n, dtype, shape, raw
                      in key}, plan) for key, plan in self._plans.items()]

    def __str__(self) -> str:
        held = f"{len(self._plans)} of {self.cache_size} plans ({self.specialisations} made)"
        head = (f"ONNX model with shapes fed as data: inputs {', '.join(self.inputs)}; shape "
                f"inputs {', '.join(self.shape_inputs)}")
        lines = [head, f"  cache: {held}"]
        for values, _ in self.plans:
            lines.append("    " + ", ".join(f"{n}={v.tolist()}" for n, v in values.items()))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<ShapeFedPlan shape inputs {list(self.shape_inputs)}>"
