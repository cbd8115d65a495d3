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
from ..ops.movement_api import full, squeeze, stack, swapaxes
from ..ops.reduce import argmax, argmin, max, mean, min, prod, sum, var
from ..ops.sorting import argsort, sort, topk
from .norms import normalize

__all__ = ["argmax", "argmin", "argsort", "cross", "isinf", "isnan", "matmul", "max", "mean",
           "min", "norm", "normalize", "prod", "sign", "sort", "std", "sum", "topk", "var"]


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


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of 3-vectors along ``axisa`` of ``a`` and ``axisb`` of ``b`` (the
    rest broadcasts), the result's vectors along ``axisc``; ``axis`` sets all three, as in
    ``numpy.cross``. ``F.cross(u, v)``"""
    g = graph_of(a, b)
    x, y = g.lift(a), g.lift(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = swapaxes(x, axisa, -1), swapaxes(y, axisb, -1)
    if x.shape[-1] != 3 or y.shape[-1] != 3:
        raise OpError("cross", (x.type, y.type), f"needs vectors of 3 along axisa and axisb, got "
                      f"{x.shape[-1]} and {y.shape[-1]}", user_location())
    u = [x[..., i] for i in range(3)]
    v = [y[..., i] for i in range(3)]
    c = stack([u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2],
               u[0] * v[1] - u[1] * v[0]], axis=-1)
    return swapaxes(c, -1, axisc)


def logsumexp(inp, axis, keepdims=False):
    """log(sum(exp(inp))) over ``axis``, computed from the maximum so that large values do not
    overflow (an all -inf slice gives -inf). ``F.nn.logsumexp(logits, axis=-1)``"""
    x = graph_of(inp).lift(inp)
    x = x if is_float(x.dtype) else ew.astype(x, np.float32)
    top = max(x, axis, keepdims=True)
    top = ew.where(isinf(top), 0.0, top)  # keeps inf and -inf out of x - top
    out = ew.log(sum(ew.exp(x - top), axis, keepdims=True)) + top
    return out if keepdims else _squeezed(out, x.ndim, axis)


def _squeezed(out, ndim: int, axis):
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return squeeze(out, tuple(a % ndim for a in axes))
# MegEngine's F.math.matinv (ops/linalg_inv.py)
from ..ops.linalg_inv import matinv

__all__ += ["matinv"]
