"""mgegraph Graph -> ONNX: one small writer per mgegraph op (the ``WRITERS`` table).

A plan is exported from ``plan.source`` (the graph it was compiled from and its outputs), a
traced function from its latest plan, a ``(graph, outputs)`` pair as it is. Params become
initializers under their names; constants become initializers too; the graph inputs keep their
names; only the nodes the outputs depend on are written.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir.dims import Dim, is_known_nonnegative
from ..ir.graph import Graph, Var
from ..ir.types import is_float
from . import OnnxExportError, export_attention, export_half, export_rnn
from .export_dims import DimWriter, dim_param

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


class _Writer:
    """The ONNX graph being built: nodes, initializers, and a name per mgegraph Var."""

    def __init__(self, graph: Graph, opset: int):
        self.g, self.opset = graph, opset
        self.nodes, self.initializers = [], []
        self.names: dict[int, str] = {}
        self._used: set[str] = set()
        self._count = 0
        self.dims = DimWriter(self, graph.inputs)  # shapes with named sizes, from the inputs

    def fresh(self, hint: str = "t") -> str:
        while True:
            self._count += 1
            name = f"{hint}_{self._count}"
            if name not in self._used:
                self._used.add(name)
                return name

    def claim(self, name: str) -> str:
        if name in self._used:
            raise OnnxExportError(f"the name {name!r} is used twice in the exported graph")
        self._used.add(name)
        return name

    def name(self, var: Var) -> str:
        return self.names[var.id]

    def const(self, array, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), np.int64), "ints")

    def shape(self, values) -> str:
        """``values`` (ints, and Dims of named sizes) as a 1-D int64 tensor."""
        return self.dims.shape(values)

    def add(self, op: str, inputs, n_outputs: int = 1, outputs=None, **attrs) -> list[str]:
        outputs = list(outputs) if outputs is not None else [self.fresh(op.lower())
                                                              for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outputs, **attrs))
        return outputs


def _tensor_type(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


# -- writers: (w, node, input names) -> list of output names (one per node output) ---------
WRITERS: dict = {}


def writer(*names):
    def register(fn):
        for name in names:
            WRITERS[name] = fn
        return fn
    return register


_UNARY = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "exp": "Exp", "log": "Log",
          "sqrt": "Sqrt", "erf": "Erf", "abs": "Abs", "neg": "Neg", "ceil": "Ceil",
          "floor": "Floor", "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos",
          "sign": "Sign", "softplus": "Softplus", "hardswish": "HardSwish", "copy": "Identity"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "pow": "Pow", "maximum": "Max",
           "minimum": "Min", "equal": "Equal", "less": "Less", "greater": "Greater",
           "less_equal": "LessOrEqual", "greater_equal": "GreaterOrEqual", "where": "Where"}

def _same(onnx_op):
    """The writer of an op with one ONNX op of the same inputs."""
    return lambda w, n, ins: w.add(onnx_op, ins)


for _op, _onnx in {**_UNARY, **_BINARY}.items():
    WRITERS[_op] = _same(_onnx)


@writer("div")
def _div(w, n, ins):
    if not is_float(n.inputs[0].dtype):  # NumPy's integer true division is float; mgegraph's too?
        raise OnnxExportError("div of integers has no ONNX form with NumPy's meaning")
    return w.add("Div", ins)


@writer("floor_div")
def _floor_div(w, n, ins):
    if not is_float(n.outputs[0].dtype):
        raise OnnxExportError("floor_div of integers is not exported")
    return w.add("Floor", w.add("Div", ins))


@writer("not_equal")
def _not_equal(w, n, ins):
    return w.add("Not", w.add("Equal", ins))


@writer("square")
def _square(w, n, ins):
    return w.add("Mul", [ins[0], ins[0]])


@writer("rsqrt")
def _rsqrt(w, n, ins):
    return w.add("Reciprocal", w.add("Sqrt", ins))


@writer("log1p")
def _log1p(w, n, ins):
    one = w.const(np.ones((), n.inputs[0].dtype))
    return w.add("Log", w.add("Add", [ins[0], one]))


@writer("silu")
def _silu(w, n, ins):
    return w.add("Mul", [ins[0], w.add("Sigmoid", ins)[0]])


@writer("leaky_relu")
def _leaky_relu(w, n, ins):
    return w.add("LeakyRelu", ins, alpha=float(n.attr["negative_slope"]))


def _gelu_by_formula(w, ins, dtype, tanh: bool):
    c = lambda v: w.const(np.asarray(v, dtype))
    x = ins[0]
    if tanh:
        inner = w.add("Mul", [x, w.add("Add", [c(1.0), w.add("Mul", [c(0.044715),
                                                                  w.add("Mul", [x, x])[0]])[0]])[0]])
        t = w.add("Tanh", w.add("Mul", [inner[0], c(math.sqrt(2 / math.pi))]))
    else:
        t = w.add("Erf", w.add("Mul", [x, c(1 / math.sqrt(2))]))
    return w.add("Mul", [w.add("Mul", [x, c(0.5)])[0], w.add("Add", [t[0], c(1.0)])[0]])


@writer("gelu", "gelu_tanh")
def _gelu(w, n, ins):
    tanh = n.op.name == "gelu_tanh"
    if w.opset >= 20:
        return w.add("Gelu", ins, approximate="tanh" if tanh else "none")
    return _gelu_by_formula(w, ins, n.inputs[0].dtype, tanh)


@writer("cast")
def _cast(w, n, ins):
    return w.add("Cast", ins, to=_tensor_type(n.outputs[0].dtype))


@writer("clip")
def _clip(w, n, ins):
    dtype = n.inputs[0].dtype
    lo, hi = n.attr["lower"], n.attr["upper"]
    bound = lambda v: "" if not np.isfinite(v) else w.const(np.asarray(v, dtype))
    return w.add("Clip", [ins[0], bound(lo), bound(hi)])


@writer("mod")
def _mod(w, n, ins):
    if not is_float(n.outputs[0].dtype):
        return w.add("Mod", ins, fmod=0)  # ONNX's integer Mod takes the divisor's sign, as NumPy
    # NumPy's float remainder: a - floor(a / b) * b
    q = w.add("Floor", w.add("Div", ins))
    return w.add("Sub", [ins[0], w.add("Mul", [q[0], ins[1]])[0]])


# -- trigonometric and hyperbolic math, the roundings -----------------------------------------
for _op in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"):
    WRITERS[_op] = _same(_op.capitalize())
WRITERS["round_half_even"] = _same("Round")


@writer("round")
def _round(w, n, ins):
    # halves away from zero: Round (halves to even) except at a half, where x + sign(x) / 2 is
    # exact (|x| - floor(|x|) is exact too)
    half = w.const(np.asarray(0.5, n.inputs[0].dtype))
    a = w.add("Abs", ins)[0]
    tie = w.add("Equal", [w.add("Sub", [a, w.add("Floor", [a])[0]])[0], half])[0]
    away = w.add("Add", [ins[0], w.add("Mul", [w.add("Sign", ins)[0], half])[0]])[0]
    return w.add("Where", [tie, away, w.add("Round", ins)[0]])


def _negative(w, v, dtype):
    """The sign bit of non-NaN ``v`` as a bool tensor: v < 0 or 1 / v < 0 (-0 has it)."""
    zero = w.const(np.zeros((), dtype))
    return w.add("Or", [w.add("Less", [v, zero])[0],
                        w.add("Less", [w.add("Reciprocal", [v])[0], zero])[0]])[0]


@writer("atan2")
def _atan2(w, n, ins):
    """ONNX has no Atan2: atan(y / x), plus pi with y's sign where x's sign bit is set (x = -0
    included). Where y / x is 0 / 0 or inf / inf (both zeros, both infinite) the point is moved
    to one with the same angle: x to +-1, an infinite y to +-1, a zero y kept; NaN stays NaN."""
    dtype = n.inputs[0].dtype
    c = lambda v: w.const(np.asarray(v, dtype))
    y, x = ins
    ordered = w.add("And", [w.add("Equal", [x, x])[0], w.add("Equal", [y, y])[0]])[0]
    bad = w.add("And", [w.add("IsNaN", w.add("Div", [y, x]))[0], ordered])[0]
    unit_x = w.add("Where", [_negative(w, x, dtype), c(-1.0), c(1.0)])[0]
    unit_y = w.add("Where", [_negative(w, y, dtype), c(-1.0), c(1.0)])[0]
    # a signed zero only ever in Where's second branch: ONNX Runtime's first gives -0 as +0
    x2 = w.add("Where", [bad, unit_x, x])[0]
    y2 = w.add("Where", [w.add("And", [bad, w.add("IsInf", [y])[0]])[0], unit_y, y])[0]
    angle = w.add("Atan", w.add("Div", [y2, x2]))[0]
    turn = w.add("Where", [_negative(w, y2, dtype), c(-np.pi), c(np.pi)])[0]
    return w.add("Where", [_negative(w, x2, dtype), w.add("Add", [angle, turn])[0], angle])


# -- activations ------------------------------------------------------------------------------
# table activations that are one ONNX op, with their attributes (the same names in both)
_ACTIVATIONS = {"elu": ("Elu", ("alpha",)), "celu": ("Celu", ("alpha",)),
                "selu": ("Selu", ("alpha", "gamma")), "softsign": ("Softsign", ()),
                "hardsigmoid": ("HardSigmoid", ("alpha", "beta")),
                "thresholded_relu": ("ThresholdedRelu", ("alpha",)),
                "shrink": ("Shrink", ("lambd", "bias"))}


def _activation_writer(onnx_op, names):
    return lambda w, n, ins: w.add(onnx_op, ins, **{k: float(n.attr[k]) for k in names})


for _op, (_onnx, _names) in _ACTIVATIONS.items():
    WRITERS[_op] = _activation_writer(_onnx, _names)


@writer("mish")
def _mish(w, n, ins):
    if w.opset >= 18:
        return w.add("Mish", ins)
    return w.add("Mul", [ins[0], w.add("Tanh", w.add("Softplus", ins))[0]])


@writer("logsigmoid")
def _logsigmoid(w, n, ins):
    return w.add("Neg", w.add("Softplus", w.add("Neg", ins)))


@writer("prelu")
def _prelu(w, n, ins):
    x = ins[0]
    if n.outputs[0].shape != n.inputs[0].shape:  # ONNX broadcasts the slope to x only
        x = w.add("Expand", [x, w.shape(n.outputs[0].shape)])[0]
    return w.add("PRelu", [x, ins[1]])


def _activation(w, n, outs):
    act = n.attr.get("activation", "none")
    if act == "none":
        return outs
    if act == "relu":
        return w.add("Relu", outs)
    if act == "relu6":  # clip(x, 0, 6), as the epilogue pass found it
        dtype = n.outputs[0].dtype
        return w.add("Clip", [outs[0], w.const(np.asarray(0, dtype)),
                              w.const(np.asarray(6, dtype))])
    raise OnnxExportError(f"{n.op.name} with activation {act!r} is not exported")


@writer("linear")
def _linear(w, n, ins):
    x = n.inputs[0]
    if x.ndim == 2:
        return _activation(w, n, w.add("Gemm", ins, transB=1))
    wt = w.add("Transpose", [ins[1]], perm=[1, 0])
    out = w.add("MatMul", [ins[0], wt[0]])
    if len(ins) > 2:
        out = w.add("Add", [out[0], ins[2]])
    return _activation(w, n, out)


@writer("matmul")
def _matmul(w, n, ins):
    a, b = ins
    for i, flag in ((0, "transpose_a"), (1, "transpose_b")):
        if n.attr.get(flag):
            nd = n.inputs[i].ndim
            perm = list(range(nd - 2)) + [nd - 1, nd - 2]
            t = w.add("Transpose", [ins[i]], perm=perm)[0]
            a, b = (t, b) if i == 0 else (a, t)
    return w.add("MatMul", [a, b])


def _bias_1d(w, n, ins) -> list:
    """A convolution's optional third input as the (C,) bias ONNX wants: [] when it has none."""
    if len(ins) < 3 or n.inputs[2].ndim == 1:
        return ins[2:]
    return w.add("Reshape", [ins[2], w.ints([-1])])


