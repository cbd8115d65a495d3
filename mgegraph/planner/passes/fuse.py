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

Design: what one fused kernel holds is the backend's to say (``backend.FusionLimits``: inputs,
outputs, registers, dims). A group that would exceed them is split into runs of its members in
graph order, each the longest that fits from where the last one ended, emitted one after the
other where the group would have been (all the group's outside inputs are made before that
point and its readers after it, so the order stays valid). Inputs and outputs are counted on
the program as it will be built; registers are the most values live at once in it
(``registers_needed``), which every allocator of straight-line code needs and the CPU's linear
scan achieves, so the count is exact before lowering; dims are bounded by the output's rank
(conservative: a lowering that collapses contiguous dims may need fewer).

>>> str(fuse(g, [y]).graph)   # relu(x * a + b) -> fused_elementwise[...] %x %a %b
"""
from __future__ import annotations

import bisect
import heapq

from ...ir.types import FLOAT_DTYPES, TensorType
from ...ops.fused import FLOAT32, FUSABLE_OPS
from ...ops.fused_program import STORAGE, reads, steps
from .rewrite import Builder, PassResult, result

# quantize and dequantize join float32 groups, per tensor, between float32 and int8 or uint8:
# the fused kernel loads and stores those integers (ops/fused_program.py)
_STORAGE_CODE = {dtype: code for code, dtype in STORAGE.items()}


def _fusable(node) -> bool:
    if node.op.name == "quantize":
        return _quantized_boundary(node.outputs[0], node.inputs[0])
    if node.op.name == "dequantize":
        return _quantized_boundary(node.inputs[0], node.outputs[0])
    if node.op.name not in FUSABLE_OPS or len(node.outputs) != 1:
        return False
    out = node.outputs[0]
    return out.dtype in FLOAT_DTYPES and all(v.dtype == out.dtype for v in node.inputs)


def _quantized_boundary(q, real) -> bool:
    return real.dtype == FLOAT32 and q.dtype in _STORAGE_CODE and not q.type.quant.per_channel


def _computes(node) -> TensorType:
    """The type a fusable node computes in (a quantize's: its float input's), which all the
    members of a group share."""
    v = node.inputs[0] if node.op.name == "quantize" else node.outputs[0]
    return TensorType(v.shape, v.dtype)


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
            shape = _computes(node)
            inside = {g for g in roots.values() if _computes(groups.members[g][0]) == shape}
            ext = _outside(groups, node, roots, deps, inside)
            if inside and any(ext & groups.alias[g] for g in inside):
                # an input group that another one reads through something outside (a recurrent
                # state beside a gate of the step after a GEMM) stays apart; the rest merge
                inside = {g for g in inside
                          if not any(groups.ext_deps[o] & groups.alias[g] for o in inside)}
                ext = _outside(groups, node, roots, deps, inside)
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


def _outside(groups, node, roots, deps, inside) -> int:
    """What the group of ``inside`` merged with ``node`` would read from outside, through
    anything (a bitmask of groups)."""
    ext = 0
    for v in node.inputs:
        if roots.get(v.id) not in inside:
            ext |= deps.get(v.id, 0) | (groups.alias[roots[v.id]] if v.id in roots else 0)
    for g in inside:
        ext |= groups.ext_deps[g]
    return ext


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
                code.append(("load", len(value), len(inputs), _STORAGE_CODE.get(v.dtype, 0), 0))
                inputs.append(v)
            value[v.id] = len(value)
        return value[v.id]

    for node in members:
        args = [operand(v) for v in node.inputs] + [0] * (3 - len(node.inputs))
        name = node.op.name
        if name in ("quantize", "dequantize"):  # the scale and zero point become constants
            q = (node.outputs[0] if name == "quantize" else node.inputs[0]).type
            args[1:3] = len(constants), len(constants) + 1
            constants += [q.quant.scale, float(q.quant.zero_point)]
            name = "quantize_" + q.dtype.name if name == "quantize" else name
        for key in FUSABLE_OPS.get(name, ()):  # float attributes become constants
            args[len(node.inputs) + FUSABLE_OPS[name].index(key)] = len(constants)
            constants.append(float(node.attr[key]))
        value[node.outputs[0].id] = len(value)
        code.append((name, value[node.outputs[0].id], *args[:3]))
    for k, v in enumerate(needed):
        code.append(("store", k, value[v.id], _STORAGE_CODE.get(v.dtype, 0), 0))
    out = _computes(members[0])
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


def registers_needed(code) -> int:
    """The registers an SSA program needs: the most values live at one step, at least one. A
    value takes a register from the step that makes it to its last read (a value nobody reads
    takes none), and a step's result takes one while its operands still hold theirs.

    >>> registers_needed([("load", 0, 0), ("load", 1, 1), ("add", 2, 0, 1), ("store", 0, 2)])
    2
    """
    code = steps(code)
    last = {v: k for k, (op, _, a, b, c) in enumerate(code) for v in reads(op, a, b, c)}
    freed = [0] * len(code)
    for k in last.values():
        freed[k] += 1
    held = most = 0
    for k, (op, dst, *_) in enumerate(code):
        if op != "store" and dst in last:
            held += 1
            most = max(most, held)
        held -= freed[k]
    return max(most, 1)


def _split(graph, members, readers, outputs, limits) -> list[list]:
    """The group as runs of members (graph order) that each fit ``limits``; a run of one node
    is emitted unfused, which always works. No limits: the group whole."""
    if limits is None:
        return [members]
    if len(members[0].outputs[0].shape) > limits.max_dims:
        return [[m] for m in members]
    runs, start = [], 0
    while start < len(members):
        end = _run_end(graph, members, start, readers, outputs, limits)
        runs.append(members[start:end])
        start = end
    return runs


def _run_end(graph, members, start, readers, outputs, limits) -> int:
    """The end of the longest run ``members[start:end]`` that fits, at least ``start + 1``.

    A run's inputs and registers only grow as it grows (a member adds loads and steps, and
    makes values live longer, never shorter), so the longest run within those two limits is
    found by galloping and bisection; its outputs can fall as it grows (a value's last outside
    reader joins it), so the run is then the longest prefix of that one whose outputs fit."""
    def bounded(end: int) -> bool:
        run = members[start:end]
        inputs, attrs = _program(graph, run, _needed(run, readers, outputs))
        return (len(inputs) <= limits.max_inputs
                and registers_needed(attrs["code"]) <= limits.max_registers)

    stop = len(members)
    if bounded(stop):  # the rest fits whole, the common case: one program built
        good = stop
    elif not bounded(start + 1):
        return start + 1
    else:
        good = _longest(bounded, start, stop)
    counts = _outputs_by_length(members[start:good], readers, outputs)
    return next((start + n for n in range(good - start, 1, -1)
                 if counts[n - 1] <= limits.max_outputs), start + 1)


def _longest(bounded, start: int, stop: int) -> int:
    """The largest end in [start + 1, stop] with ``bounded(end)``, which holds at start + 1 and,
    once false, stays false: runs of 2, 4, 8, ... members until one fails, then bisection."""
    good, width = start + 1, 1
    while good < stop:
        probe = min(start + 2 * width, stop)
        if not bounded(probe):
            ends = range(good + 1, probe)
            return good + bisect.bisect_left(ends, True, key=lambda end: not bounded(end))
        good, width = probe, 2 * width
    return good


def _outputs_by_length(run, readers, outputs) -> list[int]:
    """For each length n, how many values ``run[:n]`` stores (what ``_needed`` lists): those
    the caller wants or someone outside the first n members reads."""
    wanted = {v.id for v in outputs}
    outside, count, counts = {}, 0, []
    for node in run:
        for v in node.inputs:
            if v.id in outside:
                outside[v.id] -= 1
                count -= outside[v.id] == 0 and v.id not in wanted
        out = node.outputs[0]
        outside[out.id] = len(readers.get(out.id, ()))
        count += outside[out.id] > 0 or out.id in wanted
        counts.append(count)
    return counts


def fuse(graph, outputs, limits=None) -> PassResult:
    """Fuse the graph's elementwise groups; with ``limits`` (a ``backend.FusionLimits``) every
    fused node fits them, a group that would not being split (the report counts those split).

    >>> fuse(g, [y], limits=mg.backend.get_backend("cpu").fusion).stats
    {'groups': 1, 'fused': ['mul+add+relu']}
    """
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
    builder, made, split = Builder(graph), [], 0
    for kind, nodes in order:
        runs = [nodes] if kind == "node" else _split(graph, nodes, readers, outputs, limits)
        split += len(runs) > 1
        for run in runs:
            if kind == "node" or len(run) == 1:
                _copy(builder, run)
            else:
                made.append(_emit(builder, graph, run, readers, outputs))
    builder.carry_bindings()
    stats = {"groups": len(made), "fused": made}
    if split:  # only then, so that the report of a graph that fits reads as it always has
        stats["split"] = split
    return result(builder, outputs, bool(made), stats)


def _copy(builder, nodes) -> None:
    for node in nodes:
        for old, new in zip(node.outputs, builder.copy(node)):
            builder.vars[old.id] = new


def _emit(builder, graph, members, readers, outputs) -> str:
    """One fused node for ``members``; returns what the report calls it."""
    needed = _needed(members, readers, outputs)
    inputs, attrs = _program(graph, members, needed)
    news = builder.add("fused_elementwise", [builder.var(v) for v in inputs], attrs, members[-1])
    for old, new in zip(needed, news):
        builder.vars[old.id] = new
    return "+".join(n.op.name for n in members)
