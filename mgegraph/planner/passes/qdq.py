"""QDQ folding: a float op between dequantizes and a quantize becomes the int8 op it stands for.

A QDQ model (ONNX Runtime's ``quantize_static``, a QAT export) says "int8" by wrapping float ops
in quantize/dequantize pairs. This pass rewrites

- ``quantize(act(conv2d(dequantize(xq), dequantize(wq)[, bias]) [+ bias]))`` into
  ``quantized_conv2d(xq, wq, bias_int32)``, ``act`` none or relu (a relu node or conv2d's own
  ``activation``), the int32 bias in units of ``sx * sw[o]``;
- the same around ``linear`` and around ``matmul`` with a constant 2-D weight (a (K, N) weight
  is transposed to (N, K) here, once) into ``quantized_linear``;
- the same around ``conv2d_backward_data(dequantize(wq), dequantize(xq))``, the form ONNX's
  ConvTranspose and ``conv_transpose2d`` import to when their padding is symmetric (no crop or
  pad after it), into ``quantized_conv_transpose2d`` (its output_padding the cells
  ``input_hw`` holds past the convolution's), the weight per tensor or, with groups 1, per
  output channel along its axis 1;
- the same around ``matmul(dequantize(a), dequantize(b))`` of two 3-D values (a MatMul of a
  (batch or 1, n, k) weight or activation by a (batch or 1, k, m) activation), ``a`` per tensor
  or per row (axis 1), ``b`` per tensor, a bias added per row ((n, 1)), into
  ``quantized_batch_matmul``;
- ``quantize(act(add(dequantize(a), dequantize(b))))`` into ``quantized_add``;
- ``quantize(pool(dequantize(xq)))`` with ``xq``'s own parameters into the pool of ``xq``'s
  integers, where the pooling op takes quantized values: max pooling (exact: max commutes
  with the increasing map q -> s (q - z)) and average pooling (the integer mean rounded half
  to even); likewise a reshape, transpose, slice or broadcast (exact).

Meaning: the rewritten node gives the integers ``ops/quantized.py`` defines, which equal those of
the float path (dequantize, float op, quantize) within one step of the output: they differ only
where the float sum's order or the float bias moves a value across a rounding boundary. A
bias given as int32 (dequantize of a qs32 value whose scales are ``sx * sw``, as QDQ models
store it) is added as those integers; a float bias is quantized to them by the ``quantize`` op
(round half to even, as ONNX Runtime's bias quantization), so a param stays a param. Only
float32 chains whose intermediate values nothing else reads are rewritten; a dequantize read by
other nodes too stays for them. The pass is ``"fold_qdq"`` in the pipeline (levels 1 and 2); to
compare with the float path, compile with the level's pass list without it:
``mg.compile(y, optimize=[p for p in LEVELS[1] if p != "fold_qdq"])``.

>>> str(fold_qdq(g, [y]).graph)   # quantize(conv2d(dequantize %xq, dequantize %wq)) ->
...                               # quantized_conv2d %xq %wq
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...ir.graph import Graph, Node, Var
from ...ir.quant import QuantParams
from ...ops.quantized import EIGHT_BITS, accumulator_scales
from ...ops.registry import QUANT_KEEPING_OPS, get_op
from .dce import dce
from .rewrite import PassResult, rebuild, result, use_counts, weight_values

FLOAT32 = np.dtype(np.float32)
INT32 = np.dtype(np.int32)
LINEAR_OPS = ("conv2d", "linear", "matmul", "conv2d_backward_data")
# ops that keep their input's quantization: on the integers, those that pick or move values
# give the quantize of their float result exactly (max commutes with the increasing map
# q -> s (q - z)); an average pool gives the integer mean rounded half to even, which the float
# mean's quantize equals but where the float sum rounds across a half
SAME_QUANT_OPS = ("max_pool2d", "adaptive_max_pool2d", "reshape", "transpose", "slice",
                  "broadcast_to", "avg_pool2d", "adaptive_avg_pool2d")
# how close a qs32 bias's scales must be to sx * sw[o] to be added as its integers (the float32
# rounding of the product, as ops/quantized.py allows)
_SCALE_TOLERANCE = 1e-6


@dataclass
class _Match:
    """What one quantize node becomes: the op, its inputs (old Vars, or new ones made by
    ``make``) and attributes, and the float nodes it replaces."""

    op: str
    attrs: dict
    make: object  # (builder) -> list of new input Vars
    replaced: list = field(default_factory=list)


def fold_qdq(graph: Graph, outputs, runs=None) -> PassResult:
    """``runs(op name)``: whether the target has a kernel for an op; a chain is left in float
    where it has none for the int8 op (None: every op runs)."""
    uses = use_counts(graph, outputs)
    fixed = weight_values(graph)[0]
    matches = {}
    for node in graph.nodes:
        if node.op.name == "quantize":
            match = _match(graph, node, uses, fixed)
            if match is not None and (runs is None or runs(match.op) or _is_view(match.op)):
                matches[id(node)] = match
    if not matches:
        return PassResult(graph, list(outputs), False, {"folded": {}})
    replaced = {id(n) for m in matches.values() for n in m.replaced}

    def rewrite(builder, node):
        if id(node) in matches:
            m = matches[id(node)]
            return builder.add(m.op, m.make(builder), m.attrs, node)
        if id(node) in replaced:
            return (None,) * len(node.outputs)
        return None

    built = result(rebuild(graph, rewrite), outputs, True, {})
    cleaned = dce(built.graph, built.outputs)  # the dequantizes only the float ops read
    counts: dict[str, int] = {}
    for m in matches.values():
        counts[m.op] = counts.get(m.op, 0) + 1
    return PassResult(cleaned.graph, cleaned.outputs, True, {"folded": counts})


def _is_view(name: str) -> bool:
    """A reshape is a view of its input's bytes: no kernel to ask the target for."""
    return get_op(name).view is not None


