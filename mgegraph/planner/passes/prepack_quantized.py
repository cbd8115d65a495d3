"""Weight prepacking of the int8 ops: ``quantized_conv2d(x, w, b)`` and
``quantized_linear(x, w, b)`` whose weight and bias read only weights become
``quantized_conv2d_packed(x, quantized_pack_weight(w, b))`` (``quantized_linear_packed``), so
they are packed once (the CPU's int8 GEMM layout and per-channel constants,
ops/quantized_pack.py) instead of every run: a constant weight here, in NumPy (the packed
const replaces it), one that reads a param by the plan's prologue. prepack.py runs it for a
target that packs weights.

The transposed convolution and the batched matmul likewise:
``quantized_conv_transpose2d(x, w[, b])`` becomes ``quantized_conv_transpose2d_packed(x,
quantized_pack_transposed_weight(w)[, b])`` (its bias stays an input: the kernel adds it per
output channel after the col2im, so it may be anything), and ``quantized_batch_matmul(a, b[,
bias])`` whose ``a`` has no batch (1, n, k) becomes ``quantized_batch_matmul_packed(b,
quantized_pack_weight(a[, bias]))``; an ``a`` with a batch is a different matrix per batch and
stays as it is.

A depthwise convolution (groups == channels == out channels) keeps its op: its kernel reads the
weights as they are. As in prepack.py, only weights no assign writes are packed, and a weight
computed from consts alone is left for ``compile(freeze=True)``, which folds it and runs the
pass again.

>>> str(prepack_quantized(g, [y]).graph)  # quantized_conv2d %x %w %b -> ..._packed %x %p
"""
from __future__ import annotations

from ...ops.quantized_pack import pack_transposed_weight_array, pack_weight_array
from ...ops.registry import named
from .rewrite import PassResult, rebuild, result, weight_values

PACKED_OPS = {"quantized_conv2d": "quantized_conv2d_packed",
              "quantized_linear": "quantized_linear_packed",
              "quantized_conv_transpose2d": "quantized_conv_transpose2d_packed",
              "quantized_batch_matmul": "quantized_batch_matmul_packed"}
# the ops whose bias is added after the GEMM, so it stays an input of the packed op
_BIAS_KEPT = ("quantized_conv_transpose2d",)


def _depthwise(node) -> bool:
    x, w = node.inputs[:2]
    groups = node.attr["groups"]
    return groups > 1 and groups == x.shape[1] == w.shape[0]


def _weight_and_x(node):
    """(the weight, the activation) of an int8 op: the batched matmul's a is its first input."""
    a, b = node.inputs[:2]
    return (a, b) if node.op.name == "quantized_batch_matmul" else (b, a)


def _packable(node, fixed, from_param, consts) -> bool:
    name = node.op.name
    if name not in PACKED_OPS or (name == "quantized_conv2d" and _depthwise(node)):
        return False
    w, _ = _weight_and_x(node)
    if name == "quantized_batch_matmul" and (named(w.shape[0]) or w.shape[0] != 1):
        return False
    packed_bias = [] if name in _BIAS_KEPT else node.inputs[2:]
    return ((w.id in from_param or w.id in consts)
            and all(b.id in fixed for b in packed_bias))


def _pack(builder, node, w, consts, attrs):
    """The packed weight ``w``: a const packed here, or the pack op the plan's prologue runs."""
    transposed = node.op.name in _BIAS_KEPT
    bias = [] if transposed else list(node.inputs[2:])
    quant = w.type.quant
    if all(v.id in consts for v in (w, *bias)):  # packed here, the const kept packed
        values = [builder.old.values[v.id] for v in (w, *bias)]
        if transposed:
            array = pack_transposed_weight_array(values[0], quant.zero_points, **attrs)
        else:
            weight = values[0].reshape(w.shape[-2:]) if w.ndim == 3 else values[0]
            array = pack_weight_array(weight, quant.zero_points, (values[1:] or [None])[0],
                                      **attrs)
        return builder.const(array, node.location)
    op = "quantized_pack_transposed_weight" if transposed else "quantized_pack_weight"
    (packed,) = builder.add(op, [builder.var(v) for v in (w, *bias)], attrs, node)
    return packed


def prepack_quantized(graph, outputs) -> PassResult:
    fixed, from_param = weight_values(graph)
    consts = {n.outputs[0].id for n in graph.nodes if n.op.name == "const"}
    chosen = {id(n) for n in graph.nodes if _packable(n, fixed, from_param, consts)}
    if not chosen:
        return PassResult(graph, list(outputs), False, {"int8 packed": 0})

    def rewrite(builder, node):
        if id(node) not in chosen:
            return None
        w, x_old = _weight_and_x(node)
        x = builder.var(x_old)
        zx, x_dtype = x.type.quant.zero_point, x.dtype.name
        pack_attrs = {"groups": node.attr.get("groups", 1), "x_zero_point": zx,
                      "x_dtype": x_dtype}
        packed = _pack(builder, node, w, consts, pack_attrs)
        kept = [builder.var(v) for v in node.inputs[2:]] if node.op.name in _BIAS_KEPT else []
        attrs = {**node.attr, "weight_shape": tuple(w.shape),
                 "weight_scales": tuple(w.type.quant.scales), "x_zero_point": zx,
                 "x_dtype": x_dtype}
        return builder.add(PACKED_OPS[node.op.name], [x, packed, *kept], attrs, node)

    return result(rebuild(graph, rewrite), outputs, True, {"int8 packed": len(chosen)})
