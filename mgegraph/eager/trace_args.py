"""How a traced call's arguments and results meet its plan: the cache key an argument list
makes, the inputs' names (the items of tuples, lists and dicts of tensors too), the views the
recording's function gets, and a result's structure around its tensors.

>>> key = plan_key(named_arguments(bound), axes={})
"""
from __future__ import annotations

import inspect

import numpy as np

from ..ir.errors import TraceError
from .grad_manager import is_attached
from .symbolic_shape import named_shape, named_view
from .tensor import Tensor, wrap_view


def flatten(result, leaves: list):
    """The structure of a traced function's result, with its Tensors moved to ``leaves``."""
    if isinstance(result, Tensor):
        leaves.append(result)
        return len(leaves) - 1
    if result is None:
        return None
    if isinstance(result, (list, tuple)):
        return type(result), [flatten(r, leaves) for r in result]
    if isinstance(result, dict):
        return dict, {k: flatten(r, leaves) for k, r in result.items()}
    raise TraceError(f"trace: the traced function must return Tensors (or None, or tuples, "
                     f"lists and dicts of them), got {type(result).__name__}")


def unflatten(structure, values):
    if structure is None:
        return None
    if isinstance(structure, int):
        return values[structure]
    kind, items = structure
    if kind is dict:
        return {k: unflatten(s, values) for k, s in items.items()}
    if hasattr(kind, "_fields"):  # a namedtuple takes its fields as arguments
        return kind(*[unflatten(s, values) for s in items])
    return kind(unflatten(s, values) for s in items)


def view_of(t: Tensor, named: bool) -> Tensor:
    """The tensor a recording's function gets for argument ``t``: a view of its bytes that
    says what ``t`` says of itself (its MegEngine name and device)."""
    view = named_view(t) if named else wrap_view(t._array(), t)
    for slot in ("_name", "_device"):  # (unset on most tensors)
        if hasattr(t, slot):
            setattr(view, slot, getattr(t, slot))
    return view


def unhashable(key) -> str:
    for name, part, *_ in key:
        try:
            hash(part)
        except TypeError:
            return f"{name!r} (a {getattr(part[0], '__name__', part[0])})"  # (type, value)
    return "one of them"


def plan_key(arguments: dict, axes: dict) -> tuple:
    """What selects a plan: each argument's ``_key``, and for a tensor its shape (with the
    names of ``axes``, {argument: {axis: name}}, for their sizes) and the first argument that
    is the same object (``f(x, x)`` records one input for both; ``f(a, b)`` needs two), and
    "attached" where a GradManager has it attached (the plan sets its grad)."""
    first: dict[int, str] = {}
    key = []
    for name, v in arguments.items():
        if isinstance(v, (Tensor, np.ndarray)):
            shape = named_shape(v.shape, axes.get(name))
            entry = (name, shape, v.dtype, first.setdefault(id(v), name))
            key.append(entry + ("attached",) if is_attached(v) else entry)
        else:
            key.append((name, _key(v)))
    return tuple(key)


def _key(value):
    """A non-tensor argument's part of the plan key: its type and value, a float's sign and
    NaN included (Python says ``True == 1 == 1.0`` and ``-0.0 == 0.0``, and ``nan != nan``,
    but each is a different constant of the plan). A list keys by the items it holds at the
    call (``F.split(x, [2, 3])`` inside the function), so changing it later selects another
    plan."""
    if isinstance(value, (float, np.floating)):
        return type(value), float(value).hex()
    if isinstance(value, complex):
        return complex, value.real.hex(), value.imag.hex()
    if isinstance(value, (tuple, list)):  # a list keys by its items, as a tuple does
        return type(value), tuple(_key(v) for v in value)
    return type(value), value


def named_arguments(bound) -> dict:
    """Each argument under a name the plan's inputs take: varargs as ``name0, name1...``; the
    items of a tuple, list or dict that holds tensors as ``name[0], name[1]...`` (with the
    container's type and length or keys under ``name``: they select the plan too)."""
    named = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            items = {f"{name}{i}": v for i, v in enumerate(value)}
        elif kind is inspect.Parameter.VAR_KEYWORD:
            items = value
        else:
            items = {name: value}
        for item_name, item in items.items():
            _name_items(item_name, item, named)
    return named


def _name_items(name: str, value, named: dict) -> None:
    if not isinstance(value, (tuple, list, dict)) or not _holds_tensors(value):
        named[name] = value
    elif isinstance(value, dict):
        named[name] = (dict, tuple(value))
        for k, item in value.items():
            _name_items(f"{name}[{k!r}]", item, named)
    else:
        named[name] = (type(value), len(value))
        for i, item in enumerate(value):
            _name_items(f"{name}[{i}]", item, named)


def _holds_tensors(value) -> bool:
    """Whether ``value`` is a tuple, list or dict with a tensor or an array somewhere inside."""
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list)):
        return False
    return any(isinstance(v, (Tensor, np.ndarray)) or _holds_tensors(v) for v in value)


def as_tensors(value, leaf):
    """``value`` with every NumPy array (inside tuples, lists and dicts too) made a Tensor,
    and every Tensor ``t`` made ``leaf(t)``."""
    if isinstance(value, np.ndarray):
        return leaf(Tensor(value))
    if isinstance(value, Tensor):
        return leaf(value)
    if not _holds_tensors(value):
        return value
    if isinstance(value, dict):
        return type(value)({k: as_tensors(v, leaf) for k, v in value.items()})
    items = [as_tensors(v, leaf) for v in value]
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
