"""The plan prologue: the part of a graph that reads only weights, run once per weight change.

Design: after the passes, a node whose inputs are all params that no assign of the graph
writes, consts, or values of such nodes (bnfold's scaled weights, a transpose or a cast of a
weight) computes the same thing on every run until a weight changes. ``split`` moves those
nodes into a graph of their own, the prologue, which ends in assigns into fresh arrays; the
main graph reads those arrays as shared params. The executable runs the prologue when it is
made and again before a run only when one of the weights it reads was written since.

Which weights changed is the weight-write registry's (``mgegraph/weight_writes.py``: a count
per array that every writer of a shared weight bumps with ``written(array)``), which lives below
every layer that writes weights or reads the counts. A run with no write anywhere since the
prologue last ran costs one integer comparison (a global count of writes); otherwise the counts
of its own weights are compared.

>>> main, outs, pro = split(graph, outputs)   # pro is None when nothing reads only weights
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.graph import Graph, Var
from ...weight_writes import epoch, versions, written  # noqa: F401  (re-exported: their old home)
from .dce import dce
from .rewrite import rebuild, weight_result_fits


# -- the split ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Prologue:
    """The graph a prologue runs: ``graph`` ends in assigns into ``targets`` (the arrays the
    main graph reads as shared params); ``output`` is a one-byte value (a plan must have one)."""

    graph: Graph
    output: Var
    targets: tuple[np.ndarray, ...]


PLACEHOLDER = "prologue:"  # the name prefix of the main graph's params the prologue fills


def structure_key(pro: Prologue) -> tuple:
    """What makes two prologues compute the same arrays: their nodes (op, attributes, which
    earlier output each input is, output types) and the identity of every weight and constant
    array they read. The specialisations of one symbolic plan split off equal prologues (what
    reads only weights does not depend on the batch), so they can share one, its compiled plan
    and its output arrays (``mg.compile``'s store of prologues). The caller keeps the arrays
    alive with the key, so an ``id`` in it is never a freed array's."""
    where = {}
    nodes = []
    for i, node in enumerate(pro.graph.nodes):
        for k, v in enumerate(node.outputs):
            where[v.id] = (i, k)
        array = pro.graph.values.get(node.outputs[0].id) if node.outputs else None
        nodes.append((node.op.name, node.attrs, tuple(where[v.id] for v in node.inputs),
                      tuple(v.type for v in node.outputs), _array_key(node, array)))
    return tuple(nodes)


SMALL_CONST = 64  # bytes: a constant this small is named by its value (the end marker, scalars)


def _array_key(node, array):
    if array is None or _is_target(node):
        return None
    if node.op.name == "const" and array.nbytes <= SMALL_CONST:
        return array.tobytes()
    return id(array)


def _is_target(node) -> bool:
    return node.op.name == "param" and node.attr["name"].startswith(PLACEHOLDER)


def weight_arrays(pro: Prologue) -> list[np.ndarray]:
    """The weight and constant arrays a prologue reads (what its structure key names by id)."""
    return [a for n in pro.graph.nodes if n.outputs and not _is_target(n)
            and (a := pro.graph.values.get(n.outputs[0].id)) is not None]


def _weight_nodes(graph: Graph) -> set[int]:
    """``id`` of each computing node whose inputs are all weights (unassigned params, consts
    or values of such nodes), at least one of them a param's, whose results fit
    (``rewrite.weight_result_fits``: a prologue value takes persistent memory)."""
    assigned = {n.inputs[0].id for n in graph.assigns}
    fixed, from_param, found = set(), set(), set()
    for node in graph.nodes:
        name = node.op.name
        if name == "param" and node.outputs[0].id not in assigned:
            fixed.add(node.outputs[0].id)
            from_param.add(node.outputs[0].id)
        elif name == "const":
            fixed.add(node.outputs[0].id)
        if node.op.category == "source" or name == "assign" or not node.inputs:
            continue
        if all(v.id in fixed for v in node.inputs) and any(v.id in from_param
                                                           for v in node.inputs):
            if weight_result_fits(node):
                fixed.update(v.id for v in node.outputs)
                from_param.update(v.id for v in node.outputs)
                found.add(id(node))
    return found


def _is_view(node) -> bool:
    return node.op.view_offset(node) is not None


def split(graph: Graph, outputs) -> tuple[Graph, list[Var], Prologue | None]:
    """The main graph (the weight-only nodes replaced by shared params named ``prologue:k``),
    its outputs, and the Prologue that fills those params (None when there is nothing to
    move). A view of a weight stays in the main graph (it costs nothing there), and so does a
    weight-only value the caller gets back as an output (and what it is computed from)."""
    weights = _weight_nodes(graph)
    out_ids = {v.id for v in outputs}
    hoisted = set()
    for node in reversed(graph.nodes):  # backwards: an output's weight-only inputs stay too
        if id(node) not in weights:
            continue
        if any(v.id in out_ids for v in node.outputs):
            out_ids.update(v.id for v in node.inputs)
        elif not (_is_view(node) and node.inputs[0].node.op.category == "source"):
            hoisted.add(id(node))
    made = {v.id: v for n in graph.nodes if id(n) in hoisted for v in n.outputs}
    read = {v.id for v in outputs}
    for node in graph.nodes:
        if id(node) not in hoisted:
            read.update(v.id for v in node.inputs)
    boundary = [v for i, v in made.items() if i in read]
    if not boundary:
        return graph, list(outputs), None
    targets = {v.id: np.zeros(v.shape, v.dtype) for v in boundary}
    names = {v.id: f"{PLACEHOLDER}{k}" for k, v in enumerate(boundary)}

    def main_rewrite(builder, node):
        if id(node) not in hoisted:
            return None
        return tuple(builder.graph.param(names[v.id], targets[v.id], share=True,
                                         quant=v.type.quant)
                     if v.id in targets else None for v in node.outputs)

    main = rebuild(graph, main_rewrite)
    return (main.graph, [main.var(v) for v in outputs],
            _prologue_graph(graph, weights, boundary, targets, names))


def _prologue_graph(graph: Graph, weights: set[int], boundary, targets, names) -> Prologue:
    """A graph of the weight-only nodes that assigns each boundary value into its array."""
    placeholders = {}

    def weights_only(builder, node):
        if not placeholders:  # first, so that lowering may compute a value into its target
            placeholders.update({v.id: builder.graph.param(names[v.id], targets[v.id],
                                                           share=True, quant=v.type.quant)
                                 for v in boundary})
        if id(node) in weights or node.op.name in ("param", "const"):
            return None
        return (None,) * len(node.outputs)

    builder = rebuild(graph, weights_only)
    pro = builder.graph
    for v in boundary:
        pro.assign(placeholders[v.id], builder.var(v))
    output = pro.const(np.zeros((), np.bool_))
    res = dce(pro, [output])
    return Prologue(res.graph, res.outputs[0], tuple(targets[v.id] for v in boundary))
