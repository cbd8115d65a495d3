"""Elementwise ops: sources, unary, binary (NumPy broadcasting), comparisons, where, cast."""
from __future__ import annotations

import numpy as np

from .._kernels import elementwise as K
from ..ir.graph import Var
from ..ir.types import TensorType, as_dtype, broadcast_shapes, dtype_code
from .._kernels.lowering.layout import elementwise_params
from .registry import (ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, REQUIRED, Launch, OpDef,
                       register, require_dtypes)


def _source_infer(in_types, attrs):
    raise TypeError("source ops are made by Graph.input/param/const")


for _name, _attrs in (("input", {"name": REQUIRED}), ("param", {"name": REQUIRED}),
                      ("const", {"value": None})):
    register(OpDef(_name, "source", _source_infer, attrs=_attrs))


# -- gradient rules (the autodiff walker undoes broadcasting and dtype) ---------------------------
# Each takes (x, y, g, attrs) for unary ops: input, output, output gradient, attributes.
def _gelu_grad(x, y, g, a):
    cdf = 0.5 * (1.0 + erf(x * 0.7071067811865476))
    pdf = exp(-0.5 * square(x)) * 0.3989422804014327
    return g * (cdf + x * pdf)


def _gelu_tanh_grad(x, y, g, a):
    t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
    d_inner = 0.7978845608028654 * (1.0 + 0.134145 * square(x))
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - square(t)) * d_inner)


UNARY_GRADS = {
    "copy": lambda x, y, g, a: g,
    "neg": lambda x, y, g, a: -g,
    "abs": lambda x, y, g, a: g * sign(x),
    "square": lambda x, y, g, a: g * (2.0 * x),
    "relu": lambda x, y, g, a: apply("relu_backward", (y, g)),
    "exp": lambda x, y, g, a: g * y,
    "log": lambda x, y, g, a: g / x,
    "log1p": lambda x, y, g, a: g / (x + 1.0),
    "sqrt": lambda x, y, g, a: g * 0.5 / y,
    "rsqrt": lambda x, y, g, a: g * -0.5 * y * y * y,
    "reciprocal": lambda x, y, g, a: -g * y * y,
    "sin": lambda x, y, g, a: g * cos(x),
    "cos": lambda x, y, g, a: -g * sin(x),
    "tanh": lambda x, y, g, a: g * (1.0 - y * y),
    "sigmoid": lambda x, y, g, a: g * y * (1.0 - y),
    "silu": lambda x, y, g, a: g * (sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x)))),
    "softplus": lambda x, y, g, a: g * sigmoid(x),
    "leaky_relu": lambda x, y, g, a: where(x > 0, g, g * a["negative_slope"]),
    "clip": lambda x, y, g, a: where(x < a["lower"], 0.0, where(x > a["upper"], 0.0, g)),
    "erf": lambda x, y, g, a: g * 1.1283791670955126 * exp(-square(x)),
    "gelu": _gelu_grad,
    "gelu_tanh": _gelu_tanh_grad,
    "floor": lambda x, y, g, a: g * 0.0,
    "ceil": lambda x, y, g, a: g * 0.0,
    "sign": lambda x, y, g, a: g * 0.0,
}


def _unary_grad(name):
    rule = UNARY_GRADS[name]

    def grad(node, out_grads):
        return (rule(node.inputs[0], node.outputs[0], out_grads[0], node.attr),)
    return grad


def _pow_grad(x, y, out, g):
    safe_log = log(where(x > 0, x, 1.0))
    return g * y * x ** (y - 1.0), g * out * safe_log


BINARY_GRADS = {
    "add": lambda x, y, out, g: (g, g),
    "sub": lambda x, y, out, g: (g, -g),
    "mul": lambda x, y, out, g: (g * y, g * x),
    "div": lambda x, y, out, g: (g / y, -g * out / y),
    "pow": _pow_grad,
    "maximum": lambda x, y, out, g: (where(x >= y, g, 0.0), where(x >= y, 0.0, g)),
    "minimum": lambda x, y, out, g: (where(x <= y, g, 0.0), where(x <= y, 0.0, g)),
    "floor_div": lambda x, y, out, g: (None, None),
    "mod": lambda x, y, out, g: (g, -g * floor_div(x, y)),
    # relu_backward(y, g) = g where y > 0: d/dg is the same mask; d/dy is zero almost everywhere
    "relu_backward": lambda y, g, out, gg: (None, apply("relu_backward", (y, gg))),
}


def _binary_grad(name):
    rule = BINARY_GRADS[name]

    def grad(node, out_grads):
        x, y = node.inputs
        if not x.dtype.kind == "f":
            return (None, None)
        return rule(x, y, node.outputs[0], out_grads[0])
    return grad


def _where_grad(node, out_grads):
    cond, _, _ = node.inputs
    g = out_grads[0]
    return None, where(cond, g, 0.0), where(cond, 0.0, g)


