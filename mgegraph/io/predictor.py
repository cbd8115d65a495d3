"""A loaded model, ready to run: ``Predictor``, what ``mg.load`` and ``mg.runtime.load`` give.

It lives with the model file it is read from; ``mgegraph.runtime`` is its public name for a
deployment (``from mgegraph import runtime; runtime.load(path)``).

>>> predictor = runtime.load("model.mgm"); (y,) = predictor.run({"x": x})
"""
from __future__ import annotations

import numpy as np

from ..ir.dims import bind_shape, bindings_text
from ..ir.errors import FeedError, GraphError, ModelFormatError
from ..symbolic_plan import SymbolicPlan
from .arrays import type_text
from .container import Limits
from .model_file import (
    LoadedModel,
    input_types,
    output_types,
    plan_bytes_problem,
    read,
    sizes_problem,
)

# distinct fed shapes a symbolic predictor remembers as checked (then it forgets them all: a
# shape seen again is checked again, which costs one bind, not a specialisation)
ADMITTED = 1024


class Predictor:
    """A loaded model: its input and output names, types (shapes and dtypes), and ``run``.

    A model saved with a named dimension takes any shape its inputs' types allow:
    ``input_types`` and ``repr`` show them symbolic (``input0: float32[batch, 1, 8, 8]``),
    each new binding of the names is specialised at its first run, and a feed that does not
    conform is a ``FeedError`` naming the input, its declared type and the fed one.

    >>> predictor.input_names, predictor.input_shapes  # (('x',), ((8, 3),))
    """

    def __init__(self, loaded: LoadedModel, limits: Limits | None = None):
        self.plan, self.kind = loaded.plan, loaded.kind
        self.input_names, self.output_names = loaded.input_names, loaded.output_names
        declared = input_types(self.plan)
        self.input_types = tuple(declared[n] for n in self.input_names)
        self.output_types = tuple(output_types(self.plan))
        self.input_shapes = tuple(t.shape for t in self.input_types)
        self.input_dtypes = tuple(t.dtype for t in self.input_types)
        self.output_shapes = tuple(t.shape for t in self.output_types)
        self.output_dtypes = tuple(t.dtype for t in self.output_types)
        self.symbolic = isinstance(self.plan, SymbolicPlan)
        self._limits = Limits() if limits is None else limits
        self._admitted: set[tuple] = set()  # fed (shape, dtype)s already checked

    def run(self, feeds) -> list[np.ndarray]:
        """The outputs, in ``output_names`` order, for ``feeds``: a dict of input name to
        array, or the arrays in ``input_names`` order."""
        if isinstance(feeds, (list, tuple)):
            if len(feeds) != len(self.input_names):
                raise FeedError(f"run() got {len(feeds)} inputs, the model takes "
                                f"{len(self.input_names)}: {list(self.input_names)}")
            feeds = dict(zip(self.input_names, feeds))
        if self.symbolic:
            self._admit(feeds)
        return self.plan.run(feeds)

    def __call__(self, *inputs):
        """``predictor(x)``: positional inputs; one output alone, several as a list."""
        outs = self.run([np.asarray(a) for a in inputs])
        return outs[0] if len(outs) == 1 else outs

    def signature(self) -> str:
        """``input0: float32[batch, 1, 8, 8] -> float32[batch, 10]``."""
        ins = ", ".join(f"{n}: {type_text(t.shape, t.dtype)}"
                        for n, t in zip(self.input_names, self.input_types))
        outs = ", ".join(type_text(t.shape, t.dtype) for t in self.output_types)
        return f"{ins} -> {outs}"

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {type_text(t.shape, t.dtype)}"
                        for n, t in zip(self.input_names, self.input_types))
        return f"<mgegraph.runtime.Predictor ({ins}) -> {len(self.output_names)} outputs>"

    # -- a symbolic model's feeds ----------------------------------------------------------
    def bind(self, feeds: dict) -> dict[str, int]:
        """The names' values ``feeds`` give (``{"batch": 7}``), each input checked against its
        declared type, then the bounds and the facts the model's rules recorded."""
        bindings: dict[str, int] = {}
        for name, t in zip(self.input_names, self.input_types):
            value = feeds.get(name) if isinstance(feeds, dict) else None
            if not isinstance(value, (np.ndarray, np.generic)):
                continue  # missing or not an array: the plan's own check words it
            fed = f"fed {type_text(value.shape, value.dtype)}, the model takes " \
                  f"{type_text(t.shape, t.dtype)}"
            if value.dtype != t.dtype:
                raise FeedError(f"input {name}: {fed}")
            try:
                bind_shape(t.shape, value.shape, bindings, what=f"input {name}")
            except FeedError as exc:
                raise FeedError(f"{exc} ({fed})") from None
        return self.plan.bind(feeds)

    def specialize(self, bindings: dict[str, int]):
        """The plan for ``bindings`` (``{"batch": 8}``, every name), made if not cached; a
        ``FeedError`` where the values break a bound or a recorded fact, or the loading
        limits (each value's bytes, checked before the plan is made; the plan's bytes)."""
        return self._within_limits(bindings, lambda: self.plan.specialize(bindings))

    def _admit(self, feeds) -> None:
        """Check feeds whose shapes are new: they conform, and their binding stays within the
        loading limits."""
        try:
            key = tuple((feeds[n].shape, feeds[n].dtype) for n in self.input_names)
        except (KeyError, AttributeError, TypeError):
            key = None  # the plan's own check says what is wrong with these feeds
        if key in self._admitted:
            return
        bindings = self.bind(feeds)
        self._within_limits(bindings, lambda: self.plan.plan_for_feeds(feeds))
        if len(self._admitted) >= ADMITTED:
            self._admitted.clear()
        if key is not None:
            self._admitted.add(key)

    def _within_limits(self, bindings: dict, make):
        problem = sizes_problem(self.plan.graph, bindings, self._limits)
        plan = None
        if problem is None:  # before ``make``: compiling may fold constants of those sizes
            plan = make()
            problem = plan_bytes_problem(plan, self._limits)
        if problem:
            raise FeedError(f"{bindings_text(bindings)}: {problem} (runtime.load(limits=...))")
        return plan


