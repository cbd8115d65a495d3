"""NN ops: softmax, log_softmax, cross_entropy, layer_norm, batch_norm, dropout.

Design: each is one op with its own kernel, not a composite of reductions and elementwise ops,
so fusion and memory planning see one node (and one output buffer) per layer. The gradients of
cross_entropy, layer_norm and training batch_norm are dedicated backward ops for the same reason
(the training step runs them every step); those ops' own gradients, for grad of grad, come from
differentiating a composed reference twice (``_grad_of_vjp``).
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.facts import require_at_least
from ..ir.graph import Var
from ..ir.types import HALF_DTYPES, INT_DTYPES, TensorType, is_float
from .autocast import current as autocast_state
from .autocast import high_precision, low_precision
from .builder import apply, apply_multi, cast_to, graph_of
from .elementwise import exp, log, rsqrt
from .movement_api import expand_dims, gather, reshape, squeeze, zeros_like
from .reduce import mean as reduce_mean
from .reduce import size_ratio
from .reduce import sum as reduce_sum
from .reduce import var as reduce_var
from .registry import (
    FLOAT_DTYPES,
    REQUIRED,
    OpDef,
    Remake,
    named,
    normalize_axis,
    register,
    require_dtypes,
    same_shape,
    walker_grad,
)

__all__ = [
    "batch_norm",
    "cross_entropy",
    "dropout",
    "layer_norm",
    "log_softmax",
    "logsoftmax",
    "softmax",
]


def same_dtype(x: TensorType, other: TensorType, what: str):
    if other.dtype != x.dtype:
        raise TypeError(f"{what} dtype {other.dtype} differs from the input's {x.dtype}")


# -- softmax / log_softmax -----------------------------------------------------------------------
def _int_axis(axis) -> int:
    """``axis`` as an int; a float, a bool or a string is a TypeError (int() would take 1.0)."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    return int(axis)


def _softmax_infer(name):
    def infer(in_types, attrs):
        (x,) = in_types
        require_dtypes(name, x, FLOAT_DTYPES)
        normalize_axis(_int_axis(attrs["axis"]), x.ndim)
        return (x,)
    return infer


def _softmax_grad(take_log):
    # Both rules read only the output y, so the input need not stay alive for the backward.
    def grad(node, out_grads):
        (y,), (g,) = node.outputs, out_grads
        if y.ndim == 0:  # softmax of a scalar is 1, its log 0: constants
            return (g * 0.0,)
        axis = normalize_axis(node.attr["axis"], y.ndim)
        if take_log:
            return (g - exp(y) * reduce_sum(g, axis, keepdims=True),)
        return (y * (g - reduce_sum(g * y, axis, keepdims=True)),)
    return grad


for _name, _log in (("softmax", 0), ("log_softmax", 1)):
    register(OpDef(_name, "nn", _softmax_infer(_name), attrs={"axis": REQUIRED},
                   grad=_softmax_grad(_log), inplace=True, flops_per_element=12))


# -- cross entropy -------------------------------------------------------------------------------
REDUCTIONS = ("none", "mean", "sum")  # what cross_entropy's loss per sample is reduced by


def _ce_infer(in_types, attrs):
    pred, label = in_types
    require_dtypes("cross_entropy", pred, FLOAT_DTYPES, "pred")
    require_dtypes("cross_entropy", label, INT_DTYPES, "label")
    if pred.ndim < 1:
        raise ValueError("pred must have a class axis (at least 1-d)")
    axis = normalize_axis(attrs["axis"], pred.ndim)
    want = pred.shape[:axis] + pred.shape[axis + 1:]
    if not same_shape(label.shape, want, "cross_entropy's label"):
        raise ValueError(f"label shape {label.shape} must be pred's shape without axis {axis}, "
                         f"{want}")
    if attrs["reduction"] not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, "
                         f"got {attrs['reduction']!r}")
    if not 0 <= attrs["label_smooth"] <= 1:
        raise ValueError(f"label_smooth must be in [0, 1], got {attrs['label_smooth']}")
    shape = label.shape if attrs["reduction"] == "none" else ()
    return (TensorType(shape, pred.dtype),)