def _requant(q: Node) -> dict | None:
    """The result attributes a per-tensor int8/uint8 quantize of a float32 value gives."""
    x, out = q.inputs[0], q.outputs[0]
    if x.dtype != FLOAT32 or out.dtype not in EIGHT_BITS or out.type.quant.per_channel:
        return None
    quant = out.type.quant
    return {"out_dtype": out.dtype.name, "out_scale": quant.scale,
            "out_zero_point": quant.zero_point, "relu": False}


def _only_use(v: Var, uses) -> Node | None:
    """The node making ``v`` when the chain is its only reader."""
    return v.node if uses.get(v.id) == 1 and v.node is not None else None


def _dequantized(v: Var, per_tensor: bool = True) -> Var | None:
    """The 8-bit quantized value ``v`` is the float32 dequantize of, or None."""
    node = v.node
    if node is None or node.op.name != "dequantize" or v.dtype != FLOAT32:
        return None
    q = node.inputs[0]
    if q.dtype not in EIGHT_BITS or (per_tensor and q.type.quant.per_channel):
        return None
    return q


def _match(graph, q: Node, uses, fixed) -> _Match | None:
    requant = _requant(q)
    if requant is None:
        return None
    v, replaced = q.inputs[0], []
    node = _only_use(v, uses)
    if node is not None and node.op.name == "relu":
        requant["relu"], replaced = True, [node]
        v = node.inputs[0]
        node = _only_use(v, uses)
    if node is None:
        return None
    if node.op.name == "add":
        match = _add(node, requant) or _biased(graph, node, uses, fixed, requant)
    elif node.op.name in LINEAR_OPS:
        match = _linear(graph, node, None, requant)
    else:
        match = _same_quantization(node, q) if not replaced else None
    if match is not None:
        match.replaced = replaced + match.replaced + [node]
    return match


def _add(node: Node, requant: dict) -> _Match | None:
    a, b = (_dequantized(v) for v in node.inputs)
    if a is None or b is None:
        return None
    return _Match("quantized_add", requant, lambda builder: [builder.var(a), builder.var(b)])


def _biased(graph, add: Node, uses, fixed, requant) -> _Match | None:
    """``linear_op(...) + c``, ``c`` a weight-only value holding one number per output
    channel."""
    for core_v, c in (add.inputs, add.inputs[::-1]):
        core = _only_use(core_v, uses)
        if core is None or core.op.name not in LINEAR_OPS or c.id not in fixed:
            continue
        match = _linear(graph, core, c, requant)
        if match is not None:
            match.replaced.append(core)
            return match
    return None


def _same_quantization(node: Node, q: Node) -> _Match | None:
    if (node.op.name not in SAME_QUANT_OPS or len(node.inputs) != 1
            or not _takes_quantized(node.op.name)):
        return None
    xq = _dequantized(node.inputs[0])
    if xq is None or xq.type.quant != q.outputs[0].type.quant or xq.dtype != q.outputs[0].dtype:
        return None
    return _Match(node.op.name, dict(node.attr), lambda builder: [builder.var(xq)])


