"""Dead code elimination: drop every node whose values nothing needed reads.

The roots are the caller's outputs, every assign (a state update is the point of a training
step) and every input node (a plan's feeds do not change with its outputs): the same nodes
``mg.compile`` would keep. An assign of a param to itself writes the bytes it reads, so it is
removed too.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node, Var
from .rewrite import PassResult, rebuild, result

_ROOT_OPS = ("input", "assign")


def live_nodes(graph: Graph, outputs) -> set[int]:
    """``id`` of every node the outputs, assigns and inputs need.

    >>> id(y.node) in live_nodes(g, [y])
    """
    needed = {v.id for v in outputs}
    live = set()
    for node in reversed(graph.nodes):
        if _is_self_assign(node):
            continue
        if node.op.name in _ROOT_OPS or any(v.id in needed for v in node.outputs):
            live.add(id(node))
            needed.update(v.id for v in node.inputs)
    return live


def _is_self_assign(node: Node) -> bool:
    return node.op.name == "assign" and node.inputs[0].id == node.inputs[1].id


def dce(graph: Graph, outputs: list[Var]) -> PassResult:
    """Remove dead nodes; stats ``{"nodes_removed": n}``.

    >>> r = dce(g, [y]); print(r.graph)
    """
    live = live_nodes(graph, outputs)
    if len(live) == len(graph.nodes):  # nothing to drop: keep the graph, skip the rebuild
        return PassResult(graph, list(outputs), False, {"nodes_removed": 0})

    def drop_dead(builder, node):
        return None if id(node) in live else (None,) * len(node.outputs)

    builder = rebuild(graph, drop_dead)
    removed = len(graph.nodes) - len(live)
    return result(builder, outputs, removed > 0, {"nodes_removed": removed})
