"""Plans: the schedule of kernel calls over numbered buffer slots, as plain frozen data.

A Plan holds slots, instructions (kernel names and parameter blocks), feeds, outputs, initial
values, the memory plan and what the passes and rematerialisation did; it prints, reports and
compares without the graph that made it. Running it is its backend's business:
``plan.executable()`` allocates the memory once (``Plan.run`` is the convenience over it).
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from .backend import get_backend
from .host_memory import aligned_empty
from .ir.errors import FeedError, GraphError
from .ir.printer import CATEGORY_COLOURS, OTHER_COLOUR, dot_text, format_attrs
from .ir.types import TensorType, is_float
from .kernels_report import KernelsReport
from .ops import get_op
from .planner.memory.plan import MemoryPlan
from .planner.memory.report import memory_report
from .planner.passes.pipeline import passes_report


class Role(StrEnum):
    """What a slot holds. Inputs, params, consts and outputs are persistent (buffers of their
    own, outside the arena); temporaries and workspaces live in the arena; a view is another
    slot's bytes. A Role equals its name as a string (``Role.TEMP == "temp"``)."""

    INPUT = "input"
    PARAM = "param"
    CONST = "const"
    OUTPUT = "output"
    TEMP = "temp"
    WORKSPACE = "workspace"
    VIEW = "view"


@dataclass(frozen=True)
class Slot:
    """A buffer the plan reads or writes.

    ``role``: "input", "param", "const" and "output" are persistent (buffers of their own);
    "temp" and "workspace" live in the arena at ``offset``; a "view" is ``alias``'s bytes from
    ``view_offset`` on, reinterpreted with its own type.
    """

    index: int
    type: TensorType
    role: Role
    name: str | None = None
    alias: int | None = None
    view_offset: int = 0
    offset: int | None = None

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass(frozen=True)
class Choice:
    """Which way (``path``) an instruction's kernel takes and how that was decided: ``how`` is
    "rules" (the backend's rules, fitted to measurements on other machines), "measured" (timed
    now, ``compile(tune="measure")``) or "cached" (timed before on this machine, read from the
    store of ``mgegraph.tuning``); ``seconds`` of one call and the ``runner_up``'s (the fastest
    other way) where measured."""

    path: str
    how: str = "rules"
    seconds: float | None = None
    runner_up: str | None = None
    runner_up_seconds: float | None = None


@dataclass(frozen=True)
class Instruction:
    """One kernel call: ``kernel`` (a name in the plan's backend) on the ``inputs`` slots,
    writing the ``outputs`` slots, with its parameter block ``ints``/``floats`` and scratch
    ``workspace``; ``attrs`` and ``location`` are the node's, for reports and errors."""

    op: str
    kernel: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    workspace: int | None
    ints: tuple[int, ...]
    floats: tuple[float, ...]
    attrs: tuple
    location: str
    # which way its kernel takes and why (None: a kernel of one way); not part of the plan's
    # equality, which measured times would break
    choice: Choice | None = field(default=None, compare=False)

    @property
    def buffers(self) -> tuple[int, ...]:
        ws = () if self.workspace is None else (self.workspace,)
        return self.inputs + self.outputs + ws


@dataclass(frozen=True)
class PlanSource:
    """What a plan was compiled from, for saving it (the model file) and exporting it (ONNX):
    ``graph``, a snapshot of the caller's graph as it was at ``compile`` (later nodes of the
    same graph are not in it), its ``outputs`` Vars, and the keyword ``options`` of
    ``mg.compile`` (device, memory, optimize, remat, check_numerics) that give this plan."""

    graph: object
    outputs: tuple
    options: dict