def _ce_grad(node, out_grads):
    pred, label = node.inputs
    return apply("cross_entropy_backward", (pred, label, out_grads[0]), **node.attr), None


def _ce_backward_infer(in_types, attrs):
    pred, label, dloss = in_types
    (loss,) = _ce_infer((pred, label), attrs)
    if dloss != loss:
        raise TypeError(f"the loss gradient must be {loss}, got {dloss}")
    return (pred,)


def _ce_reference(pred: Var, label: Var, attrs) -> Var:
    """cross_entropy composed of ops that have gradient rules: differentiated twice, it gives
    the gradient of cross_entropy_backward."""
    axis = normalize_axis(attrs["axis"], pred.ndim)
    logp = log_softmax(pred, axis) if attrs["with_logits"] else log(pred)
    ls = attrs["label_smooth"]
    loss = squeeze(gather(logp, axis, expand_dims(label, axis)), axis) * -(1.0 - ls)
    if ls:
        loss = loss - reduce_mean(logp, axis) * ls
    return {"none": loss, "sum": reduce_sum(loss), "mean": reduce_mean(loss)}[attrs["reduction"]]


def _ce_backward_grad(node, out_grads):
    pred, label, dloss = node.inputs
    dpred, ddloss = _grad_of_vjp(lambda p: _ce_reference(p, label, node.attr), (pred,), dloss,
                                 out_grads)
    return dpred, None, ddloss


_CE_ATTRS = {"axis": 1, "with_logits": True, "label_smooth": 0.0, "reduction": "mean"}
register(OpDef("cross_entropy", "nn", _ce_infer, attrs=_CE_ATTRS, grad=_ce_grad,
               flops_per_element=12))
# Inputs pred, label, d loss; output d pred (pred's type), for the loss of the same attributes.
register(OpDef("cross_entropy_backward", "nn", _ce_backward_infer, attrs=_CE_ATTRS,
               grad=_ce_backward_grad, inplace=True, flops_per_element=12))


# -- layer norm ----------------------------------------------------------------------------------
def _ln_infer(in_types, attrs):
    x, weight, bias = in_types
    require_dtypes("layer_norm", x, FLOAT_DTYPES)
    shape = tuple(attrs["normalized_shape"])
    if x.ndim < len(shape) or not same_shape(x.shape[x.ndim - len(shape):], shape,
                                             "layer_norm's normalized_shape"):
        raise ValueError(f"normalized_shape {shape} does not match the trailing dims of "
                         f"{x.shape}")
    for what, t in (("weight", weight), ("bias", bias)):
        same_dtype(x, t, what)
        if t.shape != shape:
            raise ValueError(f"{what} shape {t.shape} must equal normalized_shape {shape}")
    return (x,)


def _ln_reference(x: Var, weight: Var, bias: Var, attrs) -> Var:
    axes = tuple(range(x.ndim - len(attrs["normalized_shape"]), x.ndim))
    centred = x - reduce_mean(x, axes, keepdims=True)
    return centred * rsqrt(reduce_var(x, axes, keepdims=True) + attrs["eps"]) * weight + bias


def affine_norm_rules(backward: str, infer, reference):
    """The rules of a norm y = normalise(x) * weight + bias whose backward op takes (x, weight,
    dy) and gives (dx, dweight, dbias): the forward op's gradient, the backward op's shape rule
    (the forward's checks, dy of x's type) and the backward op's own gradient (grad of grad),
    through ``reference(x, weight, bias, attrs)``, the norm composed of other ops."""
    def grad(node, out_grads):
        x, weight, _ = node.inputs
        return apply_multi(backward, (x, weight, out_grads[0]), **node.attr)

    def backward_infer(in_types, attrs):
        x, weight, dy = in_types
        infer((x, weight, weight), attrs)
        if dy != x:
            raise TypeError(f"dy must be {x}, got {dy}")
        return (x, weight, weight)

    def backward_grad(node, out_grads):
        x, weight, dy = node.inputs
        zero = zeros_like(weight)  # the bias: it only shifts y, but dbias is an output too
        dx, dweight, _, ddy = _grad_of_vjp(lambda *a: reference(*a, node.attr),
                                           (x, weight, zero), dy, out_grads)
        return dx, dweight, ddy
    return grad, backward_infer, backward_grad


