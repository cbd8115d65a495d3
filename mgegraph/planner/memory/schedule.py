"""Memory-aware scheduling: a topological order of a plan's instructions that keeps few bytes
live, chosen greedily.

Design: list scheduling. Among the instructions whose inputs are ready, run the one that adds
the fewest bytes to what is live (bytes of the buffers it writes minus bytes of the buffers it
reads for the last time), the earliest in the user's order on ties. Freeing can only grow as
other readers of a buffer run, so a score only falls; a heap holds possibly stale entries and
a fresh one is pushed whenever a score falls. The planner compares the result with the user's
order by the lower bound and keeps the better, so the greedy choice never makes a plan worse.

>>> order = memory_aware_order(slots, instructions)   # a permutation of range(len(...))
"""
from __future__ import annotations

import heapq

from ...ir.errors import GraphError
from ...ops.collective import EARLY_OPS, LATE_OPS
from .liveness import is_arena_buffer, root_of

_INITIAL_VALUE_ROLES = frozenset({"input", "param", "const"})


def dependencies(slots, instructions, after=()) -> list[set[int]]:
    """Per instruction, the instructions that must run before it.

    A read of a buffer waits for its write; a write to a param or input (an optimiser update,
    an assign) waits for every other read of it, because all reads in a run see the value the
    run began with. ``after`` adds pairs (i, j): j runs after i (rematerialisation pins a
    recomputation behind the backward step before its first use, or the greedy order would
    recompute it right after the original, which saves nothing).
    """
    root = root_of(slots)
    writers: dict[int, list] = {}
    for i, ins in enumerate(instructions):
        for s in ins.outputs:
            writers.setdefault(root[s], []).append(i)
    before = [set() for _ in instructions]
    for j, ins in enumerate(instructions):
        for s in ins.inputs:
            r = root[s]
            for w in writers.get(r, ()):
                if w == j:
                    continue
                if slots[r].role in _INITIAL_VALUE_ROLES:
                    before[w].add(j)
                elif w < j:  # a temporary's value is the one written before the read (a
                    before[j].add(w)  # collective's wait writes its bucket again, later)
    for i, j in after:
        before[j].add(i)
    return before


def _buffer_bytes(slots, instructions):
    """Bytes each instruction writes into arena buffers that someone reads later, and the
    arena buffers each one reads (root -> number of distinct reading instructions)."""
    root = root_of(slots)
    readers: dict[int, int] = {}
    reads = []
    for ins in instructions:
        mine = {root[s] for s in ins.inputs if is_arena_buffer(slots[root[s]])}
        reads.append(mine)
        for r in mine:
            readers[r] = readers.get(r, 0) + 1
    written = [sum(slots[root[s]].nbytes for s in set(ins.outputs) if root[s] in readers)
               for ins in instructions]
    return written, reads, readers


def memory_aware_order(slots, instructions, after=()) -> list[int]:
    before = dependencies(slots, instructions, after)
    written, reads, remaining = _buffer_bytes(slots, instructions)
    successors = [[] for _ in instructions]
    waiting = [len(b) for b in before]
    for j, b in enumerate(before):
        for i in b:
            successors[i].append(j)
    last_reader: dict[int, list] = {}
    for j, mine in enumerate(reads):
        for r in mine:
            last_reader.setdefault(r, []).append(j)

    def score(j):
        return written[j] - sum(slots[r].nbytes for r in reads[j] if remaining[r] == 1)

    heap = [(score(j), j) for j, w in enumerate(waiting) if w == 0]
    heapq.heapify(heap)
    done = [False] * len(instructions)
    order = []
    while heap:
        s, j = heapq.heappop(heap)
        if done[j] or s != score(j):
            continue
        done[j] = True
        order.append(j)
        for r in reads[j]:
            remaining[r] -= 1
            if remaining[r] == 1:  # its last reader now frees it: that reader's score fell
                for k in last_reader[r]:
                    if not done[k] and waiting[k] == 0:
                        heapq.heappush(heap, (score(k), k))
        for k in successors[j]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(heap, (score(k), k))
    if len(order) != len(instructions):
        raise GraphError("the plan's instructions have a dependency cycle: an update reads "
                         "a value computed from its own result")
    return order


def collectives_placed(order: list[int], instructions, before) -> list[int]:
    """``order`` rearranged so that collectives overlap computation (ops/collective.py's
    ``EARLY_OPS``, ``LATE_OPS``): what depends on a wait (the update reading a reduced
    gradient) runs after everything that does not (the rest of the backward pass), each start
    just after the last instruction it depends on, each wait just before the first that
    depends on it. A bucket then travels while everything between its last gradient and the
    end of the backward pass runs. Still a topological order: the part before the waits needs
    nothing after it."""
    after = [[] for _ in instructions]
    for j, b in enumerate(before):
        for i in b:
            after[i].append(j)
    waits = {i for i, ins in enumerate(instructions) if ins.op in LATE_OPS}
    behind = set(waits)  # the waits and whatever depends on one
    for i in order:
        if before[i] & behind:
            behind.add(i)
    order = [i for i in order if i not in behind] + [i for i in order if i in behind]
    for moving, early in ((EARLY_OPS, True), (LATE_OPS, False)):
        for i in [i for i in order if instructions[i].op in moving]:
            order.remove(i)
            position = {k: p for p, k in enumerate(order)}
            if early:
                order.insert(max((position[k] + 1 for k in before[i]), default=0), i)
            else:
                order.insert(min((position[k] for k in after[i]), default=len(order)), i)
    return order