@dataclass(frozen=True, eq=False)
class Plan:
    """A compiled graph: plain data. Two plans are equal when their slots, instructions,
    feeds, outputs, initial values and memory plans are."""

    device: str
    slots: tuple[Slot, ...]
    instructions: tuple[Instruction, ...]
    feeds: dict[str, int]                  # input name -> slot
    outputs: tuple[int, ...]
    values: dict[int, np.ndarray]          # slot -> initial value of a param or const
    memory: MemoryPlan
    shared: frozenset[int] = frozenset()   # param slots whose value array is the buffer itself
    passes: tuple = ()                      # (pass name, what it did) of the graph passes run
    remat: object = None                    # remat.remat_report.RematReport, when remat= ran
    check_numerics: bool = False            # runs stop at the first NaN/inf (NumericsError)
    source: PlanSource | None = None        # the graph and options it was compiled from
    # the plan of the weight-only instructions (planner.passes.prologue), which fills the
    # shared params named "prologue:k" of this plan; its executable reruns it when one of
    # the weights it reads was written (a backend without ``runs_prologue`` never gets one)
    prologue: Plan | None = None
    # the backend's executable, made on first use: memory the plan owns, not part of its data
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __eq__(self, other):
        if not isinstance(other, Plan):
            return NotImplemented
        return ((self.device, self.slots, self.instructions, self.feeds, self.outputs,
                 self.memory, self.shared, self.check_numerics)
                == (other.device, other.slots, other.instructions, other.feeds, other.outputs,
                    other.memory, other.shared, other.check_numerics)
                and self.values.keys() == other.values.keys()
                and all(np.array_equal(v, other.values[k], equal_nan=is_float(v.dtype))
                        for k, v in self.values.items()))

    __hash__ = None

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
        """The memory plan explained: see ``mgegraph.planner.memory.report``."""
        return memory_report(self, format=format, top=top)

    def remat_report(self, format: str = "text"):
        """What rematerialisation kept and recomputed, the bytes saved, the extra FLOPs and
        the curve of peak against extra compute: see ``mgegraph.planner.remat.remat_report``."""
        if self.remat is None:
            raise GraphError("this plan was compiled without remat=; pass remat='auto', "
                             "'sqrt' or a byte budget to mg.compile")
        return self.remat.render(format)

    def kernels_report(self) -> KernelsReport:
        """Which way each instruction whose kernel has several takes (a convolution's path,
        a GEMM's, their threads) and why: the backend's rules, measured now or stored for this
        machine (``compile(tune=...)``), with the times of one call and the runner-up's where
        measured. ``str()`` is a table, ``to_dict()`` plain data."""
        return KernelsReport(self)

    def passes_report(self) -> str:
        """One line per graph pass that ran before planning: what it changed."""
        return passes_report(self.passes) if self.passes else "no passes ran (optimize=0)"

    def save_html(self, path, profile=None) -> None:
        """Deprecated: ``mg.viz.save_html(plan, path)`` writes the page (the viewer takes a
        plan; a plan knows nothing of the viewer).

        >>> mg.viz.save_html(plan, "plan.html")
        """
        warnings.warn("Plan.save_html is deprecated; use mg.viz.save_html(plan, path)",
                      DeprecationWarning, stacklevel=2)
        # Design: the viewer is layers above the plan, so this shim is no import of it: it
        # reaches the viewer through the package's public facade, as the caller's code would
        sys.modules[__package__].viz.save_html(self, path, profile=profile)

    def to_dot(self) -> str:
        """The plan as a Graphviz digraph, without the graph that made it: a box per
        instruction (op, kernel, output types; coloured by op category as ``Graph.to_dot``),
        an ellipse per input, param and const; each edge is the slot an instruction reads
        (a view is drawn from the instruction that wrote the bytes it views)."""
        lines = ["digraph plan {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled"];']
        writer: dict[int, str] = {}
        for slot in self.slots:
            if slot.role in (Role.INPUT, Role.PARAM, Role.CONST):
                writer[slot.index] = f"s{slot.index}"
                label = dot_text(f"{slot.role} {slot.name or ''}\n{slot.type}")
                lines.append(f'  s{slot.index} [shape=ellipse, label="{label}"];')
        for i, ins in enumerate(self.instructions):
            colour = CATEGORY_COLOURS.get(get_op(ins.op).category, OTHER_COLOUR)
            types = "\n".join(str(self.slots[o].type) for o in ins.outputs)
            label = dot_text(f"{ins.op}{format_attrs(ins.attrs)}\n{ins.kernel}\n{types}")
            lines.append(f'  i{i} [label="{label}", fillcolor="{colour}"];')
            for s in ins.inputs:
                root = self.slots[s].alias if self.slots[s].alias is not None else s
                if root in writer:
                    lines.append(f'  {writer[root]} -> i{i} [label="s{s}"];')
            for o in ins.outputs:
                writer[o] = f"i{i}"
        lines.append("}")
        return "\n".join(lines)

    # -- running --------------------------------------------------------------------------
    def executable(self):
        """The plan made runnable by its backend (buffers allocated, kernels resolved): once
        per plan; every ``run`` reuses its memory."""
        executable = self._cache.get("executable")
        if executable is None:
            executable = self._cache["executable"] = get_backend(self.device).executable(self)
        return executable

    def run(self, feeds: dict, out=None) -> list[np.ndarray]:
        """Run the plan on ``feeds`` ({input name: array}); returns arrays the caller owns.

        ``out``: one entry per output, an array of its shape and dtype to write it into, or
        None for a new one. Feeds are only read (in place where the backend can), and the run
        reads each as it was when the run began, even when an ``out=`` array is a feed too:

        >>> y = plan.run({"x": x}, out=[y])[0]     # no allocation per call
        """
        executable = self.executable()
        if out is None:
            return executable.run(feeds)
        if getattr(executable, "writes_out", False):
            return executable.run(feeds, out=out)
        out = check_out(self, out)  # a backend that returns new arrays: copied into out=
        results = executable.run(feeds)
        for k, given in enumerate(out):
            if given is not None:
                np.copyto(given, results[k], casting="no")
                results[k] = given
        return results

    # -- reading --------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"plan device={self.device}: {len(self.instructions)} instructions, "
                 f"{len(self.slots)} slots" + (", check_numerics" if self.check_numerics else "")]
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
            lines.append(f"  {i}: {outs} = {ins.op}{format_attrs(ins.attrs)} {args}{ws}  <{ins.kernel}>")
        lines.append(f"  outputs: {', '.join(f's{o}' for o in self.outputs)}")
        m = self.memory
        lines.append(f"  arena: {m.arena_bytes}B (lower bound {m.lower_bound_bytes}B, naive "
                     f"{m.naive_bytes}B), persistent: {m.persistent_bytes}B")
        return "\n".join(lines)


