"""Plans: the schedule of kernel calls over numbered buffer slots, and the function that makes one.

A Plan is plain data (slots, instructions, feeds, outputs, initial values); it is printed,
reported and run without the graph that made it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import dispatch
from ._kernels.runtime import Executor
from .ir.errors import FeedError, GraphError, KernelError, OpError
from .ir.graph import Graph, Var
from .ir.printer import format_attrs
from .ir.types import TensorType

_KERNEL_STATUS = {1: "an index is out of range", 2: "a value is invalid",
                  3: "the kernel does not support these parameters"}


@dataclass(frozen=True)
class Slot:
    """A buffer the plan reads or writes. ``alias`` names the slot whose memory it views."""

    index: int
    type: TensorType
    role: str            # "input", "param", "const", "temp" or "workspace"
    name: str | None = None
    alias: int | None = None

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
    shared: frozenset[int] = frozenset()   # param slots whose value array is the buffer itself
    _executor: Executor | None = field(default=None, repr=False)
    _buffers: dict[int, np.ndarray] | None = field(default=None, repr=False)

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
        """Allocate every slot's buffer and build the executor: once per plan, not per run."""
        buffers: dict[int, np.ndarray] = {}
        for slot in self.slots:
            if slot.index in self.shared:
                buffers[slot.index] = self.values[slot.index]
            elif slot.alias is None:
                buffers[slot.index] = np.empty(slot.type.shape, slot.type.dtype)
        for slot in self.slots:
            if slot.alias is not None:
                buffers[slot.index] = buffers[slot.alias].reshape(slot.type.shape)
        for index, value in self.values.items():
            if index not in self.shared:
                buffers[index][...] = value
        self._executor = Executor(
            [ins.kernel.address for ins in self.instructions],
            [[buffers[b].ctypes.data for b in ins.buffers] for ins in self.instructions],
            [list(ins.ints) for ins in self.instructions],
            [list(ins.floats) for ins in self.instructions],
            buffers)
        self._buffers = buffers

    # -- reading --------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"plan device={self.device}: {len(self.instructions)} instructions, "
                 f"{len(self.slots)} slots"]
        for s in self.slots:
            extra = f" {s.name}" if s.name else ""
            extra += f" (view of s{s.alias})" if s.alias is not None else ""
            lines.append(f"  s{s.index}: {s.type} {s.role}{extra} {s.nbytes}B")
        for i, ins in enumerate(self.instructions):
            outs = ", ".join(f"s{o}" for o in ins.outputs)
            args = " ".join(f"s{a}" for a in ins.inputs)
            ws = f" ws=s{ins.workspace}" if ins.workspace is not None else ""
            lines.append(f"  {i}: {outs} = {ins.op}{format_attrs(ins.attrs)} {args}{ws}  <{ins.kernel.name}>")
        lines.append(f"  outputs: {', '.join(f's{o}' for o in self.outputs)}")
        return "\n".join(lines)


def compile(outputs, device: str = "cpu") -> Plan:
    """Compile the graph that computes ``outputs`` into a Plan.

    >>> plan = compile([y]); (out,) = plan.run({"x": x_value})
    """
    outputs = [outputs] if isinstance(outputs, Var) else list(outputs)
    if not outputs or not all(isinstance(v, Var) for v in outputs):
        raise GraphError("compile() takes a non-empty list of Vars")
    graph = outputs[0].graph
    if any(v.graph is not graph for v in outputs):
        raise GraphError("all outputs of compile() must belong to one graph")
    if device != "cpu":
        raise GraphError(f"unknown device {device!r}; available: 'cpu'")
    return _lower(graph, outputs, device)


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

    That holds when the value is made by an elementwise op (which reads each element before
    writing it), is used by nothing but the assign, and every other read of the param comes
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
                or len(producer.outputs) != 1 or value.id in output_ids
                or target.id in output_ids or len(uses.get(value.id, ())) != 1):
            continue
        others = [u for u in uses.get(target.id, ()) if u is not node and u is not producer]
        if all(position[id(u)] < position[id(producer)] for u in others):
            chosen[value.id] = target
    return chosen


def _lower(graph: Graph, outputs, device: str) -> Plan:
    slots: list[Slot] = []
    slot_of: dict[int, int] = {}
    values: dict[int, np.ndarray] = {}
    instructions: list[Instruction] = []

    def new_slot(t, role, name=None, alias=None) -> int:
        slots.append(Slot(len(slots), t, role, name, alias))
        return len(slots) - 1

    nodes = _needed_nodes(graph, outputs)
    # Assigns run last so that every read in a run sees the state as it was when the run began.
    nodes = [n for n in nodes if n.op.name != "assign"] + [n for n in nodes if n.op.name == "assign"]
    written_in_place = _assigns_written_in_place(nodes, outputs)
    for node in nodes:
        op = node.op
        if op.name == "assign" and node.inputs[1].id in written_in_place:
            continue
        if node.outputs and node.outputs[0].id in written_in_place:
            slot_of[node.outputs[0].id] = slot_of[written_in_place[node.outputs[0].id].id]
        if op.category == "source":
            (var,) = node.outputs
            slot_of[var.id] = new_slot(var.type, op.name, node.attr.get("name"))
            if op.name != "input":
                values[slot_of[var.id]] = graph.values[var.id]
            continue
        if op.view:
            src = slot_of[node.inputs[0].id]
            root = slots[src].alias if slots[src].alias is not None else src
            slot_of[node.outputs[0].id] = new_slot(node.outputs[0].type, "temp", alias=root)
            continue
        try:
            kernel = dispatch.lookup(op.name, device, op.dispatch_dtype(node))
            launch = op.lower(node)
        except (ValueError, LookupError) as exc:
            raise OpError(op.name, [v.type for v in node.inputs], str(exc), node.location) from None
        for var in node.outputs:
            if var.id not in slot_of:
                slot_of[var.id] = new_slot(var.type, "temp")
        ins_inputs = tuple(slot_of[v.id] for v in node.inputs)
        ins_outputs = tuple(slot_of[v.id] for v in node.outputs)
        if op.name == "assign":  # copy the value (input 1) into the param's buffer (input 0)
            ins_inputs, ins_outputs = ins_inputs[1:], ins_inputs[:1]
        workspace = None
        if launch.workspace:
            workspace = new_slot(TensorType((launch.workspace,), np.dtype(np.uint8)), "workspace")
        instructions.append(Instruction(
            op.name, kernel, ins_inputs, ins_outputs, workspace, launch.ints, launch.floats,
            node.attrs, node.location))
    feeds = {name: slot_of[v.id] for name, v in graph.inputs.items()}
    shared = frozenset(slot_of[i] for i in graph.shared if i in slot_of)
    return Plan(device, tuple(slots), tuple(instructions), feeds,
                tuple(slot_of[v.id] for v in outputs), values, shared)
