"""Lowering: a graph, through one backend, to instructions over numbered buffer slots.

Each node the outputs need becomes a slot per output value (a view, such as a reshape or a
contiguous slice, is its input's bytes at an offset: ``OpDef.view``) and, unless it is a source
or a view, one ``Instruction``: the backend's kernel for the op and dtype, and the parameter
block its lowering computes. Instructions come in the user's order; the memory planner orders
and places them next.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .backend import Launch
from .ir.errors import OpError
from .ir.graph import Graph, Var
from .ir.types import TensorType
from .plan import Choice, Instruction, Role, Slot
from .planner.memory.buckets import contiguous_buckets
from .tuning import by_rules


def makes_view(node) -> bool:
    """Whether ``node``'s output 0 is its input 0's bytes (no kernel runs for it)."""
    return node.op.category != "source" and bool(node.inputs) \
        and node.op.view_offset(node) is not None


def view_root(v: Var) -> Var:
    """The var whose bytes ``v`` is, through the views lowering makes no copy for."""
    while v.node is not None and makes_view(v.node):
        v = v.node.inputs[0]
    return v


def _needed_nodes(graph: Graph, outputs) -> list:
    needed = {v.id for v in outputs}
    kept = []
    for node in reversed(graph.nodes):
        if node.op.name in ("input", "assign") or any(v.id in needed for v in node.outputs):
            kept.append(node)
            needed.update(v.id for v in node.inputs)
    return kept[::-1]


def _assigns_written_in_place(nodes, outputs) -> dict[int, Var]:
    """Assigned values that can be computed straight into their param: {value var id: param}.

    That holds when the value is made by an in-place op (which reads each element before
    writing it; with several outputs, only an elementwise one, such as a fused update), is
    used by nothing but the assign, and every other read of the param or of a view of it
    (a reshape, a slice) comes earlier in the schedule; the copy of the assign is then saved.
    """
    position = {id(n): i for i, n in enumerate(nodes)}
    uses: dict[int, list] = {}
    for n in nodes:
        for v in n.inputs:
            uses.setdefault(v.id, []).append(n)
    output_ids = {v.id for v in outputs}
    # a view (a reshape, a contiguous slice) is its input's bytes: reading it reads the param
    root = {n.outputs[0].id: view_root(n.outputs[0]).id for n in nodes if makes_view(n)}
    aliases: dict[int, list] = {}
    for vid, r in root.items():
        aliases.setdefault(r, []).append(vid)
    chosen = {}
    for node in nodes:
        if node.op.name != "assign":
            continue
        target, value = node.inputs
        producer = value.node
        if (producer is None or not producer.op.inplace or id(producer) not in position
                or (len(producer.outputs) != 1 and producer.op.category != "elementwise")
                or value.id in output_ids
                or target.id in output_ids or len(uses.get(value.id, ())) != 1):
            continue
        views = aliases.get(target.id, [])
        if any(v in output_ids for v in views) or any(v.id in views for v in producer.inputs):
            continue
        # an in-place op other than an elementwise one may overwrite its input 0 only (a GEMM
        # adding into its input 0 still reads its other operands after writing outputs)
        if (producer.op.category != "elementwise"
                and any(v.id == target.id for v in producer.inputs[1:])):
            continue
        others = [u for vid in [target.id, *views] for u in uses.get(vid, ())
                  if u is not node and u is not producer
                  and not (u.outputs and u.outputs[0].id in root)]
        if all(position[id(u)] < position[id(producer)] for u in others):
            chosen[value.id] = target
    return chosen


def _launch(node, impl, kernel, launches: dict, tuner) -> tuple[Launch, Choice | None]:
    """The node's launch and the choice of way it records: the backend's rules, or the tuner's
    (``compile(tune=...)``)."""
    key = (node.op.name, node.attrs, tuple(v.type for v in node.inputs),
           tuple(v.type for v in node.outputs))
    try:
        return launches[key]
    except KeyError:
        launches[key] = chosen = _chosen(node, impl, kernel, tuner)
        return chosen
    except TypeError:  # an attribute that is not a plain immutable value: no memo
        return _chosen(node, impl, kernel, tuner)


def _chosen(node, impl, kernel, tuner) -> tuple[Launch, Choice | None]:
    return by_rules(node, impl) if tuner is None else tuner.choose(node, impl, kernel)


@dataclass
class Lowered:
    """A plan before memory planning: instructions in the user's order, no offsets."""

    device: str
    slots: list[Slot]
    instructions: list[Instruction]
    feeds: dict[str, int]
    outputs: tuple[int, ...]
    values: dict[int, np.ndarray]
    shared: frozenset[int]
    after: tuple[tuple[int, int], ...] = ()  # (i, j): instruction j runs after i