_ln_grad, _ln_backward_infer, _ln_backward_grad = affine_norm_rules(
    "layer_norm_backward", _ln_infer, _ln_reference)


_LN_ATTRS = {"normalized_shape": REQUIRED, "eps": 1e-5}
register(OpDef("layer_norm", "nn", _ln_infer, attrs=_LN_ATTRS, grad=_ln_grad, inplace=True,
               flops_per_element=8))
# Inputs x, weight, dy; outputs dx, dweight, dbias (the bias does not enter the gradients).
register(OpDef("layer_norm_backward", "nn", _ln_backward_infer, attrs=_LN_ATTRS,
               grad=_ln_backward_grad, inplace=True, flops_per_element=12))


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
        same_dtype(x, t, what)
        if t.shape not in per_channel:
            raise ValueError(f"{what} shape {t.shape} must be {per_channel[0]} or "
                             f"{per_channel[1]}")
    if not attrs["training"]:
        return (x,)
    # MegEngine's rule: one value per channel has variance 0, and an empty batch gives an
    # empty output (its statistics are NaN, which the running-statistics update skips); a
    # named batch keeps n >= 2, on which that update's n / (n - 1) relies
    if named(x.size):
        require_at_least(x.size // c, 2, "batch_norm's statistics (more than 1 value per "
                         "channel)")
    stats = TensorType((c,), x.dtype)
    return (x, stats, stats)


