"""ONNX -> mgegraph Graph: one small converter per ONNX op (the ``CONVERTERS`` table), each
emitting mgegraph ops through ``mgegraph.functional``.

Design: a value of the ONNX graph is either a ``Var`` of the mgegraph graph or a NumPy array
known at import (an initializer, a ``Constant``, a bound input, or a folded result). A node
whose inputs are all known is evaluated at import by ONNX's NumPy reference evaluator instead
of being converted, which folds the shape arithmetic exporters emit around reshapes (``Shape``
-> ``Gather`` -> ``Concat`` -> ``Reshape``): ``Shape`` of a Var is known because every shape
is static. Known arrays become graph constants only when a converter needs them as a Var;
float initializers become params named as in the file, so ``freeze`` and weight sharing work
on them as on any other graph.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import functional as F
from ..ir.errors import GraphError
from ..ir.graph import Graph, Var
from . import SUPPORTED_OPSETS, ImportLimits, OnnxImportError, checks

DTYPES = {TensorProto.FLOAT: np.dtype(np.float32), TensorProto.DOUBLE: np.dtype(np.float64),
          TensorProto.INT32: np.dtype(np.int32), TensorProto.INT64: np.dtype(np.int64),
          TensorProto.BOOL: np.dtype(np.bool_)}

# Attributes later revisions added that the converters accept at their defaults' meaning
# (Range-27's stash_type picks the accumulation type of float16 and bfloat16 ranges; Cast-24's
# and CastLike-24's round_mode the rounding to float8e8m0: types mgegraph does not have).
LATER_ATTRIBUTES = {"Range": {"stash_type"}, "Cast": {"round_mode"}, "CastLike": {"round_mode"}}


def same_semantics(op_type: str, opset: int) -> bool:
    """Whether ``op_type`` at ``opset`` means what its converter was written for: the op's
    definition in force at ``opset`` is one from opsets 13..21, or a later revision that only
    added element types (same inputs, outputs and attributes; every earlier type still allowed),
    as opsets 22 (bfloat16), 23 (float4), 24 (float8e8m0), 25 (int2) and 28 (float6) did."""
    try:
        new = onnx.defs.get_schema(op_type, opset, "")
        old = onnx.defs.get_schema(op_type, min(opset, SUPPORTED_OPSETS[-1]), "")
    except onnx.defs.SchemaError:
        return False
    if new.since_version == old.since_version:
        return True
    types = lambda s: {t.type_param_str: set(t.allowed_type_strs) for t in s.type_constraints}
    old_types, new_types = types(old), types(new)
    return ([i.name for i in new.inputs] == [i.name for i in old.inputs]
            and [o.name for o in new.outputs] == [o.name for o in old.outputs]
            and set(new.attributes) - LATER_ATTRIBUTES.get(op_type, set()) == set(old.attributes)
            and all(old_types[k] <= new_types.get(k, set()) for k in old_types))


class NotSupported(OnnxImportError):
    """A node uses a feature (an attribute value, a dtype, a runtime shape) the importer does
    not convert; its message names the node."""


class _Context:
    """What converters see: the graph, the opset, and the helpers to read inputs; what the
    import is at (``stage``, ``node``) for the errors."""

    def __init__(self, graph: Graph, limits: ImportLimits):
        self.g, self.limits, self.opset = graph, limits, None
        self._input_names: dict[int, str] = {}  # var id -> ONNX input name, for needs_constant
        self._consts: dict[int, Var] = {}  # id(array) -> its const/param Var
        self._param_names: dict[int, str] = {}  # id(array) of an initializer -> its name
        self.known_bytes = 0  # of the arrays known at import, against limits.max_known_bytes
        self.stage, self.node = "reading the model", None

    def var(self, x) -> Var:
        """``x`` as a Var: a known array becomes a param (a float initializer) or a const."""
        if isinstance(x, Var):
            return x
        key = id(x)
        if key not in self._consts:
            name = self._param_names.get(key)
            if name is not None and x.dtype.kind == "f" and name not in self.g.params:
                self._consts[key] = self.g.param(name, x)
            else:
                self._consts[key] = self.g.const(x)
        return self._consts[key]

    def known(self, x, what: str) -> np.ndarray:
        """The value of ``x`` at import (a shape, axes, a count): refused if it is computed."""
        if x is None or isinstance(x, np.ndarray):
            return x
        name = self._input_names.get(x.id)
        if name is not None:
            raise NotSupported(f"{self.where()}: {what} comes from graph input {name!r}, whose "
                               f"value decides a shape; bind it with constants={{{name!r}: ...}}",
                               needs_constant=(name,))
        raise NotSupported(f"{self.where()}: {what} is computed at run time; mgegraph needs it "
                           "known at import (static shapes)")

    def ints(self, x, what: str):
        v = self.known(x, what)
        if v is None:
            return None
        if v.size > self.limits.max_int_list:
            self.fail(f"{what} has {v.size} values, over the limit of "
                      f"{self.limits.max_int_list} (ImportLimits.max_int_list)")
        return [int(i) for i in np.asarray(v).reshape(-1)]

    def axis(self, value, rank: int, what: str = "axis", inclusive: bool = False) -> int:
        return checks.axis(self.where(), value, rank, what, inclusive)

    def axes(self, values, rank: int, what: str = "axes") -> list[int]:
        return checks.axes(self.where(), values, rank, what)

    def where(self) -> str:
        return self.stage if self.node is None else checks.node_name(self.node)

    def fail(self, reason: str):
        raise NotSupported(f"{self.where()}: {reason}")


def _shape(x):
    return tuple(x.shape)


def _dtype_of(code: int, what: str) -> np.dtype:
    if code not in DTYPES:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        raise NotSupported(f"{what}: dtype {name} is not supported (mgegraph has float32, "
                           "float64, int32, int64 and bool)")
    return DTYPES[code]


# -- converters ---------------------------------------------------------------------------
# Each takes (cx, inputs, attrs) -- inputs a list of Var / ndarray / None (a missing optional
# input), attrs a dict -- and returns the list of outputs (Var or ndarray).
CONVERTERS: dict = {}


def converter(*names):
    def register(fn):
        for name in names:
            CONVERTERS[name] = fn
        return fn
    return register


def _unary(fn):
    return lambda cx, ins, at: [fn(cx.var(ins[0]))]


for _name, _fn in {"Relu": F.relu, "Tanh": F.tanh, "Sigmoid": F.sigmoid, "Exp": F.exp,
                   "Log": F.log, "Sqrt": F.sqrt, "Erf": F.erf, "Abs": F.abs, "Neg": F.neg,
                   "Ceil": F.ceil, "Floor": F.floor, "Reciprocal": F.reciprocal, "Sin": F.sin,
                   "Cos": F.cos, "Sign": F.sign, "Softplus": F.softplus,
                   "HardSwish": F.hardswish}.items():
    CONVERTERS[_name] = _unary(_fn)


def _binary(fn):
    return lambda cx, ins, at: [fn(cx.var(ins[0]), cx.var(ins[1]))]


for _name, _fn in {"Add": F.add, "Sub": F.sub, "Mul": F.mul, "Equal": F.equal,
                   "Less": F.less, "Greater": F.greater, "LessOrEqual": F.less_equal,
                   "GreaterOrEqual": F.greater_equal}.items():
    CONVERTERS[_name] = _binary(_fn)


@converter("Div")
def _div(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    if a.dtype.kind == "f":
        return [F.div(a, b)]
    # ONNX's integer division truncates toward zero
    q = F.floor_div(F.abs(a), F.abs(b))
    neg = F.not_equal(F.less(a, 0), F.less(b, 0))
    return [F.where(neg, F.neg(q), q)]


@converter("Mod")
def _mod(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    if at.get("fmod", 0):
        if a.dtype.kind != "f":
            q = _div(cx, [a, b], {})[0]
            return [F.sub(a, F.mul(q, b))]
        r = F.mod(F.abs(a), F.abs(b))  # C fmod: the sign of the dividend
        return [F.where(F.less(a, 0), F.neg(r), r)]
    return [F.mod(a, b)]


@converter("Pow")
def _pow(cx, ins, at):
    base, exp = cx.var(ins[0]), cx.var(ins[1])
    if exp.dtype != base.dtype:  # ONNX's result has the base's type
        exp = F.astype(exp, base.dtype)
    return [F.pow(base, exp)]


@converter("Max", "Min", "Sum", "Mean")
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


@converter("And", "Or", "Xor")
def _logical(cx, ins, at):
    a, b = (F.astype(cx.var(x), np.int32) for x in ins)
    op = cx.node.op_type
    out = F.mul(a, b) if op == "And" else F.add(a, b)
    return [F.equal(out, 1) if op == "Xor" else F.greater(out, 0)]


@converter("Not")
def _not(cx, ins, at):
    return [F.equal(cx.var(ins[0]), False)]


@converter("Identity")
def _identity(cx, ins, at):
    return [ins[0]]  # the same value (a graph output that is one gets its own node below)


@converter("Dropout")
def _dropout(cx, ins, at):
    if len(ins) > 2 and ins[2] is not None and bool(np.asarray(cx.known(ins[2], "training_mode"))):
        cx.fail("training_mode=True is not supported (inference only)")
    x = cx.var(ins[0])
    return [F.reshape(x, _shape(x)), cx.g.const(np.ones(_shape(x), np.bool_))]


@converter("Where")
def _where(cx, ins, at):
    return [F.where(cx.var(ins[0]), cx.var(ins[1]), cx.var(ins[2]))]


@converter("Gelu")
def _gelu(cx, ins, at):
    approximate = at.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return [F.gelu(cx.var(ins[0]), approximate=approximate)]


@converter("LeakyRelu")
def _leaky_relu(cx, ins, at):
    return [F.leaky_relu(cx.var(ins[0]), at.get("alpha", 0.01))]


@converter("Elu")
def _elu(cx, ins, at):
    x = cx.var(ins[0])
    alpha = at.get("alpha", 1.0)
    return [F.where(F.greater(x, 0), x, F.mul(F.sub(F.exp(x), 1.0), alpha))]


@converter("HardSigmoid")
def _hard_sigmoid(cx, ins, at):
    x = cx.var(ins[0])
    return [F.clip(F.add(F.mul(x, at.get("alpha", 0.2)), at.get("beta", 0.5)), 0.0, 1.0)]


@converter("Clip")
def _clip(cx, ins, at):
    x = cx.var(ins[0])
    lo = cx.known(ins[1], "min") if len(ins) > 1 and ins[1] is not None else None
    hi = cx.known(ins[2], "max") if len(ins) > 2 and ins[2] is not None else None
    if x.dtype.kind == "f":
        return [F.clip(x, None if lo is None else float(lo), None if hi is None else float(hi))]
    out = x
    if lo is not None:
        out = F.maximum(out, cx.g.const(np.asarray(lo, x.dtype)))
    if hi is not None:
        out = F.minimum(out, cx.g.const(np.asarray(hi, x.dtype)))
    return [out if out is not x else F.reshape(x, _shape(x))]


@converter("Cast")
def _cast(cx, ins, at):
    dtype = _dtype_of(at["to"], cx.where())
    return [F.astype(cx.var(ins[0]), dtype)]


@converter("CastLike")
def _cast_like(cx, ins, at):
    dtype = np.dtype(ins[1].dtype)
    return [F.astype(cx.var(ins[0]), dtype)]


# -- matmul, conv, pooling, normalisation ------------------------------------------------
@converter("MatMul")
def _matmul(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    if a.ndim == 1 and b.ndim == 1:
        return [F.reshape(F.matmul(F.reshape(a, (1, a.shape[0])), F.reshape(b, (b.shape[0], 1))),
                          ())]
    if a.ndim == 1:
        out = F.matmul(F.reshape(a, (1, a.shape[0])), b)
        return [F.reshape(out, out.shape[:-2] + out.shape[-1:])]
    if b.ndim == 1:
        out = F.matmul(a, F.reshape(b, (b.shape[0], 1)))
        return [F.reshape(out, out.shape[:-1])]
    return [F.matmul(a, b)]


@converter("Gemm")
def _gemm(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    ta, tb = at.get("transA", 0), at.get("transB", 0)
    if ta:
        a = F.transpose(a, (1, 0))
    n = b.shape[0] if tb else b.shape[1]
    if alpha == 1.0 and beta == 1.0 and (c is None or _shape(c) == (n,)):
        # nn.Linear's form: one linear node, as mgegraph writes it
        weight = b if tb else F.transpose(b, (1, 0))
        return [F.linear(a, weight, None if c is None else cx.var(c))]
    out = F.matmul(a, b, transpose_b=bool(tb))
    if alpha != 1.0:
        out = F.mul(out, cx.g.const(np.asarray(alpha, out.dtype)))
    if c is not None:
        cv = cx.var(c)
        out = F.add(out, cv if beta == 1.0 else F.mul(cv, cx.g.const(np.asarray(beta, cv.dtype))))
    return [out]


def _pad_mode(at) -> str:
    mode = at.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return mode or "NOTSET"


def _check_window(cx, at, nd: int, kernel=None) -> None:
    """A convolution's or pooling's attributes as ONNX Runtime checks them: ``auto_pad`` or
    ``pads``, not both; ``kernel_shape`` equal to the weight's (``kernel``) where there is one;
    one stride, dilation and kernel dim per spatial axis and two pads; windows of at least 1."""
    mode = _pad_mode(at)
    if mode not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        cx.fail(f"auto_pad {mode!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    if mode != "NOTSET" and "pads" in at:
        cx.fail(f"auto_pad={mode} and pads {list(at['pads'])} together (ONNX allows one)")
    given = at.get("kernel_shape")
    if kernel is None and given is None:
        cx.fail("kernel_shape is required")
    if kernel is not None and given is not None and list(given) != list(kernel):
        cx.fail(f"kernel_shape {list(given)} contradicts the weight's spatial shape "
                f"{list(kernel)}")
    for name, count in (("kernel_shape", nd), ("strides", nd), ("dilations", nd),
                        ("pads", 2 * nd)):
        if name in at and len(at[name]) != count:
            cx.fail(f"{name} {list(at[name])} has {len(at[name])} values for {nd} spatial axes "
                    f"(ONNX needs {count})")
    for name in ("kernel_shape", "strides", "dilations"):
        if any(v < 1 for v in at.get(name, ())):
            cx.fail(f"{name} {list(at[name])} has a value below 1")
    if any(p < 0 for p in at.get("pads", ())):
        cx.fail(f"pads {list(at['pads'])} has a negative value")


def _auto_pad(cx, at, in_hw, kernel, strides, dilations):
    """ONNX pads as ((begin_h, end_h), (begin_w, end_w))."""
    n = len(in_hw)
    mode = _pad_mode(at)
    if mode == "NOTSET":
        pads = list(at.get("pads", [0] * (2 * n)))
        return [(pads[i], pads[i + n]) for i in range(n)]
    if mode == "VALID":
        return [(0, 0)] * n
    out = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        out.append((small, big) if mode == "SAME_UPPER" else (big, small))
    return out


def _spatial(cx, x, what):
    """x as NCHW: 1-D inputs get a trailing width of 1; 3-D and beyond are refused."""
    if x.ndim == 3:
        return F.reshape(x, _shape(x) + (1,)), True
    if x.ndim != 4:
        cx.fail(f"{what} on a {x.ndim}-D input: mgegraph convolves and pools 2-D (and 1-D) only")
    return x, False


def _as2(values, one_d, fill):
    values = list(values)
    return values + [fill] if one_d else values


@converter("Conv")
def _conv(cx, ins, at):
    x, one_d = _spatial(cx, cx.var(ins[0]), "Conv")
    w = cx.var(ins[1])
    if w.ndim != x.ndim - one_d:
        cx.fail(f"a weight of shape {list(_shape(w))} for an input of shape "
                f"{list(_shape(x))[:x.ndim - one_d]} (ONNX needs the same rank)")
    _check_window(cx, at, 2 - one_d, _shape(w)[2:])
    if one_d:
        w = F.reshape(w, _shape(w) + (1,))
    kernel = list(_shape(w)[2:])
    strides = _as2(at.get("strides", [1] * (2 - one_d)), one_d, 1)
    dilations = _as2(at.get("dilations", [1] * (2 - one_d)), one_d, 1)
    pads = _auto_pad(cx, at, _shape(x)[2 - 0:][:2 - one_d], kernel[:2 - one_d],
                     strides[:2 - one_d], dilations[:2 - one_d])
    if one_d:
        pads.append((0, 0))
    bias = cx.var(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if all(b == e for b, e in pads):
        padding = tuple(b for b, _ in pads)
    else:
        x = F.pad(x, ((0, 0), (0, 0)) + tuple(tuple(p) for p in pads))
        padding = (0, 0)
    y = F.conv2d(x, w, bias, stride=tuple(strides), padding=padding, dilation=tuple(dilations),
                 groups=at.get("group", 1))
    return [F.reshape(y, _shape(y)[:3]) if one_d else y]


def _pool_geometry(cx, at, in_hw, kernel, strides, dilations):
    """ONNX's pads per axis and the extra end padding ``ceil_mode`` needs, and the output
    size per axis."""
    pads = _auto_pad(cx, at, in_hw, kernel, strides, dilations)
    extra, sizes = [], []
    for (b, e), size, k, s, d in zip(pads, in_hw, kernel, strides, dilations):
        span = (k - 1) * d + 1
        if at.get("ceil_mode", 0):
            out = math.ceil((size + b + e - span) / s) + 1
            if (out - 1) * s >= size + b:  # a window that starts in the end padding is dropped
                out -= 1
        else:
            out = (size + b + e - span) // s + 1
        extra.append(max((out - 1) * s + span - (size + b + e), 0))
        sizes.append(out)
    return pads, extra, sizes


def _window_counts(masks, kernel, strides, dilations, sizes):
    """How many cells of each window the 0/1 mask of each axis counts, as an (OH, OW) array."""
    per_axis = [np.array([mask[o * s:o * s + (k - 1) * d + 1:d].sum() for o in range(n)],
                         np.float64)
                for mask, k, s, d, n in zip(masks, kernel, strides, dilations, sizes)]
    return np.outer(*per_axis)


def _dilated_windows(x, kernel, strides, dilations, sizes):
    """The kh*kw strided slices of a padded input, one per window offset: pooling with
    dilation as elementwise max/add over them."""
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h0, w0 = i * dilations[0], j * dilations[1]
            yield F.subscript(x, (slice(None), slice(None),
                                  slice(h0, h0 + (sizes[0] - 1) * strides[0] + 1, strides[0]),
                                  slice(w0, w0 + (sizes[1] - 1) * strides[1] + 1, strides[1])))


@converter("MaxPool", "AveragePool")
def _pool(cx, ins, at):
    op = cx.node.op_type
    x, one_d = _spatial(cx, cx.var(ins[0]), op)
    if len(cx.node.output) > 1 and cx.node.output[1]:
        cx.fail("the Indices output is not supported")
    if at.get("storage_order", 0):
        cx.fail("storage_order=1 is not supported")
    nd = 2 - one_d
    _check_window(cx, at, nd)
    if any(p >= k for p, k in zip(at.get("pads", ()), list(at["kernel_shape"]) * 2)):
        cx.fail(f"pads {list(at['pads'])} not smaller than kernel_shape "
                f"{list(at['kernel_shape'])} (a window of padding only; ONNX Runtime refuses it)")
    kernel = _as2(at["kernel_shape"], one_d, 1)
    strides = _as2(at.get("strides", [1] * nd), one_d, 1)
    dilations = _as2(at.get("dilations", [1] * nd), one_d, 1)
    pads, extra, sizes = _pool_geometry(cx, at, _shape(x)[2:2 + nd], kernel[:nd], strides[:nd],
                                        dilations[:nd])
    if one_d:
        pads, extra, sizes = pads + [(0, 0)], extra + [0], sizes + [_shape(x)[3]]
    full = ((0, 0), (0, 0)) + tuple((b, e + x_) for (b, e), x_ in zip(pads, extra))
    dilated = any(d != 1 for d in dilations)
    # the kernels' own padding: symmetric, at most half the window, no ceil-mode overhang
    native = (not dilated and all(b == e for b, e in pads) and not any(extra)
              and all(2 * b <= k for (b, _), k in zip(pads, kernel)))
    if op == "MaxPool":
        if native:
            y = F.max_pool2d(x, tuple(kernel), tuple(strides), tuple(b for b, _ in pads))
        elif not dilated:
            y = F.max_pool2d(F.pad(x, full, constant_value=-np.inf), tuple(kernel),
                             tuple(strides), 0)
        else:
            windows = _dilated_windows(F.pad(x, full, constant_value=-np.inf), kernel, strides,
                                       dilations, sizes)
            y = next(windows)
            for w in windows:
                y = F.maximum(y, w)
        return [F.reshape(y, _shape(y)[:3]) if one_d else y]
    include = bool(at.get("count_include_pad", 0))
    if native:
        y = F.avg_pool2d(x, tuple(kernel), tuple(strides), tuple(b for b, _ in pads),
                         mode="average" if include else "average_count_exclude_padding")
        return [F.reshape(y, _shape(y)[:3]) if one_d else y]
    # the sum over the explicitly padded input, divided by the number of cells ONNX counts
    padded = F.pad(x, full)
    if dilated:
        windows = _dilated_windows(padded, kernel, strides, dilations, sizes)
        sums = next(windows)
        for w in windows:
            sums = F.add(sums, w)
        area = 1
    else:
        sums = F.avg_pool2d(padded, tuple(kernel), tuple(strides), 0, mode="average")
        area = kernel[0] * kernel[1]
    pad_cell = 1 if include else 0
    masks = [np.array([pad_cell] * b + [1] * size + [pad_cell] * e + [0] * x_)
             for (b, e), x_, size in zip(pads, extra, _shape(x)[2:])]
    counts = _window_counts(masks, kernel, strides, dilations, sizes)
    y = F.mul(sums, cx.g.const((area / np.maximum(counts, 1)).astype(x.dtype)))
    return [F.reshape(y, _shape(y)[:3]) if one_d else y]


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx, ins, at):
    x = cx.var(ins[0])
    if cx.node.op_type == "GlobalAveragePool" and x.ndim == 4:
        return [F.adaptive_avg_pool2d(x, (1, 1))]
    axes = tuple(range(2, x.ndim))
    fn = F.mean if cx.node.op_type == "GlobalAveragePool" else F.max
    return [fn(x, axes, keepdims=True)]


@converter("BatchNormalization")
def _batch_norm(cx, ins, at):
    x, scale, bias, mean, var = (cx.var(v) for v in ins[:5])
    if x.ndim < 2:
        cx.fail("the input needs a channel axis")
    eps = at.get("epsilon", 1e-5)
    if not at.get("training_mode", 0):
        return [F.batch_norm(x, mean, var, scale, bias, training=False, eps=eps)]
    # training mode: the batch's statistics, and the running ones updated with them
    y = F.batch_norm(x, weight=scale, bias=bias, training=True, eps=eps)
    axes = (0,) + tuple(range(2, x.ndim))
    m = at.get("momentum", 0.9)
    keep, new = cx.g.const(np.asarray(m, x.dtype)), cx.g.const(np.asarray(1 - m, x.dtype))
    running_mean = F.add(F.mul(mean, keep), F.mul(F.mean(x, axes), new))
    running_var = F.add(F.mul(var, keep), F.mul(F.var(x, axes), new))
    return [y, running_mean, running_var]


@converter("LayerNormalization")
def _layer_norm(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", -1), x.ndim)
    eps = at.get("epsilon", 1e-5)
    norm_shape = _shape(x)[axis:]
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 else None
    affine_ok = _shape(scale) == norm_shape and (bias is None or _shape(bias) == norm_shape)
    if affine_ok:
        y = F.layer_norm(x, norm_shape, weight=cx.var(scale),
                         bias=None if bias is None else cx.var(bias), eps=eps)
    else:
        y = F.mul(F.layer_norm(x, norm_shape, affine=False, eps=eps), cx.var(scale))
        if bias is not None:
            y = F.add(y, cx.var(bias))
    outs = [y]
    names = list(cx.node.output)
    if len(names) > 1:
        axes = tuple(range(axis, x.ndim))
        mean = F.mean(x, axes, keepdims=True)
        outs.append(mean)
        if len(names) > 2:
            var = F.mean(F.square(F.sub(x, mean)), axes, keepdims=True)
            outs.append(F.rsqrt(F.add(var, cx.g.const(np.asarray(eps, x.dtype)))))
    return outs


@converter("Softmax", "LogSoftmax")
def _softmax(cx, ins, at):
    x = cx.var(ins[0])
    fn = F.softmax if cx.node.op_type == "Softmax" else F.log_softmax
    return [fn(x, cx.axis(at.get("axis", -1), x.ndim))]


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


@converter("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
           "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")
def _reduce(cx, ins, at):
    x = cx.var(ins[0])
    axes = _reduce_axes(cx, ins, at, x)
    if axes is None:
        return [F.reshape(x, _shape(x))]
    keep = bool(at.get("keepdims", 1))
    op = cx.node.op_type
    if any(_shape(x)[a] == 0 for a in axes) and op in ("ReduceMax", "ReduceMin"):
        # ONNX: the max of nothing is the lowest value of the type, the min the highest
        shape = tuple(1 if i in axes else d for i, d in enumerate(_shape(x))
                      if keep or i not in axes)
        if x.dtype.kind == "f":
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
        return [out if keep else F.reshape(out, tuple(d for i, d in enumerate(_shape(x))
                                                      if i not in axes))]
    fn = {"ReduceMean": F.mean, "ReduceSum": F.sum, "ReduceMax": F.max, "ReduceMin": F.min,
          "ReduceProd": F.prod}[op]
    return [fn(x, axes, keepdims=keep)]


@converter("ArgMax", "ArgMin")
def _argmax(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 0), x.ndim)
    keep = bool(at.get("keepdims", 1))
    if at.get("select_last_index", 0):
        n = _shape(x)[axis]
        flipped = F.flip(x, axis)
        fn = F.argmax if cx.node.op_type == "ArgMax" else F.argmin
        out = F.sub(cx.g.const(np.asarray(n - 1, np.int64)), F.astype(fn(flipped, axis, keep),
                                                                     np.int64))
        return [out]
    fn = F.argmax if cx.node.op_type == "ArgMax" else F.argmin
    return [F.astype(fn(x, axis, keep), np.int64)]


# -- movement -----------------------------------------------------------------------------
@converter("Reshape")
def _reshape(cx, ins, at):
    x = cx.var(ins[0])
    target = cx.ints(ins[1], "the target shape")
    if not at.get("allowzero", 0):
        target = [_shape(x)[i] if d == 0 else d for i, d in enumerate(target)]
    return [F.reshape(x, tuple(target))]


@converter("Flatten")
def _flatten(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 1), x.ndim, inclusive=True)
    s = _shape(x)
    return [F.reshape(x, (math.prod(s[:axis]), math.prod(s[axis:])))]


@converter("Transpose")
def _transpose(cx, ins, at):
    x = cx.var(ins[0])
    perm = tuple(at.get("perm", range(x.ndim - 1, -1, -1)))
    if sorted(perm) != list(range(x.ndim)):
        cx.fail(f"perm {list(perm)} is not a permutation of the {x.ndim} axes")
    return [F.transpose(x, perm)]


@converter("Concat")
def _concat(cx, ins, at):
    parts = [cx.var(x) for x in ins if x is not None]
    axis = cx.axis(at["axis"], parts[0].ndim)
    parts = [p for p in parts if p.size or len(parts) == 1]
    return [F.concat(parts, axis)]


@converter("Squeeze")
def _squeeze(cx, ins, at):
    x = cx.var(ins[0])
    axes = cx.ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None
    if axes is None:
        axes = [i for i, d in enumerate(_shape(x)) if d == 1]
    axes = set(cx.axes(axes, x.ndim))
    if any(_shape(x)[a] != 1 for a in axes):
        cx.fail(f"squeezes axes {sorted(axes)} of shape {list(_shape(x))}: each must be 1")
    return [F.reshape(x, tuple(d for i, d in enumerate(_shape(x)) if i not in axes))]


@converter("Unsqueeze")
def _unsqueeze(cx, ins, at):
    x = cx.var(ins[0])
    axes = cx.ints(ins[1], "axes")
    axes = sorted(cx.axes(axes, x.ndim + len(axes)))  # axes of the output
    shape = list(_shape(x))
    for a in axes:
        shape.insert(a, 1)
    return [F.reshape(x, tuple(shape))]


@converter("Expand")
def _expand(cx, ins, at):
    x = cx.var(ins[0])
    target = tuple(cx.ints(ins[1], "the target shape"))
    try:
        shape = np.broadcast_shapes(_shape(x), target)
    except ValueError:
        cx.fail(f"cannot broadcast shape {list(_shape(x))} to {list(target)}")
    if shape == _shape(x):
        return [F.reshape(x, shape)]
    return [F.broadcast_to(x, shape)]


@converter("Tile")
def _tile(cx, ins, at):
    x = cx.var(ins[0])
    repeats = cx.ints(ins[1], "repeats")
    if len(repeats) != x.ndim or min(repeats, default=0) < 0:
        cx.fail(f"repeats {repeats} for a rank-{x.ndim} input (ONNX needs one per axis, none "
                "negative)")
    return [F.tile(x, tuple(repeats))]


@converter("Gather")
def _gather(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim == 0:
        cx.fail("gathers from a 0-d input (ONNX needs rank >= 1)")
    axis = cx.axis(at.get("axis", 0), x.ndim)
    return [F.take(x, _indices(cx, ins[1], _shape(x)[axis]), axis)]


def _indices(cx, idx, n: int):
    """Gather's indices as a Var; known ones checked against the axis's ``[-n, n-1]``."""
    if not isinstance(idx, np.ndarray):
        return idx
    if idx.size and (idx.min() < -n or idx.max() >= n):
        cx.fail(f"indices from {idx.min()} to {idx.max()} on an axis of {n} (ONNX allows "
                f"{-n} to {n - 1})")
    return cx.g.const(np.asarray(idx, np.int64))


@converter("GatherElements")
def _gather_elements(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 0), x.ndim)
    if len(_shape(ins[1])) != x.ndim:
        cx.fail(f"indices of rank {len(_shape(ins[1]))} for a rank-{x.ndim} input (ONNX needs "
                "the same rank)")
    return [F.gather(x, axis, _indices(cx, ins[1], _shape(x)[axis]))]


@converter("Slice")
def _slice(cx, ins, at):
    x = cx.var(ins[0])
    starts, ends = cx.ints(ins[1], "starts"), cx.ints(ins[2], "ends")
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
    steps = cx.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    axes = list(range(len(starts))) if axes is None else cx.axes(axes, x.ndim)
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        cx.fail(f"starts, ends, axes and steps of lengths {len(starts)}, {len(ends)}, "
                f"{len(axes)} and {len(steps)}: ONNX needs one of each per axis")
    if 0 in steps:
        cx.fail("a step of 0")
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(s, e, st)
    return [F.subscript(x, tuple(index))]


@converter("Split")
def _split(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", 0), x.ndim)
    n_out = len(cx.node.output)
    sizes = cx.ints(ins[1], "split") if len(ins) > 1 and ins[1] is not None else None
    if sizes is None and "split" in at:  # opset 13's attribute form
        sizes = list(at["split"])
    size = _shape(x)[axis]
    if sizes is None:
        n = at.get("num_outputs", n_out)
        chunk = -(-size // n)
        sizes = [min(chunk, size - i * chunk) for i in range(n)]
    if len(sizes) != n_out or sum(sizes) != size or min(sizes) < 0:
        cx.fail(f"split sizes {sizes} for {n_out} outputs of an axis of {size}: ONNX needs one "
                "size per output, none negative, summing to the axis")
    bounds = list(np.cumsum(sizes)[:-1])
    if len(sizes) == 1:
        return [F.reshape(x, _shape(x))]
    return F.split(x, [int(b) for b in bounds], axis)


@converter("Pad")
def _pad(cx, ins, at):
    x = cx.var(ins[0])
    pads = cx.ints(ins[1], "pads")
    value = cx.known(ins[2], "constant_value") if len(ins) > 2 and ins[2] is not None else None
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
    axes = list(range(x.ndim)) if axes is None else cx.axes(axes, x.ndim)
    k = len(axes)
    if len(pads) != 2 * k:
        cx.fail(f"{len(pads)} pads for {k} axes (ONNX needs 2 per axis)")
    width = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        width[a] = (pads[i], pads[i + k])
    if any(b < 0 or e < 0 for b, e in width):
        cx.fail("negative pads are not supported")
    mode = at.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "edge", "reflect"):
        cx.fail(f"mode {mode!r} is not supported")
    return [F.pad(x, tuple(width), mode=mode,
                  constant_value=0.0 if value is None else float(np.asarray(value).reshape(-1)[0]))]


@converter("Trilu")
def _trilu(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim < 2:
        cx.fail(f"a rank-{x.ndim} input (Trilu needs rank >= 2)")
    n, m = _shape(x)[-2:]
    rows = cx.g.const(np.arange(n, dtype=np.int64).reshape(n, 1))
    cols = cx.g.const(np.arange(m, dtype=np.int64).reshape(1, m))
    diff = F.sub(cols, rows)
    k = ins[1] if len(ins) > 1 and ins[1] is not None else np.asarray(0, np.int64)
    if isinstance(k, np.ndarray):
        k = int(np.asarray(k).reshape(-1)[0])
        kk = cx.g.const(np.asarray(k, np.int64))
    else:
        kk = F.astype(F.reshape(k, ()), np.int64)
    mask = F.greater_equal(diff, kk) if at.get("upper", 1) else F.less_equal(diff, kk)
    return [F.where(mask, x, cx.g.const(np.zeros((), x.dtype)))]


@converter("Shape")
def _shape_op(cx, ins, at):
    s = np.asarray(_shape(ins[0]), np.int64)
    return [s[at.get("start", 0):at.get("end")]]


@converter("Size")
def _size(cx, ins, at):
    return [np.asarray(math.prod(_shape(ins[0])), np.int64)]


@converter("ConstantOfShape")
def _constant_of_shape(cx, ins, at):
    shape = tuple(cx.ints(ins[0], "the shape"))
    value = at.get("value")
    value = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value)
    return [np.full(shape, value.reshape(-1)[0], value.dtype)]


@converter("Range")
def _range(cx, ins, at):
    start, limit, delta = (cx.known(v, name) for v, name in zip(ins, ("start", "limit", "delta")))
    return [np.arange(start, limit, delta, dtype=np.asarray(start).dtype)]


@converter("Constant")
def _constant(cx, ins, at):
    (key,) = at
    value = at[key]
    if key == "value":
        return [numpy_helper.to_array(value)]
    if key == "value_float":
        return [np.asarray(value, np.float32)]
    if key == "value_floats":
        return [np.asarray(value, np.float32)]
    if key == "value_int":
        return [np.asarray(value, np.int64)]
    if key == "value_ints":
        return [np.asarray(value, np.int64)]
    cx.fail(f"a {key} constant is not supported")


# -- the walk -----------------------------------------------------------------------------
def _fold(node, values: list, opset: int, ir_version: int) -> list:
    """Evaluate one node on known arrays with ONNX's NumPy reference evaluator."""
    from onnx.reference import ReferenceEvaluator  # lazy: loads onnx's whole evaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in zip(names, values) if n]
    outs = [f"out{i}" if n else "" for i, n in enumerate(node.output)]
    copy = helper.make_node(node.op_type, names, outs, domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph([copy], "fold", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ir_version)
    results = ReferenceEvaluator(model).run(None, {n: v for n, v in zip(names, values) if n})
    it = iter(results)
    return [np.asarray(next(it)) if o else None for o in outs]


def _check_ops(graph_proto, opset: int):
    """Every node's op must have a converter at this opset: all others reported at once."""
    missing = Counter()
    for node in graph_proto.node:
        if node.domain not in ("", "ai.onnx"):
            missing[f"{node.domain}.{node.op_type}"] += 1
        elif node.op_type not in CONVERTERS or not same_semantics(node.op_type, opset):
            missing[node.op_type] += 1
    if missing:
        listed = ", ".join(f"{op} (x{n})" for op, n in sorted(missing.items()))
        raise OnnxImportError(f"unsupported ONNX ops at opset {opset}: {listed}; nothing was "
                              "imported", unsupported=dict(missing))


def import_graph(model, *, constants=None, input_shapes=None, limits=None):
    """``(Graph, outputs)`` of an ONNX model; see ``mgegraph.onnx.import_graph``."""
    cx = _Context(Graph(), ImportLimits() if limits is None else limits)
    try:
        return _import(cx, model, dict(constants or {}), dict(input_shapes or {}))
    except OnnxImportError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a file provokes is the file's error
        raise OnnxImportError(f"{cx.where()}: {type(exc).__name__}: {exc}") from exc


def _import(cx: _Context, model, constants: dict, input_shapes: dict):
    model = checks.read_model(model, cx.limits)
    cx.opset = checks.opset_of(model)
    gp = model.graph
    checks.check_structure(gp, cx.limits)
    _check_ops(gp, cx.opset)
    env: dict[str, object] = {"": None}
    for init in gp.initializer:
        cx.stage = f"initializer {init.name!r}"
        checks.check_initializer(init, cx.limits, DTYPES)
        if init.data_location == TensorProto.EXTERNAL:
            cx.fail("its data is in an external file: pass the model's path, so that onnx "
                    "reads that data from the model's folder")
        array = _remember(cx, np.array(numpy_helper.to_array(init), order="C"))
        env[init.name] = array
        cx._param_names[id(array)] = init.name
    declared = {vi.name: vi for vi in gp.input}
    for name, value in constants.items():
        cx.stage = f"constants[{name!r}]"
        if name not in declared:
            cx.fail("the model has no graph input of that name")
        env[name] = _remember(cx, _bound(cx, declared[name], value))
    for vi in gp.input:
        if vi.name not in env:  # else an initializer listed as an input, or a bound constant
            cx.stage = f"graph input {vi.name!r}"
            var = _graph_input(cx, vi, input_shapes.get(vi.name))
            env[vi.name] = var
            cx._input_names[var.id] = vi.name
    cx.stage = None
    for node in gp.node:
        cx.node = node
        for name, value in zip(node.output, _convert(cx, node, [env[n] for n in node.input],
                                                     model.ir_version)):
            if name:
                env[name] = value
    cx.node, cx.stage = None, "the graph's outputs"
    return cx.g, [_output(cx, vi.name, env[vi.name]) for vi in gp.output]


def _bound(cx: _Context, vi, value) -> np.ndarray:
    """A value bound to a graph input: of the input's declared type, as a feed must be."""
    array = np.array(value, order="C")
    tt = vi.type.tensor_type
    if tt.elem_type:
        dtype = _dtype_of(tt.elem_type, cx.where())
        converted = array.astype(dtype)
        nan = array.dtype.kind == "f" and dtype.kind == "f"
        if not np.array_equal(converted, array, equal_nan=nan):
            cx.fail(f"a {array.dtype} value that {dtype}, the input's dtype, does not hold")
        array = converted
    if tt.HasField("shape"):
        dims = tt.shape.dim
        if len(dims) != array.ndim or any(d.HasField("dim_value") and d.dim_value != n
                                          for d, n in zip(dims, array.shape)):
            want = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
            cx.fail(f"a value of shape {list(array.shape)} for an input declared {want}")
    return array


def _graph_input(cx: _Context, vi, shape) -> Var:
    if not vi.type.HasField("tensor_type"):
        cx.fail("it is not a tensor")
    tt = vi.type.tensor_type
    dtype = _dtype_of(tt.elem_type, cx.where())
    if shape is None:
        for axis, dim in enumerate(tt.shape.dim):
            if not dim.HasField("dim_value"):
                label = dim.dim_param or "unknown"
                raise OnnxImportError(
                    f"graph input {vi.name!r} has a dynamic dim {label!r} at axis {axis}; "
                    f"mgegraph needs static shapes: pass input_shapes={{{vi.name!r}: ...}}")
        shape = [dim.dim_value for dim in tt.shape.dim]
    shape = tuple(int(d) for d in shape)
    checks.check_size(cx.where(), shape, dtype, cx.limits, "the input")
    return cx.g.input(vi.name, shape, dtype)


def _convert(cx: _Context, node, ins: list, ir_version: int) -> list:
    """The node's outputs: folded when every input is known, else through its converter;
    its outputs' sizes checked against the limits before either allocates them."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    known = [v if isinstance(v, np.ndarray) else None for v in ins]
    types = [None if v is None else (_shape(v), v.dtype) for v in ins]
    predicted = checks.infer_node(node, known, types, cx.opset, ir_version)
    fold = node.op_type != "Constant" and all(v is None or isinstance(v, np.ndarray) for v in ins) \
        and any(v is not None for v in ins)
    for name, guess in zip(node.output, predicted):
        if guess is not None:
            checks.check_size(cx.where(), guess[0], guess[1], cx.limits, f"output {name!r}")
        elif name and fold:
            cx.fail(f"the size of output {name!r} is not known before it is evaluated, so it "
                    "cannot be checked against the limits")
    if fold:
        _reserve(cx, sum(checks.tensor_bytes(*guess) for guess in predicted if guess))
        outs = _fold(node, ins, cx.opset, ir_version)
    else:
        try:
            outs = CONVERTERS[node.op_type](cx, ins, attrs)
        except OnnxImportError:
            raise
        except GraphError as exc:
            raise OnnxImportError(f"{cx.where()}: {exc}") from exc
    for name, value in zip(node.output, outs):
        if name and value is not None:
            checks.check_size(cx.where(), _shape(value), value.dtype, cx.limits,
                              f"output {name!r}")
    return outs


def _reserve(cx: _Context, nbytes: int) -> None:
    cx.known_bytes += nbytes
    if cx.known_bytes > cx.limits.max_known_bytes:
        cx.fail(f"the arrays known at import would take {cx.known_bytes} bytes, over the limit "
                f"of {cx.limits.max_known_bytes} (ImportLimits.max_known_bytes)")


def _remember(cx: _Context, array: np.ndarray) -> np.ndarray:
    checks.check_size(cx.where(), array.shape, array.dtype, cx.limits)
    _reserve(cx, array.nbytes)
    return array


def _output(cx: _Context, name: str, value):
    cx.stage = f"graph output {name!r}"
    if isinstance(value, np.ndarray):
        if value.dtype not in DTYPES.values():
            cx.fail(f"dtype {value.dtype} is not supported")
        return cx.g.const(value)
    if value.node.op.name in ("input", "param", "const"):
        return F.reshape(value, _shape(value))  # an output is its own value
    return value
