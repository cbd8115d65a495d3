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

Only weights no assign writes are packed: a training step, which writes them every run, would
pack them every run.

>>> str(prepack(g, [y], block_of).graph)   # conv2d %x %w -> conv2d_packed %x %wp
"""
from __future__ import annotations

from ...ops.conv import pack_weight_array, weight_dims
from .rewrite import PassResult, rebuild, result, weight_values


def prepack(graph, outputs, block_of=None) -> PassResult:
    """``block_of(conv2d node)``: the block of output channels the target packs that
    convolution's weights in, or None to leave it; without one, nothing is packed."""
    if block_of is None:
        return PassResult(graph, list(outputs), False, {"packed": 0})
    fixed, from_param = weight_values(graph)
    consts = {n.outputs[0].id for n in graph.nodes if n.op.name == "const"}
    blocks = {}
    for node in graph.nodes:
        if node.op.name != "conv2d" or node.inputs[1].id not in fixed:
            continue
        w = node.inputs[1].id
        if w in from_param or w in consts:
            block = block_of(node)
            if block is not None:
                blocks[id(node)] = block
    if not blocks:
        return PassResult(graph, list(outputs), False, {"packed": 0})

    def rewrite(builder, node):
        block = blocks.get(id(node))
        if block is None:
            return None
        x, w, *bias = (builder.var(v) for v in node.inputs)
        groups = node.attr["groups"]
        if node.inputs[1].id in consts:
            value = builder.old.values[node.inputs[1].id]
            packed = builder.const(pack_weight_array(value, groups, block), node.location)
        else:
            (packed,) = builder.add("conv2d_pack_weight", [w], {"groups": groups,
                                                                "block": block}, node)
        oc, _, kh, kw = weight_dims(node.inputs[1].type, groups)
        attrs = {**node.attr, "out_channels": oc, "kernel_size": (kh, kw)}
        return builder.add("conv2d_packed", [x, packed, *bias], attrs, node)

    builder = rebuild(graph, rewrite)
    return result(builder, outputs, True, {"packed": len(blocks)})
