"""``megengine.functional.math``'s names: the reductions of ``ops/reduce.py``, sorting, matmul,
normalize, and, composed of existing ops here, std, norm, isnan and isinf.

>>> F.norm(x, ord=1, axis=-1)
"""
from __future__ import annotations

import math as _math
import numbers

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.types import is_float
from ..ops import elementwise as ew
from ..ops.builder import graph_of
from ..ops.elementwise import sign
from ..ops.matmul import matmul
from ..ops.movement_api import full
from ..ops.reduce import argmax, argmin, max, mean, min, prod, sum, var
from ..ops.sorting import argsort, sort, topk
from .norms import normalize

__all__ = ["argmax", "argmin", "argsort", "isinf", "isnan", "matmul", "max", "mean", "min",
           "norm", "normalize", "prod", "sign", "sort", "std", "sum", "topk", "var"]


def std(inp, axis=None, keepdims=False):
    """Population standard deviation (ddof=0) over ``axis``: ``sqrt(var)``; integer inputs
    give floats. ``F.std(x, axis=1)``"""
    return ew.sqrt(var(inp, axis, keepdims))


def norm(inp, ord=None, axis=None, keepdims=False):
    """The vector ``ord``-norm over ``axis`` (MegEngine's: ``ord`` None is 2, 0 counts the
    nonzero elements, inf and -inf are the largest and smallest magnitude); ``axis`` may be
    None only for a 1-d input; integer inputs give float32. ``F.norm(x, ord=1, axis=-1)``"""
    x = graph_of(inp).lift(inp)
    x = x if is_float(x.dtype) else ew.astype(x, np.float32)  # MegEngine: integers give float32
    if axis is None and x.ndim != 1:
        raise OpError("norm", (x.type,), f"axis is required unless the input is 1-d, got "
                      f"{x.ndim}-d", user_location())
    ord = 2 if ord is None else ord
    if isinstance(ord, bool) or not isinstance(ord, (numbers.Real, np.number)):
        raise OpError("norm", (x.type,), f"ord must be a number, got {ord!r}", user_location())
    if ord == 0:
        return sum(ew.astype(ew.not_equal(x, 0), x.dtype), axis, keepdims)
    if ord in (_math.inf, -_math.inf):
        return (max if ord > 0 else min)(ew.abs(x), axis, keepdims)
    return ew.pow(sum(ew.pow(ew.abs(x), float(ord)), axis, keepdims), 1.0 / ord)


def isnan(inp):
    """Elementwise: is ``inp`` NaN (a bool tensor; integers never are). ``F.isnan(x)``"""
    (x,) = ew.as_values(inp)
    x = graph_of(x).lift(x)
    if not is_float(x.dtype):
        return full(x.shape, False, np.bool_, graph=x.graph)
    return ew.not_equal(x, x)  # NaN is the one value unequal to itself


def isinf(inp):
    """Elementwise: is ``inp`` +inf or -inf (a bool tensor). ``F.isinf(x)``"""
    (x,) = ew.as_values(inp)
    x = graph_of(x).lift(x)
    if not is_float(x.dtype):
        return full(x.shape, False, np.bool_, graph=x.graph)
    return ew.equal(ew.abs(x), _math.inf)
