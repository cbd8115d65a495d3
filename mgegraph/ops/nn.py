"""NN ops: softmax, log_softmax, cross_entropy, layer_norm, batch_norm, dropout.

Design: each is one op with its own kernel, not a composite of reductions and elementwise ops,
so fusion and memory planning see one node (and one output buffer) per layer.
"""
from __future__ import annotations

import math

import numpy as np

from .._kernels import nn as K
from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import INT_DTYPES, TensorType
from .builder import apply, apply_multi, graph_of
from .registry import (FLOAT_DTYPES, REQUIRED, Launch, OpDef, normalize_axis, register,
                       require_dtypes)

__all__ = ["softmax", "log_softmax", "logsoftmax", "cross_entropy", "layer_norm", "batch_norm",
           "dropout"]


def _size(shape) -> int:
    return math.prod(shape)


def _split(shape, axis: int) -> tuple[int, int, int]:
    """(outer, axis length, inner) sizes of a contiguous ``shape`` around ``axis``."""
    if not shape:
        return 1, 1, 1
    return _size(shape[:axis]), shape[axis], _size(shape[axis + 1:])


def _same_dtype(x: TensorType, other: TensorType, what: str):
    if other.dtype != x.dtype:
        raise TypeError(f"{what} dtype {other.dtype} differs from the input's {x.dtype}")


# -- softmax / log_softmax -----------------------------------------------------------------------
def _softmax_infer(name):
    def infer(in_types, attrs):
        (x,) = in_types
        require_dtypes(name, x, FLOAT_DTYPES)
        normalize_axis(attrs["axis"], x.ndim)
        return (x,)
    return infer


def _softmax_lower(take_log):
    def lower(node):
        (x,) = node.inputs
        return Launch((*_split(x.shape, normalize_axis(node.attr["axis"], x.ndim)), take_log))
    return lower


for _name, _log in (("softmax", 0), ("log_softmax", 1)):
    register(OpDef(_name, "nn", _softmax_infer(_name), attrs={"axis": REQUIRED},
                   kernel="softmax", dtypes=FLOAT_DTYPES, lower=_softmax_lower(_log),
                   inplace=True, flops_per_element=12))


# -- cross entropy -------------------------------------------------------------------------------
def _ce_infer(in_types, attrs):
    pred, label = in_types
    require_dtypes("cross_entropy", pred, FLOAT_DTYPES, "pred")
    require_dtypes("cross_entropy", label, INT_DTYPES, "label")
    if pred.ndim < 1:
        raise ValueError("pred must have a class axis (at least 1-d)")
    axis = normalize_axis(attrs["axis"], pred.ndim)
    want = pred.shape[:axis] + pred.shape[axis + 1:]
    if label.shape != want:
        raise ValueError(f"label shape {label.shape} must be pred's shape without axis {axis}, "
                         f"{want}")
    if attrs["reduction"] not in K.REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(K.REDUCTIONS)}, "
                         f"got {attrs['reduction']!r}")
    if not 0 <= attrs["label_smooth"] <= 1:
        raise ValueError(f"label_smooth must be in [0, 1], got {attrs['label_smooth']}")
    shape = label.shape if attrs["reduction"] == "none" else ()
    return (TensorType(shape, pred.dtype),)


def _ce_lower(node):
    pred, label = node.inputs
    a = node.attr
    split = _split(pred.shape, normalize_axis(a["axis"], pred.ndim))
    ints = (*split, int(a["with_logits"]), K.REDUCTIONS[a["reduction"]],
            int(label.dtype == np.dtype(np.int64)))
    return Launch(ints, (float(a["label_smooth"]),))


register(OpDef("cross_entropy", "nn", _ce_infer,
               attrs={"axis": 1, "with_logits": True, "label_smooth": 0.0, "reduction": "mean"},
               kernel="cross_entropy", dtypes=FLOAT_DTYPES, lower=_ce_lower,
               flops_per_element=12))


# -- layer norm ----------------------------------------------------------------------------------
def _ln_infer(in_types, attrs):
    x, weight, bias = in_types
    require_dtypes("layer_norm", x, FLOAT_DTYPES)
    shape = tuple(attrs["normalized_shape"])
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape):] != shape:
        raise ValueError(f"normalized_shape {shape} does not match the trailing dims of "
                         f"{x.shape}")
    for what, t in (("weight", weight), ("bias", bias)):
        _same_dtype(x, t, what)
        if t.shape != shape:
            raise ValueError(f"{what} shape {t.shape} must equal normalized_shape {shape}")
    return (x,)


