"""Elementwise ops: sources, the ops of the elementwise table (unary, binary with NumPy
broadcasting, comparisons), where, cast, and their public functions.

What each table op computes is its entry in elementwise_table.py; this module makes its OpDef
(shape and dtype rule, gradient, FLOPs, in place) and its public function from the entry, so
adding an op is adding an entry. The CPU lowerings are in mgegraph/_kernels/lowering/.
"""
from __future__ import annotations

import sys

import numpy as np

from ..ir.errors import GraphError, OpError, user_location
from ..ir.graph import Var, eager_graph
from ..ir.types import TensorType, as_dtype, broadcast_shapes, is_float
from . import elementwise_table as TABLE
from .builder import apply, apply_in, cast_to, graph_of, promote
from .elementwise_table import Elementwise
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, register, require_dtypes


def _source_infer(in_types, attrs):
    raise TypeError("source ops are made by Graph.input/param/const")


for _name, _attrs in (("input", {"name": REQUIRED}), ("param", {"name": REQUIRED}),
                      ("const", {"value": None})):
    register(OpDef(_name, "source", _source_infer, attrs=_attrs))


# -- ops from the table ---------------------------------------------------------------------------
# The autodiff walker undoes broadcasting and dtype; a table rule sees the public functions of
# this module as ``f``.
def _unary_grad(rule):
    def grad(node, out_grads):
        return (rule(_module(), node.inputs[0], node.outputs[0], out_grads[0], node.attr),)
    return grad


def _binary_grad(rule):
    def grad(node, out_grads):
        x, y = node.inputs
        if not is_float(x.dtype):
            return (None, None)
        return rule(_module(), x, y, node.outputs[0], out_grads[0])
    return grad


def _module():
    return sys.modules[__name__]


def _unary_infer(name, dtypes, check=None):
    def infer(in_types, attrs):
        (x,) = in_types
        require_dtypes(name, x, dtypes)
        if check is not None:
            check(attrs)
        return (x,)
    return infer


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


def _opdef(entry: Elementwise) -> OpDef:
    if entry.kind == "unary":
        attrs = {k: entry.defaults.get(k, REQUIRED) for k in entry.params}
        return OpDef(entry.name, "elementwise",
                     _unary_infer(entry.name, entry.dtypes, entry.check),
                     attrs=attrs, grad=_unary_grad(entry.grad), inplace=True,
                     flops_per_element=entry.flops)
    if entry.kind == "binary":
        return OpDef(entry.name, "elementwise", _binary_infer(entry.name, entry.dtypes),
                     grad=_binary_grad(entry.grad), inplace=True, flops_per_element=entry.flops)
    return OpDef(entry.name, "elementwise",
                 _binary_infer(entry.name, entry.dtypes, np.dtype(np.bool_)),
                 flops_per_element=entry.flops)


for _entry in TABLE.OPS:
    register(_opdef(_entry))


# -- where, assign, cast: structure rather than arithmetic, so not table entries -----------------
def _where_grad(node, out_grads):
    cond, _, _ = node.inputs
    g = out_grads[0]
    return None, where(cond, g, 0.0), where(cond, 0.0, g)


def _where_infer(in_types, attrs):
    cond, x, y = in_types
    if cond.dtype != np.dtype(np.bool_):
        raise TypeError(f"condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise TypeError(f"branch dtypes differ ({x.dtype} and {y.dtype})")
    return (TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), x.dtype),)


register(OpDef("where", "elementwise", _where_infer, grad=_where_grad))


def _assign_infer(in_types, attrs):
    raise TypeError("assign nodes are made by Graph.assign")


# Graph.assign makes these; the plan runs them as copies after every other instruction.
register(OpDef("assign", "movement", _assign_infer))


def _cast_grad(node, out_grads):
    x = node.inputs[0]
    if not (is_float(x.dtype) and is_float(node.outputs[0].dtype)):
        return (None,)
    return (astype(out_grads[0], x.dtype),)


def _cast_infer(in_types, attrs):
    (x,) = in_types
    return (TensorType(x.shape, as_dtype(attrs["dtype"])),)


register(OpDef("cast", "elementwise", _cast_infer, attrs={"dtype": REQUIRED}, grad=_cast_grad))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
# functions written below rather than made from their table entry
_WRITTEN = ("clip", "leaky_relu", "gelu", "div", "elu", "selu", "celu", "hardsigmoid",
            "thresholded_relu", "shrink", "prelu")
_PUBLIC = [op.name for op in TABLE.OPS if op.public]
__all__ = ["where", "astype", "cast", "relu6", "hswish", "hsigmoid", "hardtanh", "softshrink",
           "hardshrink"]
__all__ += [op.name for op in TABLE.OPS if op.public]
__all__ += ["masked_fill"]  # a composition over where


def _floating(x):
    """Float ops on integer inputs compute in float32 for int32/bool and float64 for int64,
    as NumPy's ufuncs do with float32 as the default float."""
    if is_float(x.dtype):
        return x
    return cast_to(x, np.float64 if x.dtype == np.dtype(np.int64) else np.float32)


