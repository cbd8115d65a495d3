"""Plans: the schedule of kernel calls over numbered buffer slots, and the function that makes one.

A Plan is plain data (slots, instructions, feeds, outputs, initial values); it is printed,
reported and run without the graph that made it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import dispatch
from ._kernels.runtime import Executor
from .ir.errors import FeedError, GraphError, KernelError, OpError
from .ir.graph import Graph, Var
from .ir.printer import format_attrs
from .ir.types import TensorType
from .planner.memory import MemoryPlan, memory_options, place, schedule
from .planner.pipeline import optimize as optimize_graph
from .planner.pipeline import passes_report
from .planner.remat import graph_flops, remat_options, split
from .planner.remat_report import RematReport
from .planner.remat_search import Judge, candidates, choose
from .planner.verify import checks_enabled, verify

_KERNEL_STATUS = {1: "an index is out of range", 2: "a value is invalid",
                  3: "the kernel does not support these parameters"}


@dataclass(frozen=True)
class Slot:
    """A buffer the plan reads or writes.

    ``role``: "input", "param", "const" and "output" are persistent (buffers of their own);
    "temp" and "workspace" live in the arena at ``offset``; a "view" is ``alias``'s bytes from
    ``view_offset`` on, reinterpreted with its own type.
    """

    index: int
    type: TensorType
    role: str
    name: str | None = None
    alias: int | None = None
    view_offset: int = 0
    offset: int | None = None

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass(frozen=True)
class Instruction:
    op: str
    kernel: dispatch.Kernel
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    workspace: int | None
    ints: tuple[int, ...]
    floats: tuple[float, ...]
    attrs: tuple
    location: str

    @property
    def buffers(self) -> tuple[int, ...]:
        ws = () if self.workspace is None else (self.workspace,)
        return self.inputs + self.outputs + ws


@dataclass
class Plan:
    device: str
    slots: tuple[Slot, ...]
    instructions: tuple[Instruction, ...]
    feeds: dict[str, int]                  # input name -> slot
    outputs: tuple[int, ...]
    values: dict[int, np.ndarray]          # slot -> initial value of a param or const
    memory: MemoryPlan
    shared: frozenset[int] = frozenset()   # param slots whose value array is the buffer itself
    passes: tuple = ()                      # (pass name, what it did) of the graph passes run
    remat: object = None                    # planner.remat_report.RematReport, when remat= ran
    _executor: Executor | None = field(default=None, repr=False)
    _buffers: dict[int, np.ndarray] | None = field(default=None, repr=False)

    @property
    def arena_bytes(self) -> int:
        """Bytes of the one arena that holds every temporary and workspace."""
        return self.memory.arena_bytes

    @property
    def lower_bound_bytes(self) -> int:
        """The most bytes live at one step of the schedule: no arena can be smaller."""
        return self.memory.lower_bound_bytes

    @property
    def naive_bytes(self) -> int:
        """What the temporaries would take with no reuse at all: the sum of their sizes."""
        return self.memory.naive_bytes

    @property
    def persistent_bytes(self) -> int:
        """Inputs, outputs, parameters and constants, each in a buffer of its own."""
        return self.memory.persistent_bytes

    def memory_report(self, format: str = "text", top: int = 10):
        """The memory plan explained: see ``mgegraph.planner.report``."""
        from .planner.report import memory_report
        return memory_report(self, format=format, top=top)

    def remat_report(self, format: str = "text"):
        """What rematerialisation kept and recomputed, the bytes saved, the extra FLOPs and
        the curve of peak against extra compute: see ``mgegraph.planner.remat_report``."""
        if self.remat is None:
            raise GraphError("this plan was compiled without remat=; pass remat='auto', "
                             "'sqrt' or a byte budget to mg.compile")
        return self.remat.render(format)

    def passes_report(self) -> str:
        """One line per graph pass that ran before planning: what it changed."""
        return passes_report(self.passes) if self.passes else "no passes ran (optimize=0)"

    # -- running --------------------------------------------------------------------------
    def run(self, feeds: dict) -> list[np.ndarray]:
        """Run the plan on ``feeds`` ({input name: array}); returns arrays the caller owns."""
        self._check_feeds(feeds)
        if self._executor is None:
            self._prepare()
        buffers = self._buffers
        for name, slot in self.feeds.items():
            np.copyto(buffers[slot], feeds[name], casting="no")
        failure = self._executor.run()
        if failure is not None:
            index, status = failure
            ins = self.instructions[index]
            raise KernelError(f"{ins.op} (kernel {ins.kernel.name}, node made at {ins.location}): "
                              f"{_KERNEL_STATUS.get(status, f'status {status}')}")
        return [buffers[s].copy() for s in self.outputs]

    def _check_feeds(self, feeds):
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds must be a dict of input name to array, got {type(feeds).__name__}")
        missing = sorted(set(self.feeds) - set(feeds))
        extra = sorted(set(feeds) - set(self.feeds))
        if missing or extra:
            raise FeedError(f"feeds do not match the plan's inputs {sorted(self.feeds)}: "
                            f"missing {missing}, extra {extra}")
        for name, slot in self.feeds.items():
            value, want = feeds[name], self.slots[slot].type
            if not isinstance(value, (np.ndarray, np.generic)):
                raise FeedError(f"feed {name!r} must be a numpy array, got {type(value).__name__}")
            if np.shape(value) != want.shape or value.dtype != want.dtype:
                raise FeedError(f"feed {name!r} is {value.dtype}{list(value.shape)}, the plan "
                                f"needs {want.dtype}{list(want.shape)}")

    def _prepare(self):
        """Carve every buffer out of the arena or allocate it, and build the executor: once
        per plan, not per run."""
        arena = _aligned_bytes(self.memory.arena_bytes, self.memory.options.alignment)
        buffers: dict[int, np.ndarray] = {}
        for slot in self.slots:
            if slot.index in self.shared:
                buffers[slot.index] = self.values[slot.index]
            elif slot.offset is not None:
                buffers[slot.index] = _typed(arena[slot.offset:slot.offset + slot.nbytes], slot)
            elif slot.alias is None:
                buffers[slot.index] = np.empty(slot.type.shape, slot.type.dtype)
        for slot in self.slots:
            if slot.alias is not None:
                root = buffers[slot.alias].reshape(-1).view(np.uint8)
                buffers[slot.index] = _typed(
                    root[slot.view_offset:slot.view_offset + slot.nbytes], slot)
        for index, value in self.values.items():
            if index not in self.shared:
                buffers[index][...] = value
        poison = _poison_list(self, buffers) if self.memory.options.poison else []
        self._executor = Executor(
            [ins.kernel.address for ins in self.instructions],
            [[buffers[b].ctypes.data for b in ins.buffers] for ins in self.instructions],
            [list(ins.ints) for ins in self.instructions],
            [list(ins.floats) for ins in self.instructions],
            (buffers, arena), poison)
        self._buffers = buffers

    # -- reading --------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"plan device={self.device}: {len(self.instructions)} instructions, "
                 f"{len(self.slots)} slots"]
        for s in self.slots:
            extra = f" {s.name}" if s.name else ""
            if s.alias is not None:
                extra += f" (view of s{s.alias}" + (f" +{s.view_offset}" if s.view_offset else "") + ")"
            where = f" @+{s.offset:#x}" if s.offset is not None else ""
            lines.append(f"  s{s.index}: {s.type}{where} {s.role}{extra} {s.nbytes}B")
        for i, ins in enumerate(self.instructions):
            outs = ", ".join(f"s{o}" for o in ins.outputs)
            args = " ".join(f"s{a}" for a in ins.inputs)
            ws = f" ws=s{ins.workspace}" if ins.workspace is not None else ""
            lines.append(f"  {i}: {outs} = {ins.op}{format_attrs(ins.attrs)} {args}{ws}  <{ins.kernel.name}>")
        lines.append(f"  outputs: {', '.join(f's{o}' for o in self.outputs)}")
        m = self.memory
        lines.append(f"  arena: {m.arena_bytes}B (lower bound {m.lower_bound_bytes}B, naive "
                     f"{m.naive_bytes}B), persistent: {m.persistent_bytes}B")
        return "\n".join(lines)


def _aligned_bytes(nbytes: int, alignment: int) -> np.ndarray:
    """A zeroed uint8 array of ``nbytes`` whose first byte is ``alignment``-aligned."""
    raw = np.zeros(nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes]


def _typed(raw: np.ndarray, slot: Slot) -> np.ndarray:
    return raw.view(slot.type.dtype).reshape(slot.type.shape)


# NaN; others (workspaces are bytes) 0xFF bytes, NaN as float32 and float64 too
_POISON_KIND = {np.dtype(np.float32): 1, np.dtype(np.float64): 2}


def _poison_list(plan: Plan, buffers) -> list[tuple[int, int, int, int]]:
    """(step, address, bytes, dtype code) of each arena value once its last reader ran; a
    value another takes over in place is left to its successor."""
    taken = {src for src, _ in plan.memory.overwrites.values()}
    return sorted((end - 1, buffers[s].ctypes.data, plan.slots[s].nbytes,
                   _POISON_KIND.get(plan.slots[s].type.dtype, 0))
                  for s, (_, end) in plan.memory.spans.items() if s not in taken)


def compile(outputs, device: str = "cpu", memory=None, optimize=1, remat=None) -> Plan:
    """Compile the graph that computes ``outputs`` into a Plan.

    ``memory`` chooses how temporaries share the arena: None (the default plan), a preset
    ("default", "debug" poisons dead buffers, "no_reuse"), an arena strategy name, or a
    ``mg.planner.MemoryOptions``. ``optimize`` is a level (0: no pass, 1: every pass) or a
    list of pass names of ``mg.planner.pipeline.PASSES``; ``plan.passes_report()`` says what
    each did. ``remat`` trades compute for memory in a training graph (the first output is the
    loss): None (off), "sqrt", "auto", a byte budget for the arena, or a
    ``mg.planner.RematOptions``; ``plan.remat_report()`` says what it kept and recomputed.

    >>> plan = compile([y]); (out,) = plan.run({"x": x_value})
    """
    options = memory_options(memory)
    remat = remat_options(remat)
    outputs = [outputs] if isinstance(outputs, Var) else list(outputs)
    if not outputs or not all(isinstance(v, Var) for v in outputs):
        raise GraphError("compile() takes a non-empty list of Vars")
    graph = outputs[0].graph
    if any(v.graph is not graph for v in outputs):
        raise GraphError("all outputs of compile() must belong to one graph")
    if device != "cpu":
        raise GraphError(f"unknown device {device!r}; available: 'cpu'")
    graph, outputs, report = optimize_graph(graph, outputs, optimize, check=checks_enabled())
    outputs = _before_updates(graph, outputs)
    if remat is None:
        plan = _plan(_lower(graph, outputs, device), options)
    else:
        plan = _remat_plan(graph, outputs, device, options, remat)
    plan.passes = tuple(report)
    return plan


def _remat_plan(graph: Graph, outputs, device: str, options, remat) -> Plan:
    """Rematerialisation runs after the graph passes, so that CSE cannot merge the clones back
    into their originals and the clones are the same fused kernels (bitwise the same results);
    every candidate is judged by its own memory plan."""
    s = split(graph, outputs)
    launches: dict = {}
    judge = Judge(s, outputs, lambda g, outs, clones: _lower(g, outs, device, clones, launches),
                  options)
    pool, base_flops = candidates(s), graph_flops(graph)

    def plan_of(candidate):
        judged = judge(candidate)
        return _plan(judged.lowered, options, judged.scheduled, judged.memory(options))

    chosen = choose(judge, pool, remat, base_flops)
    plan = plan_of(chosen)
    plan.remat = RematReport(s, judge, pool, chosen, remat, base_flops, plan_of)
    return plan


def _before_updates(graph: Graph, outputs) -> list:
    """Outputs that the passes reduced to a param an assign updates (``w + 0`` -> ``w``) are
    copied, so they still give the value the run began with, not the updated one."""
    assigned = {node.inputs[0].id for node in graph.assigns}
    if not any(v.id in assigned for v in outputs):
        return outputs
    from .ops.builder import apply
    return [apply("copy", (v,)) if v.id in assigned else v for v in outputs]


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
    used by nothing but the assign, and every other read of the param comes
    earlier in the schedule; the copy of the assign is then saved.
    """
    position = {id(n): i for i, n in enumerate(nodes)}
    uses: dict[int, list] = {}
    for n in nodes:
        for v in n.inputs:
            uses.setdefault(v.id, []).append(n)
    output_ids = {v.id for v in outputs}
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
        others = [u for u in uses.get(target.id, ()) if u is not node and u is not producer]
        if all(position[id(u)] < position[id(producer)] for u in others):
            chosen[value.id] = target
    return chosen