def _ln_lower(node):
    x = node.inputs[0]
    n = _size(node.attr["normalized_shape"])
    return Launch((_size(x.shape[:x.ndim - len(node.attr["normalized_shape"])]), n),
                  (float(node.attr["eps"]),))


register(OpDef("layer_norm", "nn", _ln_infer, attrs={"normalized_shape": REQUIRED, "eps": 1e-5},
               kernel="layer_norm", dtypes=FLOAT_DTYPES, lower=_ln_lower, inplace=True,
               flops_per_element=8))


# -- batch norm ----------------------------------------------------------------------------------
_BN_INPUTS = ("weight", "bias", "running_mean", "running_var")


def _bn_infer(in_types, attrs):
    x, *params = in_types
    require_dtypes("batch_norm", x, FLOAT_DTYPES)
    if x.ndim < 2:
        raise ValueError("input must be at least 2-d (N, C, ...)")
    want = 2 if attrs["training"] else 4
    if len(params) != want:
        raise ValueError(f"training={attrs['training']} takes {want + 1} inputs "
                         f"(x, {', '.join(_BN_INPUTS[:want])}), got {len(in_types)}")
    c = x.shape[1]
    per_channel = ((c,), (1, c) + (1,) * (x.ndim - 2))
    for what, t in zip(_BN_INPUTS, params):
        _same_dtype(x, t, what)
        if t.shape not in per_channel:
            raise ValueError(f"{what} shape {t.shape} must be {per_channel[0]} or "
                             f"{per_channel[1]}")
    if not attrs["training"]:
        return (x,)
    stats = TensorType((c,), x.dtype)
    return (x, stats, stats)


def _bn_lower(node):
    x = node.inputs[0]
    return Launch((x.shape[0], x.shape[1], _size(x.shape[2:]), int(node.attr["training"])),
                  (float(node.attr["eps"]),))


# Outputs: y; when training also the batch mean and the biased batch variance (shape (C,)), which
# the running-statistics update reads (scale the variance by n / (n - 1) for the unbiased one).
register(OpDef("batch_norm", "nn", _bn_infer, attrs={"training": False, "eps": 1e-5},
               kernel="batch_norm", dtypes=FLOAT_DTYPES, lower=_bn_lower, inplace=True,
               flops_per_element=6))


# -- dropout -------------------------------------------------------------------------------------
def _dropout_infer(in_types, attrs):
    (x,) = in_types
    require_dtypes("dropout", x, FLOAT_DTYPES)
    if not 0 <= attrs["drop_prob"] <= 1:
        raise ValueError(f"drop_prob must be in [0, 1], got {attrs['drop_prob']}")
    if not isinstance(attrs["seed"], (int, np.integer)):
        raise TypeError(f"seed must be an int, got {attrs['seed']!r}")
    return (x,)


def _dropout_lower(node):
    seed = int(node.attr["seed"]) & (2**64 - 1)
    seed = seed - 2**64 if seed >= 2**63 else seed  # the kernel reads it back as uint64
    return Launch((node.inputs[0].size, seed), (float(node.attr["drop_prob"]),))


register(OpDef("dropout", "nn", _dropout_infer, attrs={"drop_prob": REQUIRED, "seed": 0},
               kernel="dropout", dtypes=FLOAT_DTYPES, lower=_dropout_lower, inplace=True,
               flops_per_element=4))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
def _axis_attr(axis, ndim: int):
    """The normalised axis; an invalid one is passed on as given, so the op's shape rule reports
    it with the op, the types and the user's line."""
    try:
        return normalize_axis(int(axis), ndim)
    except (ValueError, TypeError):
        return axis


def _softmax_axis(ndim: int) -> int:
    return 0 if ndim in (0, 1, 3) else 1  # MegEngine's default


def softmax(inp, axis=None):
    """exp(x - max) / sum(exp(x - max)) along ``axis``; None picks MegEngine's default (0 for
    0-, 1- and 3-d inputs, else 1). ``F.softmax(logits, axis=-1)``"""
    x = graph_of(inp).lift(inp)
    axis = _softmax_axis(x.ndim) if axis is None else axis
    return apply("softmax", (x,), axis=_axis_attr(axis, x.ndim))


