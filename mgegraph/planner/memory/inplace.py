"""In-place reuse: which outputs are written straight into the bytes of an input that dies.

An op whose ``OpDef.inplace`` is set reads each element before it writes the element at the
same position, so its output may take over the buffer of an input that is read for the last
time by this very instruction. Elementwise ops may take any input of the output's shape and
element size; other in-place ops (softmax, norms) only input 0, as their kernels promise.
"""
from __future__ import annotations

from ...ops import get_op
from .liveness import Liveness, is_arena_buffer


def _can_take(slots, ins, step, s, live: Liveness, taken, alignment,
              elementwise: bool) -> bool:
    out, src = slots[ins.outputs[0]], slots[live.root[s]]
    r = src.index
    return (is_arena_buffer(src) and r not in taken and live.last[r] == step
            and slots[s].type.shape == out.type.shape
            and slots[s].type.dtype.itemsize == out.type.dtype.itemsize
            and slots[s].view_offset % alignment == 0
            # another input reading the same bytes through a different view would see the
            # output's values where it expects the input's; the same slot again is read at
            # the same element only by an elementwise op (a GEMM reads its operands throughout)
            and (all(live.root[t] != r or t == s for t in ins.inputs) if elementwise
                 else all(live.root[t] != r for t in ins.inputs[1:])))


def choose_overwrites(slots, instructions, live: Liveness,
                      alignment: int) -> dict[int, tuple[int, int]]:
    """{output slot: (root slot it overwrites, byte offset inside that root)}.

    >>> choose_overwrites(plan.slots, plan.instructions, liveness.analyze(...), 64)
    {7: (5, 0)}
    """
    chosen: dict[int, tuple[int, int]] = {}
    taken: set[int] = set()
    for step, ins in enumerate(instructions):
        if not ins.outputs or not is_arena_buffer(slots[ins.outputs[0]]):
            continue
        op = get_op(ins.op)
        if not op.inplace:
            continue
        elementwise = op.category == "elementwise"
        candidates = ins.inputs if elementwise else ins.inputs[:1]
        for s in candidates:
            if _can_take(slots, ins, step, s, live, taken, alignment, elementwise):
                r = live.root[s]
                chosen[ins.outputs[0]] = (r, slots[s].view_offset)
                taken.add(r)
                break
    return chosen