class NoneOperandError(GraphError, TypeError):
    """An elementwise function given None (``x + None``): MegEngine's TypeError and its words,
    the user's line in the error's note."""


def as_values(*values) -> tuple:
    """The arguments of a public elementwise function; where none is a tensor (``F.abs(-3.0)``,
    ``F.add(1, 2)``) the first becomes an eager Tensor, so the result is one (MegEngine's rule)."""
    if any(v is None for v in values):
        error = NoneOperandError("the operand is None and is not supported.")
        error.add_note(f"(at {user_location()})")
        raise error
    if any(isinstance(v, Var) for v in values):
        return values
    return (eager_graph().lift(values[0]),) + values[1:]


def _make_unary(name):
    float_only = set(TABLE.BY_NAME[name].dtypes) <= set(FLOAT_DTYPES)

    def fn(inp):
        (inp,) = as_values(inp)
        x = inp if getattr(inp, "plain", False) else graph_of(inp).lift(inp)
        if float_only and not is_float(x.type.dtype):
            x = _floating(x)
        return apply_in(x.graph, name, (x,), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name}. ``F.{name}(x)``"
    return fn


def _make_binary(name):
    float_only = set(TABLE.BY_NAME[name].dtypes) <= set(FLOAT_DTYPES)

    def fn(x, y):
        a, b = promote(*as_values(x, y))
        if float_only and not is_float(a.dtype):  # atan2 of integers, as NumPy's
            a, b = _floating(a), _floating(b)
        return apply_in(a.graph, name, (a, b), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} with NumPy broadcasting and type promotion."
    return fn


for _name in _PUBLIC:
    if _name not in _WRITTEN:
        _kind = TABLE.BY_NAME[_name].kind
        globals()[_name] = (_make_unary if _kind == "unary" else _make_binary)(_name)


def relu_backward(y, g):
    """g where relu's output y > 0 (relu's gradient rule; not public)."""
    return apply("relu_backward", (y, g))


def div(x, y):
    """True division: integer inputs are computed in floating point, as NumPy does."""
    a, b = promote(*as_values(x, y))
    if not is_float(a.dtype):
        a, b = cast_to(a, np.float64), cast_to(b, np.float64)
    return apply("div", (a, b))


def where(mask, x, y):
    """Elementwise ``x if mask else y`` with broadcasting over all three."""
    g = graph_of(mask, x, y)
    a, b = promote(x, y) if isinstance(x, Var) or isinstance(y, Var) else (g.lift(x), g.lift(y))
    return apply("where", (cast_to(g.lift(mask), np.bool_), a, b))


def astype(inp, dtype):
    """Cast to ``dtype`` (float32, float64, int32, int64, bool, uint8, int8, int16)."""
    return cast_to(inp, as_dtype(dtype))


cast = astype


def clip(inp, lower=None, upper=None):
    """Clamp to [lower, upper]; either bound may be None, a number or a tensor broadcast against
    ``inp`` (then ``minimum(maximum(inp, lower), upper)``: upper wherever lower > upper, NaN
    from any operand, as np.clip with array bounds). ``F.clip(x, 0.0, 6.0)``"""
    if isinstance(lower, Var) or isinstance(upper, Var):
        return _clip_by_tensors(inp, lower, upper)
    lo = -np.inf if lower is None else float(lower)
    hi = np.inf if upper is None else float(upper)
    if not is_float(inp.dtype):
        info = np.iinfo(inp.dtype)
        lo, hi = max(lo, info.min), min(hi, info.max)
    return apply("clip", (inp,), lower=lo, upper=hi)


def _clip_by_tensors(inp, lower, upper):
    # a composition, so each bound gets its gradient from maximum's and minimum's rules (ties
    # go to inp, as PyTorch's clamp); numbers keep to the clip op
    out = inp if lower is None else maximum(inp, lower)  # noqa: F821  made from the table
    return out if upper is None else minimum(out, upper)  # noqa: F821


def masked_fill(inp, mask, value):
    """``value`` where the bool ``mask`` (broadcast to ``inp``'s shape) is true, else ``inp``;
    ``value`` a number or a 0-d tensor, cast to ``inp``'s dtype (PyTorch's ``masked_fill``;
    MegEngine has none). ``F.masked_fill(scores, pad_mask, -1e9)``"""
    g = graph_of(inp, mask, value)
    x, m = g.lift(inp), g.lift(mask)
    v = value if isinstance(value, Var) else g.const(np.asarray(value, x.dtype))
    problem = _masked_fill_problem(x, m, v)
    if problem:
        raise OpError("masked_fill", (x.type, m.type, v.type), problem, user_location())
    return where(m, cast_to(v, x.dtype), x)