def _takes_quantized(name: str) -> bool:
    return get_op(name).quantized or name in QUANT_KEEPING_OPS


def _linear(graph, core: Node, extra_bias: Var | None, requant: dict) -> _Match | None:
    """conv2d, linear, matmul or conv2d_backward_data of dequantized values, with its own bias
    or ``extra_bias``."""
    name = core.op.name
    if core.attr.get("activation", "none") not in ("none", "relu"):
        return None
    if core.attr.get("activation") == "relu":
        requant = {**requant, "relu": True}
    if name == "conv2d_backward_data":
        return _conv_transpose(core, extra_bias, requant)
    if name == "matmul" and _weight(graph, core) is None:
        return _batch_matmul(core, extra_bias, requant)
    xq = _dequantized(core.inputs[0])
    weight = _weight(graph, core)
    if xq is None or weight is None:
        return None
    channels = weight.shape[0] if isinstance(weight, Var) else weight[0].shape[0]
    biases = list(core.inputs[2:]) + ([extra_bias] if extra_bias is not None else [])
    if len(biases) > 1 or (extra_bias is not None and not _per_channel_bias(
            extra_bias, channels, conv=name == "conv2d")):
        return None
    wq = weight if isinstance(weight, Var) else None
    w_quant = wq.type.quant if wq is not None else weight[1]
    scales = accumulator_scales(xq.type.quant, w_quant)
    bias = biases[0] if biases else None

    def make(builder):
        w_new = builder.var(wq) if wq is not None else builder.const(weight[0], quant=weight[1])
        inputs = [builder.var(xq), w_new]
        if bias is not None:
            inputs.append(_int_bias(builder, bias, scales, channels, core))
        return inputs

    if name == "conv2d":
        attrs = {k: core.attr[k] for k in ("stride", "padding", "dilation", "groups")}
        return _Match("quantized_conv2d", {**attrs, **requant}, make)
    return _Match("quantized_linear", requant, make)


def _with_bias(first: Var, second: Var, bias: Var | None, scales, channels, core: Node):
    """The int8 op's inputs ``first``, ``second`` and the bias in int32 units of ``scales``."""
    def make(builder):
        inputs = [builder.var(first), builder.var(second)]
        if bias is not None:
            inputs.append(_int_bias(builder, bias, scales, channels, core))
        return inputs
    return make


def _conv_transpose(core: Node, bias: Var | None, requant: dict) -> _Match | None:
    """conv2d_backward_data(dequantize(wq), dequantize(xq)[, bias]) (or + a bias per channel): the
    transposed convolution of xq by wq (C_in, C_out/groups, kh, kw), its weight per tensor or
    per output channel (axis 1) with groups 1."""
    wq, xq = _dequantized(core.inputs[0], per_tensor=False), _dequantized(core.inputs[1])
    groups = core.attr["groups"]
    if wq is None or xq is None or wq.ndim != 4 or (
            wq.type.quant.per_channel and (wq.type.quant.axis != 1 or groups != 1)):
        return None
    channels = wq.shape[1] * groups
    if bias is not None and not _per_channel_bias(bias, channels, conv=True):
        return None
    biases = list(core.inputs[2:]) + ([bias] if bias is not None else [])  # its own, the add's
    if len(biases) > 1:
        return None
    bias = biases[0] if biases else None
    stride, padding, dilation = (core.attr[k] for k in ("stride", "padding", "dilation"))
    # input_hw holds the output_padding: the cells past (n - 1) s - 2 p + d (k - 1) + 1
    output_padding = tuple(
        core.attr["input_hw"][a] - ((xq.shape[2 + a] - 1) * stride[a] - 2 * padding[a]
                                    + dilation[a] * (wq.shape[2 + a] - 1) + 1) for a in range(2))
    attrs = {"stride": stride, "padding": padding, "output_padding": output_padding,
             "dilation": dilation, "groups": groups, **requant}
    scales = accumulator_scales(xq.type.quant, wq.type.quant)
    return _Match("quantized_conv_transpose2d", attrs,
                  _with_bias(xq, wq, bias, scales, channels, core))


