"""Batch-norm folding for inference: conv2d then batch_norm(training=False) becomes one conv2d
with a scaled weight and a shifted bias.

Design: the folded weight and bias are computed by graph ops from the params (scale =
gamma / sqrt(var + eps); w' = w * scale; b' = beta + (b - mean) * scale), not baked in as
constants, so a predictor still reads the current weights after more training. Those ops touch
only weight-sized data, while the batch norm they replace made a pass over every activation.
The arithmetic differs from the batch-norm kernel's, so results agree to rounding, not bitwise.

>>> str(bnfold(g, [y]).graph)   # conv2d %x %w -> batch_norm ... becomes conv2d %x %w' %b'
"""
from __future__ import annotations

from ... import functional as F
from .rewrite import PassResult, rebuild, result, use_counts


def _foldable(node, uses) -> bool:
    if node.op.name != "batch_norm" or node.attr["training"]:
        return False
    conv = node.inputs[0].node
    return (conv is not None and conv.op.name == "conv2d" and conv.attr["activation"] == "none"
            and uses.get(node.inputs[0].id) == 1)


def _folded(builder, bn):
    conv = bn.inputs[0].node
    x, w = (builder.var(v) for v in conv.inputs[:2])
    gamma, beta, mean, var = (F.reshape(builder.var(v), (w.shape[0],)) for v in bn.inputs[1:])
    scale = gamma * F.rsqrt(var + bn.attr["eps"])
    weight = w * F.reshape(scale, (w.shape[0],) + (1,) * (w.ndim - 1))
    shift = -mean if len(conv.inputs) == 2 else builder.var(conv.inputs[2]) - mean
    bias = beta + shift * scale
    return builder.add(conv.op, [x, weight, bias], conv.attr, bn)


def bnfold(graph, outputs) -> PassResult:
    uses = use_counts(graph, outputs)
    folds = [n for n in graph.nodes if _foldable(n, uses)]
    if not folds:
        return PassResult(graph, list(outputs), False, {"folded": 0})
    convs = {id(n.inputs[0].node) for n in folds}
    targets = {id(n) for n in folds}

    def rewrite(builder, node):
        if id(node) in convs:
            return (None,)
        if id(node) in targets:
            return _folded(builder, node)
        return None

    builder = rebuild(graph, rewrite)
    return result(builder, outputs, bool(folds), {"folded": len(folds)})
