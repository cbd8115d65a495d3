"""Common subexpression elimination: one node for each (op, inputs, attributes).

Design: every op but the sources and ``assign`` is a pure function of its inputs and
attributes, so two nodes that agree on all three make the same values and the later one is
replaced by the earlier. That includes dropout: its mask hashes (seed, element index, step
input) and nothing else, so two dropouts with the same input, seed, probability and step draw
the same mask (the gradient rule relies on exactly that). Sources are never merged by key:
inputs are distinct feeds and params are distinct state even with equal values; two consts are
merged when their dtype, shape and bytes are equal and they are small (the key holds the bytes).
Attribute values are compared with their type and repr, so ``0.0`` and ``-0.0`` or ``True``
and ``1`` stay apart.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node, Var
from .rewrite import PassResult, rebuild, result

CONST_MERGE_BYTES = 4096  # consts up to this size are compared by their bytes
_NEVER_MERGED = ("input", "param", "assign")


def _attr_key(value):
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    return type(value).__name__, repr(value)


def _key(graph: Graph, node: Node, rep: dict[int, int]):
    """The merge key of ``node`` (inputs named by their representatives' ids), or None when
    it must stay on its own."""
    name = node.op.name
    if name in _NEVER_MERGED:
        return None
    if name == "const":
        array = graph.values[node.outputs[0].id]
        if array.nbytes > CONST_MERGE_BYTES:
            return None
        return name, array.dtype.str, array.shape, array.tobytes()
    inputs = tuple(rep.get(v.id, v.id) for v in node.inputs)
    return name, inputs, _attr_key(node.attrs)


def _merges(graph: Graph) -> dict[int, Node]:
    """id(node) -> the earlier equal node that replaces it. Found before building anything, so
    a graph with nothing to merge is returned as it is."""
    seen: dict[tuple, Node] = {}
    rep: dict[int, int] = {}  # var id -> the id of the var that stands for it
    merges = {}
    for node in graph.nodes:
        key = _key(graph, node, rep)
        if key is None:
            continue
        first = seen.setdefault(key, node)
        if first is not node:
            merges[id(node)] = first
            for old, kept in zip(node.outputs, first.outputs):
                rep[old.id] = kept.id
    return merges


def cse(graph: Graph, outputs: list[Var]) -> PassResult:
    """Merge equal nodes; stats ``{"merged": n}`` (nodes replaced by an earlier equal one).

    >>> r = cse(g, [x * 2.0 + x * 2.0]); print(r.graph)  # one mul
    """
    merges = _merges(graph)
    if not merges:
        return PassResult(graph, list(outputs), False, {"merged": 0})

    def merge(builder, node):
        first = merges.get(id(node))
        return None if first is None else tuple(builder.var(v) for v in first.outputs)

    return result(rebuild(graph, merge), outputs, True, {"merged": len(merges)})
