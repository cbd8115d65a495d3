"""A bucket's gradients laid out one after another, so that one collective covers its bytes.

``all_reduce_start`` (ops/collective.py) reduces its inputs as one run of memory: the lowering
gives each of them a buffer of its own, and ``contiguous_buckets`` then makes them views of one
new buffer, the bucket, at the offsets of ``bucket_layout``. Everything else follows from
views: each gradient's kernel writes into the bucket, liveness counts a view's reads and
writes as its root's, so the bucket is live from its first gradient's write to the last read
of its reduced values (after the wait), and the arena places it as one request.

>>> contiguous_buckets(lowered.slots, lowered.instructions)   # edits the slot list
"""
from __future__ import annotations

from dataclasses import replace

from ...ir.errors import GraphError
from ...ir.types import TensorType
from ...ops.collective import bucket_layout

_MOVABLE_ROLES = ("temp",)


def contiguous_buckets(slots: list, instructions) -> list[int]:
    """Make the inputs of every ``all_reduce_start`` views of one new slot (its bucket);
    returns the buckets' slot indices in the instructions' order."""
    buckets = []
    for ins in instructions:
        if ins.op == "all_reduce_start":
            buckets.append(_gather(slots, ins))
    return buckets


def _gather(slots: list, ins) -> int:
    members = [slots[s] for s in ins.inputs]
    bad = [s for s in members if s.alias is not None or s.role not in _MOVABLE_ROLES]
    if bad or len(set(ins.inputs)) != len(ins.inputs):
        raise GraphError(f"all_reduce_start (made at {ins.location}): a bucket takes distinct "
                         "temporaries only, got "
                         f"{[(s.index, str(s.role), s.alias) for s in members]}")
    # the slots are plan.py's Slot and Role (a layer above): made through their own types
    offsets, nbytes = bucket_layout([s.type for s in members])
    dtype = members[0].type.dtype
    bucket = len(slots)
    slots.append(type(members[0])(bucket, TensorType((nbytes // dtype.itemsize,), dtype),
                                  members[0].role, name=f"bucket{dict(ins.attrs)['bucket']}"))
    moved = {s.index: off for s, off in zip(members, offsets)}
    for i, s in enumerate(slots):
        if s.index in moved:
            slots[i] = replace(s, role=type(s.role)("view"), alias=bucket,
                               view_offset=moved[s.index])
        elif s.alias in moved:  # a view of a member is a view of the bucket
            slots[i] = replace(s, alias=bucket, view_offset=s.view_offset + moved[s.alias])
    return bucket