def _batch_matmul(core: Node, bias: Var | None, requant: dict) -> _Match | None:
    """matmul(dequantize(a), dequantize(b)) of (batch or 1, n, k) and (batch or 1, k, m) values
    (+ a bias per row): ``a`` per tensor or per row (axis 1), ``b`` per tensor."""
    a, b = _dequantized(core.inputs[0], per_tensor=False), _dequantized(core.inputs[1])
    if (a is None or b is None or a.ndim != 3 or b.ndim != 3 or core.attr["transpose_a"]
            or core.attr["transpose_b"] or not _per_output(a.type.quant, 1)):
        return None
    rows = a.shape[1]
    if bias is not None and not _per_row_bias(bias, rows):
        return None
    scales = accumulator_scales(b.type.quant, a.type.quant)
    return _Match("quantized_batch_matmul", requant, _with_bias(a, b, bias, scales, rows, core))


def _per_row_bias(c: Var, rows) -> bool:
    """Whether adding ``c`` to a (batch, n, m) result adds one number per row: (n, 1) after
    leading ones."""
    shape = list(c.shape)
    while len(shape) > 2 and shape[0] == 1:
        shape.pop(0)
    return shape == [rows, 1] and c.dtype == FLOAT32


def _weight(graph, core: Node):
    """conv2d's and linear's weight as the quantized Var it is the dequantize of; a constant
    (K, N) weight (a matmul's, or under linear's transpose, as ONNX's Gemm without transB
    imports) as the (N, K) integers and their parameters, transposed here."""
    w = core.inputs[1]
    name = core.op.name
    if name == "linear" and w.node is not None and w.node.op.name == "transpose":
        return _transposed(graph, w.node.inputs[0]) if w.node.attr["pattern"] == (1, 0) else None
    if name != "matmul":
        wq = _dequantized(w, per_tensor=False)
        return wq if wq is not None and _per_output(wq.type.quant, 0) else None
    if core.attr["transpose_a"] or w.ndim != 2:
        return None
    if not core.attr["transpose_b"]:
        return _transposed(graph, w)
    wq = _dequantized(w, per_tensor=False)
    if wq is None or wq.node.op.name != "const" or not _per_output(wq.type.quant, 0):
        return None
    return graph.values[wq.id], wq.type.quant


def _transposed(graph, w: Var):
    """The dequantized constant (K, N) ``w`` as (N, K) integers and their parameters."""
    wq = _dequantized(w, per_tensor=False)
    if wq is None or wq.node.op.name != "const" or wq.ndim != 2:
        return None
    quant = wq.type.quant
    if not _per_output(quant, 1):
        return None
    if quant.per_channel:
        quant = QuantParams(quant.scales, quant.zero_points, 0)
    return np.ascontiguousarray(graph.values[wq.id].T), quant


def _per_output(quant: QuantParams, axis: int) -> bool:
    """Per tensor, or per output channel (``axis`` of the weight as stored)."""
    return not quant.per_channel or quant.axis == axis


def _per_channel_bias(c: Var, channels, conv: bool) -> bool:
    """Whether adding ``c`` adds one number per output channel: (C,) after leading ones,
    and (C, 1, 1) for a convolution's (N, C, H, W) output."""
    shape = list(c.shape)
    while shape and shape[0] == 1 and len(shape) > (3 if conv else 1):
        shape.pop(0)
    return shape == ([channels, 1, 1] if conv else [channels]) and c.dtype == FLOAT32


def _int_bias(builder, bias: Var, scales: tuple, channels: int, like: Node) -> Var:
    """The bias in int32 units of ``sx * sw[o]``: a qs32 value of those scales as it is, any
    other dequantized or float bias quantized to them (round half to even)."""
    inner = bias.node.inputs[0] if bias.node.op.name == "dequantize" else None
    if (inner is not None and inner.dtype == INT32 and inner.ndim == 1
            and _same_scales(inner.type.quant, scales)):
        return builder.var(inner)
    b = builder.var(bias)
    if b.ndim != 1:
        (b,) = builder.add("reshape", [b], {"shape": (channels,)}, like)
    per_channel = len(scales) > 1
    attrs = {"scales": scales, "zero_points": (0,) * len(scales), "dtype": "int32",
             "axis": 0 if per_channel else None}
    (q,) = builder.add("quantize", [b], attrs, like)
    return q


def _same_scales(quant: QuantParams | None, scales: tuple) -> bool:
    if quant is None or len(quant.scales) != len(scales) or any(quant.zero_points):
        return False
    return all(math.isclose(g, e, rel_tol=_SCALE_TOLERANCE) for g, e in zip(quant.scales, scales))