@writer("conv2d")
def _conv(w, n, ins):
    ph, pw = n.attr["padding"]
    out = w.add("Conv", [ins[0], ins[1], *_bias_1d(w, n, ins)], strides=list(n.attr["stride"]),
                pads=[ph, pw, ph, pw], dilations=list(n.attr["dilation"]),
                group=int(n.attr["groups"]), kernel_shape=list(n.inputs[1].shape[2:]))
    return _activation(w, n, out)


# conv2d's data gradient is a transposed convolution: ConvTranspose of the gradient by the weight,
# its output_padding the rows and columns input_hw has past the stride's grid.
# Its bias, where the epilogue pass gave it one, is ConvTranspose's B, (C,) as conv2d's is Conv's.
@writer("conv2d_backward_data")
def _conv_transpose(w, n, ins):
    weight, dy = n.inputs[:2]
    (ph, pw), stride, dilation = n.attr["padding"], n.attr["stride"], n.attr["dilation"]
    extra = [size - ((m - 1) * s + (k - 1) * d + 1 - 2 * p) for size, m, k, s, d, p in zip(
        n.attr["input_hw"], dy.shape[2:], weight.shape[2:], stride, dilation, (ph, pw))]
    return w.add("ConvTranspose", [ins[1], ins[0], *_bias_1d(w, n, ins)], strides=list(stride),
                 pads=[ph, pw, ph, pw], dilations=list(dilation), group=int(n.attr["groups"]),
                 kernel_shape=list(weight.shape[2:]), output_padding=extra)


