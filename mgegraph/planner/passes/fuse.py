"""Elementwise fusion: maximal connected groups of elementwise ops become one fused node.

A group is a set of float elementwise nodes of one output shape and dtype (inputs may
broadcast). Its node carries the group's expression as a small SSA program (``code``: one
``(op, dst, a, b, c)`` per step over numbered values, loads of the group's inputs, scalar
constants, and stores of the values needed outside), which the CPU evaluator runs block by block
and a GPU backend can render as one kernel.

Design: nodes join groups in graph order; a node merges the groups of all its fusable inputs
unless that would make a cycle, i.e. some value the merged group reads from outside already
depends on one of the groups (each value tracks the groups it depends on). Groups of one node
stay as they are. The new graph is emitted in a topological order of groups and other nodes,
stable in the original order, because a fused node must come after everything it reads.

>>> str(fuse(g, [y]).graph)   # relu(x * a + b) -> fused_elementwise[...] %x %a %b
"""
from __future__ import annotations

import heapq

from ...ops.fused import FUSABLE_OPS
from .rewrite import Builder, PassResult, result

FLOAT = ("float32", "float64")


def _fusable(node) -> bool:
    if node.op.name not in FUSABLE_OPS or len(node.outputs) != 1:
        return False
    out = node.outputs[0]
    return str(out.dtype) in FLOAT and all(v.dtype == out.dtype for v in node.inputs)


class _Groups:
    """Union-find over group ids with each group's members. Sets of groups are int bitmasks
    over the ids ever made (OR is one C loop, where Python sets cost a loop per element):
    ``alias`` holds the ids merged into a root, ``ext_deps`` the groups that a root's outside
    inputs depend on."""

    def __init__(self):
        self.parent: dict[int, int] = {}
        self.members: dict[int, list] = {}
        self.alias: dict[int, int] = {}
        self.ext_deps: dict[int, int] = {}

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def new(self, node, ext: int) -> int:
        g = len(self.parent)
        self.parent[g], self.members[g], self.alias[g], self.ext_deps[g] = g, [node], 1 << g, ext
        return g

    def merge(self, groups: set[int], node, ext: int) -> int:
        keep = min(groups)
        for g in groups - {keep}:
            self.parent[g] = keep
            self.members[keep] += self.members.pop(g)
            self.alias[keep] |= self.alias.pop(g)
            self.ext_deps[keep] |= self.ext_deps.pop(g)
        self.members[keep].append(node)
        self.ext_deps[keep] |= ext
        return keep


def _group_nodes(graph) -> tuple[_Groups, dict[int, int]]:
    """The groups, and var id -> group id for every var a group member makes."""
    groups, group_of, deps = _Groups(), {}, {}
    for node in graph.nodes:
        roots = {v.id: groups.find(group_of[v.id]) for v in node.inputs if v.id in group_of}
        reads = 0  # the groups this node depends on, through its inputs
        for v in node.inputs:
            reads |= deps.get(v.id, 0) | (groups.alias[roots[v.id]] if v.id in roots else 0)
        mine = None
        if _fusable(node):
            shape = node.outputs[0].type
            inside = {g for g in roots.values() if groups.members[g][0].outputs[0].type == shape}
            ext = 0  # what the merged group would read from outside, through anything
            for v in node.inputs:
                if roots.get(v.id) not in inside:
                    ext |= deps.get(v.id, 0) | (groups.alias[roots[v.id]] if v.id in roots else 0)
            for g in inside:
                ext |= groups.ext_deps[g]
            if inside and not any(ext & groups.alias[g] for g in inside):
                mine = groups.merge(inside, node, ext)
            else:
                mine = groups.new(node, reads)
        for v in node.outputs:
            if mine is not None:
                group_of[v.id] = mine
                deps[v.id] = reads & ~groups.alias[mine]
            else:
                deps[v.id] = reads
    return groups, group_of


def _scalar_const(graph, v):
    node = v.node
    if node is not None and node.op.name == "const" and v.shape == ():
        return float(graph.values[v.id])
    return None