def _mark_outputs(slots: list[Slot], outputs) -> None:
    """Temporaries the caller gets back (or that an output views) outlive the run."""
    for s in outputs:
        root = slots[s].alias if slots[s].alias is not None else s
        if slots[root].role == Role.TEMP:
            slots[root] = replace(slots[root], role=Role.OUTPUT)


def lower(graph: Graph, outputs, backend, clones=frozenset(), launches=None,
          tuner=None) -> Lowered:
    """Instructions in the graph's order. ``clones`` (id() of rematerialisation's recomputing
    nodes) each run after the last other instruction before them (``Lowered.after``).
    ``launches`` memoises the backend's lowerings (pure functions of the op, attributes and
    types) across nodes and calls: the layers of a deep network, and the candidate graphs of
    rematerialisation, repeat the same nodes. ``tuner`` (a ``tuning.Tuner``) chooses the way
    of each kernel that has several; None: the backend's rules."""
    launches = {} if launches is None else launches
    slots: list[Slot] = []
    slot_of: dict[int, int] = {}
    values: dict[int, np.ndarray] = {}
    instructions: list[Instruction] = []

    def new_slot(t, role, name=None, alias=None, view_offset=0) -> int:
        slots.append(Slot(len(slots), t, role, name, alias, view_offset))
        return len(slots) - 1

    nodes = _needed_nodes(graph, outputs)
    # Assigns run last so that every read in a run sees the state as it was when the run began.
    nodes = [n for n in nodes if n.op.name != "assign"] + [n for n in nodes if n.op.name == "assign"]
    written_in_place = _assigns_written_in_place(nodes, outputs)
    after, anchor = [], None
    for node in nodes:
        op = node.op
        if op.name == "assign" and node.inputs[1].id in written_in_place:
            continue
        for var in node.outputs:
            if var.id in written_in_place:
                slot_of[var.id] = slot_of[written_in_place[var.id].id]
        if op.category == "source":
            (var,) = node.outputs
            slot_of[var.id] = new_slot(var.type, Role(op.name), node.attr.get("name"))
            if op.name != "input":
                values[slot_of[var.id]] = graph.values[var.id]
            continue
        view_offset = op.view_offset(node)
        if view_offset is not None:
            src = slots[slot_of[node.inputs[0].id]]
            root = src.alias if src.alias is not None else src.index
            slot_of[node.outputs[0].id] = new_slot(node.outputs[0].type, Role.VIEW, alias=root,
                                                   view_offset=src.view_offset + view_offset)
            continue
        impl = backend.impl(op.name)
        if impl is None:
            raise OpError(op.name, [v.type for v in node.inputs],
                          f"device {backend.name!r} does not run {op.name!r}", node.location)
        try:
            kernel = backend.kernel(op.name, impl.dispatch_dtype(node))
            launch, choice = _launch(node, impl, kernel, launches, tuner)
        except (ValueError, LookupError) as exc:
            raise OpError(op.name, [v.type for v in node.inputs], str(exc), node.location) from None
        if op.in_place_from is not None:  # the kernel writes these inputs' own bytes
            for var, src in zip(node.outputs, node.inputs[op.in_place_from:]):
                slot_of[var.id] = slot_of[src.id]
        for var in node.outputs:
            if var.id not in slot_of:
                slot_of[var.id] = new_slot(var.type, Role.TEMP)
        ins_inputs = tuple(slot_of[v.id] for v in node.inputs)
        ins_outputs = tuple(slot_of[v.id] for v in node.outputs)
        if op.name == "assign":  # copy the value (input 1) into the param's buffer (input 0)
            ins_inputs, ins_outputs = ins_inputs[1:], ins_inputs[:1]
        if id(node) not in clones:
            anchor = len(instructions)
        elif anchor is not None:
            after.append((anchor, len(instructions)))
        workspace = None
        if launch.workspace:
            workspace = new_slot(TensorType((launch.workspace,), np.dtype(np.uint8)), Role.WORKSPACE)
        instructions.append(Instruction(
            op.name, kernel.name, ins_inputs, ins_outputs, workspace, launch.ints, launch.floats,
            node.attrs, node.location, choice))
    feeds = {name: slot_of[v.id] for name, v in graph.inputs.items()}
    shared = frozenset(slot_of[i] for i in graph.shared if i in slot_of)
    output_slots = tuple(slot_of[v.id] for v in outputs)
    _mark_outputs(slots, output_slots)
    contiguous_buckets(slots, instructions)
    return Lowered(backend.name, slots, instructions, feeds, output_slots, values, shared,
                    tuple(after))