# Outputs: y; when training also the batch mean and the biased batch variance (shape (C,)), which
# the running-statistics update reads (scale the variance by n / (n - 1) for the unbiased one).
def _channels(v: Var, x: Var) -> Var:
    """A per-channel value of shape (C,) or (1, C, 1, ...) shaped to broadcast against x."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return v if v.shape == shape else reshape(v, shape)


def _bn_axes(x: Var) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))


def _per_channel_sum(v: Var, x: Var, like: Var) -> Var:
    return reshape(reduce_sum(v, _bn_axes(x)), like.shape)


def _bn_inference_grad(node, out_grads):
    # y = (x - running_mean) * rstd * weight + bias: no batch statistics, so no coupling
    # between samples. Running statistics are buffers, not trained: no gradient.
    x, weight, bias, rmean, rvar = node.inputs
    (g,) = out_grads
    rstd = rsqrt(_channels(rvar, x) + node.attr["eps"])
    dx = g * (_channels(weight, x) * rstd)
    dweight = _per_channel_sum(g * (x - _channels(rmean, x)) * rstd, x, weight)
    return dx, dweight, _per_channel_sum(g, x, bias), None, None


def _bn_training_grad(node, out_grads):
    """y through batch_norm_backward; the batch mean and variance outputs, when they are used,
    through their formulas (d mean / dx = 1 / n, d var / dx = 2 (x - mean) / n)."""
    x, weight, bias = node.inputs
    _, mean, var = node.outputs
    gy, gmean, gvar = out_grads
    dx = dweight = dbias = None
    if gy is not None:
        dx, dweight, dbias = apply_multi("batch_norm_backward", (x, weight, mean, var, gy),
                                         eps=node.attr["eps"])
        dbias = dbias if bias.shape == dbias.shape else reshape(dbias, bias.shape)
    count = _stat_count(x)
    stats = [_channels(gmean, x) / size_ratio(x.graph, count, 1.0, x.dtype)
             if gmean is not None else None,
             (x - _channels(mean, x)) * (_channels(gvar, x)
                                         * size_ratio(x.graph, 2.0, count, x.dtype))
             if gvar is not None else None]
    for term in stats:
        if term is not None:
            dx = term if dx is None else dx + term
    return dx, dweight, dbias


def _stat_count(x: Var):
    """The values each channel's batch statistics gather (N*H*W), at least 1; named where the
    batch is."""
    if named(x.size):
        return x.size // x.shape[1]
    return max(x.size // max(x.shape[1], 1), 1)


def _bn_grad(node, out_grads):
    return (_bn_training_grad if node.attr["training"] else _bn_inference_grad)(node, out_grads)


def _bn_backward_infer(in_types, attrs):
    x, weight, mean, var, dy = in_types
    _bn_infer((x, weight, weight), {"training": True, **attrs})
    for what, t in (("mean", mean), ("var", var)):
        if t != TensorType((x.shape[1],), x.dtype):
            raise TypeError(f"{what} must be the batch statistic of type {x.dtype}[{x.shape[1]}]"
                            f", got {t}")
    if dy != x:
        raise TypeError(f"dy must be {x}, got {dy}")
    return (x, weight, weight)


def _bn_reference(x: Var, weight: Var, bias: Var, eps: float) -> Var:
    axes = _bn_axes(x)
    rstd = rsqrt(reduce_var(x, axes, keepdims=True) + eps)
    centred = x - reduce_mean(x, axes, keepdims=True)
    return centred * rstd * _channels(weight, x) + _channels(bias, x)


def _bn_backward_grad(node, out_grads):
    # The statistics inputs are the batch statistics of x (the rule above wires them so), so
    # the reference recomputes them from x and they get no gradient of their own.
    x, weight, _, _, dy = node.inputs
    zero = zeros_like(weight)
    dx, dweight, _, ddy = _grad_of_vjp(lambda *a: _bn_reference(*a, node.attr["eps"]),
                                       (x, weight, zero), dy, out_grads)
    return dx, dweight, None, None, ddy


# Per element: (x - mean) * scale + bias; the batch statistics add a sum and a sum of squared
# deviations.
_BN_NORMALISE_FLOPS, _BN_STATS_FLOPS = 3, 4


def _bn_flops(node):
    return node.inputs[0].size * (_BN_NORMALISE_FLOPS
                                  + (_BN_STATS_FLOPS if node.attr["training"] else 0))


def _bn_remake(node):
    # The kernel normalises with the statistics as stored, so the inference form on the batch
    # mean and variance the node saved gives its y bitwise, in one pass instead of three.
    if not node.attr["training"]:
        return None
    x, weight, bias = node.inputs
    _, mean, var = node.outputs
    return Remake("batch_norm", {"training": False, "eps": node.attr["eps"]},
                  (x, weight, bias, mean, var), (0,), _BN_NORMALISE_FLOPS * x.size)


# Outputs: y; when training also the batch mean and the biased batch variance (shape (C,)), which
# the running-statistics update reads (scale the variance by n / (n - 1) for the unbiased one).
register(OpDef("batch_norm", "nn", _bn_infer, attrs={"training": False, "eps": 1e-5},
               grad=_bn_grad, inplace=True, flops=_bn_flops, remake=_bn_remake))
# Training form only. Inputs x, weight, batch mean, batch var, dy; outputs dx, dweight, dbias,
# the last two in the weight's shape.
register(OpDef("batch_norm_backward", "nn", _bn_backward_infer, attrs={"eps": 1e-5},
               grad=_bn_backward_grad, inplace=True, flops_per_element=10))


# -- dropout -------------------------------------------------------------------------------------
def _dropout_infer(in_types, attrs):
    x, *step = in_types
    require_dtypes("dropout", x, FLOAT_DTYPES)
    if step and (step[0].dtype != np.dtype(np.int64) or step[0].size != 1):
        raise TypeError(f"the step input must be one int64, got {step[0]}")
    if not 0 <= attrs["drop_prob"] <= 1:
        raise ValueError(f"drop_prob must be in [0, 1], got {attrs['drop_prob']}")
    if not isinstance(attrs["seed"], (int, np.integer)):
        raise TypeError(f"seed must be an int, got {attrs['seed']!r}")
    return (x,)


def _dropout_grad(node, out_grads):
    # The mask hashes (seed, element index) only, so the same attributes drop the same elements
    # of the gradient and scale the kept ones alike.
    return (apply("dropout", (out_grads[0],) + node.inputs[1:], **node.attr),) + \
        (None,) * (len(node.inputs) - 1)


register(OpDef("dropout", "nn", _dropout_infer, attrs={"drop_prob": REQUIRED, "seed": 0},
               grad=_dropout_grad, inplace=True, flops_per_element=4))


# -- second-order support ------------------------------------------------------------------------
def _grad_of_vjp(reference, primals, dy: Var, out_grads):
    """Gradients w.r.t. (*primals, dy) of <vjp, h>, where vjp = d<reference(*primals), dy> / d
    primals is what a dedicated backward op computes and h = ``out_grads`` its cotangents.

    Design: the backward ops are fast kernels without a formula in the graph; their own
    gradients come from differentiating the composed forward twice. It only runs for grad of
    grad, which can afford the larger graph. ``grad`` gives total derivatives, and dy often
    depends on the primals (dy = x in d(sum(f(x) * x))): the formula is written on stand-ins,
    free views of the inputs, so that it yields the partial derivatives a rule must return.
    """
    *primals, dy = (reshape(v, v.shape) for v in (*primals, dy))
    firsts = walker_grad(reduce_sum(reference(*primals) * dy), primals)
    terms = [reduce_sum(d * h) for d, h in zip(firsts, out_grads) if h is not None]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return walker_grad(total, [*primals, dy])


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
def _axis_attr(axis, ndim: int):
    """The normalised axis; an invalid one is passed on as given, so the op's shape rule reports
    it with the op, the types and the user's line."""
    try:
        return normalize_axis(_int_axis(axis), ndim)
    except (ValueError, TypeError):
        return axis


