"""The collectives (ops/collective.py) on CUDA: NCCL calls on the group's communicator, which
the runtime makes (mgegraph/cuda/collective.py), and csrc_cuda/collective.cu's kernels for
the scale (a mean) and the deterministic sum in rank order.

An instruction's steps (``CommStep`` for an NCCL call, ``Step`` for a kernel):

    all_reduce        all_reduce x -> y, scale y       (deterministic: all_gather x -> workspace,
                                                        rank_sum workspace -> y, scale y)
    all_reduce_start  start: the bucket, in place, on the communication stream
    all_reduce_wait   wait: the plan's stream waits for it, then scale the bucket

A group of one process makes no NCCL call (its sum is the value): a copy, or nothing, and the
scale. The bucket is the bytes from its first value's address on (the memory planner lays its
values out one after another, planner/memory/buckets.py), padding included, as on the CPU.

>>> sorted(KERNELS)[:2]
['all_reduce_f32', 'all_reduce_f64']
"""
from __future__ import annotations

import numpy as np

from ...backend import Launch, kernel_name
from ...communicator import DistributedError, by_key
from ...ir.types import short_name
from ...kernel_abi.layout import pack
from ...ops.collective import REDUCED_DTYPES, bucket_layout
from ..kernel import CommStep, CudaKernel, Step
from .norm import elementwise_steps

OPS = ("all_reduce", "all_reduce_start", "all_reduce_wait")
# the ints of every collective instruction (csrc_cuda/collective.cu reads count and ranks)
FIELDS = ("count", "ranks", "members", "is_float", "deterministic", "bucket")


def _values(node) -> list:
    """The values the node reduces (a wait's request aside)."""
    return list(node.inputs[1:] if node.op.name == "all_reduce_wait" else node.inputs)


def _lower(node) -> Launch:
    attrs, values = node.attr, _values(node)
    dtype = values[0].dtype
    try:
        ranks = by_key(attrs["group"]).size
    except DistributedError as exc:
        raise ValueError(str(exc)) from None
    count = bucket_layout([v.type for v in values])[1] // dtype.itemsize
    is_float = bool(np.issubdtype(dtype, np.floating))
    if not is_float and attrs["scale"] != 1.0:
        raise ValueError(f"an all-reduce of {dtype} cannot be scaled by {attrs['scale']} (a "
                         "mean of integers): reduce a float, or sum")
    deterministic = bool(attrs.get("deterministic", False)) and ranks > 1
    ints = pack(FIELDS, count=count, ranks=ranks, members=len(values), is_float=is_float,
                deterministic=deterministic, bucket=attrs.get("bucket", 0))
    workspace = ranks * count * dtype.itemsize if deterministic else 0  # the gathered values
    return Launch(ints, (float(attrs["scale"]),), workspace)


def _scaled(dtype, launch, at: int) -> list[Step]:
    """The scale of the ``count`` elements at buffer ``at``, where there is one."""
    count, is_float, scale = launch.ints[0], launch.ints[3], launch.floats[0]
    if not is_float or scale == 1.0:
        return []
    entry = f"mg_collective_scale_{short_name(dtype)}"
    return [Step(s.entry, s.grid, s.block, buffers=(at,))
            for s in elementwise_steps(entry, count)]


def _steps(op: str, dtype):
    name = short_name(dtype)

    def comm(action: str, buffers, launch) -> CommStep:
        return CommStep(f"nccl_{action}", action, buffers, launch.ints[0], dtype.name,
                        launch.ints[5])

    def steps(launch, types) -> list:
        ranks, deterministic = launch.ints[1], launch.ints[4]
        if op == "all_reduce_start":
            return [comm("start", (0,), launch)] if ranks > 1 else []
        if op == "all_reduce_wait":
            wait = [comm("wait", (1,), launch)] if ranks > 1 else []
            return wait + _scaled(dtype, launch, at=1)
        if deterministic:  # workspace (buffer 2) = every rank's x, then y = their sum in order
            summed = [Step(s.entry, s.grid, s.block, buffers=(2, 1)) for s in elementwise_steps(
                f"mg_collective_rank_sum_{name}", launch.ints[0])]
            return [comm("all_gather", (0, 2), launch)] + summed + _scaled(dtype, launch, 1)
        first = comm("all_reduce" if ranks > 1 else "copy", (0, 1), launch)
        return [first] + _scaled(dtype, launch, at=1)
    return steps


def implement(table) -> None:
    """Register the collectives on ``table``."""
    for op in OPS:
        table.implement(op, kernel=op, dtypes=REDUCED_DTYPES, lower=_lower,
                        dispatch_input=1 if op == "all_reduce_wait" else 0)


KERNELS = {kernel_name(op, dtype): CudaKernel("collective.cu", _steps(op, dtype))
           for op in OPS for dtype in REDUCED_DTYPES}
