"""A graph with named dimensions made again with numbers: what a specialised plan compiles.

``specialize(graph, outputs, bindings)`` replays every node in order through
``Graph.add_node`` with the names replaced by the bound values, in the input types and in
the attributes (a reshape to ``(batch, -1)``), so every op's shape rule runs again on
numbers and checks what it could only record before. Params and constants keep their arrays
(a param is shared: every specialisation of a training step reads and updates one array).
"""
from __future__ import annotations

from .dims import Dim, bindings_text, substitute
from .errors import FeedError, GraphError
from .graph import Graph, Var
from .types import TensorType


def substitute_value(value, bindings: dict):
    """An attribute with every ``Dim`` in it (tuples nested) replaced by its bound value."""
    if isinstance(value, Dim):
        return substitute(value, bindings)
    if isinstance(value, tuple):
        return tuple(substitute_value(v, bindings) for v in value)
    return value


def holds_dim(value) -> bool:
    """Whether an attribute (tuples nested) holds a named dimension."""
    return isinstance(value, Dim) or (isinstance(value, tuple) and any(map(holds_dim, value)))


def substitute_type(t: TensorType, bindings: dict) -> TensorType:
    if not t.symbolic:
        return t
    return TensorType(tuple(substitute(d, bindings) for d in t.shape), t.dtype, t.quant)


def specialize(graph: Graph, outputs, bindings: dict[str, int]) -> tuple[Graph, list[Var]]:
    """``graph`` (and ``outputs``, Vars of it) with the names of ``bindings`` bound.

    Every param becomes a shared param of the new graph over the same array, whether the
    original shared it or not: the caller (``SymbolicPlan``) hands in a graph whose params
    it owns. A shape rule that refuses the numbers (a kernel larger than a bound image) is a
    ``FeedError`` naming the bindings and the op's message."""
    out = Graph()
    out.constraints = graph.constraints  # the facts, for a caller that prints them
    new: dict[int, Var] = {}
    try:
        for node in graph.nodes:
            if node.op.name == "assign":
                out.assign(new[node.inputs[0].id], new[node.inputs[1].id])
                continue
            made = _replay(out, graph, node, new, bindings)
            for old, var in zip(node.outputs, made):
                new[old.id] = var
    except GraphError as exc:
        raise FeedError(f"the graph cannot take the fed shapes ({bindings_text(bindings)}): "
                        f"{exc}") from None
    return out, [new[v.id] for v in outputs]


def _replay(out: Graph, graph: Graph, node, new: dict, bindings: dict) -> tuple[Var, ...]:
    name = node.op.name
    if name == "input":
        t = substitute_type(node.outputs[0].type, bindings)
        return (out.input(node.attr["name"], t.shape, t.dtype, t.quant),)
    if name == "param":
        return (out.param(node.attr["name"], graph.values[node.outputs[0].id], share=True,
                          quant=node.outputs[0].type.quant),)
    if name == "const":  # a constant's array is never written: the specialisations share it
        made = out.add_node("const", (), dict(node.attrs), types=(node.outputs[0].type,),
                            location=node.location)
        out.values[made.outputs[0].id] = graph.values[node.outputs[0].id]
        return made.outputs
    attrs = {k: substitute_value(v, bindings) for k, v in node.attrs}
    return out.add_node(node.op, [new[v.id] for v in node.inputs], attrs,
                        location=node.location).outputs
