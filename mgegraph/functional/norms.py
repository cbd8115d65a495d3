"""The normalisations beyond batch and layer norm: group and instance norm (the group_norm op),
and, composed of existing ops, local response norm, Lp and mean-variance normalisation
(``F.nn.group_norm``, ``F.normalize``).

>>> y = F.nn.group_norm(x, 32, True, gamma, beta)
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.types import is_float
from ..ops import elementwise as ew
from ..ops import movement_api as movement
from ..ops import reduce
from ..ops.autocast import high_precision
from ..ops.builder import apply, graph_of
from ..ops.conv import avg_pool2d

# Design: group norm (and instance norm, its one-channel-per-group case) is its own op, for
# speed (ops/norm.py); LRN is the channel-window sum of squares as an average pool over the
# zero-padded channel axis; Lp and mean-variance normalisation are reductions and elementwise
# ops, which the planner fuses.


def _refuse(op: str, values, reason: str):
    raise OpError(op, tuple(v.type for v in values), reason, user_location())


def _float_input(op: str, inp, min_ndim: int):
    x = high_precision(graph_of(inp).lift(inp))
    if not is_float(x.dtype):
        _refuse(op, (x,), f"needs a floating-point input, got {x.dtype}")
    if x.ndim < min_ndim:
        _refuse(op, (x,), f"needs an input of at least {min_ndim} dims (N, C, ...), got "
                f"{x.ndim}")
    return x


def _channel_param(op: str, x, value, what: str, fill: float):
    """A per-channel weight or bias, (C,) or (1, C, 1, ...), as a (C,) Var; absent, a const
    filled with ``fill``."""
    c = x.shape[1]
    if value is None:
        return x.graph.const(np.full(c, fill, x.dtype))
    v = x.graph.lift(value) if not isinstance(value, (np.ndarray, list, tuple, float, int)) \
        else x.graph.const(np.asarray(value, x.dtype))
    if v.size != c or v.ndim not in (1, x.ndim) or v.shape[1 if v.ndim > 1 else 0] != c:
        _refuse(op, (x, v), f"{what} must have shape ({c},) or (1, {c}, 1, ...), got {v.shape}")
    if v.dtype != x.dtype:
        _refuse(op, (x, v), f"{what} dtype {v.dtype} differs from the input's {x.dtype}")
    return v if v.ndim == 1 else movement.reshape(v, (c,))


def group_norm(inp, num_groups, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise each group of ``num_groups`` channel groups of an (N, C, ...) input over its
    channels and positions, then ``* weight + bias`` per channel (shape (C,)) when ``affine``
    (a missing one counts as ones or zeros).

    >>> y = F.nn.group_norm(x, 32, True, gamma, beta)
    """
    x = _float_input("group_norm", inp, 2)
    c = x.shape[1]
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) \
            or num_groups < 1 or c % num_groups:
        _refuse("group_norm", (x,), f"num_groups must be an int >= 1 dividing the {c} "
                f"channels, got {num_groups!r}")
    if not affine:
        weight = bias = None
    w = _channel_param("group_norm", x, weight, "weight", 1.0)
    b = _channel_param("group_norm", x, bias, "bias", 0.0)
    return apply("group_norm", (x, w, b), groups=int(num_groups), eps=float(eps))


def instance_norm(inp, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise each channel of each sample of an (N, C, ...) input over its positions, then
    ``* weight + bias`` per channel when ``affine``. ``F.nn.instance_norm(x, True, g, b)``"""
    x = _float_input("instance_norm", inp, 3)
    return group_norm(x, x.shape[1], affine, weight, bias, eps)


def _window_sum_of_squares(x, size: int, before: int, after: int):
    """The mean of x^2 over channels [c - before, c + after] (zero outside), for each channel c."""
    rest = x.size // (x.shape[0] * x.shape[1]) if x.size else 1
    sq = movement.reshape(ew.square(x), (x.shape[0], 1, x.shape[1], rest))
    padded = movement.pad(sq, ((0, 0), (0, 0), (before, after), (0, 0)))
    mean = avg_pool2d(padded, (size, 1), stride=1, mode="average")
    return movement.reshape(mean, x.shape)


def lrn(inp, size: int, alpha: float, beta: float, k: float, before: int):
    """x / (k + alpha * mean of x^2 over a window of ``size`` channels starting ``before``
    channels below c)^beta: PyTorch's and ONNX's LRN (they differ in ``before`` for even
    sizes)."""
    x = _float_input("local_response_norm", inp, 2)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        _refuse("local_response_norm", (x,), f"the window size must be an int >= 1, got {size!r}")
    mean_sq = _window_sum_of_squares(x, int(size), before, int(size) - 1 - before)
    return x * ew.pow(mean_sq * float(alpha) + float(k), -float(beta))


def local_response_norm(inp, kernel_size=5, k=2.0, alpha=1e-4, beta=0.75):
    """MegEngine's LRN across channels: x / (k + alpha * sum of x^2 over the ``kernel_size``
    channels centred on c)^beta; ``kernel_size`` is odd.

    >>> y = F.nn.local_response_norm(x, kernel_size=5, k=2.0, alpha=1e-4, beta=0.75)
    """
    x = _float_input("local_response_norm", inp, 2)
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, (int, np.integer)) \
            or kernel_size < 1 or kernel_size % 2 == 0:
        _refuse("local_response_norm", (x,), f"kernel_size must be an odd int >= 1, got "
                f"{kernel_size!r}")
    # MegEngine's alpha scales the window's sum; lrn's scales its mean
    return lrn(x, int(kernel_size), alpha * kernel_size, beta, k, int(kernel_size) // 2)


def _lp_norm(op: str, x, ord, axis):
    if ord == math.inf:
        return reduce.max(ew.abs(x), axis, keepdims=True)
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.number)) \
            or not 0 < ord < math.inf:
        _refuse(op, (x,), f"ord must be a number > 0 or inf, got {ord!r}")
    if ord == 2:
        return ew.sqrt(reduce.sum(ew.square(x), axis, keepdims=True))
    if ord == 1:
        return reduce.sum(ew.abs(x), axis, keepdims=True)
    return ew.pow(reduce.sum(ew.pow(ew.abs(x), float(ord)), axis, keepdims=True), 1.0 / ord)


def normalize(inp, ord=None, axis=None, eps=1e-12):
    """``inp`` divided by its Lp norm over ``axis`` (None: the whole tensor), the norm clipped
    below at ``eps``; ``ord`` None means 2; integer inputs give float32 (MegEngine's
    ``F.normalize``).

    >>> unit = F.normalize(x, ord=2, axis=-1)
    """
    x = high_precision(graph_of(inp).lift(inp))
    x = x if is_float(x.dtype) else ew.astype(x, np.float32)  # MegEngine: integers give float32
    norm = _lp_norm("normalize", x, 2 if ord is None else ord, axis)
    return x / ew.clip(norm, lower=eps)


def mean_variance_normalization(inp, axis=(0, 2, 3), eps=1e-9):
    """(x - mean) / (std + eps) over ``axis`` (ONNX MeanVarianceNormalization, its epsilon).
    ``F.nn.mean_variance_normalization(x, axis=(2, 3))``"""
    x = _float_input("mean_variance_normalization", inp, 0)
    centred = x - reduce.mean(x, axis, keepdims=True)
    std = ew.sqrt(reduce.mean(ew.square(centred), axis, keepdims=True))
    return centred / (std + eps)

