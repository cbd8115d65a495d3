"""The gradient all-reduce of a compiled training step: ``compile_train_step(...,
all_reduce=dist.AllReduce(bucket_mb=10, mean=True))``.

>>> step = mg.compile_train_step(model, F.cross_entropy, opt, (x, y),
...                              all_reduce=dist.AllReduce(bucket_mb=4))

Design: the step's graph marks each gradient with the ``all_reduce`` op (ops/collective.py);
the planner's ``bucket_grads`` pass packs the marks into buckets of ``bucket_mb`` and
overlaps each bucket's reduction with the rest of the backward pass, inside the plan (the
eager ``make_allreduce_cb`` is the GradManager's way; in a traced step it makes the same
marks). Every rank compiles the same plan, so the ranks call the same collectives in the same
order; that holds only if they train the same model on batches of the same shapes, which the
first step checks (``check``), naming both ranks, before any bucket is sent.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from ..communicator import DistributedError, ProgressThread
from ..ops.collective import all_reduce
from .group import WORLD, Group, _require
from .helper import BUCKET_BYTES, _check_same


@dataclass(frozen=True)
class AllReduce:
    """How a compiled step reduces its gradients over ``group``: their mean (``mean=True``,
    as DDP and MegEngine's ``make_allreduce_cb("mean")``) or sum, in buckets of at most
    ``bucket_mb`` MiB per dtype (0: each gradient alone, a blocking call per gradient).

    ``deterministic=True``: each gradient summed in rank order, ((g0 + g1) + g2) + ..., then
    scaled, the same bits whatever MPI's algorithm and on every rank, at the cost of the
    overlap (one blocking all-gather per gradient, N times the bytes). The step then equals,
    bitwise, one process that computes the gradient of each rank's batch with the same plan
    and adds them in rank order (gradient accumulation over N micro-batches of B). It equals
    the plain one-process step on the N*B batch bitwise only where that step's sums over the
    batch are exact (the weight gradients of linear and conv2d and the bias gradients are sums
    over the batch rows, which a GEMM or a reduction adds in its own blocked order, not chunk
    by chunk), so in general only within float tolerance.

    ``progress_thread=True``: while the plan runs, the eager callback's ``ProgressThread``
    lets MPI move the buckets on during a long kernel too (the executor itself tests each
    bucket's request only between instructions); the results are the same bits. Off by
    default: on 2 ranks of one thread on a 2-core machine under heavy load it made the
    convnet's and the MLP's steps 1.25-1.30x slower (interleaved in one process) and hid no
    more (``benchmarks/distributed_scaling.py``'s thread columns), as the eager callback's
    thread did not pay there either; a machine with a spare core per rank may differ.

    >>> step = mg.compile_train_step(model, loss, opt, batch,
    ...                              all_reduce=dist.AllReduce(deterministic=True))
    """

    bucket_mb: float = BUCKET_BYTES / 2**20
    mean: bool = True
    group: Group = field(default=WORLD)
    deterministic: bool = False
    progress_thread: bool = False
    _poller: ProgressThread | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not (isinstance(self.bucket_mb, (int, float)) and self.bucket_mb >= 0):
            raise DistributedError(f"AllReduce: bucket_mb must be a number >= 0, got "
                                   f"{self.bucket_mb!r}")
        if self.progress_thread:  # (frozen: the thread is made once, with the settings)
            object.__setattr__(self, "_poller", ProgressThread())

    @contextlib.contextmanager
    def running(self):
        """Around each run of the step's plan: the progress thread held, where asked for and
        there are other ranks (a job of one process sends nothing)."""
        if self._poller is None or self.group.size == 1:
            yield
            return
        self._poller.hold()
        try:
            yield
        finally:
            self._poller.release()

    def reduced(self, grads: dict) -> dict:
        """``grads`` (key -> gradient Var) each marked to be all-reduced in the plan."""
        _require("compile_train_step(all_reduce=...)")
        group = self.group
        scale = 1.0 / group.size if self.mean else 1.0
        size = 0 if self.deterministic else int(self.bucket_mb * 2**20)
        return {key: all_reduce(g, group=group.key, scale=scale, bucket_bytes=size,
                                deterministic=self.deterministic)
                for key, g in grads.items()}

    def check(self, signature: list) -> None:
        """Refuse ranks whose steps differ (``signature``: (shape, dtype) of every batch input
        and gradient, in order), naming both ranks; run before the first step."""
        _check_same(self.group.comm, signature, "compile_train_step(all_reduce=...)",
                    "batch inputs and gradients")