def _cast_grad(node, out_grads):
    x = node.inputs[0]
    if x.dtype.kind != "f" or node.outputs[0].dtype.kind != "f":
        return (None,)
    return (astype(out_grads[0], x.dtype),)


# -- unary ---------------------------------------------------------------------------------------
def _unary_infer(name, dtypes):
    def infer(in_types, attrs):
        (x,) = in_types
        require_dtypes(name, x, dtypes)
        return (x,)
    return infer


def _unary_lower(code, float_attrs):
    def lower(node):
        (x,) = node.inputs
        floats = tuple(float(node.attr[a]) for a in float_attrs)
        return Launch(elementwise_params(code, x.shape, [x.shape]), floats)
    return lower


UNARY = {
    # name: (dtypes, float attrs passed to the kernel in order, flops per element)
    "neg": (NUMERIC_DTYPES, {}, 1), "abs": (NUMERIC_DTYPES, {}, 1),
    "square": (NUMERIC_DTYPES, {}, 1), "relu": (NUMERIC_DTYPES, {}, 1),
    "sign": (NUMERIC_DTYPES, {}, 1), "copy": (NUMERIC_DTYPES, {}, 0),
    "exp": (FLOAT_DTYPES, {}, 8), "log": (FLOAT_DTYPES, {}, 8), "log1p": (FLOAT_DTYPES, {}, 8),
    "sqrt": (FLOAT_DTYPES, {}, 4), "rsqrt": (FLOAT_DTYPES, {}, 5), "sin": (FLOAT_DTYPES, {}, 8),
    "cos": (FLOAT_DTYPES, {}, 8), "tanh": (FLOAT_DTYPES, {}, 8), "sigmoid": (FLOAT_DTYPES, {}, 10),
    "silu": (FLOAT_DTYPES, {}, 11), "softplus": (FLOAT_DTYPES, {}, 17),
    "gelu": (FLOAT_DTYPES, {}, 12), "gelu_tanh": (FLOAT_DTYPES, {}, 14),
    "floor": (FLOAT_DTYPES, {}, 1), "ceil": (FLOAT_DTYPES, {}, 1), "erf": (FLOAT_DTYPES, {}, 10),
    "reciprocal": (FLOAT_DTYPES, {}, 1),
    "leaky_relu": (FLOAT_DTYPES, {"negative_slope": 0.01}, 2),
    "clip": (NUMERIC_DTYPES, {"lower": REQUIRED, "upper": REQUIRED}, 2),
}

for _name, (_dtypes, _attrs, _flops) in UNARY.items():
    register(OpDef(_name, "elementwise", _unary_infer(_name, _dtypes), attrs=_attrs,
                   kernel="unary", dtypes=_dtypes, lower=_unary_lower(K.UNARY_OPS[_name], _attrs),
                   grad=_unary_grad(_name), inplace=True, flops_per_element=_flops))


# -- binary --------------------------------------------------------------------------------------
def _binary_infer(name, dtypes, out_dtype=None):
    def infer(in_types, attrs):
        x, y = in_types
        if x.dtype != y.dtype:
            raise TypeError(f"input dtypes differ ({x.dtype} and {y.dtype}); "
                            "mgegraph.functional promotes them, the op itself does not")
        require_dtypes(name, x, dtypes)
        shape = broadcast_shapes(x.shape, y.shape)
        return (TensorType(shape, out_dtype or x.dtype),)
    return infer


def _lower_broadcast(code):
    def lower(node):
        return Launch(elementwise_params(code, node.outputs[0].shape,
                                         [v.shape for v in node.inputs]))
    return lower


BINARY = {"add": NUMERIC_DTYPES, "sub": NUMERIC_DTYPES, "mul": NUMERIC_DTYPES,
          "div": FLOAT_DTYPES, "relu_backward": FLOAT_DTYPES, "pow": NUMERIC_DTYPES,
          "maximum": NUMERIC_DTYPES,
          "minimum": NUMERIC_DTYPES, "floor_div": NUMERIC_DTYPES, "mod": NUMERIC_DTYPES}

for _name, _dtypes in BINARY.items():
    register(OpDef(_name, "elementwise", _binary_infer(_name, _dtypes), kernel="binary",
                   dtypes=_dtypes, lower=_lower_broadcast(K.BINARY_OPS[_name]), inplace=True,
                   grad=_binary_grad(_name),
                   flops_per_element=8 if _name == "pow" else 1))

for _name, _code in K.COMPARE_OPS.items():
    register(OpDef(_name, "elementwise", _binary_infer(_name, ALL_DTYPES, np.dtype(np.bool_)),
                   kernel="compare", dtypes=ALL_DTYPES, lower=_lower_broadcast(_code)))


