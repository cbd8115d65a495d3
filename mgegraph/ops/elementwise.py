"""Elementwise ops: sources, unary, binary (NumPy broadcasting), comparisons, where, cast."""
from __future__ import annotations

import numpy as np

from .._kernels import elementwise as K
from ..ir.graph import Var
from ..ir.types import TensorType, as_dtype, broadcast_shapes, dtype_code
from .layout import elementwise_params
from .registry import (ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, REQUIRED, Launch, OpDef,
                       register, require_dtypes)


def _source_infer(in_types, attrs):
    raise TypeError("source ops are made by Graph.input/param/const")


for _name, _attrs in (("input", {"name": REQUIRED}), ("param", {"name": REQUIRED}),
                      ("const", {"value": None})):
    register(OpDef(_name, "source", _source_infer, attrs=_attrs))


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
    "floor": (FLOAT_DTYPES, {}, 1), "ceil": (FLOAT_DTYPES, {}, 1),
    "reciprocal": (FLOAT_DTYPES, {}, 1),
    "leaky_relu": (FLOAT_DTYPES, {"negative_slope": 0.01}, 2),
    "clip": (NUMERIC_DTYPES, {"lower": REQUIRED, "upper": REQUIRED}, 2),
}

for _name, (_dtypes, _attrs, _flops) in UNARY.items():
    register(OpDef(_name, "elementwise", _unary_infer(_name, _dtypes), attrs=_attrs,
                   kernel="unary", dtypes=_dtypes, lower=_unary_lower(K.UNARY_OPS[_name], _attrs),
                   inplace=True, flops_per_element=_flops))


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
          "div": FLOAT_DTYPES, "pow": NUMERIC_DTYPES, "maximum": NUMERIC_DTYPES,
          "minimum": NUMERIC_DTYPES, "floor_div": NUMERIC_DTYPES, "mod": NUMERIC_DTYPES}

for _name, _dtypes in BINARY.items():
    register(OpDef(_name, "elementwise", _binary_infer(_name, _dtypes), kernel="binary",
                   dtypes=_dtypes, lower=_lower_broadcast(K.BINARY_OPS[_name]), inplace=True,
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
               lower=_lower_broadcast(0), dispatch_input=1))


# -- cast ----------------------------------------------------------------------------------------
def _cast_infer(in_types, attrs):
    (x,) = in_types
    return (TensorType(x.shape, as_dtype(attrs["dtype"])),)


def _cast_lower(node):
    (x,) = node.inputs
    code = dtype_code(node.outputs[0].dtype)
    return Launch(elementwise_params(code, x.shape, [x.shape]))


register(OpDef("cast", "elementwise", _cast_infer, attrs={"dtype": REQUIRED}, kernel="cast",
               dtypes=ALL_DTYPES, lower=_cast_lower))


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
    if _name != "div":
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
