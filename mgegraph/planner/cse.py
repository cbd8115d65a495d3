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

from ..ir.graph import Graph, Node, Var
from .rewrite import PassResult, rebuild, result

CONST_MERGE_BYTES = 4096  # consts up to this size are compared by their bytes
_NEVER_MERGED = ("input", "param", "assign")


def _attr_key(value):
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    return type(value).__name__, repr(value)


def _key(builder, node: Node):
    """The merge key of ``node`` in the new graph, or None when it must stay on its own."""
    name = node.op.name
    if name in _NEVER_MERGED:
        return None
    if name == "const":
        array = builder.old.values[node.outputs[0].id]
        if array.nbytes > CONST_MERGE_BYTES:
            return None
        return name, array.dtype.str, array.shape, array.tobytes()
    inputs = tuple(builder.var(v).id for v in node.inputs)
    return name, inputs, _attr_key(node.attrs)


def cse(graph: Graph, outputs: list[Var]) -> PassResult:
    """Merge equal nodes; stats ``{"merged": n}`` (nodes replaced by an earlier equal one).

    >>> r = cse(g, [x * 2.0 + x * 2.0]); print(r.graph)  # one mul
    """
    seen: dict[tuple, tuple[Var, ...]] = {}
    merged = 0

    def merge(builder, node):
        nonlocal merged
        key = _key(builder, node)
        if key is None:
            return None
        if key in seen:
            merged += 1
            return seen[key]
        seen[key] = builder.copy(node)
        return seen[key]

    builder = rebuild(graph, merge)
    return result(builder, outputs, merged > 0, {"merged": merged})