def _masked_fill_problem(x, mask, value) -> str | None:
    if mask.dtype != np.dtype(np.bool_):
        return f"the mask must be bool, got {mask.dtype}"
    if value.ndim != 0:
        return f"the value must be a number or a 0-d tensor, got shape {value.shape}"
    try:
        shape = broadcast_shapes(x.shape, mask.shape)
    except (TypeError, ValueError):
        shape = None
    if shape != x.shape:
        return f"the mask {mask.shape} does not broadcast to the input's shape {x.shape}"
    return None


def leaky_relu(inp, negative_slope=0.01):
    return apply("leaky_relu", (_floating(inp),), negative_slope=float(negative_slope))


def gelu(inp, approximate="none"):
    """GELU, exact (erf) by default; ``approximate="tanh"`` for the tanh form."""
    if approximate not in ("none", "tanh"):
        raise GraphError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r} "
                         f"(at {user_location()})")
    return apply("gelu" if approximate == "none" else "gelu_tanh", (_floating(inp),))


def relu6(inp):
    return clip(inp, 0.0, 6.0)


def hsigmoid(inp):
    return clip(inp + 3.0, 0.0, 6.0) / 6.0


def hswish(inp):
    """MegEngine's name for hardswish, ``x * relu6(x + 3) / 6``."""
    return hardswish(inp)  # noqa: F821  made from its table entry above


# -- activations with parameters (ops of the table; hardtanh and the shrinks are compositions) ----
def _attr_error(op: str, reason: str) -> GraphError:
    return GraphError(f"{op}: {reason} (at {user_location()})")


def elu(inp, alpha=1.0):
    """``x`` above 0, ``alpha * (e^x - 1)`` at or below. ``F.elu(x, alpha=1.0)``"""
    return apply("elu", (_floating(inp),), alpha=float(alpha))


_SELU = TABLE.BY_NAME["selu"].defaults


def selu(inp, alpha=_SELU["alpha"], gamma=_SELU["gamma"]):
    """``gamma * elu(x, alpha)``, with the self-normalising constants by default (PyTorch's;
    ONNX's are their float32 roundings). ``F.selu(x)``"""
    return apply("selu", (_floating(inp),), alpha=float(alpha), gamma=float(gamma))


def celu(inp, alpha=1.0):
    """``x`` above 0, ``alpha * (e^(x / alpha) - 1)`` at or below; alpha must not be 0.
    ``F.celu(x, alpha=1.0)``"""
    return apply("celu", (_floating(inp),), alpha=float(alpha))


def hardsigmoid(inp, alpha=1 / 6, beta=0.5):
    """``clip(alpha * x + beta, 0, 1)``: PyTorch's and MegEngine's ``x / 6 + 1 / 2`` by default
    (``hsigmoid`` computes it as ``relu6(x + 3) / 6``); ONNX's HardSigmoid is alpha=0.2.
    ``F.hardsigmoid(x)``"""
    return apply("hardsigmoid", (_floating(inp),), alpha=float(alpha), beta=float(beta))


def thresholded_relu(inp, alpha=1.0):
    """``x`` above alpha, else 0 (NaN stays NaN). ``F.thresholded_relu(x, 1.0)``"""
    return apply("thresholded_relu", (_floating(inp),), alpha=float(alpha))


def shrink(inp, lambd=0.5, bias=0.0):
    """ONNX's Shrink: ``x + bias`` below -lambd, ``x - bias`` above lambd, else 0.
    ``F.shrink(x, lambd=0.5, bias=0.0)``"""
    return apply("shrink", (_floating(inp),), lambd=float(lambd), bias=float(bias))


def softshrink(inp, lambd=0.5):
    """``x - lambd`` above lambd, ``x + lambd`` below -lambd, else 0; lambd >= 0.
    ``F.softshrink(x, 0.5)``"""
    if not lambd >= 0:
        raise _attr_error("softshrink", f"lambd must be >= 0, got {lambd}")
    return shrink(inp, lambd, lambd)


def hardshrink(inp, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0; lambd >= 0. ``F.hardshrink(x, 0.5)``"""
    if not lambd >= 0:
        raise _attr_error("hardshrink", f"lambd must be >= 0, got {lambd}")
    return shrink(inp, lambd, 0.0)


def hardtanh(inp, min_val=-1.0, max_val=1.0):
    """``clip(x, min_val, max_val)``. ``F.hardtanh(x, -1.0, 1.0)``"""
    if not min_val <= max_val:
        raise _attr_error("hardtanh", f"min_val {min_val} is greater than max_val {max_val}")
    return clip(_floating(inp), min_val, max_val)


def prelu(inp, weight):
    """``x`` above 0, ``weight * x`` at or below, ``weight`` broadcast against ``x`` as NumPy
    does (MegEngine's and ONNX's rule): a per-channel slope of NCHW data is shaped (C, 1, 1),
    as ``nn.PReLU`` shapes its own. ``F.prelu(x, w)``"""
    a, b = promote(inp, weight)
    if not is_float(a.dtype):
        a, b = _floating(a), _floating(b)
    return apply_in(a.graph, "prelu", (a, b), {})
