"""Weight prepacking: a conv2d whose weight is computed from weights alone, and which the backend
runs faster from a layout of its own, reads that layout, packed once instead of on every run.

Design: ``conv2d(x, w)`` becomes ``conv2d_packed(x, conv2d_pack_weight(w))`` where the target's
``block_of(node)`` names the block of output channels its kernel wants (the CPU's gather tiles:
``_kernels/lowering/conv.py``'s ``prepack_block``). The pack is not computed here:

- a weight that reads a param is packed by the plan's prologue, which runs again only after
  one of those params was written (``passes/prologue.py``), so a predictor still sees the
  model's current weights;
- a const weight is packed here, with NumPy (the layout is a copy: bitwise what the kernel
  would write), so the const the plan holds is the packed one;
- a weight computed from consts alone (bnfold's scaled weights of a frozen model) is left as it
  is: ``compile(freeze=True)`` folds the weights after the passes and then runs this pass again,
  on consts.

A linear layer is the 1x1 convolution of 1x1 planes over its rows: ``linear(x, w, b)`` with
such a weight becomes ``reshape(conv2d_packed(reshape(x, (rows, k, 1, 1)), pack(reshape(w,
(n, k, 1, 1))), b), x's shape with n last)`` (reshapes are views; the CPU runs it as a GEMM of
rows on the same tiles, conv_blocked.pxi ``rows_call``). So is ``matmul(x, w)`` of a 2-D
weight, whose (k, n) weight is transposed before packing (once, in the prologue or here); a
bias added to it (``x @ w + b``, b of n values: ONNX's MatMul + Add) and a relu or relu6 (a
clip to [0, 6]) after that become conv2d_packed's bias and activation, as the epilogue pass
makes them a linear's, so they run while each tile is in cache instead of in a pass of their
own.

Only weights no assign writes are packed: a training step, which writes them every run, would
pack them every run.

>>> str(prepack(g, [y], block_of).graph)   # conv2d %x %w -> conv2d_packed %x %wp
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ops.conv import pack_weight_array, weight_dims
from ...ops.matmul import rows_by_weight
from .epilogue import activation_of
from .prepack_quantized import prepack_quantized
from .rewrite import PassResult, rebuild, result, use_counts, weight_values

PACKED = ("conv2d", "linear", "matmul")


def prepack(graph, outputs, block_of=None) -> PassResult:
    """``block_of(node)`` (a conv2d, a linear or a matmul): the block of output channels the
    target packs its weights in, or None to leave it; without one, nothing is packed (the int8
    ops included: a target that packs weights runs them packed too)."""
    if block_of is None:
        return _prepack_floats(graph, outputs, block_of)
    int8 = prepack_quantized(graph, outputs)
    floats = _prepack_floats(int8.graph, int8.outputs, block_of)
    stats = {**floats.stats, **int8.stats} if int8.changed else floats.stats
    return PassResult(floats.graph, floats.outputs, int8.changed or floats.changed, stats)


def _prepack_floats(graph, outputs, block_of=None) -> PassResult:
    if block_of is None:
        return PassResult(graph, list(outputs), False, {"packed": 0})
    fixed, from_param = weight_values(graph)
    consts = {n.outputs[0].id for n in graph.nodes if n.op.name == "const"}
    blocks = {}
    for node in graph.nodes:
        if node.op.name not in PACKED or node.inputs[1].id not in fixed:
            continue
        if node.op.name != "conv2d" and rows_by_weight(node) is None:
            continue
        w = node.inputs[1].id
        if w in from_param or w in consts:
            block = block_of(node)
            if block is not None:
                blocks[id(node)] = block
    if not blocks:
        return PassResult(graph, list(outputs), False, {"packed": 0})
    tails = _matmul_tails(graph, outputs, blocks)
    absorbed = {id(n): t for t in tails.values() for n in t.nodes}

    def rewrite(builder, node):
        tail = absorbed.get(id(node))
        if tail is not None:  # the matmul's bias add or relu: the last of them gives its value
            if node is not tail.nodes[-1]:
                return (None,) * len(node.outputs)
            return _rows(builder, tail.matmul, blocks[id(tail.matmul)],
                         tail.matmul.inputs[1].id in consts, tail)
        block = blocks.get(id(node))
        if block is None:
            return None
        if id(node) in tails:  # made at the end of its tail
            return (None,) * len(node.outputs)
        if node.op.name in ("linear", "matmul"):
            return _rows(builder, node, block, node.inputs[1].id in consts)
        x, w, *bias = (builder.var(v) for v in node.inputs)
        groups = node.attr["groups"]
        packed = _packed(builder, node, w, groups, block, node.inputs[1].id in consts)
        oc, _, kh, kw = weight_dims(node.inputs[1].type, groups)
        attrs = {**node.attr, "out_channels": oc, "kernel_size": (kh, kw)}
        return builder.add("conv2d_packed", [x, packed, *bias], attrs, node)

    builder = rebuild(graph, rewrite)
    return result(builder, outputs, True, {"packed": len(blocks)})


def _packed(builder, node, w, groups, block, const, transposed=False):
    """The packed weight: a const packed here (``transposed``: the const is w's transpose), or
    a conv2d_pack_weight node (the prologue's)."""
    if const:
        value = builder.old.values[node.inputs[1].id]
        value = (value.T if transposed else value).reshape(w.shape)
        return builder.const(pack_weight_array(value, groups, block), node.location)
    (packed,) = builder.add("conv2d_pack_weight", [w], {"groups": groups, "block": block}, node)
    return packed


@dataclass(frozen=True)
class _Tail:
    matmul: object  # a packed matmul node
    bias: object    # the Var of n values added to its product
    activation: str  # the epilogue activation of the sum that follows it (epilogue.activation_of)
    nodes: tuple     # the add, and the activation's node when there is one


def _matmul_tails(graph, outputs, blocks) -> dict:
    """id(matmul node) -> its _Tail, for each packed matmul whose one use is an add of a bias of
    its n values (of its dtype), then maybe a relu or relu6 (clip to [0, 6]), the add's one
    use."""
    uses = use_counts(graph, outputs)
    users = {}
    for node in graph.nodes:
        for v in node.inputs:
            users.setdefault(v.id, node)
    tails = {}
    for node in graph.nodes:
        if node.op.name != "matmul" or id(node) not in blocks:
            continue
        y = node.outputs[0]
        add = users.get(y.id)
        if uses.get(y.id) != 1 or add is None or add.op.name != "add":
            continue
        bias = add.inputs[1] if add.inputs[0].id == y.id else add.inputs[0]
        if (bias.id == y.id or bias.shape != (y.shape[-1],) or bias.dtype != y.dtype
                or add.outputs[0].type != y.type):
            continue
        s = add.outputs[0]
        act = users.get(s.id)
        activation = activation_of(act) if act is not None and uses.get(s.id) == 1 else None
        if activation is not None:
            tails[id(node)] = _Tail(node, bias, activation, (add, act))
        else:
            tails[id(node)] = _Tail(node, bias, "none", (add,))
    return tails


def _rows(builder, node, block, const, tail=None):
    """A linear, or a matmul of a 2-D weight, as the 1x1 conv2d_packed of its rows (with
    ``tail``'s bias and activation)."""
    x, w, *bias = (builder.var(v) for v in node.inputs)
    if tail is not None:
        bias = [builder.var(tail.bias)]
    rows, k, n = rows_by_weight(node)
    transposed = node.op.name == "matmul" and not node.attr["transpose_b"]
    if transposed:  # matmul's (k, n) weight: packed from its (n, k) transpose
        (w,) = builder.add("transpose", [w], {"pattern": (1, 0)}, node)
    (x_rows,) = builder.add("reshape", [x], {"shape": (rows, k, 1, 1)}, node)
    (w4,) = builder.add("reshape", [w], {"shape": (n, k, 1, 1)}, node)
    packed = _packed(builder, node, w4, 1, block, const, transposed)
    activation = node.attr["activation"] if node.op.name == "linear" else "none"
    if tail is not None and tail.activation != "none":
        activation = tail.activation
    attrs = {"activation": activation, "out_channels": n, "kernel_size": (1, 1)}
    (y,) = builder.add("conv2d_packed", [x_rows, packed, *bias], attrs, node)
    return builder.add("reshape", [y], {"shape": (*x.shape[:-1], n)}, node)