def load(path, limits: Limits | None = None, device: str | None = None, tune=None, *,
         map_location=None):
    """What ``mg.save`` wrote (to a file name or a binary file object): a ``Predictor`` for a
    model (``.run(feeds)``, its input and output names, shapes and dtypes; ``.plan``), a dict
    of arrays for a state dict, the object for a saved Module, tensor or nested state.
    ``map_location`` is MegEngine's: loaded tensors live in host memory, so it may only name
    the CPU ("cpu0", "xpux") or be None.
    ``device`` compiles the model for another device than the one it was saved from;
    ``tune`` chooses its kernels' ways as ``mg.compile``'s does (None: those stored for this
    machine, by ``mgegraph tune MODEL`` or an earlier ``tune="measure"``, else the rules).

    >>> weights = mg.load("weights.mgm"); model.load_state_dict(weights)
    """
    if map_location is not None and not (isinstance(map_location, str) and map_location.lower()
                                         .startswith(("cpu", "xpu"))):
        raise GraphError(f"load(map_location={map_location!r}): loaded tensors live in host "
                         "memory; name the CPU ('cpu0') or pass None")
    loaded = read(path, limits, device, tune)
    return Predictor(loaded, limits) if isinstance(loaded, LoadedModel) else loaded


def load_predictor(path, limits: Limits | None = None, device: str | None = None,
                   tune=None) -> Predictor:
    """The model saved at ``path`` (``mg.save``), validated, compiled and ready to run;
    a ``ModelFormatError`` names what is wrong with a broken or hostile file, or says that
    the file holds weights only.

    >>> predictor = runtime.load("model.mgm"); outputs = predictor.run([x])
    """
    loaded = read(path, limits, device, tune)
    if not isinstance(loaded, LoadedModel):
        raise ModelFormatError(f"model file: {path!r} holds a state dict or a saved object, "
                               "not a compiled model; mg.load it (and load_state_dict weights)")
    return Predictor(loaded, limits)
