"""A command's feeds for a loaded model: ``.npy`` files checked against its input types, seeded
random arrays for the inputs not given, and, for a model with named dimensions, the binding of
the names they make (``mgegraph run/profile/report/viz``).

Design: a name no given input and no ``--dim NAME=N`` binds takes its least value, 1 or the
low end of ``compile(bounds=...)``, as ``trtexec`` sets a dynamic dimension it is not given,
raised to the value of a name a recorded fact makes it equal to (``batch == n``); the commands
print the binding they used, saying which names took that default.

>>> feeds = read_feeds(predictor, [("input0", "one_image.npy")])
>>> bound = binding(predictor, feeds, {})      # Binding({'batch': 1}, defaulted=())
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dims import Relation, bare_name, bind_shape, bindings_text, evaluate
from ..ir.errors import FeedError
from ..ir.types import is_float
from .arrays import read_npy, type_text


@dataclass(frozen=True)
class Binding:
    """The value of each name of a model's inputs, and which took their default."""

    values: dict[str, int]
    defaulted: tuple[str, ...]

    def __str__(self) -> str:
        """``batch=1 (batch: not given, its least value; --dim NAME=N sets it)``."""
        text = bindings_text(self.values)
        if self.defaulted:
            text += (f" ({', '.join(self.defaulted)}: not given, its least value; "
                     "--dim NAME=N or an --input sets it)")
        return text


def read_feeds(predictor, specs, rng: np.random.Generator | None = None,
               dims: dict[str, int] | None = None) -> dict:
    """The feeds named by ``--input`` specs ``(name or None, path)``; inputs not given are
    random when ``rng`` is given (``feeds_and_binding``), else an error.

    >>> read_feeds(predictor, [(None, "x.npy")])   # {'input0': array(...)}
    """
    feeds, _ = feeds_and_binding(predictor, specs, dims or {}, rng)
    missing = [n for n in predictor.input_names if n not in feeds]
    if missing:
        wants = dict(zip(predictor.input_names, predictor.input_types))
        wanted = ", ".join(f"{n} ({type_text(wants[n].shape, wants[n].dtype)})"
                           for n in missing)
        raise FeedError(f"no --input NAME=FILE.npy for the model's input(s) {wanted}")
    return feeds


def feeds_and_binding(predictor, specs, dims: dict[str, int],
                      rng: np.random.Generator | None = None) -> tuple[dict, Binding | None]:
    """The arrays of the ``--input`` specs and, with ``rng``, random ones for the other inputs
    (standard normal floats, zeros otherwise, at the shapes the binding gives); and for a
    model with named dimensions the ``Binding`` they and ``dims`` make (else None). The
    binding is checked against the model's bounds, facts and loading limits before any
    array of its shapes is made."""
    given = read_given(predictor, specs)
    bound = binding(predictor, given, dims) if predictor.symbolic or dims else None
    if rng is None or len(given) == len(predictor.input_names):
        return given, bound
    if bound is not None:
        predictor.specialize(bound.values)
    return fill_random(predictor, given, bound, rng), bound


def read_given(predictor, specs) -> dict:
    """The arrays of the ``--input`` specs ``(name or None, path)`` only, each checked against
    its input's type (a named dimension takes any size here)."""
    names, feeds = predictor.input_names, {}
    wants = dict(zip(names, predictor.input_types))
    for name, path in specs:
        name = _feed_name(name, path, names)
        if name in feeds:
            raise FeedError(f"--input {name}=...: given twice")
        feeds[name] = _read_array(name, path, wants[name])
    return feeds


def fill_random(predictor, feeds: dict, bound: Binding | None,
                rng: np.random.Generator) -> dict:
    """``feeds`` and a ``random_array`` for each input they lack, its names bound as
    ``bound`` says (None: a model with fixed shapes)."""
    values = {} if bound is None else bound.values
    filled = dict(feeds)
    for name, t in zip(predictor.input_names, predictor.input_types):
        if name not in filled:
            filled[name] = random_array([evaluate(d, values) for d in t.shape], t.dtype, rng)
    return filled


def binding(predictor, feeds: dict, dims: dict[str, int]) -> Binding:
    """The names' values: ``dims`` (``--dim``), then those the arrays in ``feeds`` bind, then
    each name left at its least value; a ``FeedError`` where two of them disagree."""
    names = getattr(predictor.plan, "names", frozenset())
    for name, value in dims.items():
        if name not in names:
            have = f"its names are {', '.join(sorted(names))}" if names else "it names none"
            raise FeedError(f"--dim {name}={value}: the model has no dimension {name!r}; {have}")
    values = dict(dims)
    for name, t in zip(predictor.input_names, predictor.input_types):
        if name in feeds:
            try:
                bind_shape(t.shape, feeds[name].shape, values, what=f"--input {name}")
            except FeedError as exc:
                given = "".join(f" with --dim {n}={v}" for n, v in sorted(dims.items()))
                raise FeedError(f"{exc} (the model takes {type_text(t.shape, t.dtype)}"
                                f"{given})") from None
    defaulted = tuple(sorted(names - values.keys()))
    bounds = getattr(predictor.plan, "bounds", {})
    values.update({name: bounds.get(name, (1, None))[0] for name in defaulted})
    if defaulted:
        _follow_equal_names(predictor.plan.constraints, values, set(defaulted))
    return Binding(values, defaulted)


def _follow_equal_names(facts, values: dict[str, int], free: set[str]) -> None:
    """Raise each ``free`` name to the value of a name a recorded fact makes it equal to, so
    that a default binding keeps the facts it can. Values only grow: it ends."""
    pairs = [(bare_name(f.left), bare_name(f.right)) for f in facts
             if f.relation is Relation.EQUAL]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    changed = True
    while changed:
        changed = False
        for a, b in pairs + [(b, a) for a, b in pairs]:
            if a in free and values[a] < values[b]:
                values[a], changed = values[b], True


def _feed_name(name: str | None, path: str, names: tuple[str, ...]) -> str:
    if name is None:
        if len(names) != 1:
            raise FeedError(f"--input {path}: the model has {len(names)} inputs {list(names)}; "
                            f"write --input NAME={path}")
        return names[0]
    if name not in names:
        raise FeedError(f"--input {name}={path}: the model has no input {name!r}; its inputs "
                        f"are {list(names)}")
    return name


def _read_array(name: str, path: str, t) -> np.ndarray:
    def refuse(message: str):
        raise FeedError(f"--input {name}={path}: {message}")

    return read_npy(path, t.shape, t.dtype, refuse, f"the model's input {name}")


def random_array(shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """A feed of ``shape`` and ``dtype``: standard normal floats, zeros for integers and
    booleans (an index input then stays in range).

    >>> random_array((2, 3), np.dtype("float32"), np.random.default_rng(0)).shape  # (2, 3)
    """
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)