@writer("batch_norm")
def _batch_norm(w, n, ins):
    if n.attr["training"]:
        raise OnnxExportError("batch_norm with training=True is not exported (inference only)")
    x, weight, bias, mean, var = ins
    flat = []
    for name, v in zip((weight, bias, mean, var), n.inputs[1:]):
        known = w.g.values.get(v.id)  # a param's (C,) copy beside it costs no Reshape node
        flat.append(name if v.ndim == 1 else w.const(np.ravel(known), name) if known is not None
                    else w.add("Reshape", [name, w.ints([-1])])[0])
    out = w.add("BatchNormalization", [x, *flat], epsilon=float(n.attr["eps"]))
    return out + [w.fresh("unused") for _ in n.outputs[1:]]


@writer("max_pool2d", "avg_pool2d")
def _pool(w, n, ins):
    begin = n.attr["padding"]
    end = begin if n.attr["padding_end"] is None else n.attr["padding_end"]
    attrs = {"kernel_shape": list(n.attr["kernel_size"]), "strides": list(n.attr["stride"]),
             "pads": [*begin, *end]}
    if n.attr["ceil_mode"]:
        attrs["ceil_mode"] = 1
    if n.attr["dilation"] != (1, 1):
        if n.op.name == "avg_pool2d" and w.opset < 19:
            raise OnnxExportError(f"avg_pool2d with dilation {n.attr['dilation']}: ONNX's "
                                  f"AveragePool takes dilations from opset 19 (asked: {w.opset})")
        attrs["dilations"] = list(n.attr["dilation"])
    if n.op.name == "max_pool2d":
        return w.add("MaxPool", ins, **attrs)
    return w.add("AveragePool", ins, count_include_pad=int(n.attr["mode"] == "average"), **attrs)