def _program(graph, members, needed) -> tuple[list, dict]:
    """(the group's outside inputs, the fused node's attrs) for members in graph order."""
    value, code, constants, inputs = {}, [], [], []

    def operand(v):
        if v.id not in value:
            scalar = _scalar_const(graph, v)
            if scalar is not None:
                code.append(("const", len(value), len(constants), 0, 0))
                constants.append(scalar)
            else:
                code.append(("load", len(value), len(inputs), 0, 0))
                inputs.append(v)
            value[v.id] = len(value)
        return value[v.id]

    for node in members:
        args = [operand(v) for v in node.inputs] + [0] * (3 - len(node.inputs))
        for key in FUSABLE_OPS[node.op.name]:  # float attributes become constants
            args[len(node.inputs) + FUSABLE_OPS[node.op.name].index(key)] = len(constants)
            constants.append(float(node.attr[key]))
        value[node.outputs[0].id] = len(value)
        code.append((node.op.name, value[node.outputs[0].id], *args[:3]))
    for k, v in enumerate(needed):
        code.append(("store", k, value[v.id], 0, 0))
    out = members[0].outputs[0]
    return inputs, {"code": tuple(code), "constants": tuple(constants), "shape": out.shape,
                    "dtype": str(out.dtype), "n_outputs": len(needed)}


def _items(graph, groups, group_of, dissolved=frozenset()):
    """(the order to emit, the groups caught in a cycle). Groups of two or more are single
    items, other nodes themselves, topologically sorted, stable by each item's last node."""
    fused = {g: m for g, m in groups.members.items() if len(m) > 1 and g not in dissolved}
    item_of, items = {}, []
    for pos, node in enumerate(graph.nodes):
        g = groups.find(group_of[node.outputs[0].id]) if node.outputs and \
            node.outputs[0].id in group_of else None
        key = ("group", g) if g in fused else ("node", id(node))
        if key not in item_of:
            item_of[key] = len(items)
            items.append([key, [], pos])
        items[item_of[key]][1].append(node)
        items[item_of[key]][2] = pos
    producer = {v.id: item_of_node for item_of_node, (_, nodes, _) in enumerate(items)
                for n in nodes for v in n.outputs}
    after = [set() for _ in items]
    waiting = [0] * len(items)
    for i, (_, nodes, _) in enumerate(items):
        before = {producer[v.id] for n in nodes for v in n.inputs} - {i}
        waiting[i] = len(before)
        for b in before:
            after[b].add(i)
    heap = [(items[i][2], i) for i in range(len(items)) if waiting[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append((items[i][0][0], items[i][1]))
        for j in after[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(heap, (items[j][2], j))
    stuck = {key[1] for key, _, _ in items if key[0] == "group"} - \
        {groups.find(group_of[nodes[0].outputs[0].id]) for kind, nodes in order
         if kind == "group"}
    return order, stuck


def _needed(members, readers, outputs) -> list:
    inside = {id(n) for n in members}
    wanted = {v.id for v in outputs}
    return [n.outputs[0] for n in members
            if n.outputs[0].id in wanted
            or any(id(r) not in inside for r in readers.get(n.outputs[0].id, ()))]


def fuse(graph, outputs, limits=None) -> PassResult:
    groups, group_of = _group_nodes(graph)
    readers: dict[int, list] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers.setdefault(v.id, []).append(node)
    order, stuck = _items(graph, groups, group_of)
    if stuck:
        # NOTE: the dependency tracking of _group_nodes misses cycles that close through a
        # group that grew after a value read from it; those groups go back to single nodes,
        # which always leaves a valid order, since the graph itself has no cycle.
        order, stuck = _items(graph, groups, group_of, dissolved=stuck)
    builder, made = Builder(graph), []
    for kind, nodes in order:
        if kind == "node":
            for node in nodes:
                for old, new in zip(node.outputs, builder.copy(node)):
                    builder.vars[old.id] = new
            continue
        needed = _needed(nodes, readers, outputs)
        inputs, attrs = _program(graph, nodes, needed)
        news = builder.add("fused_elementwise", [builder.var(v) for v in inputs], attrs,
                           nodes[-1])
        for old, new in zip(needed, news):
            builder.vars[old.id] = new
        made.append("+".join(n.op.name for n in nodes))
    builder.carry_bindings()
    return result(builder, outputs, bool(made), {"groups": len(made), "fused": made})
