"""Epilogue fusion: linear or conv2d, then a bias add and an activation (relu, or relu6: a
clip to [0, 6]), become one kernel call; so do group_norm and an activation after it (its
kernel applies it as it writes y: the U-Net's group norm + relu, one pass over the tensor less);
and conv2d_backward_data (the transposed convolution) and a per-channel bias add after it (its
col2im adds the bias to each row as it completes it: a pass over the output less, the same bits).

The GEMM kernels apply the bias and the activation row by row while the output is still in
cache (``activation="relu"`` or ``"relu6"`` on linear and conv2d), so the intermediate values
are never written out and read back. A value is absorbed only when the next op of the chain is
its one use and no one else (an output of the plan, another op) needs it.

>>> str(epilogue(g, [y]).graph)      # relu(linear(x, w) + b) -> linear[activation=relu] x w b
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .rewrite import PassResult, rebuild, result, use_counts

PRODUCERS = ("linear", "conv2d", "group_norm")
# ops that take a bias added after them as an input, and no activation
BIAS_ONLY = ("conv2d_backward_data",)


def activation_of(node) -> str | None:
    """The epilogue activation that elementwise ``node`` is, or None: relu, or relu6 for a clip
    to exactly [+0, 6] (a clip to -0 gives -0 where relu6 gives +0)."""
    if node.op.name == "relu":
        return "relu"
    if node.op.name == "clip":
        lo, hi = node.attr["lower"], node.attr["upper"]
        if lo == 0 and math.copysign(1.0, lo) > 0 and hi == 6:
            return "relu6"
    return None


@dataclass(frozen=True)
class _Chain:
    base: object               # the linear or conv2d node
    bias: object = None        # a bias Var added after it (linear only), or None
    activation: str = "none"   # relu or relu6 once one ends the chain
    ops: tuple[str, ...] = ()


def _extend(node, chains, uses) -> _Chain | None:
    """The chain ``node`` continues, or None."""
    name = node.op.name
    if (name in PRODUCERS and node.attr["activation"] == "none") \
            or (name in BIAS_ONLY and len(node.inputs) == 2):
        return _Chain(node, ops=(name,))
    activation = activation_of(node)
    if name != "add" and activation is None:
        return None
    for k, v in enumerate(node.inputs):
        chain = chains.get(v.id)
        if chain is None or uses.get(v.id) != 1 or chain.activation != "none":
            continue
        if activation is not None:
            if chain.base.op.name in BIAS_ONLY:
                return None
            return _Chain(chain.base, chain.bias, activation, chain.ops + (name,))
        bias = node.inputs[1 - k]
        if chain.bias is None and _takes_bias(chain.base, bias) \
                and node.outputs[0].type == v.type:
            return _Chain(chain.base, bias, "none", chain.ops + ("add",))
    return None


def _takes_bias(base, bias) -> bool:
    """Whether ``bias`` added to ``base``'s output can be its bias input: linear's (out,) along
    the last axis; conv2d_backward_data's (1, C, 1, 1) along the channels."""
    out = base.outputs[0]
    if bias.dtype != out.dtype:
        return False
    if base.op.name == "linear":
        return len(base.inputs) == 2 and bias.shape == (out.shape[-1],)
    return base.op.name in BIAS_ONLY and bias.shape == (1, out.shape[1], 1, 1)


def _chains(graph, outputs) -> dict[int, _Chain]:
    """Var id -> the chain it ends, for every var a fused chain could end at."""
    uses, chains = use_counts(graph, outputs), {}
    for node in graph.nodes:
        chain = _extend(node, chains, uses)
        if chain is not None:
            chains[node.outputs[0].id] = chain
    return chains


def epilogue(graph, outputs) -> PassResult:
    chains = _chains(graph, outputs)
    longest: dict[int, int] = {}  # base node -> the var its longest chain ends at
    for v_id, chain in chains.items():
        if len(chain.ops) > len(chains[longest.get(id(chain.base), v_id)].ops) \
                or id(chain.base) not in longest:
            longest[id(chain.base)] = v_id
    finals = {v: chains[v] for v in longest.values() if len(chains[v].ops) > 1}
    members = {id(c.base) for c in finals.values()}
    if not finals:
        return PassResult(graph, list(outputs), False, {"fused": 0, "groups": []})
    fused = []

    def rewrite(builder, node):
        out = node.outputs[0].id if node.outputs else None
        if out in finals:
            c = finals[out]
            inputs = [builder.var(v) for v in c.base.inputs]
            if c.bias is not None:
                inputs.append(builder.var(c.bias))
            attrs = dict(c.base.attr)
            if c.base.op.name not in BIAS_ONLY:
                attrs["activation"] = c.activation
            fused.append("+".join(c.ops))
            return builder.add(c.base.op, inputs, attrs, node)
        if id(node) in members or (out in chains and id(chains[out].base) in members):
            return (None,) * len(node.outputs)
        return None

    builder = rebuild(graph, rewrite)
    return result(builder, outputs, bool(fused), {"fused": len(fused), "groups": fused})