@writer("adaptive_avg_pool2d", "adaptive_max_pool2d")
def _adaptive_pool(w, n, ins):
    oh, ow = n.attr["oshp"]
    h, wd = n.inputs[0].shape[2:]
    avg = n.op.name == "adaptive_avg_pool2d"
    if (oh, ow) == (1, 1):
        return w.add("GlobalAveragePool" if avg else "GlobalMaxPool", ins)
    if isinstance(h, Dim) or isinstance(wd, Dim):
        raise OnnxExportError(f"{n.op.name} of a {h}x{wd} image to {oh}x{ow}: its windows "
                              "depend on the named size, which ONNX pooling cannot take")
    if h % oh or wd % ow:
        raise OnnxExportError(f"{n.op.name} from {h}x{wd} to {oh}x{ow} (windows of unequal "
                              "sizes) has no ONNX pooling form")
    k = [h // oh, wd // ow]
    return w.add("AveragePool" if avg else "MaxPool", ins, kernel_shape=k, strides=k)


@writer("reshape")
def _reshape(w, n, ins):
    return w.add("Reshape", [ins[0], w.shape(n.outputs[0].shape)])


@writer("broadcast_to")
def _broadcast_to(w, n, ins):
    return w.add("Expand", [ins[0], w.shape(n.outputs[0].shape)])


@writer("transpose")
def _transpose(w, n, ins):
    return w.add("Transpose", ins, perm=list(n.attr["pattern"]))


@writer("concat")
def _concat(w, n, ins):
    return w.add("Concat", ins, axis=int(n.attr["axis"]))


@writer("split")
def _split(w, n, ins):
    sizes = [b - a for a, b in n.attr["ranges"]]
    return w.add("Split", [ins[0], w.shape(sizes)], n_outputs=len(sizes),
                 axis=int(n.attr["axis"]))


@writer("slice")
def _slice(w, n, ins):
    shape = n.inputs[0].shape
    starts, ends, axes, steps = [], [], [], []
    for axis, (s, e, st) in enumerate(zip(n.attr["starts"], n.attr["stops"], n.attr["steps"])):
        if s is None and e is None and st in (None, 1):
            continue
        if any(isinstance(v, Dim) for v in (shape[axis], s, e)):
            start, stop, step = _slice_bounds(s, e, 1 if st is None else st, shape[axis])
        else:
            start, stop, step = slice(s, e, st).indices(shape[axis])
            if step < 0 and start < 0:  # nothing (ONNX would read -1 as the last element)
                start = stop = 0
            elif step < 0 and stop < 0:
                stop = INT64_MIN  # past the first element
        starts.append(start), ends.append(stop), axes.append(axis), steps.append(step)
    if not axes:
        return w.add("Identity", ins)
    return w.add("Slice", [ins[0], w.shape(starts), w.shape(ends), w.ints(axes), w.ints(steps)])


def _slice_bounds(start, stop, step, size) -> tuple:
    """Python's slice bounds as ONNX Slice reads them, for an axis whose size is named: an
    absent bound is the axis's far end. The clamping is the same but for one case: stepping
    back from a start below ``-size``, Python takes nothing and ONNX the first element, so a
    start that may be one is refused."""
    if step < 0 and start is not None and not (is_known_nonnegative(start)
                                                or is_known_nonnegative(start + size)):
        raise OnnxExportError(f"slice({start}, {stop}, {step}) on an axis of size {size}: "
                              "ONNX's Slice and Python's differ when the start is below "
                              f"-{size}, which the named size leaves open")
    if step > 0:
        return (0 if start is None else start, INT64_MAX if stop is None else stop, step)
    return (INT64_MAX if start is None else start, INT64_MIN if stop is None else stop, step)


@writer("take")
def _take(w, n, ins):
    return w.add("Gather", ins, axis=int(n.attr["axis"]))


# the embedding lookup (ops/sequence.py): a Gather of rows; padding_idx only masks gradients
@writer("embedding")
def _embedding(w, n, ins):
    return w.add("Gather", ins, axis=0)


# RMS norm (ops/sequence.py): RMSNormalization is opset 23, past the opsets written, so the
# ops of its definition: x / sqrt(mean(x^2) + eps) * scale
@writer("rms_norm")
def _rms_norm(w, n, ins):
    x, scale = ins
    ndim, k = n.inputs[0].ndim, len(n.attr["normalized_shape"])
    mean = _reduce_node(w, "ReduceMean", w.add("Mul", [x, x])[0], list(range(ndim - k, ndim)),
                        True)
    eps = w.const(np.asarray(float(n.attr["eps"]), n.inputs[0].dtype))
    rms = w.add("Sqrt", w.add("Add", [mean[0], eps]))
    return w.add("Mul", [w.add("Div", [x, rms[0]])[0], scale])


# scaled dot-product attention (ops/attention.py): MatMul/Softmax nodes (onnx/export_attention.py)
WRITERS["attention"] = export_attention.write_attention


@writer("gather")
def _gather(w, n, ins):
    return w.add("GatherElements", ins, axis=int(n.attr["axis"]))


@writer("pad")
def _pad(w, n, ins):
    width = n.attr["pad_width"]
    pads = [b for b, _ in width] + [e for _, e in width]
    value = w.const(np.asarray(n.attr["constant_value"], n.inputs[0].dtype))
    if n.attr["mode"] == "wrap" and w.opset < 19:
        raise OnnxExportError(f"Pad's mode 'wrap' is ONNX's from opset 19, not {w.opset}")
    return w.add("Pad", [ins[0], w.ints(pads), value], mode=n.attr["mode"])


# -- resampling: resize as Resize (pixel_shuffle is written as its reshapes and transpose) ----
_RESIZE_SINCE = {"half_pixel_symmetric": 19}  # newer coordinate transformations' opsets


@writer("resize")
def _resize(w, n, ins):
    a, x = n.attr, n.inputs[0]
    coord, lead = a["coord"], x.ndim - len(a["size"])
    if coord == "tf_half_pixel_for_nearest" or w.opset < _RESIZE_SINCE.get(coord, 13):
        raise OnnxExportError(f"coordinate transformation {coord!r} is not in Resize at opset "
                              f"{w.opset}")
    attrs = {"mode": a["mode"], "coordinate_transformation_mode": coord,
             "nearest_mode": a["nearest_mode"], "cubic_coeff_a": a["cubic_a"],
             "exclude_outside": int(a["exclude_outside"])}
    if a["antialias"]:  # the filter stretched when downscaling: Resize's from opset 18
        if w.opset < 18:
            raise OnnxExportError(f"Resize takes antialias from opset 18, not {w.opset}")
        attrs["antialias"] = 1
    if a["scale"] is None:  # Resize takes out / in as the scale of given sizes, as resize does
        return w.add("Resize", [ins[0], "", "", w.shape((*x.shape[:lead], *a["size"]))],
                     **attrs)
    scales = w.const(np.asarray((1.0,) * lead + a["scale"], np.float32), "scales")
    return w.add("Resize", [ins[0], "", scales], **attrs)


_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
           "prod": "ReduceProd"}


