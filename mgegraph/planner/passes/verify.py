"""The graph verifier: ``verify_graph(graph)`` raises GraphError unless the IR is well formed.

The pipeline runs it after every pass in check mode; tests run it on what a pass returns. It
is the graph level of the three verifiers (``memory.verify.verify_plan`` checks a plan's
memory, ``memory.arena_check.verify_arena`` an arena's offsets) and reads nothing but the
graph and each op's own type rule.
"""
from __future__ import annotations

from ...ir.errors import GraphError
from ...ir.graph import Graph


def verify_graph(graph: Graph) -> None:
    """Raise GraphError unless every value is defined once before use, names are unique, the
    source tables match the nodes, and every type is what its op's rule infers.

    >>> verify_graph(pipeline.optimize(g, [y])[0])
    """
    defined: set[int] = set()
    for node in graph.nodes:
        _verify_node(graph, node, defined)
    assigns = [n for n in graph.nodes if n.op.name == "assign"]
    listed = graph.assigns
    if len(assigns) != len(listed) or any(a is not b for a, b in zip(assigns, listed)):
        raise GraphError("graph.assigns does not list the assign nodes in order")
    _verify_sources(graph)


def _verify_node(graph: Graph, node, defined: set[int]) -> None:
    for v in node.inputs:
        if v.graph is not graph or v.id not in defined:
            raise GraphError(f"{node.op.name} reads %{v.id} before it is defined")
    for v in node.outputs:
        if v.id in defined or v.node is not node or v.graph is not graph:
            raise GraphError(f"%{v.id} is defined twice or does not point at its node")
        defined.add(v.id)
    if node.op.category == "source":
        return
    if node.op.name == "assign":
        target, value = node.inputs
        if target.node.op.name != "param" or target.type != value.type:
            raise GraphError(f"assign %{target.id} <- %{value.id}: not a param of that type")
        return
    want = tuple(node.op.infer(tuple(v.type for v in node.inputs), node.attr))
    have = tuple(v.type for v in node.outputs)
    if want != have:
        raise GraphError(f"{node.op.name} records types {', '.join(map(str, have))} but its rule "
                         f"gives {', '.join(map(str, want))}")


def _verify_sources(graph: Graph) -> None:
    names: dict[str, int] = {}
    for node in graph.nodes:
        if node.op.name not in ("input", "param", "const"):
            continue
        (v,) = node.outputs
        if node.op.name != "const":
            table = graph.inputs if node.op.name == "input" else graph.params
            name = node.attr["name"]
            if name in names or table.get(name) is not v:
                raise GraphError(f"{node.op.name} {name!r} is repeated or not in the graph's table")
            names[name] = v.id
        if node.op.name != "input":
            value = graph.values.get(v.id)
            if value is None or value.shape != v.shape or value.dtype != v.dtype:
                raise GraphError(f"%{v.id}: the stored value does not match {v.type}")
    if len(names) != len(graph.inputs) + len(graph.params):
        raise GraphError("graph.inputs or graph.params names a value that has no node")
