"""``hardmax``: the one-hot of each first maximum along an axis (ONNX's Hardmax), a composition
that registers no op.

Design: the comparison of argmax (keepdims) with the positions along the axis, rather than
``one_hot(argmax)``: one_hot puts its classes on the last axis, so any other axis would need a
transpose back. argmax picks the first of tied maxima (and the first NaN), as ONNX's reference
(``np.argmax``) does.
"""
from __future__ import annotations

import numpy as np

from ..ir.dims import Dim
from ..ir.errors import OpError, user_location
from .builder import graph_of
from .elementwise import astype, equal
from .movement_api import arange, reshape
from .reduce import argmax

__all__ = ["hardmax"]


def hardmax(inp, axis=-1):
    """1 at the first maximum of each slice along ``axis``, 0 elsewhere, in ``inp``'s dtype
    (ONNX's Hardmax, opset 13). No gradient flows through it.
    ``F.hardmax(logits, axis=-1)``"""
    x = graph_of(inp).lift(inp)
    if not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < x.ndim:
        raise OpError("hardmax", (x.type,), f"axis {axis!r} is out of range for {x.ndim} "
                      "dimensions", user_location())
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    if n == 0:
        raise OpError("hardmax", (x.type,), f"axis {axis} is empty: no maximum to mark",
                      user_location())
    first = argmax(x, axis, keepdims=True)
    along = [1] * x.ndim
    along[axis] = n
    if isinstance(n, Dim):
        positions = reshape(arange(n, dtype="int64", graph=x.graph), tuple(along))
    else:  # a constant: the model file and ONNX keep it as it is
        positions = x.graph.const(np.arange(n, dtype=np.int64).reshape(along))
    return astype(equal(positions, first), x.dtype)
