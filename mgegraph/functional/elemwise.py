"""``megengine.functional.elemwise``'s names: the elementwise functions of ``ops/elementwise.py``
and, composed of them here, the logical functions over bool tensors and ``logaddexp``.

>>> both = F.logical_and(x > 0, y > 0)
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import OpError, user_location
from ..ops import elementwise as ew
from ..ops.builder import graph_of
from ..ops.elementwise import *

# MegEngine's list (MegEngine's tests call each name with one or two tensors); its expm1,
# left_shift and right_shift are not here yet
__all__ = ["abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "ceil",
           "clip", "cos", "cosh", "div", "equal", "erf", "exp", "floor", "floor_div", "greater",
           "greater_equal", "less", "less_equal", "log", "log1p", "logaddexp", "logical_and",
           "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "mod", "mul", "neg",
           "not_equal", "pow", "round", "sin", "sinh", "sqrt", "square", "sub", "tan", "tanh"]


def _bools(op: str, *values):
    """The operands of a logical function, which must be bool tensors (MegEngine's rule)."""
    values = ew.as_values(*values)
    g = graph_of(*values)
    lifted = tuple(g.lift(v) for v in values)
    wrong = [v.dtype for v in lifted if v.dtype != np.bool_]
    if wrong:
        raise OpError(op, tuple(v.type for v in lifted), f"needs bool inputs, got {wrong[0]}",
                      user_location())
    return lifted


def logical_and(x, y):
    """Elementwise ``x and y`` of bool tensors, with broadcasting. ``F.logical_and(a > 0, b)``"""
    a, b = _bools("logical_and", x, y)
    return ew.where(a, b, False)


def logical_or(x, y):
    """Elementwise ``x or y`` of bool tensors, with broadcasting. ``F.logical_or(a, b)``"""
    a, b = _bools("logical_or", x, y)
    return ew.where(a, True, b)


def logical_xor(x, y):
    """Elementwise ``x != y`` of bool tensors, with broadcasting. ``F.logical_xor(a, b)``"""
    a, b = _bools("logical_xor", x, y)
    return ew.not_equal(a, b)


def logical_not(x):
    """Elementwise ``not x`` of a bool tensor. ``F.logical_not(mask)``"""
    (a,) = _bools("logical_not", x)
    return ew.equal(a, False)


def logaddexp(x, y):
    """Elementwise log(exp(x) + exp(y)), computed as max + log1p(exp(-|x - y|)) so that large
    values do not overflow; equal infinities give themselves. ``F.logaddexp(a, b)``"""
    x, y = ew.as_values(x, y)
    larger = ew.maximum(x, y)
    spread = ew.log1p(ew.exp(-ew.abs(x - y)))
    return ew.where(ew.equal(x, y), x + math.log(2.0), larger + spread)