def _where_infer(in_types, attrs):
    cond, x, y = in_types
    if cond.dtype != np.dtype(np.bool_):
        raise TypeError(f"condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise TypeError(f"branch dtypes differ ({x.dtype} and {y.dtype})")
    return (TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), x.dtype),)


register(OpDef("where", "elementwise", _where_infer, kernel="where", dtypes=ALL_DTYPES,
               lower=_lower_broadcast(0), dispatch_input=1, grad=_where_grad))


def _assign_infer(in_types, attrs):
    raise TypeError("assign nodes are made by Graph.assign")


# Graph.assign makes these; the plan lowers them to copies run after every other instruction.
def _assign_lower(node):
    target = node.inputs[0]
    return Launch(elementwise_params(K.UNARY_OPS["copy"], target.shape, [target.shape]))


register(OpDef("assign", "movement", _assign_infer, kernel="unary", dtypes=NUMERIC_DTYPES,
               lower=_assign_lower))


# -- cast ----------------------------------------------------------------------------------------
def _cast_infer(in_types, attrs):
    (x,) = in_types
    return (TensorType(x.shape, as_dtype(attrs["dtype"])),)


def _cast_lower(node):
    (x,) = node.inputs
    code = dtype_code(node.outputs[0].dtype)
    return Launch(elementwise_params(code, x.shape, [x.shape]))


register(OpDef("cast", "elementwise", _cast_infer, attrs={"dtype": REQUIRED}, kernel="cast",
               dtypes=ALL_DTYPES, lower=_cast_lower, grad=_cast_grad))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
from .builder import apply, cast_to, graph_of, promote  # noqa: E402

__all__ = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "floor_div", "mod",
           "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "where",
           "astype", "cast", "clip", "leaky_relu", "gelu", "relu6", "hswish", "hsigmoid"]
__all__ += [name for name in UNARY if name not in ("clip", "leaky_relu", "gelu", "gelu_tanh", "copy")]


def _floating(x):
    """Float ops on integer inputs compute in float32 for int32/bool and float64 for int64,
    as NumPy's ufuncs do with float32 as the default float."""
    if x.dtype in FLOAT_DTYPES:
        return x
    return cast_to(x, np.float64 if x.dtype == np.dtype(np.int64) else np.float32)


def _make_unary(name):
    float_only = UNARY[name][0] == FLOAT_DTYPES

    def fn(inp):
        x = graph_of(inp).lift(inp)
        return apply(name, (_floating(x) if float_only else x,))

    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name}. ``F.{name}(x)``"
    return fn


for _name in UNARY:
    if _name not in ("clip", "leaky_relu"):
        globals()[_name] = _make_unary(_name)


def _make_binary(name):
    def fn(x, y):
        a, b = promote(x, y)
        return apply(name, (a, b))

    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name} with NumPy broadcasting and type promotion."
    return fn


for _name in BINARY:
    if _name not in ("div", "relu_backward"):
        globals()[_name] = _make_binary(_name)
for _name in K.COMPARE_OPS:
    globals()[_name] = _make_binary(_name)


def div(x, y):
    """True division: integer inputs are computed in floating point, as NumPy does."""
    a, b = promote(x, y)
    if a.dtype not in FLOAT_DTYPES:
        a, b = cast_to(a, np.float64), cast_to(b, np.float64)
    return apply("div", (a, b))


def where(mask, x, y):
    """Elementwise ``x if mask else y`` with broadcasting over all three."""
    g = graph_of(mask, x, y)
    a, b = promote(x, y) if isinstance(x, Var) or isinstance(y, Var) else (g.lift(x), g.lift(y))
    return apply("where", (cast_to(g.lift(mask), np.bool_), a, b))


def astype(inp, dtype):
    """Cast to ``dtype`` (float32, float64, int32, int64, bool)."""
    return cast_to(inp, as_dtype(dtype))


cast = astype


def clip(inp, lower=None, upper=None):
    """Clamp to [lower, upper]; either bound may be None."""
    lo = -np.inf if lower is None else float(lower)
    hi = np.inf if upper is None else float(upper)
    if inp.dtype not in FLOAT_DTYPES:
        info = np.iinfo(inp.dtype)
        lo, hi = max(lo, info.min), min(hi, info.max)
    return apply("clip", (inp,), lower=lo, upper=hi)


def leaky_relu(inp, negative_slope=0.01):
    return apply("leaky_relu", (_floating(inp),), negative_slope=float(negative_slope))


def gelu(inp, approximate="none"):
    """GELU, exact (erf) by default; ``approximate="tanh"`` for the tanh form."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return apply("gelu" if approximate == "none" else "gelu_tanh", (_floating(inp),))


def relu6(inp):
    return clip(inp, 0.0, 6.0)


def hsigmoid(inp):
    return clip(inp + 3.0, 0.0, 6.0) / 6.0


def hswish(inp):
    return inp * hsigmoid(inp)
