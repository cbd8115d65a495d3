"""The ONNX converters of elementwise math and reductions: arithmetic, comparisons, logic,
activations, casts, and the Reduce* and Arg* ops; their table is ``CONVERTERS`` (ONNX op ->
converter, see ``context`` for the signature), merged with the other families' in
``converters``."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.types import is_float
from .context import dtype_of, shape_of


def _unary(fn):
    return lambda cx, ins, at: [fn(cx.var(ins[0]))]


def _binary(fn):
    return lambda cx, ins, at: [fn(cx.var(ins[0]), cx.var(ins[1]))]


def _div(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    if is_float(a.dtype):
        return [F.div(a, b)]
    # ONNX's integer division truncates toward zero
    q = F.floor_div(F.abs(a), F.abs(b))
    neg = F.not_equal(F.less(a, 0), F.less(b, 0))
    return [F.where(neg, F.neg(q), q)]


def _mod(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    if at.get("fmod", 0):
        if not is_float(a.dtype):
            q = _div(cx, [a, b], {})[0]
            return [F.sub(a, F.mul(q, b))]
        r = F.mod(F.abs(a), F.abs(b))  # C fmod: the sign of the dividend
        return [F.where(F.less(a, 0), F.neg(r), r)]
    return [F.mod(a, b)]


def _pow(cx, ins, at):
    base, exp = cx.var(ins[0]), cx.var(ins[1])
    if exp.dtype != base.dtype:  # ONNX's result has the base's type
        exp = F.astype(exp, base.dtype)
    return [F.pow(base, exp)]


def _variadic(cx, ins, at):
    fn = {"Max": F.maximum, "Min": F.minimum, "Sum": F.add, "Mean": F.add}[cx.node.op_type]
    out = cx.var(ins[0])
    for x in ins[1:]:
        out = fn(out, cx.var(x))
    if cx.node.op_type == "Mean":
        out = F.div(out, cx.g.const(np.asarray(len(ins), out.dtype)))
    elif len(ins) == 1:
        out = F.add(out, cx.g.const(np.zeros((), out.dtype)))  # a new value, not the input
    return [out]


def _logical(cx, ins, at):
    a, b = (F.astype(cx.var(x), np.int32) for x in ins)
    op = cx.node.op_type
    out = F.mul(a, b) if op == "And" else F.add(a, b)
    return [F.equal(out, 1) if op == "Xor" else F.greater(out, 0)]


def _not(cx, ins, at):
    return [F.equal(cx.var(ins[0]), False)]


def _identity(cx, ins, at):
    # the same value (a graph output that is one gets its own node: importer._output)
    return [ins[0]]


def _dropout(cx, ins, at):
    if len(ins) > 2 and ins[2] is not None and bool(np.asarray(cx.known(ins[2], "training_mode"))):
        cx.fail("training_mode=True is not supported (inference only)")
    x = cx.var(ins[0])
    return [F.reshape(x, shape_of(x)), cx.g.const(np.ones(shape_of(x), np.bool_))]


def _where(cx, ins, at):
    return [F.where(cx.var(ins[0]), cx.var(ins[1]), cx.var(ins[2]))]


def _gelu(cx, ins, at):
    approximate = at.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return [F.gelu(cx.var(ins[0]), approximate=approximate)]


def _leaky_relu(cx, ins, at):
    return [F.leaky_relu(cx.var(ins[0]), at.get("alpha", 0.01))]


def _clip(cx, ins, at):
    x = cx.var(ins[0])
    bounds = [ins[i] if len(ins) > i else None for i in (1, 2)]
    if any(b is not None and not isinstance(b, np.ndarray) for b in bounds):
        # a bound computed at run time (or fed): the composition over maximum and minimum
        lo, hi = (None if b is None else cx.var(b) for b in bounds)
        return [F.clip(x, lo, hi)]
    lo = cx.known(ins[1], "min") if len(ins) > 1 and ins[1] is not None else None
    hi = cx.known(ins[2], "max") if len(ins) > 2 and ins[2] is not None else None
    if is_float(x.dtype):
        return [F.clip(x, None if lo is None else float(lo), None if hi is None else float(hi))]
    out = x
    if lo is not None:
        out = F.maximum(out, cx.g.const(np.asarray(lo, x.dtype)))
    if hi is not None:
        out = F.minimum(out, cx.g.const(np.asarray(hi, x.dtype)))
    return [out if out is not x else F.reshape(x, shape_of(x))]


def _cast(cx, ins, at):
    dtype = dtype_of(at["to"], cx.where())
    return [F.astype(cx.var(ins[0]), dtype)]


def _cast_like(cx, ins, at):
    dtype = np.dtype(ins[1].dtype)
    return [F.astype(cx.var(ins[0]), dtype)]


# -- reductions ---------------------------------------------------------------------------
def _reduce_axes(cx, ins, at, x):
    axes_input = cx.node.op_type == "ReduceSum" or cx.opset >= 18
    if axes_input and len(ins) > 1 and ins[1] is not None:
        axes = cx.ints(ins[1], "axes")
    elif not axes_input and "axes" in at:
        axes = list(at["axes"])
    else:
        axes = []
    if not axes:
        return None if at.get("noop_with_empty_axes", 0) else tuple(range(x.ndim))
    return tuple(sorted(cx.axes(axes, x.ndim)))


def _reduce(cx, ins, at):
    x = cx.var(ins[0])
    axes = _reduce_axes(cx, ins, at, x)
    if axes is None:
        return [F.reshape(x, shape_of(x))]
    keep = bool(at.get("keepdims", 1))
    op = cx.node.op_type
    if any(shape_of(x)[a] == 0 for a in axes) and op in ("ReduceMax", "ReduceMin"):
        # ONNX: the max of nothing is the lowest value of the type, the min the highest
        shape = tuple(1 if i in axes else d for i, d in enumerate(shape_of(x))
                      if keep or i not in axes)
        if is_float(x.dtype):
            value = -np.inf if op == "ReduceMax" else np.inf
        elif x.dtype.kind == "b":
            value = op == "ReduceMin"
        else:
            value = np.iinfo(x.dtype).min if op == "ReduceMax" else np.iinfo(x.dtype).max
        return [np.full(shape, value, x.dtype)]
    if op == "ReduceSumSquare":
        return [F.sum(F.square(x), axes, keep)]
    if op == "ReduceL1":
        return [F.sum(F.abs(x), axes, keep)]
    if op == "ReduceL2":
        return [F.sqrt(F.sum(F.square(x), axes, keep))]
    if op == "ReduceLogSum":
        return [F.log(F.sum(x, axes, keep))]
    if op == "ReduceLogSumExp":
        m = F.max(x, axes, keepdims=True)
        s = F.log(F.sum(F.exp(F.sub(x, m)), axes, keepdims=True))
        out = F.add(s, m)
        return [out if keep else F.reshape(out, tuple(d for i, d in enumerate(shape_of(x))
                                                      if i not in axes))]
    fn = {"ReduceMean": F.mean, "ReduceSum": F.sum, "ReduceMax": F.max, "ReduceMin": F.min,
          "ReduceProd": F.prod}[op]
    return [fn(x, axes, keepdims=keep)]


def _argmax(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 0), x.ndim)
    keep = bool(at.get("keepdims", 1))
    if at.get("select_last_index", 0):
        n = shape_of(x)[axis]
        flipped = F.flip(x, axis)
        fn = F.argmax if cx.node.op_type == "ArgMax" else F.argmin
        out = F.sub(cx.g.const(np.asarray(n - 1, np.int64)), F.astype(fn(flipped, axis, keep),
                                                                     np.int64))
        return [out]
    fn = F.argmax if cx.node.op_type == "ArgMax" else F.argmin
    return [F.astype(fn(x, axis, keep), np.int64)]


# ONNX op -> converter
CONVERTERS = {
    "Relu": _unary(F.relu), "Tanh": _unary(F.tanh), "Sigmoid": _unary(F.sigmoid),
    "Exp": _unary(F.exp), "Log": _unary(F.log), "Sqrt": _unary(F.sqrt), "Erf": _unary(F.erf),
    "Abs": _unary(F.abs), "Neg": _unary(F.neg), "Ceil": _unary(F.ceil),
    "Floor": _unary(F.floor), "Reciprocal": _unary(F.reciprocal), "Sin": _unary(F.sin),
    "Cos": _unary(F.cos), "Sign": _unary(F.sign), "Softplus": _unary(F.softplus),
    "HardSwish": _unary(F.hardswish),
    "Add": _binary(F.add), "Sub": _binary(F.sub), "Mul": _binary(F.mul),
    "Equal": _binary(F.equal), "Less": _binary(F.less), "Greater": _binary(F.greater),
    "LessOrEqual": _binary(F.less_equal), "GreaterOrEqual": _binary(F.greater_equal),
    "Div": _div, "Mod": _mod, "Pow": _pow,
    "Max": _variadic, "Min": _variadic, "Sum": _variadic, "Mean": _variadic,
    "And": _logical, "Or": _logical, "Xor": _logical, "Not": _not,
    "Identity": _identity, "Dropout": _dropout, "Where": _where,
    "Gelu": _gelu, "LeakyRelu": _leaky_relu,
    "Clip": _clip, "Cast": _cast, "CastLike": _cast_like,
    "ReduceMean": _reduce, "ReduceSum": _reduce, "ReduceMax": _reduce, "ReduceMin": _reduce,
    "ReduceProd": _reduce, "ReduceSumSquare": _reduce, "ReduceL1": _reduce,
    "ReduceL2": _reduce, "ReduceLogSum": _reduce, "ReduceLogSumExp": _reduce,
    "ArgMax": _argmax, "ArgMin": _argmax,
}


# -- activations: each one op of the elementwise table, ONNX's defaults -------------------------
# ONNX's Selu defaults: PyTorch's constants rounded to float32
_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _with(fn, **defaults):
    """The converter of an activation whose ONNX attributes are ``fn``'s keyword arguments."""
    return lambda cx, ins, at: [fn(cx.var(ins[0]), **{k: at.get(k, v)
                                                       for k, v in defaults.items()})]


