"""Weight prepacking of the int8 ops: ``quantized_conv2d(x, w, b)`` and
``quantized_linear(x, w, b)`` whose weight and bias read only weights become
``quantized_conv2d_packed(x, quantized_pack_weight(w, b))`` (``quantized_linear_packed``), so
they are packed once (the CPU's int8 GEMM layout and per-channel constants,
ops/quantized_pack.py) instead of every run: a constant weight here, in NumPy (the packed
const replaces it), one that reads a param by the plan's prologue. prepack.py runs it for a target that packs weights.

A depthwise convolution (groups == channels == out channels) keeps its op: its kernel reads the
weights as they are. As in prepack.py, only weights no assign writes are packed, and a weight
computed from consts alone is left for ``compile(freeze=True)``, which folds it and runs the
pass again.

>>> str(prepack_quantized(g, [y]).graph)  # quantized_conv2d %x %w %b -> ..._packed %x %p
"""
from __future__ import annotations

from ...ops.quantized_pack import pack_weight_array
from .rewrite import PassResult, rebuild, result, weight_values

PACKED_OPS = {"quantized_conv2d": "quantized_conv2d_packed",
              "quantized_linear": "quantized_linear_packed"}


def _depthwise(node) -> bool:
    x, w = node.inputs[:2]
    groups = node.attr["groups"]
    return groups > 1 and groups == x.shape[1] == w.shape[0]


def _packable(node, fixed, from_param, consts) -> bool:
    if node.op.name not in PACKED_OPS or (node.op.name == "quantized_conv2d"
                                          and _depthwise(node)):
        return False
    w, *bias = node.inputs[1:]
    return ((w.id in from_param or w.id in consts)
            and all(b.id in fixed for b in bias))


def prepack_quantized(graph, outputs) -> PassResult:
    fixed, from_param = weight_values(graph)
    consts = {n.outputs[0].id for n in graph.nodes if n.op.name == "const"}
    chosen = {id(n) for n in graph.nodes if _packable(n, fixed, from_param, consts)}
    if not chosen:
        return PassResult(graph, list(outputs), False, {"int8 packed": 0})

    def rewrite(builder, node):
        if id(node) not in chosen:
            return None
        x, w, *bias = (builder.var(v) for v in node.inputs)
        zx, x_dtype = x.type.quant.zero_point, x.dtype.name
        pack_attrs = {"groups": node.attr.get("groups", 1), "x_zero_point": zx,
                      "x_dtype": x_dtype}
        if all(v.id in consts for v in node.inputs[1:]):  # packed here, the const kept packed
            values = [builder.old.values[v.id] for v in node.inputs[1:]]
            packed = builder.const(pack_weight_array(values[0], w.type.quant.zero_points,
                                                     (values[1:] or [None])[0], **pack_attrs),
                                   node.location)
        else:  # packed by the plan's prologue
            (packed,) = builder.add("quantized_pack_weight", [w, *bias], pack_attrs, node)
        attrs = {**node.attr, "weight_shape": tuple(w.shape),
                 "weight_scales": tuple(w.type.quant.scales), "x_zero_point": zx,
                 "x_dtype": x_dtype}
        return builder.add(PACKED_OPS[node.op.name], [x, packed], attrs, node)

    return result(rebuild(graph, rewrite), outputs, True, {"int8 packed": len(chosen)})