def check_feeds(plan, feeds) -> None:
    """For every backend's executable: a FeedError unless ``feeds`` holds exactly the plan's inputs, each a NumPy array of the
    shape and dtype the plan was compiled for."""
    if not isinstance(feeds, dict):
        raise FeedError(f"feeds must be a dict of input name to array, got {type(feeds).__name__}")
    if feeds.keys() != plan.feeds.keys():
        missing = sorted(set(plan.feeds) - set(feeds))
        extra = sorted(set(feeds) - set(plan.feeds))
        raise FeedError(f"feeds do not match the plan's inputs {sorted(plan.feeds)}: "
                        f"missing {missing}, extra {extra}")
    for name, slot in plan.feeds.items():
        value, want = feeds[name], plan.slots[slot].type
        if not isinstance(value, (np.ndarray, np.generic)):
            raise FeedError(f"feed {name!r} must be a numpy array, got {type(value).__name__}")
        if value.shape != want.shape or value.dtype != want.dtype:
            raise FeedError(f"feed {name!r} is {value.dtype}{list(value.shape)}, the plan "
                            f"needs {want.dtype}{list(want.shape)}")


def check_out(plan, out) -> list:
    """``out`` as a list with one entry per plan output (an array of the output's shape and
    dtype, writeable, or None); a FeedError naming the output otherwise."""
    if not isinstance(out, (list, tuple)) or len(out) != len(plan.outputs):
        raise FeedError(f"out= must be a list of {len(plan.outputs)} arrays or None (one per "
                        f"output of the plan), got {type(out).__name__}"
                        + (f" of {len(out)}" if isinstance(out, (list, tuple)) else ""))
    arrays = [a for a in out if a is not None]
    for k, (array, slot) in enumerate(zip(out, plan.outputs)):
        if array is None:
            continue
        want = plan.slots[slot].type
        if not isinstance(array, np.ndarray):
            raise FeedError(f"out[{k}] must be a numpy array or None, got {type(array).__name__}")
        if array.shape != want.shape or array.dtype != want.dtype:
            raise FeedError(f"out[{k}] is {array.dtype}{list(array.shape)}, output {k} of the "
                            f"plan is {want.dtype}{list(want.shape)}")
        if not array.flags.writeable:
            raise FeedError(f"out[{k}] is read-only")
        if any(other is not array and np.may_share_memory(array, other) for other in arrays) \
                or sum(other is array for other in arrays) > 1:
            raise FeedError(f"out[{k}] overlaps another out= array: each output needs its own")
    return list(out)


