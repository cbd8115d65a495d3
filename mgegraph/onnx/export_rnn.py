"""The recurrent layers of ``nn/rnn.py`` exported as ONNX RNN, GRU and LSTM nodes, one per layer
and direction, instead of the hundreds of nodes their unrolled loop is made of.

Design: recognised by replay. A ``linear`` node whose input is a sequence flattened to
(T*B, I) is a candidate; ``nn.rnn.unroll`` is run again in a scratch graph on stand-ins of the
candidate's types (every kind, direction, bias and initial state that fits), and the replay's
nodes must equal the original's node for node (op, attributes, constants' values, wiring) from
the projection on. A match is exactly the layer ``unroll`` defines, whatever the code that
called it; anything else (a hand-written loop, an edited step) is left to the per-op writers.
A region whose inner values are read outside it (other than its outputs: the sequence, the
final h and c) is left unrolled too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import functional as F
from ..ir.graph import Graph
from ..nn.rnn import GATES, unroll

_SKIPPED = ("input", "param", "const")  # made where first used: no fixed place in the order
# PyTorch's gate blocks in ONNX's order: LSTM i f g o -> i o f c, GRU r z n -> z r h
_ONNX_ORDER = {"RNN": (0,), "LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2)}


@dataclass
class Region:
    """One layer in one direction: the exported nodes it covers (in order), the original Vars
    of its inputs (x, W_ih, W_hh, b_ih, b_hh, h0, c0; None where absent) and of its outputs
    (Y, h, c)."""
    kind: str
    reverse: bool
    relu: bool
    nodes: list
    inputs: dict
    outputs: dict


def find(graph: Graph, nodes: list, outputs: list) -> list[Region]:
    """The regions that replay as ``unroll`` among the graph's nodes, with some of ``nodes``
    (the exported ones) in them. Replays are matched against every node the graph holds, in
    the order they were made: ``nodes`` lacks those no output needs (the forget gate of a
    zero cell state, the sequence when only the final state is read)."""
    order = [n for n in graph.nodes if n.op.name not in _SKIPPED]
    at = {id(n): i for i, n in enumerate(order)}
    needed = {id(n) for n in nodes}
    regions, taken = [], set()
    for node in order:
        if node.op.name != "linear" or id(node) in taken:
            continue
        for region in _candidates(graph, order, at[id(node)], node):
            region.nodes = [n for n in region.nodes if id(n) in needed]
            if region.nodes and _sealed(region, nodes, outputs):
                regions.append(region)
                taken.update(id(n) for n in region.nodes)
                break
    return regions


def _candidates(graph, order, pos, linear):
    flat = linear.inputs[0]
    if flat.node is None or flat.node.op.name != "reshape" or flat.node.inputs[0].ndim != 3:
        return
    x, w_ih = flat.node.inputs[0], linear.inputs[1]
    for kind, gates in GATES.items():
        if w_ih.shape[0] % gates:
            continue
        hidden = w_ih.shape[0] // gates
        for reverse in (False, True):
            for given in (False, True):
                for relu in ((False, True) if kind == "RNN" else (False,)):
                    region = _match(graph, order, pos, kind, x, w_ih.type, hidden, reverse,
                                    len(linear.inputs) == 3, given, relu)
                    if region is not None:
                        yield region


def _match(graph, order, pos, kind, x, w_type, hidden, reverse, biased, given, relu):
    """The region if a replay of ``unroll`` with these options equals the nodes around
    ``order[pos]`` (the projection's linear), else None."""
    scratch = Graph()
    stand = {"x": scratch.input("x", x.shape, x.dtype),
             "w_ih": scratch.input("w_ih", w_type.shape, w_type.dtype),
             "w_hh": scratch.input("w_hh", (w_type.shape[0], hidden), w_type.dtype)}
    if biased:
        for name in ("b_ih", "b_hh"):
            stand[name] = scratch.input(name, (w_type.shape[0],), w_type.dtype)
    states = ("h0", "c0") if kind == "LSTM" else ("h0",)
    if given:
        for name in states:
            stand[name] = scratch.input(name, (x.shape[1], hidden), x.dtype)
    try:
        y, final = unroll(kind, stand["x"], tuple(stand.get(k) for k in (
            "w_ih", "w_hh", "b_ih", "b_hh")), tuple(stand.get(s) for s in states), reverse,
            F.relu if relu else F.tanh)
    except (ValueError, TypeError):
        return None
    replay = [n for n in scratch.nodes if n.op.name not in _SKIPPED]
    start = pos - next(i for i, n in enumerate(replay) if n.op.name == "linear")
    if start < 0 or start + len(replay) > len(order):
        return None
    names = {v.id: k for k, v in stand.items()}
    bound, same = {}, {}
    for r, o in zip(replay, order[start:start + len(replay)]):
        if not _same_node(scratch, graph, r, o, names, bound, same):
            return None
    outputs = {"y": same[y.id], "h": same[final[0].id]}
    if kind == "LSTM":
        outputs["c"] = same[final[1].id]
    return Region(kind, reverse, relu, order[start:start + len(replay)],
                  {k: bound.get(k) for k in ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")},
                  outputs)


def _same_node(scratch, graph, r, o, names, bound, same) -> bool:
    if r.op.name != o.op.name or r.attrs != o.attrs or len(r.inputs) != len(o.inputs):
        return False
    for a, b in zip(r.inputs, o.inputs):
        if a.id in names:  # a stand-in: the original's Var, the same at every use
            if bound.setdefault(names[a.id], b) is not b:
                return False
        elif a.node is not None and a.node.op.name == "const":
            if b.node is None or b.node.op.name != "const" or a.type != b.type or \
                    not np.array_equal(scratch.values[a.id], graph.values[b.id]):
                return False
        elif same.get(a.id) is not b:
            return False
    same.update({a.id: b for a, b in zip(r.outputs, o.outputs)})
    return True


def _sealed(region, nodes, outputs) -> bool:
    """No value made inside the region is read outside it, except its outputs."""
    inner = {id(n) for n in region.nodes}
    made = {v.id for n in region.nodes for v in n.outputs}
    allowed = {v.id for v in region.outputs.values()}
    for node in nodes:
        if id(node) not in inner and any(v.id in made - allowed for v in node.inputs):
            return False
    return all(v.id not in made - allowed for v in outputs)


def write(w, region: Region) -> dict[int, str]:
    """The region's ONNX node (and the reordering of its weights): the names of its outputs,
    by the original Vars' ids."""
    ins, gates = region.inputs, GATES[region.kind]
    hidden = ins["w_ih"].shape[0] // gates
    x = w.name(ins["x"])
    weights = [_onnx_gates(w, w.name(ins[k]), region.kind, hidden) for k in ("w_ih", "w_hh")]
    bias = ""
    if ins["b_ih"] is not None:
        bias = w.add("Concat", [_onnx_gates(w, w.name(ins[k]), region.kind, hidden)
                                for k in ("b_ih", "b_hh")], axis=1)[0]
    states = [w.add("Unsqueeze", [w.name(ins[k]), w.ints([0])])[0] if ins[k] is not None else ""
              for k in (("h0", "c0") if region.kind == "LSTM" else ("h0",))]
    node_ins = [x, *weights, bias, "", *states]
    while node_ins[-1] == "":
        node_ins.pop()
    attrs = {"hidden_size": int(hidden),
             "direction": "reverse" if region.reverse else "forward"}
    if region.kind == "GRU":
        attrs["linear_before_reset"] = 1
    if region.relu:
        attrs["activations"] = ["Relu"]
    n_out = 3 if region.kind == "LSTM" else 2
    outs = w.add(region.kind, node_ins, n_outputs=n_out, **attrs)
    named = {region.outputs["y"].id: w.add("Squeeze", [outs[0], w.ints([1])])[0],
             region.outputs["h"].id: w.add("Squeeze", [outs[1], w.ints([0])])[0]}
    if region.kind == "LSTM":
        named[region.outputs["c"].id] = w.add("Squeeze", [outs[2], w.ints([0])])[0]
    return named


def _onnx_gates(w, name: str, kind: str, hidden: int) -> str:
    """A weight (G*H, ...) or bias (G*H,) with its gate blocks in ONNX's order, (1, G*H, ...)."""
    order = _ONNX_ORDER[kind]
    if len(order) > 1:
        parts = w.add("Split", [name, w.ints([hidden] * len(order))], n_outputs=len(order),
                      axis=0)
        name = w.add("Concat", [parts[k] for k in order], axis=0)[0]
    return w.add("Unsqueeze", [name, w.ints([0])])[0]


def covered(regions: list[Region]) -> dict[int, Region]:
    """id of each node a region covers -> its region."""
    return {id(n): region for region in regions for n in region.nodes}