def log_softmax(inp, axis=None):
    """x - logsumexp(x) along ``axis`` (default as ``softmax``). ``F.log_softmax(x, axis=1)``"""
    x = graph_of(inp).lift(inp)
    axis = _softmax_axis(x.ndim) if axis is None else axis
    return apply("log_softmax", (x,), axis=_axis_attr(axis, x.ndim))


logsoftmax = log_softmax


def cross_entropy(pred, label, axis=1, with_logits=True, label_smooth=0.0, reduction="mean"):
    """Cross entropy of ``pred`` (logits, or probabilities with ``with_logits=False``) against
    integer class ``label``s along ``axis``; ``reduction`` is "mean", "sum" or "none".

    >>> loss = F.cross_entropy(logits, labels)  # logits (N, C), labels (N,) int32/int64
    """
    g = graph_of(pred, label)
    p, y = g.lift(pred), g.lift(label)
    return apply("cross_entropy", (p, y), axis=_axis_attr(axis, p.ndim),
                 with_logits=bool(with_logits), label_smooth=float(label_smooth or 0.0),
                 reduction=reduction)


def _param(g, value, shape, dtype, fill: float) -> Var:
    """A Var for an optional parameter: a Var or an nn.Parameter as given, an array-like as a
    const of ``dtype``, None as a const filled with ``fill``."""
    if value is None:
        return g.const(np.full(shape, fill, dtype))
    if isinstance(value, (np.ndarray, list, tuple, int, float)):
        return g.const(np.asarray(value, dtype=dtype))
    return g.lift(value)


def layer_norm(inp, normalized_shape, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` dims, then ``* weight + bias`` when
    ``affine`` (a missing weight counts as ones, a missing bias as zeros).

    >>> y = F.layer_norm(x, x.shape[-1:], weight=gamma, bias=beta)
    """
    x = graph_of(inp).lift(inp)
    g = x.graph
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(int(d) for d in normalized_shape)
    if not affine:
        weight = bias = None
    w, b = _param(g, weight, shape, x.dtype, 1.0), _param(g, bias, shape, x.dtype, 0.0)
    return apply("layer_norm", (x, w, b), normalized_shape=shape, eps=float(eps))


def batch_norm(inp, running_mean=None, running_var=None, weight=None, bias=None, *,
               training=False, momentum=0.9, eps=1e-5):
    """Batch normalisation over every axis but 1 of an (N, C, ...) input.

    ``training=True`` normalises with the batch's mean and biased variance; ``training=False``
    with ``running_mean`` / ``running_var`` (shape (C,) or (1, C, 1, ...)). Returns y only: the
    running-statistics update (``momentum``) is not applied here.

    >>> y = F.batch_norm(x, mean, var, gamma, beta, training=False)
    """
    x = graph_of(inp).lift(inp)
    g = x.graph
    c = (x.shape[1],) if x.ndim >= 2 else (1,)  # the op's shape rule reports a bad input
    inputs = [x, _param(g, weight, c, x.dtype, 1.0), _param(g, bias, c, x.dtype, 0.0)]
    if not training:
        if running_mean is None or running_var is None:
            raise OpError("batch_norm", (x.type,), "training=False needs running_mean and "
                          "running_var", user_location())
        inputs += [_param(g, running_mean, c, x.dtype, 0.0),
                   _param(g, running_var, c, x.dtype, 1.0)]
    outputs = apply_multi("batch_norm", inputs, training=bool(training), eps=float(eps))
    return outputs[0]


def dropout(inp, drop_prob, training=True, seed=0):
    """Inverted dropout: zero each element with probability ``drop_prob`` and scale the kept
    ones by 1 / (1 - drop_prob). The mask depends only on ``seed`` and the element's index.
    ``training=False`` or ``drop_prob=0`` returns ``inp`` itself (no node).

    >>> h = F.dropout(h, 0.1, seed=step)
    """
    if not training or drop_prob == 0:
        return inp
    x = graph_of(inp).lift(inp)
    return apply("dropout", (x,), drop_prob=float(drop_prob), seed=seed)