def _reduce_node(w, op, x, axes, keep):
    if op == "ReduceSum" or w.opset >= 18:
        return w.add(op, [x, w.ints(axes)], keepdims=int(keep))
    return w.add(op, [x], axes=list(axes), keepdims=int(keep))


@writer(*_REDUCE)
def _reduce(w, n, ins):
    axis = n.attr["axis"]
    axes = range(n.inputs[0].ndim) if axis is None else (axis if isinstance(axis, tuple)
                                                           else (axis,))
    return _reduce_node(w, _REDUCE[n.op.name], ins[0], list(axes), n.attr["keepdims"])


@writer("var")
def _var(w, n, ins):
    axis = n.attr["axis"]
    axes = list(range(n.inputs[0].ndim) if axis is None else (axis if isinstance(axis, tuple)
                                                               else (axis,)))
    mean = _reduce_node(w, "ReduceMean", ins[0], axes, True)
    d = w.add("Sub", [ins[0], mean[0]])
    return _reduce_node(w, "ReduceMean", w.add("Mul", [d[0], d[0]])[0], axes,
                        n.attr["keepdims"])


@writer("argmax", "argmin")
def _argmax(w, n, ins):
    x = n.inputs[0]
    axis = n.attr["axis"]
    axes = tuple(range(x.ndim)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    op = "ArgMax" if n.op.name == "argmax" else "ArgMin"
    if len(axes) == 1:
        out = w.add(op, ins, axis=int(axes[0]), keepdims=int(n.attr["keepdims"]))
    else:
        if tuple(axes) != tuple(range(x.ndim)):
            raise OnnxExportError(f"{n.op.name} over axes {axes} is not exported")
        flat = w.add("Reshape", [ins[0], w.ints([-1])])
        out = w.add(op, flat, axis=0, keepdims=0)
        out = w.add("Reshape", [out[0], w.shape(n.outputs[0].shape)])
    if n.outputs[0].dtype != np.int64:
        out = w.add("Cast", out, to=_tensor_type(n.outputs[0].dtype))
    return out


@writer("softmax", "log_softmax")
def _softmax(w, n, ins):
    return w.add("Softmax" if n.op.name == "softmax" else "LogSoftmax", ins,
                 axis=int(n.attr["axis"]))


@writer("layer_norm")
def _layer_norm(w, n, ins):
    k = len(n.attr["normalized_shape"])
    eps = float(n.attr["eps"])
    if w.opset >= 17:
        return w.add("LayerNormalization", ins, axis=-k, epsilon=eps)
    x, scale, bias = ins
    axes = list(range(n.inputs[0].ndim - k, n.inputs[0].ndim))
    mean = _reduce_node(w, "ReduceMean", x, axes, True)
    d = w.add("Sub", [x, mean[0]])
    var = _reduce_node(w, "ReduceMean", w.add("Mul", [d[0], d[0]])[0], axes, True)
    std = w.add("Sqrt", w.add("Add", [var[0], w.const(np.asarray(eps, n.inputs[0].dtype))]))
    y = w.add("Div", [d[0], std[0]])
    return w.add("Add", [w.add("Mul", [y[0], scale])[0], bias])


@writer("group_norm")
def _group_norm(w, n, ins):
    x, scale, bias = ins
    groups, eps = int(n.attr["groups"]), float(n.attr["eps"])
    if w.opset >= 21:  # GroupNormalization-21: scale and bias per channel
        return _activation(w, n, w.add("GroupNormalization", ins, num_groups=groups,
                                       epsilon=eps))
    # before: InstanceNormalization over (N, groups, -1), then the per-channel affine
    shape = n.inputs[0].shape
    dtype = n.inputs[0].dtype
    grouped = w.add("Reshape", [x, w.ints([shape[0], groups, -1])])
    normed = w.add("InstanceNormalization", [grouped[0], w.const(np.ones(groups, dtype)),
                                             w.const(np.zeros(groups, dtype))], epsilon=eps)
    y = w.add("Reshape", [normed[0], w.ints(list(shape))])
    per_channel = w.ints([shape[1]] + [1] * (len(shape) - 2))
    scaled = w.add("Mul", [y[0], w.add("Reshape", [scale, per_channel])[0]])
    return _activation(w, n, w.add("Add", [scaled[0], w.add("Reshape", [bias, per_channel])[0]]))


@writer("fill")
def _fill(w, n, ins):
    out = n.outputs[0]
    value = numpy_helper.from_array(np.full((1,), n.attr["value"], out.dtype))
    return w.add("ConstantOfShape", [w.shape(out.shape)], value=value)


# -- detection and geometry (ops/vision.py) -------------------------------------------------
_GRID_MODES_20 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
# remap's borders that GridSample's paddings give, sampling at pixels (align_corners=1):
# replicating taps is clipping the point, reflect_101 is reflecting it about the edge pixels
_REMAP_PADDINGS = {"replicate": "border", "reflect_101": "reflection", "constant": "zeros"}


def _grid_sample_node(w, ins, mode, padding, aligned):
    if w.opset < 16:
        raise OnnxExportError(f"ONNX has GridSample from opset 16; this export is at opset "
                              f"{w.opset} (export with opset=16 or later)")
    mode = _GRID_MODES_20[mode] if w.opset >= 20 else mode
    return w.add("GridSample", ins, mode=mode, padding_mode=padding, align_corners=int(aligned))


@writer("grid_sample")
def _grid_sample(w, n, ins):
    return _grid_sample_node(w, ins, n.attr["mode"], n.attr["padding_mode"],
                             n.attr["align_corners"])


# grid_sample over volumes: GridSample is N-D from opset 20
@writer("grid_sample3d")
def _grid_sample3d(w, n, ins):
    if w.opset < 20:
        raise OnnxExportError(f"GridSample samples 5-D inputs from opset 20; this export is at "
                              f"opset {w.opset} (export with opset=20 or later)")
    return _grid_sample_node(w, ins, n.attr["mode"], n.attr["padding_mode"],
                             n.attr["align_corners"])


@writer("remap")
def _remap(w, n, ins):
    border, h, wd = n.attr["border_mode"], *n.inputs[0].shape[2:]
    padding = _REMAP_PADDINGS.get(border)
    if padding is None or (border == "constant" and n.attr["scalar"] != 0):
        raise OnnxExportError(f"remap with border_mode={border!r} (scalar {n.attr['scalar']}) "
                              "has no GridSample padding; replicate, reflect_101 and constant "
                              "0 do")
    if isinstance(h, Dim) or isinstance(wd, Dim) or h < 2 or wd < 2:
        raise OnnxExportError(f"remap of a {h}x{wd} image: GridSample's points are pixels "
                              "over the image's span, which needs known sides of 2 or more")
    dtype = n.inputs[1].dtype
    scale = w.const(np.array([2 / (wd - 1), 2 / (h - 1)], dtype))
    points = w.add("Sub", [w.add("Mul", [ins[1], scale])[0], w.const(np.ones((), dtype))])
    mode = "bilinear" if n.attr["interp_mode"] == "linear" else "nearest"
    if n.inputs[0].dtype == np.uint8:
        return _remap_u8(w, ins[0], points[0], mode, padding)
    return _grid_sample_node(w, [ins[0], points[0]], mode, padding, True)


# remap of a uint8 image: ONNX Runtime's GridSample reads floats only, and ONNX leaves integer
# rounding unsaid, so the image is sampled as float32, then rounded as remap rounds (Round is
# half to even) and saturated; float32 sums may land 1 off mgegraph's double ones near a tie
def _remap_u8(w, image, points, mode, padding):
    image = w.add("Cast", [image], to=onnx.TensorProto.FLOAT)
    (y,) = _grid_sample_node(w, [image[0], points], mode, padding, True)
    y = w.add("Clip", [w.add("Round", [y])[0], w.const(np.array(0, np.float32)),
                       w.const(np.array(255, np.float32))])
    return w.add("Cast", y, to=onnx.TensorProto.UINT8)


@writer("roi_align")
def _roi_align(w, n, ins):
    at = n.attr
    (sh, sw), aligned = at["sample_points"], at["aligned"]
    if at["convention"] != "onnx":
        raise OnnxExportError("roi_align in MegEngine's convention (zeros outside the image) "
                              "is not ONNX's RoiAlign (points clamped at its edge); "
                              "convention='onnx' exports")
    if sh != sw or (aligned and w.opset < 16):
        raise OnnxExportError(f"RoiAlign takes one sampling ratio (got {sh}x{sw}) and aligns "
                              f"half pixels from opset 16 (this export: {w.opset})")
    boxes = w.add("Slice", [ins[1], w.ints([1]), w.ints([5]), w.ints([1])])
    index = w.add("Cast", w.add("Gather", [ins[1], w.const(np.array(0, np.int64))], axis=1),
                  to=onnx.TensorProto.INT64)
    attrs = {"coordinate_transformation_mode": "half_pixel" if aligned else "output_half_pixel"}
    return w.add("RoiAlign", [ins[0], *boxes, *index], mode="avg" if at["mode"] == "average"
                 else "max", output_height=at["output_shape"][0],
                 output_width=at["output_shape"][1], sampling_ratio=sh,
                 spatial_scale=float(at["spatial_scale"]), **(attrs if w.opset >= 16 else {}))


@writer("roi_pooling")
def _roi_pooling(w, n, ins):
    if n.attr["mode"] != "max":
        raise OnnxExportError("roi_pooling's average mode has no ONNX form (MaxRoiPool pools "
                              "by max)")
    return w.add("MaxRoiPool", ins, pooled_shape=list(n.attr["output_shape"]),
                 spatial_scale=float(n.attr["scale"]))


# -- deformable sampling (ops/deform.py) ----------------------------------------------------
@writer("deform_im2col")
def _deform_im2col(w, n, ins):
    """The columns as DeformConv with a one-hot weight in one group per channel: output
    channel c * K + k is channel c's tap k, the column order of deform_im2col."""
    if w.opset < 19:
        raise OnnxExportError(f"ONNX has DeformConv from opset 19; this export is at opset "
                              f"{w.opset} (export with opset=19 or later)")
    x, offset, at = n.inputs[0], n.inputs[1], n.attr
    (kh, kw), (ph, pw) = at["kernel_size"], at["padding"]
    taps, channels = kh * kw, x.shape[1]
    one_hot = np.tile(np.eye(taps, dtype=x.dtype).reshape(taps, 1, kh, kw), (channels, 1, 1, 1))
    return w.add("DeformConv", [ins[0], w.const(one_hot), ins[1], "", ins[2]], group=channels,
                 offset_group=offset.shape[1] // (2 * taps), kernel_shape=[kh, kw],
                 pads=[ph, pw, ph, pw], strides=list(at["stride"]),
                 dilations=list(at["dilation"]))


# -- sorting and scans (ops/sorting.py) ----------------------------------------------------
@writer("sort", "topk")
def _topk(w, n, ins):
    """TopK along the last axis (sort: k is the whole axis), its int64 indices cast to int32."""
    values, indices = n.outputs
    k = w.ints([values.shape[-1]])
    out = w.add("TopK", [ins[0], k], n_outputs=2, axis=-1,
                largest=int(n.attr["descending"]), sorted=1)
    return [out[0], *w.add("Cast", [out[1]], to=_tensor_type(indices.dtype))]


@writer("cumsum")
def _cumsum(w, n, ins):
    axis = w.const(np.array(n.attr["axis"], np.int64), "axis")
    return w.add("CumSum", [ins[0], axis], exclusive=int(n.attr["exclusive"]),
                 reverse=int(n.attr["reverse"]))


# MegEngine's sliding windows (onnx/export_window.py: Pad and Slices; Col2Im). matinv has no
# writer: ONNX's default domain has no matrix inverse (only ONNX Runtime's com.microsoft
# Inverse, which other runtimes do not read), so export refuses it by name as any op without one
from . import export_window

WRITERS.update(export_window.WRITERS)


# -- the walk -----------------------------------------------------------------------------
def _source(obj):
    """(graph, outputs) of a Plan, a traced function, a Predictor or a (graph, outputs) pair."""
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], Graph):
        graph, outputs = obj
        outputs = [outputs] if isinstance(outputs, Var) else list(outputs)
        return graph, outputs
    plan = getattr(obj, "plan", None)
    plan = obj if plan is None else plan
    source = getattr(plan, "source", None)
    if source is None:
        if hasattr(obj, "plan") and getattr(obj, "plan", None) is None:
            raise OnnxExportError("the traced function has no plan yet: call it once first")
        raise OnnxExportError(f"cannot export a {type(obj).__name__}: pass a Plan, a traced "
                              "function, a compile_module predictor or (graph, outputs)")
    return source.graph, list(source.outputs)