def _shrink(cx, ins, at):
    return [F.shrink(cx.var(ins[0]), lambd=at.get("lambd", 0.5), bias=at.get("bias", 0.0))]


def _prelu(cx, ins, at):
    x, slope = cx.var(ins[0]), cx.var(ins[1])
    out = F.prelu(x, slope)
    if shape_of(out) != shape_of(x):
        cx.fail(f"the slope {shape_of(slope)} does not broadcast to the input "
                f"{shape_of(x)} (ONNX's PRelu broadcasts it one way)")
    return [out]


def _swish(cx, ins, at):
    x, alpha = cx.var(ins[0]), float(at.get("alpha", 1.0))
    return [F.silu(x) if alpha == 1.0 else F.mul(x, F.sigmoid(F.mul(x, alpha)))]


CONVERTERS.update({
    "Elu": _with(F.elu, alpha=1.0), "Celu": _with(F.celu, alpha=1.0),
    "Selu": _with(F.selu, alpha=_SELU_ALPHA, gamma=_SELU_GAMMA),
    "HardSigmoid": _with(F.hardsigmoid, alpha=0.2, beta=0.5),
    "ThresholdedRelu": _with(F.thresholded_relu, alpha=1.0),
    "Softsign": _unary(F.softsign), "Mish": _unary(F.mish), "Shrink": _shrink,
    "PRelu": _prelu, "Swish": _swish,
})


