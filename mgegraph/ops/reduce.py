"""Reductions over any set of axes: sum, mean, prod, var, max, min, argmax, argmin."""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import TensorType, is_float
from .builder import apply, cast_to, graph_of
from .elementwise import astype, equal, where
from .movement import full_node
from .movement_api import broadcast_to, reshape
from .registry import OpDef, named, normalize_axes, register

__all__ = ["argmax", "argmin", "max", "mean", "min", "prod", "sum", "var"]

REDUCE_OPS = ("sum", "prod", "mean", "var", "max", "min", "argmax", "argmin")

# NumPy's wording when an empty axis is reduced by an op without an identity.
_NO_IDENTITY = {
    "max": "zero-size array to reduction operation maximum which has no identity",
    "min": "zero-size array to reduction operation minimum which has no identity",
    "argmax": "attempt to get argmax of an empty sequence",
    "argmin": "attempt to get argmin of an empty sequence",
}
_INT64, _FLOAT64 = np.dtype(np.int64), np.dtype(np.float64)


def result_dtype(op: str, dtype: np.dtype) -> np.dtype:
    """NumPy's result dtype: sums and products of integers and bools are int64 (uint8's too,
    where NumPy gives uint64, which mgegraph has not: the same bits below 2**63), their means
    and variances float64; max/min keep the dtype; argmax/argmin give int64."""
    if op in ("argmax", "argmin"):
        return _INT64
    if op in ("max", "min") or is_float(dtype):
        return dtype
    return _INT64 if op in ("sum", "prod") else _FLOAT64


def canonical_axes(axis, ndim: int) -> tuple[int, ...]:
    """None -> every axis; an int or a sequence -> sorted unique non-negative axes."""
    if ndim == 0 and axis is not None and (isinstance(axis, (int, np.integer)) or len(axis)):
        raise ValueError(f"axis {axis} is out of range for a 0-d input")
    if axis is not None and not isinstance(axis, (int, np.integer, tuple, list)):
        raise TypeError(f"axis must be None, an int or a sequence of ints, got {axis!r}")
    return normalize_axes(axis, ndim)