def _needed(graph: Graph, outputs) -> list:
    """The nodes ``outputs`` depend on, in graph order."""
    want = {v.id for v in outputs}
    keep = []
    for node in reversed(graph.nodes):
        if any(v.id in want for v in node.outputs):
            keep.append(node)
            want.update(v.id for v in node.inputs)
    return keep[::-1]


def export(obj, path=None, opset: int = 17, *, output_names=None):
    if not 13 <= opset <= 21:
        raise OnnxExportError(f"opset {opset}: mgegraph writes opsets 13 to 21")
    graph, outputs = _source(obj)
    nodes = _needed(graph, outputs)
    missing = Counter(n.op.name for n in nodes
                      if n.op.name not in WRITERS and n.op.name not in ("input", "param", "const"))
    if missing:
        listed = ", ".join(f"{op} (x{k})" for op, k in sorted(missing.items()))
        raise OnnxExportError(f"mgegraph ops without an ONNX form: {listed}")
    w = _Writer(graph, opset)
    inputs, used_inputs = [], {v.id for n in nodes for v in n.inputs} | {v.id for v in outputs}
    for name, var in graph.inputs.items():  # every graph input, in the order they were made
        w.names[var.id] = w.claim(name)
        inputs.append(helper.make_tensor_value_info(name, _tensor_type(var.dtype),
                                                    [dim_param(d) for d in var.shape]))
    for name, var in graph.params.items():
        if var.id in used_inputs:
            w.names[var.id] = w.claim(name)
            w.initializers.append(numpy_helper.from_array(
                np.array(graph.values[var.id], order="C"), name))
    # recurrent layers as ONNX RNN/GRU/LSTM nodes, written where their first node was
    regions = export_rnn.covered(export_rnn.find(graph, nodes, outputs))
    for node in nodes:
        op = node.op.name
        region = regions.get(id(node))
        if region is not None:
            if node is region.nodes[0]:
                w.names.update(export_rnn.write(w, region))
            continue
        if op in ("input", "param"):
            continue
        if op == "const":
            w.names[node.outputs[0].id] = w.const(graph.values[node.outputs[0].id])
            continue
        ins = [w.name(v) for v in node.inputs]
        try:
            outs = export_half.write(w, node, ins, WRITERS[op])
        except OnnxExportError as exc:
            raise OnnxExportError(f"{op} node made at {node.location}: {exc}") from None
        for var, name in zip(node.outputs, outs):
            w.names[var.id] = name
    names = list(output_names) if output_names is not None else [f"output{i}" for i in
                                                                  range(len(outputs))]
    if len(names) != len(outputs):
        raise OnnxExportError(f"{len(names)} output names for {len(outputs)} outputs")
    out_infos, rename = [], {}
    produced = {name for node in w.nodes for name in node.output}
    for var, name in zip(outputs, names):
        current = w.name(var)
        if current in produced and current not in rename:
            rename[current] = w.claim(name)  # the node that makes it writes the output itself
        else:  # a graph input, a weight, or an output listed twice
            w.add("Identity", [rename.get(current, current)], outputs=[w.claim(name)])
        out_infos.append(helper.make_tensor_value_info(name, _tensor_type(var.dtype),
                                                       [dim_param(d) for d in var.shape]))
    for node in w.nodes:
        for field in (node.input, node.output):
            for i, name in enumerate(field):
                if name in rename:
                    field[i] = rename[name]
    onnx_graph = helper.make_graph(w.nodes, "mgegraph", inputs, out_infos, w.initializers)
    model = helper.make_model(onnx_graph, producer_name="mgegraph",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, _IR_FOR_OPSET.get(opset, 8))
    onnx.checker.check_model(model, full_check=True)
    if path is not None:
        onnx.save(model, str(path))
    return model