def _softmax_axis(ndim: int) -> int:
    return 0 if ndim in (0, 1, 3) else 1  # MegEngine's default


def softmax(inp, axis=None):
    """exp(x - max) / sum(exp(x - max)) along ``axis``; None picks MegEngine's default (0 for
    0-, 1- and 3-d inputs, else 1). ``F.softmax(logits, axis=-1)``"""
    x = high_precision(graph_of(inp).lift(inp))
    axis = _softmax_axis(x.ndim) if axis is None else axis
    return apply("softmax", (x,), axis=_axis_attr(axis, x.ndim))


def log_softmax(inp, axis=None):
    """x - logsumexp(x) along ``axis`` (default as ``softmax``). ``F.log_softmax(x, axis=1)``"""
    x = high_precision(graph_of(inp).lift(inp))
    axis = _softmax_axis(x.ndim) if axis is None else axis
    return apply("log_softmax", (x,), axis=_axis_attr(axis, x.ndim))


logsoftmax = log_softmax


def cross_entropy(pred, label, axis=1, with_logits=True, label_smooth=0.0, reduction="mean"):
    """Cross entropy of ``pred`` (logits, or probabilities with ``with_logits=False``) against
    integer class ``label``s along ``axis``; ``reduction`` is "mean", "sum" or "none".

    >>> loss = F.cross_entropy(logits, labels)  # logits (N, C), labels (N,) int32/int64
    """
    g = graph_of(pred, label)
    p, y = high_precision(g.lift(pred)), g.lift(label)
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
    x = high_precision(graph_of(inp).lift(inp))
    g = x.graph
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(int(d) for d in normalized_shape)
    if not affine:
        weight = bias = None
    w, b = _param(g, weight, shape, x.dtype, 1.0), _param(g, bias, shape, x.dtype, 0.0)
    return apply("layer_norm", (x, w, b), normalized_shape=shape, eps=float(eps))


def batch_norm(inp, running_mean=None, running_var=None, weight=None, bias=None, *,
               training=False, momentum=0.9, eps=1e-5, inplace=True):
    """Batch normalisation over every axis but 1 of an (N, C, ...) input (MegEngine's).

    ``training=True`` normalises with the batch's mean and biased variance and, given
    ``running_mean`` / ``running_var``, updates them: running = momentum * running +
    (1 - momentum) * batch (the unbiased variance; an empty batch leaves them), written in
    place (Parameters, Buffers or eager tensors) with ``inplace``, else returned as
    ``(y, new_mean, new_var)``. ``training=False`` normalises with the running statistics
    (shape (C,) or (1, C, 1, ...)). A half input normalises in float32 with float32
    statistics and comes back half; under autocast the input is first cast to the
    low-precision type and the parameters to the high one (MegEngine's rule).

    >>> y = F.batch_norm(x, mean, var, gamma, beta, training=False)
    """
    x = low_precision(graph_of(inp).lift(inp))[0]
    g = x.graph
    state = autocast_state()
    work = state.high if state.enabled and x.dtype in HALF_DTYPES \
        else _work_dtype(x, (weight, bias, running_mean, running_var))
    c = (x.shape[1],) if x.ndim >= 2 else (1,)  # the op's shape rule reports a bad input
    inputs = [cast_to(x, work) if x.dtype != work else x,
              *_params(g, ((weight, 1.0), (bias, 0.0)), c, work, x.dtype)]
    if not training:
        if running_mean is None or running_var is None:
            raise OpError("batch_norm", (x.type,), "training=False needs running_mean and "
                          "running_var", user_location())
        inputs += _params(g, ((running_mean, 0.0), (running_var, 1.0)), c, work, x.dtype)
    y, *stats = apply_multi("batch_norm", inputs, training=bool(training), eps=float(eps))
    y = cast_to(y, x.dtype) if y.dtype != x.dtype else y
    if not training or (running_mean is None and running_var is None):
        return y
    new = _running_stats(x, stats, (running_mean, running_var), momentum)
    if not inplace:
        return (y, *new)
    for target, value in zip((running_mean, running_var), new):
        if target is not None:
            _write_statistic(g, target, value, x)
    return y