def reduced_shape(shape, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _infer(name):
    def infer(in_types, attrs):
        (x,) = in_types
        axes = canonical_axes(attrs["axis"], x.ndim)
        if name in _NO_IDENTITY and any(x.shape[a] == 0 for a in axes):
            raise ValueError(_NO_IDENTITY[name])
        shape = reduced_shape(x.shape, axes, bool(attrs["keepdims"]))
        return (TensorType(shape, result_dtype(name, x.dtype)),)
    return infer


# -- gradient rules -----------------------------------------------------------------------------
# Each takes (x, y, g, axes): input, output and output gradient, both in keepdims shape, and the
# reduced axes. The backward is made of ordinary ops, so grad of grad works.
def _expand(v: Var, x: Var) -> Var:
    """A keepdims-shaped ``v`` broadcast back to ``x``'s shape."""
    return v if v.shape == x.shape else broadcast_to(v, x.shape)


def _count(x: Var, axes):
    """How many elements each reduced value gathers: at least 1 (0 for an empty axis would
    divide by zero), a named size where an axis is named."""
    count = math.prod(x.shape[a] for a in axes)
    return count if named(count) else builtins.max(count, 1)


# Design: a count a gradient divides by is a Python float in a graph whose shapes are numbers,
# lifted to a constant as it always was. Where the count is a named size, the float would be
# the size of one binding; the count is then a fill of the named size, which each specialised
# graph holds as its number, computed in float64 and cast once, so it rounds exactly as the
# float of a graph built with that number.
def size_ratio(graph, num, den, dtype):
    """``num / den`` where either may be a named size: a Python float when both are numbers,
    else a scalar Var of ``dtype`` that the bound sizes give at run time.

    >>> g / size_ratio(x.graph, batch, 1, x.dtype)   # the mean's divisor, batch named
    """
    if not named(num, den):
        return num / den
    value = full_node((), num, np.float64, graph) if named(num) else float(num)
    if den != 1:
        value = value / (full_node((), den, np.float64, graph) if named(den) else float(den))
    return cast_to(value, dtype)


def _sum_grad(x, y, g, axes):
    return _expand(g, x)


def _mean_grad(x, y, g, axes):
    return _expand(g / size_ratio(x.graph, _count(x, axes), 1.0, x.dtype), x)


def _prod_grad(x, y, g, axes):
    """d prod / d x_i is the product of the others, computed without dividing by zero.

    Design: with P the product of the non-zero entries and k the number of zeros in a group, the
    product of the others is P / x_i when k = 0; when k = 1 it is P at the zero and, elsewhere,
    ``z * P / x_i`` where z is the zero entry itself: 0 in value, but its derivative keeps grad
    of grad right. Only second derivatives within a group holding two or more zeros are lost.
    """
    is_zero = equal(x, 0.0)
    nonzero = where(is_zero, 1.0, x)
    p = prod(nonzero, axes, keepdims=True)
    zeros = sum(astype(is_zero, x.dtype), axes, keepdims=True)
    zero_entry = sum(where(is_zero, x, 0.0), axes, keepdims=True)
    factor = where(equal(zeros, 0.0), 1.0,
                   where(equal(zeros, 1.0), where(is_zero, 1.0, zero_entry), 0.0))
    return g * (p / nonzero) * factor


def _extremum_grad(x, y, g, axes):
    """The gradient goes to the entries equal to the extremum, split evenly between ties (JAX's
    convention, so the sum of the gradient equals g); a NaN extremum gives NaN gradients."""
    hit = astype(equal(x, y), x.dtype)
    return hit * (g / sum(hit, axes, keepdims=True))


def _var_grad(x, y, g, axes):
    scale = size_ratio(x.graph, 2.0, _count(x, axes), x.dtype)
    return (x - mean(x, axes, keepdims=True)) * (g * scale)


REDUCE_GRADS = {"sum": _sum_grad, "mean": _mean_grad, "prod": _prod_grad, "max": _extremum_grad,
                "min": _extremum_grad, "var": _var_grad}


def _grad(name):
    rule = REDUCE_GRADS.get(name)

    def grad(node, out_grads):
        (x,), (y,), (g,) = node.inputs, node.outputs, out_grads
        if rule is None or not is_float(x.dtype):  # argmax/argmin: integer indices, no gradient
            return (None,)
        axes = canonical_axes(node.attr["axis"], x.ndim)
        keep = reduced_shape(x.shape, axes, True)
        y, g = (v if v.shape == keep else reshape(v, keep) for v in (y, g))
        return (rule(x, y, g, axes),)
    return grad


for _name in REDUCE_OPS:
    register(OpDef(_name, "reduce", _infer(_name), attrs={"axis": None, "keepdims": False},
                   grad=_grad(_name), flops_per_element=2.0 if _name == "var" else 1.0))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
class RepeatedAxisError(OpError, AssertionError):
    """A reduction given one axis twice, once counted from the end (``axis=(-1, 1)`` of a 2-d
    input); an AssertionError, as MegEngine's."""


def _repeats(axis, ndim: int) -> bool:
    if not isinstance(axis, (tuple, list)) or \
            not all(isinstance(a, (int, np.integer)) for a in axis):
        return False
    return len({int(a) % builtins.max(ndim, 1) for a in axis}) < len(axis)


def _axes_of(name: str, x, axis) -> tuple[int, ...]:
    try:
        return canonical_axes(axis, x.ndim)
    except (ValueError, TypeError) as exc:
        error = RepeatedAxisError if _repeats(axis, x.ndim) else OpError
        raise error(name, (x.type,), str(exc), user_location()) from None


def _reduce(name: str, inp, axis, keepdims: bool) -> Var:
    x = graph_of(inp).lift(inp)
    return apply(name, (x,), axis=_axes_of(name, x, axis), keepdims=bool(keepdims))


def sum(inp, axis=None, keepdims=False):
    """Sum over ``axis`` (None: every axis; an int or a sequence of ints).

    >>> F.sum(x, axis=(0, 2), keepdims=True)
    """
    return _reduce("sum", inp, axis, keepdims)


def mean(inp, axis=None, keepdims=False):
    """Arithmetic mean over ``axis``; integer inputs give float64. ``F.mean(x, axis=-1)``"""
    return _reduce("mean", inp, axis, keepdims)


def prod(inp, axis=None, keepdims=False):
    """Product over ``axis``; an empty axis gives 1. ``F.prod(x, axis=0)``"""
    return _reduce("prod", inp, axis, keepdims)


def var(inp, axis=None, keepdims=False):
    """Population variance (ddof=0, like ``np.var``) over ``axis``. ``F.var(x, axis=1)``"""
    return _reduce("var", inp, axis, keepdims)


def max(inp, axis=None, keepdims=False):
    """Maximum over ``axis``; NaN propagates. ``F.max(x, axis=1)``"""
    return _reduce("max", inp, axis, keepdims)


def min(inp, axis=None, keepdims=False):
    """Minimum over ``axis``; NaN propagates. ``F.min(x, axis=1)``"""
    return _reduce("min", inp, axis, keepdims)


def _arg(name: str, inp, axis, keepdims: bool) -> Var:
    x = graph_of(inp).lift(inp)
    if axis is None or isinstance(axis, (int, np.integer)):
        return _reduce(name, x, axis, keepdims)
    if not isinstance(axis, (tuple, list)) or not axis:
        raise OpError(name, (x.type,), f"axis must be None, an int or a non-empty sequence of "
                      f"ints, got {axis!r}", user_location())
    # MegEngine's meaning of several axes: one reduction per axis, the last axis first, each
    # later one reducing the indices the one before gave
    for a in sorted(_axes_of(name, x, axis), reverse=True):
        x = _reduce(name, x, a, keepdims)
    return x


def argmax(inp, axis=None, keepdims=False):
    """Index (int64) of the first maximum along ``axis``; None: in the flattened input. The
    first NaN counts as the maximum, as in NumPy. Several axes are MegEngine's: argmax along
    each, the last first, each over the indices the one before gave.
    ``F.argmax(logits, axis=1)``"""
    return _arg("argmax", inp, axis, keepdims)


def argmin(inp, axis=None, keepdims=False):
    """Index (int64) of the first minimum along ``axis``, as ``argmax``. ``F.argmin(x, 0)``"""
    return _arg("argmin", inp, axis, keepdims)