# the newest IR version each opset shipped with, so older runtimes load the file
_IR_FOR_OPSET = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}


# -- quantization (ops/quantize.py): QuantizeLinear and DequantizeLinear with the parameters of
# the quantized type; a quantized value is plain integers in ONNX, so as_quantized is Identity
def _quant_inputs(w, quant, dtype) -> list[str]:
    """The scale and zero point initializers of ``quant`` (1-D per axis, scalars per tensor)."""
    shape = (len(quant.scales),) if quant.per_channel else ()
    scale = np.asarray(quant.scales, np.float32).reshape(shape)
    zero_point = np.asarray(quant.zero_points, dtype).reshape(shape)
    return [w.const(scale, "scale"), w.const(zero_point, "zero_point")]


def _quant_axis(quant) -> dict:
    return {"axis": quant.axis} if quant.per_channel else {}


@writer("quantize")
def _quantize(w, n, ins):
    out = n.outputs[0]
    if out.dtype == np.int32:
        raise OnnxExportError("quantize to int32 has no QuantizeLinear form at the opsets the "
                              "exporter writes (int8 and uint8 have)")
    if n.inputs[0].dtype != np.float32:
        raise OnnxExportError(f"QuantizeLinear takes float32 values, not {n.inputs[0].dtype}")
    return w.add("QuantizeLinear", [ins[0], *_quant_inputs(w, out.type.quant, out.dtype)],
                 **_quant_axis(out.type.quant))