def _work_dtype(x: Var, params) -> np.dtype:
    """x's dtype, or for a half x with wider float parameters (or under autocast) the widest of
    theirs: MegEngine's batch norm takes float16 data with float32 parameters."""
    if x.dtype not in HALF_DTYPES:
        return x.dtype
    wider = [np.dtype(p.dtype) for p in params if getattr(p, "dtype", None) is not None
             and is_float(np.dtype(p.dtype)) and np.dtype(p.dtype).itemsize > x.dtype.itemsize]
    return max(wider, key=lambda d: d.itemsize) if wider else x.dtype


def _params(g, pairs, shape, dtype, data_dtype) -> list:
    """Each (value, fill) as a Var (``_param``); for half data, all in the ``dtype`` it is
    normalised in (otherwise a dtype unlike the data's is left for the op to refuse)."""
    out = [_param(g, value, shape, dtype, fill) for value, fill in pairs]
    if dtype == data_dtype:
        return out
    return [v if v.dtype == dtype else cast_to(v, dtype) for v in out]


def _running_stats(x: Var, stats, running, momentum) -> list:
    """momentum * running + (1 - momentum) * batch for each running statistic given (else
    None), in its own shape and dtype; the batch's variance unbiased by n / (n - 1)."""
    n = _stat_count(x)
    if not named(x.size) and x.size == 0:
        batch = [None, None]  # no values: the running statistics stay
    else:
        mean, biased = stats
        batch = [mean, biased * size_ratio(x.graph, n, n - 1 if named(n) else max(n - 1, 1),
                                           biased.dtype)]
    new = []
    for old, value in zip(running, batch):
        if old is None:
            new.append(None)
            continue
        old = x.graph.lift(old)
        if value is not None:
            value = reshape(value, old.shape) if value.shape != old.shape else value
            value = old * momentum + cast_to(value, old.dtype) * (1 - momentum)
        new.append(old if value is None else value)
    return new


def _write_statistic(g, target, value: Var, x: Var) -> None:
    old = g.lift(target)
    if old is value:
        return
    if not getattr(g, "eager", False) and old.node.op.name != "param":
        raise OpError("batch_norm", (x.type, old.type), "inplace=True writes the running "
                      "statistics, which must be Parameters or Buffers in a graph (pass "
                      "inplace=False to get them back)", user_location())
    g.assign(old, value)


def dropout(inp, drop_prob, training=True, seed=0, step=None):
    """Inverted dropout: zero each element with probability ``drop_prob`` and scale the kept
    ones by 1 / (1 - drop_prob). The mask depends only on ``seed``, the element's index and
    ``step``, an optional int64 scalar Var read at run time (nn.Dropout passes a counter that
    each training step advances, so every step draws a new mask).
    ``training=False`` or ``drop_prob=0`` returns ``inp`` itself (no node).

    >>> h = F.dropout(h, 0.1, seed=3)
    """
    if not training or drop_prob == 0:
        return inp
    g = graph_of(inp, step)
    inputs = (g.lift(inp),) if step is None else (g.lift(inp), g.lift(step))
    return apply("dropout", inputs, drop_prob=float(drop_prob), seed=seed)
