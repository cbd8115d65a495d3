"""Gradient buckets: ``all_reduce`` marks become one start/wait pair per bucket of values.

A data-parallel training step marks each gradient with ``all_reduce`` (ops/collective.py).
Reduced one by one, each mark is a blocking call; this pass packs the marks into buckets
(MegEngine's param pack, PyTorch DDP's buckets): per group, scale and dtype, in the order the
gradients are written, each bucket at most ``bucket_bytes`` (a larger value alone). Each bucket
becomes ``all_reduce_start`` right after the node that writes its last gradient and
``all_reduce_wait`` just before the first node that reads one of its results, so the
reduction runs while the rest of the backward pass computes. The memory planner then lays the
bucket's gradients out one after another (planner/memory/buckets.py) and keeps them until the
wait; the schedule keeps each start early and each wait late (``collectives_placed``).

A mark stays as it is (a blocking all-reduce of its own) where its value cannot live in a
bucket: a source, a view of another value's bytes, a graph output, a value something else
reads too (it would see the reduced numbers), a reduced value the caller gets back (a
plan's outputs have buffers of their own), a deterministic mark (summed in rank order by its
own kernel), or a bucket size of 0.

>>> res = bucket_grads(g, outputs); res.stats
{'buckets': 2, 'values': 4, 'bytes': 5120, 'left_alone': 0}
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.graph import Graph, Var
from ...ops.collective import BUCKET_ALIGNMENT
from .rewrite import PassResult, rebuild, result, use_counts


@dataclass
class Bucket:
    """Marks reduced together: their nodes, where the last value is written and the first
    result read (graph positions)."""

    marks: list = field(default_factory=list)
    nbytes: int = 0
    last_write: int = -1
    first_read: int = 1 << 62


def _bucketable(mark, outputs, uses) -> bool:
    (value,) = mark.inputs
    producer = value.node
    return (mark.attr["bucket_bytes"] > 0 and not mark.attr["deterministic"]
            and producer is not None
            and producer.op.category != "source" and producer.op.view_offset(producer) is None
            and producer.op.in_place_from is None
            and value.id not in outputs and mark.outputs[0].id not in outputs
            and uses.get(value.id, 0) == 1)


def plan_buckets(graph: Graph, outputs) -> tuple[list[Bucket], int]:
    """(the buckets, how many marks stay alone), marks taken in the order their values are
    written; a bucket closes when the next value would overflow it or is read before the
    bucket's last value is written."""
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    first_read: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            first_read.setdefault(v.id, i)
    for v in outputs:
        first_read.setdefault(v.id, len(graph.nodes))
    uses = use_counts(graph, [])
    output_ids = {v.id for v in outputs}
    marks = [n for n in graph.nodes if n.op.name == "all_reduce"]
    chosen = [m for m in marks if _bucketable(m, output_ids, uses)]
    chosen.sort(key=lambda m: position[id(m.inputs[0].node)])
    open_buckets: dict[tuple, Bucket] = {}
    done: list[Bucket] = []
    for mark in chosen:
        value, attrs = mark.inputs[0], mark.attr
        key = (attrs["group"], attrs["scale"], value.dtype)
        size = -(-value.type.nbytes // BUCKET_ALIGNMENT) * BUCKET_ALIGNMENT
        write = position[id(value.node)]
        read = first_read.get(mark.outputs[0].id, len(graph.nodes))
        bucket = open_buckets.get(key)
        if bucket is not None and (bucket.nbytes + size > attrs["bucket_bytes"]
                                   or bucket.first_read <= write or read <= bucket.last_write):
            done.append(open_buckets.pop(key))
            bucket = None
        if bucket is None:
            bucket = open_buckets[key] = Bucket()
        bucket.marks.append(mark)
        bucket.nbytes += size
        bucket.last_write = max(bucket.last_write, write)
        bucket.first_read = min(bucket.first_read, read)
    done.extend(open_buckets.values())
    done.sort(key=lambda b: b.last_write)
    return done, len(marks) - len(chosen)


def bucket_grads(graph: Graph, outputs: list[Var]) -> PassResult:
    """Replace bucketable ``all_reduce`` marks by start/wait pairs over buckets; stats
    ``{"buckets", "values", "bytes", "left_alone"}``.

    >>> r = bucket_grads(g, [loss]); print(r.graph)
    """
    buckets, alone = plan_buckets(graph, outputs)
    if not buckets:
        return PassResult(graph, list(outputs), False, {"buckets": 0, "left_alone": alone})
    starts: dict[int, list] = {}  # id of the node writing a bucket's last value -> buckets
    for number, bucket in enumerate(buckets):
        starts.setdefault(id(graph.nodes[bucket.last_write]), []).append((number, bucket))
    waiting: dict[int, tuple[int, Bucket]] = {}  # mark output id -> its bucket
    for number, bucket in enumerate(buckets):
        for mark in bucket.marks:
            waiting[mark.outputs[0].id] = (number, bucket)
    requests: dict[int, Var] = {}

    def wait_for(builder, number, bucket, like):
        values = [builder.var(m.inputs[0]) for m in bucket.marks]
        attrs = _pair_attrs(bucket, number)
        reduced = builder.add("all_reduce_wait", [requests[number], *values], attrs, like)
        for mark, r in zip(bucket.marks, reduced):
            builder.vars[mark.outputs[0].id] = r
            waiting.pop(mark.outputs[0].id, None)

    bucketed = set(waiting)  # (waiting loses each bucket's marks once its wait is made)

    def rewrite(builder, node):
        if node.op.name == "all_reduce" and node.outputs[0].id in bucketed:
            return (None,)  # its value comes from its bucket's wait
        for v in node.inputs:
            if v.id in waiting:
                wait_for(builder, *waiting[v.id], like=node)
        outs = builder.copy(node)
        builder.vars.update((old.id, new) for old, new in zip(node.outputs, outs))
        for number, bucket in starts.get(id(node), ()):
            values = [builder.var(m.inputs[0]) for m in bucket.marks]
            (requests[number],) = builder.add("all_reduce_start", values,
                                              _pair_attrs(bucket, number), bucket.marks[-1])
        return outs

    builder = rebuild(graph, rewrite)
    for number, bucket in sorted(dict(waiting.values()).items(), key=lambda nb: nb[0]):
        wait_for(builder, number, bucket, like=bucket.marks[-1])  # results no node reads
    stats = {"buckets": len(buckets), "values": sum(len(b.marks) for b in buckets),
             "bytes": sum(b.nbytes for b in buckets), "left_alone": alone}
    return result(builder, outputs, True, stats)


def _pair_attrs(bucket: Bucket, number: int) -> dict:
    attrs = bucket.marks[0].attr
    return {"group": attrs["group"], "scale": attrs["scale"], "bucket": number}