# -- trigonometric and hyperbolic math, Round, Hardmax --------------------------------------------
def _hardmax(cx, ins, at):
    x = cx.var(ins[0])
    return [F.hardmax(x, cx.axis(at.get("axis", -1), x.ndim))]


CONVERTERS.update({
    "Tan": _unary(F.tan), "Asin": _unary(F.asin), "Acos": _unary(F.acos), "Atan": _unary(F.atan),
    "Sinh": _unary(F.sinh), "Cosh": _unary(F.cosh), "Asinh": _unary(F.asinh),
    "Acosh": _unary(F.acosh), "Atanh": _unary(F.atanh),
    # ONNX's Round takes halves to even; F.round (MegEngine's) takes them away from zero
    "Round": _unary(F.round_half_even), "Hardmax": _hardmax,
})


# -- compositions first written for MegEngine's F: Einsum, IsNaN, IsInf --------------------------
def _einsum(cx, ins, at):
    equation = at["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    return [F.einsum(equation, *(cx.var(x) for x in ins))]


def _isinf(cx, ins, at):
    x = cx.var(ins[0])
    positive, negative = at.get("detect_positive", 1), at.get("detect_negative", 1)
    if positive and negative:
        return [F.isinf(x)]
    if not is_float(x.dtype) or not (positive or negative):
        return [F.full(x.shape, False, np.bool_, graph=x.graph)]
    return [F.equal(x, float("inf") if positive else float("-inf"))]


CONVERTERS.update({"Einsum": _einsum, "IsNaN": _unary(F.isnan), "IsInf": _isinf})