def _launch(node, launches: dict):
    key = (node.op.name, node.attrs, tuple(v.type for v in node.inputs),
           tuple(v.type for v in node.outputs))
    try:
        return launches[key]
    except KeyError:
        launches[key] = launch = node.op.lower(node)
        return launch
    except TypeError:  # an attribute that is not a plain immutable value: no memo
        return node.op.lower(node)


@dataclass
class _Lowered:
    """A plan before memory planning: instructions in the user's order, no offsets."""

    device: str
    slots: list[Slot]
    instructions: list[Instruction]
    feeds: dict[str, int]
    outputs: tuple[int, ...]
    values: dict[int, np.ndarray]
    shared: frozenset[int]
    after: tuple[tuple[int, int], ...] = ()  # (i, j): instruction j runs after i


def _plan(lowered: _Lowered, options, scheduled=None, memory=None) -> Plan:
    """The Plan of a lowered graph; ``scheduled`` (memory.schedule's result) and ``memory``
    (its placement) when the caller has them already."""
    if scheduled is None:
        scheduled = schedule(lowered.slots, lowered.instructions, options, lowered.after)
    order = scheduled.order
    memory = place(lowered.slots, scheduled, options) if memory is None else memory
    slots = tuple(replace(s, offset=memory.offsets.get(s.index)) for s in lowered.slots)
    plan = Plan(lowered.device, slots, tuple(lowered.instructions[i] for i in order),
                lowered.feeds, lowered.outputs, lowered.values, memory, lowered.shared)
    if checks_enabled():
        verify(plan)
    return plan


