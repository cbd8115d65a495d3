"""Liveness: the steps over which each buffer of a lowered plan holds a value someone needs.

A *buffer* is a root slot (a slot that is not a view); a view's reads count as reads of its
root. Steps are instruction indices: a buffer is live from the step that writes it through the
last step that reads it, so it becomes the arena request ``[first, last + 1)``.

>>> live = analyze(slots, instructions)
>>> live.first[s], live.last[s]
(3, 7)
"""
from __future__ import annotations

from dataclasses import dataclass

PERSISTENT_ROLES = frozenset({"input", "param", "const", "output"})


@dataclass(frozen=True)
class Liveness:
    root: tuple[int, ...]     # slot -> the root slot whose buffer it lives in
    first: dict[int, int]     # root -> step of its first write
    last: dict[int, int]      # root -> step of its last read (its write, if it is never read)
    readers: dict[int, list]  # root -> steps that read it, ascending

    def request_span(self, root: int) -> tuple[int, int]:
        return self.first[root], self.last[root] + 1


def root_of(slots) -> tuple[int, ...]:
    return tuple(s.index if s.alias is None else s.alias for s in slots)


def is_arena_buffer(slot) -> bool:
    """Temporaries and workspaces live in the arena; everything that outlives a run does not."""
    return slot.alias is None and slot.role not in PERSISTENT_ROLES


def analyze(slots, instructions) -> Liveness:
    root = root_of(slots)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    readers: dict[int, list] = {}
    for step, ins in enumerate(instructions):
        for s in ins.inputs:
            r = root[s]
            last[r] = step
            steps = readers.setdefault(r, [])
            if not steps or steps[-1] != step:
                steps.append(step)
        written = ins.outputs if ins.workspace is None else ins.outputs + (ins.workspace,)
        for s in written:
            r = root[s]
            first.setdefault(r, step)
            last[r] = max(last.get(r, step), step)
    return Liveness(root, first, last, readers)
