"""A plan on the device, worked out without one: where each slot lives (``persistent_layout``,
``slot_addresses``) and every launch of every instruction (``plan_calls``), the pure functions
whose results the executable (runtime.py) hands to the driver.

>>> persistent_layout(plan)   # doctest: +SKIP
({0: 0, 1: 256}, 512)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backend import Launch
from ..ir.errors import GraphError
from .kernel import CudaKernel, RenderedKernel
from .render import module

# The driver's allocations start at 256-byte boundaries; so does every slot of the persistent
# block (inputs, outputs, params, consts).
PERSISTENT_ALIGNMENT = 256


def persistent_layout(plan) -> tuple[dict[int, int], int]:
    """(root slot -> offset, total bytes) of the slots outside the arena (inputs, outputs,
    params, consts), each at a PERSISTENT_ALIGNMENT boundary of one allocation."""
    offsets, top = {}, 0
    for slot in plan.slots:
        if slot.offset is None and slot.alias is None:
            offsets[slot.index] = top
            top += -(-max(slot.nbytes, 1) // PERSISTENT_ALIGNMENT) * PERSISTENT_ALIGNMENT
    return offsets, top


def slot_addresses(plan, arena: int, persistent: int, offsets: dict[int, int]) -> dict[int, int]:
    """Every slot's device address: the arena's base plus its planned offset, the persistent
    block's base plus its offset, a view its root's address plus the view offset."""
    address = {}
    for slot in plan.slots:
        if slot.offset is not None:
            address[slot.index] = arena + slot.offset
        elif slot.alias is None:
            address[slot.index] = persistent + offsets[slot.index]
    for slot in plan.slots:
        if slot.alias is not None:
            address[slot.index] = address[slot.alias] + slot.view_offset
    return address


@dataclass(frozen=True)
class Call:
    """One launch of a plan: its instruction's index, the module's source (a csrc_cuda/ file,
    or None: the plan's rendered module), the step and the slots of its MgArgs."""

    index: int
    source: str | None
    step: object
    slots: tuple[int, ...]


def plan_calls(plan, backend) -> tuple[list[Call], list[str]]:
    """(the launches of every instruction in order, the texts of the plan's rendered
    kernels): everything ``CudaExecutable`` needs from the plan, without a device."""
    calls, texts = [], {}
    for i, ins in enumerate(plan.instructions):
        entry = backend.kernel_by_name(ins.kernel)
        types = [plan.slots[s].type for s in ins.inputs + ins.outputs]
        if isinstance(entry, RenderedKernel):
            text, steps = entry.render(ins, types)
            texts.setdefault(text, None)
            source = None
        elif isinstance(entry, CudaKernel):
            workspace = 0 if ins.workspace is None else plan.slots[ins.workspace].nbytes
            steps = entry.steps(Launch(ins.ints, ins.floats, workspace), tuple(types))
            source = entry.source
        else:
            raise GraphError(f"kernel {ins.kernel!r} is not a CUDA kernel")
        calls += [Call(i, source, step, ins.buffers if step.buffers is None else
                       tuple(ins.buffers[b] for b in step.buffers)) for step in steps]
    return calls, list(texts)


def rendered_source(texts) -> str:
    """The one module of a plan's rendered kernels."""
    return module(texts)