def _mark_outputs(slots: list[Slot], outputs) -> None:
    """Temporaries the caller gets back (or that an output views) outlive the run."""
    for s in outputs:
        root = slots[s].alias if slots[s].alias is not None else s
        if slots[root].role == "temp":
            slots[root] = replace(slots[root], role="output")


def _lower(graph: Graph, outputs, device: str, clones=frozenset(), launches=None) -> _Lowered:
    """Instructions in the graph's order. ``clones`` (id() of rematerialisation's recomputing
    nodes) each run after the last other instruction before them (``_Lowered.after``).
    ``launches`` memoises ``OpDef.lower`` (a pure function of the op, attributes and types)
    across nodes and calls: the layers of a deep network, and the candidate graphs of
    rematerialisation, repeat the same nodes."""
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
            slot_of[var.id] = new_slot(var.type, op.name, node.attr.get("name"))
            if op.name != "input":
                values[slot_of[var.id]] = graph.values[var.id]
            continue
        view_offset = op.view_offset(node)
        if view_offset is not None:
            src = slots[slot_of[node.inputs[0].id]]
            root = src.alias if src.alias is not None else src.index
            slot_of[node.outputs[0].id] = new_slot(node.outputs[0].type, "view", alias=root,
                                                   view_offset=src.view_offset + view_offset)
            continue
        try:
            kernel = dispatch.lookup(op.name, device, op.dispatch_dtype(node))
            launch = _launch(node, launches)
        except (ValueError, LookupError) as exc:
            raise OpError(op.name, [v.type for v in node.inputs], str(exc), node.location) from None
        for var in node.outputs:
            if var.id not in slot_of:
                slot_of[var.id] = new_slot(var.type, "temp")
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
            workspace = new_slot(TensorType((launch.workspace,), np.dtype(np.uint8)), "workspace")
        instructions.append(Instruction(
            op.name, kernel, ins_inputs, ins_outputs, workspace, launch.ints, launch.floats,
            node.attrs, node.location))
    feeds = {name: slot_of[v.id] for name, v in graph.inputs.items()}
    shared = frozenset(slot_of[i] for i in graph.shared if i in slot_of)
    output_slots = tuple(slot_of[v.id] for v in outputs)
    _mark_outputs(slots, output_slots)
    return _Lowered(device, slots, instructions, feeds, output_slots, values, shared,
                    tuple(after))