def non_finite_output(plan, index: int, slot: int, value: np.ndarray) -> str | None:
    """What a ``check_numerics`` run says when instruction ``index`` wrote ``value`` into its
    output ``slot``: None unless it is a float array holding a NaN or an infinity."""
    if not is_float(value.dtype) or np.isfinite(value).all():
        return None
    ins = plan.instructions[index]
    what = "NaN" if np.isnan(value).any() else "an infinity"
    return (f"instruction {index} ({ins.op}, kernel {ins.kernel}, node made at {ins.location}) "
            f"wrote {what} into its output s{slot} {plan.slots[slot].type}")


def host_buffers(plan: Plan, arena: np.ndarray) -> dict[int, np.ndarray]:
    """Every slot of ``plan`` as a NumPy array, for a backend whose memory is the host's: the
    temporaries and workspaces at their offsets in ``arena`` (uint8), persistent slots in
    buffers of their own (a shared param is its value array itself), views as their root's
    bytes at the view offset; params and consts hold their initial values."""
    buffers: dict[int, np.ndarray] = {}
    for slot in plan.slots:
        if slot.index in plan.shared:
            buffers[slot.index] = plan.values[slot.index]
        elif slot.offset is not None:
            buffers[slot.index] = _typed(arena[slot.offset:slot.offset + slot.nbytes], slot)
        elif slot.alias is None:
            buffers[slot.index] = aligned_empty(slot.type.shape, slot.type.dtype)
    for slot in plan.slots:
        if slot.alias is not None:
            buffers[slot.index] = view_in(buffers[slot.alias], slot)
    for index, value in plan.values.items():
        if index not in plan.shared:
            buffers[index][...] = value
    return buffers


def view_in(root: np.ndarray, slot: Slot) -> np.ndarray:
    """The view ``slot`` as an array over ``root``, an array holding its root slot's bytes."""
    raw = root.reshape(-1).view(np.uint8)
    return _typed(raw[slot.view_offset:slot.view_offset + slot.nbytes], slot)


def _typed(raw: np.ndarray, slot: Slot) -> np.ndarray:
    return raw.view(slot.type.dtype).reshape(slot.type.shape)


def dead_values(plan: Plan) -> list[tuple[int, int]]:
    """(step, slot) of each arena value after its last reader ran, in step order: what a
    ``memory="debug"`` plan poisons. A value another takes over in place is left to its
    successor."""
    taken = {src for src, _ in plan.memory.overwrites.values()}
    return sorted((end - 1, s) for s, (_, end) in plan.memory.spans.items() if s not in taken)