@writer("dequantize")
def _dequantize(w, n, ins):
    q = n.inputs[0]
    if n.outputs[0].dtype != np.float32:
        raise OnnxExportError(f"DequantizeLinear gives float32 values, not {n.outputs[0].dtype}")
    return w.add("DequantizeLinear", [ins[0], *_quant_inputs(w, q.type.quant, q.dtype)],
                 **_quant_axis(q.type.quant))


WRITERS["as_quantized"] = _same("Identity")


# -- fake quantization (ops/fake_quant.py): QuantizeLinear then DequantizeLinear, the same floats
# where the scale and zero point are constants (a frozen or QAT-exported model) and the range is
# a whole int8 or uint8 one (QuantizeLinear saturates to its storage type's)
_FAKE_QUANT_STORAGE = {(-128, 127): np.int8, (0, 255): np.uint8}


def _fake_quant_params(w, n) -> list[str]:
    scale, zero_point = (w.g.values.get(v.id) for v in n.inputs[1:])
    if scale is None or zero_point is None:
        raise OnnxExportError("fake_quant's scale and zero point must be constants to export it "
                              "(QuantizeLinear's are): compile with freeze=True")
    storage = _FAKE_QUANT_STORAGE.get((n.attr["qmin"], n.attr["qmax"]))
    if storage is None:
        raise OnnxExportError(f"fake_quant to [{n.attr['qmin']}, {n.attr['qmax']}]: "
                              f"QuantizeLinear saturates to int8's or uint8's whole range")
    zp = np.asarray(zero_point, np.float64)
    info = np.iinfo(storage)
    if np.any(zp != np.rint(zp)) or zp.min() < info.min or zp.max() > info.max:
        raise OnnxExportError(f"fake_quant's zero point {zp.tolist()} is not an integer of "
                              f"{np.dtype(storage)}")
    shape = (scale.size,) if n.attr["axis"] is not None else ()
    return [w.const(np.asarray(scale, np.float32).reshape(shape), "scale"),
            w.const(zp.astype(storage).reshape(shape), "zero_point")]


@writer("fake_quant")
def _fake_quant(w, n, ins):
    if n.inputs[0].dtype != np.float32:
        raise OnnxExportError(f"QuantizeLinear takes float32 values, not {n.inputs[0].dtype}")
    params = _fake_quant_params(w, n)
    axis = {} if n.attr["axis"] is None else {"axis": n.attr["axis"]}
    q = w.add("QuantizeLinear", [ins[0], *params], **axis)
    return w.add("DequantizeLinear", [*q, *params], **axis)


# the int8 compute ops (onnx/export_quant.py): QDQ around the float op, as quantize_static writes
from . import export_quant

WRITERS.update(export_quant.WRITERS)
