"""No copies around a run: feeds read in place, outputs written where the caller gets them.

Design: the executor's buffer pointers are C data fixed when a plan's executable is made. A
feed slot no instruction writes, and an output slot of its own, can instead be pointed at
another array for one run (``Executor.bind``): the caller's feed array, read in place, and the
array the caller gets back (``out=``, or a fresh one), written by the instruction that makes
the output. That removes the two copies ``plan.run`` made around the kernels (on fusion-chain,
80 MiB moved per call). The contract stays "arrays you own": nothing is written into a feed,
every returned array is the caller's alone, and a run reads each feed as it was when the run
began, also when the same array is fed twice, fed while also given as ``out=``, or an output of
the last run is fed back.

A feed is bound when it is a C-contiguous, aligned ``np.ndarray`` (its dtype and shape are the
plan's: ``check_feeds``) whose bytes no array the run writes may overlap (an ``out=`` array, a
shared param the run assigns); otherwise it is copied into the plan's own buffer as before.
A bound feed stays bound after the run, so ``executor.run()`` alone (the benchmarks' executor
timing) reads the last run's feeds as it always did; outputs are pointed back at the plan's own
buffers once a run ends.
"""
from __future__ import annotations

import sys

import numpy as np

from ..host_memory import aligned_empty
from ..plan import Role


def binding_groups(plan) -> tuple[dict[int, int], dict[int, int], list[list[tuple]]]:
    """(feed slot -> group, output slot -> group, groups) for ``Executor.set_bindings``: every
    feed slot no instruction writes, and every output slot of its own an instruction writes,
    with each (instruction, buffer index, byte offset) that points into its bytes."""
    written = {_root(plan, b) for ins in plan.instructions
               for b in ins.outputs + ((ins.workspace,) if ins.workspace is not None else ())}
    feeds = [s for s in plan.feeds.values() if s not in written]
    outputs = [s for s in dict.fromkeys(plan.outputs)
               if plan.slots[s].role == Role.OUTPUT and plan.slots[s].alias is None
               and s in written and s not in plan.values and s not in plan.feeds.values()]
    groups, feed_group, output_group = [], {}, {}
    for table, slots in ((feed_group, feeds), (output_group, outputs)):
        for s in slots:
            table[s] = len(groups)
            groups.append([(i, j, _offset(plan, b)) for i, ins in enumerate(plan.instructions)
                           for j, b in enumerate(ins.buffers) if _root(plan, b) == s])
    return feed_group, output_group, groups


def _root(plan, slot: int) -> int:
    alias = plan.slots[slot].alias
    return slot if alias is None else alias


def _offset(plan, slot: int) -> int:
    return plan.slots[slot].view_offset if plan.slots[slot].alias is not None else 0


def readable_in_place(value) -> bool:
    """Whether a (checked) feed can be read where it lies."""
    return type(value) is np.ndarray and value.flags.c_contiguous and value.flags.aligned


def overlaps_any(array: np.ndarray, others) -> bool:
    """Whether ``array``'s bytes may overlap any of ``others`` (a bounds check: cheap, and a
    false 'yes' only costs a copy)."""
    return any(np.may_share_memory(array, other) for other in others)


class OutputPool:
    """The arrays the last run returned, reused for the next run's outputs when the caller
    kept no reference to them (a caching allocator in one line: fresh pages for a 16 MiB
    output cost a third of a fusion-chain call)."""

    def __init__(self):
        self.last: dict[int, np.ndarray] = {}

    def take(self, slot: int, type_) -> np.ndarray:
        array = self.last.get(slot)
        # 3 references: self.last's, this frame's and getrefcount's argument; any name, view or
        # memoryview the caller holds adds one, and then the array is theirs
        if array is not None and sys.getrefcount(array) == 3:
            return array
        return aligned_empty(type_.shape, type_.dtype)

    def keep(self, results: dict[int, np.ndarray]) -> None:
        self.last = results
