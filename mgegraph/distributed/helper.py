"""Data-parallel training helpers, MegEngine's ``megengine.distributed.helper``: ``bcast_list_``
(the root's initial weights everywhere), ``make_allreduce_cb`` (the GradManager callback that
all-reduces gradients in buckets), ``synchronized`` and ``on_root`` (a checkpoint written by
rank 0 alone, the others waiting).

>>> dist.bcast_list_(model.parameters())
>>> gm = GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])

Design: the GradManager hands the callback each gradient as soon as its backward walk has made
it final, in the order the walk finishes them (the last layer's first); the callback packs them
into per-dtype buckets of about ``bucket_bytes`` (MegEngine's param pack) and starts a bucket's
non-blocking all-reduce once it is full (and the ranks' check below came back), so the sum
travels while the walk computes the earlier layers' gradients. MPICH moves messages only inside
MPI calls: the manager's ``progress()`` after each node tests the buckets under way, and during
a node (a GEMM of milliseconds makes no MPI call) a ``ProgressThread`` can, from its own
thread, while buckets are under way (``progress_thread=True``). It returns a future per
gradient; the manager resolves them once the walk is over (MegEngine's ``Future.get``): the
first ``get()`` sends the buckets not yet full, then each future waits for its own bucket and
takes its slice.

Design: the ranks must send alike, or MPI sums unrelated numbers or hangs on sizes that
differ. Before each send the ranks agree on every gradient handed over so far (shapes, dtypes,
order) and on whether the walk is over: at the first backward by comparing the lists (blocking),
later by a checksum (a model whose gradients change from step to step, a branch taken on one
rank only) that never blocks the walk. A full bucket's round goes out as a non-blocking
all-reduce (MAX) of (-h, h), h the checksum, so the ranks agree when max(h) == -max(-h) == h;
the bucket's own all-reduce starts once that check has come back (tested after each node
walked and each gradient handed over), so unlike sizes never reach MPI and no rank waits for
the others at a bucket. At most one check is under way and a round's buckets start before the
next round's check goes out, so every rank issues check 1, bucket 1, check 2, ... in one
order, whenever each comes back; and a rank that stops (its failure check, below) leaves no
other rank with checks nobody answers. That order is not the walk's: a collective of the
backward pass itself (``SyncBatchNorm``'s) may come before a bucket on one rank and after it
on another, so the checks and buckets travel on the callback's own duplicate of the group's
communicator, matched apart from the group's other collectives. A mismatch seen by the check
(the same result on every rank) makes every rank compare the full states, naming both ranks.
A rank whose backward pass fails tells the others through the same checks (the manager's
``backward_failed`` hook: it sends the rounds it had filled, as the others do, then a checksum
no state has), so they raise at their next bucket, naming it, instead of waiting for
a bucket that never comes; every rank completes the sends under way (MPI cannot cancel a
collective) and no gradient lands.

Design: a traced step (``mg.jit.trace``) runs its plan, not this Python, after the recording
call, so there the callback sends nothing itself: each future resolves to the gradient marked
with the ``all_reduce`` op (``_TracedFuture``), which the trace records, and the planner packs
the marks into buckets overlapped with the backward pass, as for ``compile_train_step``.

Design: checkpoints. ``mg.save`` itself stays the same in every process (a rank may save its own
files: a per-rank log, a shard); ``on_root`` is the explicit helper, MegEngine's users' ``if
dist.get_rank() == 0:`` guard with the barrier and the error handling it usually lacks: the
root's failure reaches every rank instead of leaving them to time out in the next collective.
"""
from __future__ import annotations

import contextlib
import functools
import zlib
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..communicator import Communicator, DistributedError, Pending, ProgressThread
from ..eager.mode import MODE
from ..eager.tensor import Tensor, rebind, wrap
from ..ir.errors import user_location
from ..ir.types import HALF_DTYPES
from ..ops.collective import all_reduce
from .group import WORLD, Group, _require, group_barrier, is_distributed

BUCKET_BYTES = 10 * 1024 * 1024  # MegEngine's param-pack threshold


def bcast_list_(inps, group: Group = WORLD) -> None:
    """Give every tensor of ``inps`` the root's value, in place (the initial weights): a
    Parameter is written where plans read it, another Tensor holds a new array. The ranks'
    tensors must agree in number, shapes and dtypes (checked first).

    >>> dist.bcast_list_(model.parameters())
    """
    tensors = list(inps)
    comm = group.comm
    _check_same(comm, [(tuple(t.shape), str(t.dtype)) for t in tensors], "bcast_list_",
                "tensors")
    for t in tensors:
        value = comm.broadcast(t.value, t.shape, t.dtype)
        if _writable_in_place(t):
            t.value = value
        else:
            rebind(t, wrap(value))


def _writable_in_place(t) -> bool:
    """Whether ``t`` takes ``t.value = array`` (a Parameter: plans read its array in place)."""
    prop = getattr(type(t), "value", None)
    return isinstance(prop, property) and prop.fset is not None


def _check_same(comm, signature: list, what: str, things: str) -> None:
    """Refuse, naming both ranks and the first difference, if the ranks' ``signature`` (a
    list of (shape, dtype)) differ."""
    _refuse_different(comm.ranks[comm.rank], comm.allgather_object(signature, what), comm,
                      what, things)


def _refuse_different(me: int, signatures: list, comm, what: str, things: str) -> None:
    """The DistributedError naming this rank (world rank ``me``), the first rank whose entry
    of ``signatures`` (in rank order) differs from this rank's, and the first difference."""
    signature = signatures[comm.rank]
    for rank, theirs in enumerate(signatures):
        if theirs != signature:
            raise DistributedError(
                f"{what}: rank {me} has {things} {_described(signature, theirs)}, rank "
                f"{comm.ranks[rank]} {_described(theirs, signature)}: the ranks must train "
                "the same model (the same tensors, shapes and dtypes, in the same order, at "
                "every step)")


def on_root(func, *args, group: Group = WORLD, **kwargs):
    """``func(*args, **kwargs)`` on the root of ``group`` (rank 0 of WORLD) only, while the
    other ranks wait for it to return: the way to write a checkpoint or a model file once per
    job. The root gets ``func``'s result, the others None; if it raised, every rank raises (the
    root its own exception, the others a DistributedError quoting it), so no rank trains on
    believing a checkpoint exists. Not distributed, ``func`` just runs.

    >>> dist.on_root(mg.save, model.state_dict(), "step_1000.mge")
    """
    if not is_distributed():
        return func(*args, **kwargs)
    comm = group.comm
    result, failure, error = None, None, None
    if comm.rank == 0:
        try:
            result = func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every rank must hear of any failure
            failure, error = f"{type(exc).__name__}: {exc}", exc
    # the gather is the barrier: no rank goes on before the root has returned
    (root_failure, *_) = comm.allgather_object(failure, "on_root")
    if error is not None:
        raise error
    if root_failure is not None:
        raise DistributedError(f"on_root({getattr(func, '__qualname__', func)!r:.60}) failed on "
                               f"the root, rank {comm.ranks[0]}: {root_failure}")
    return result


def synchronized(func):
    """Decorator: every rank waits at a barrier after ``func`` returns (MegEngine's, for one
    rank downloading what the others read)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        result = func(*args, **kwargs)
        if is_distributed():
            group_barrier()
        return result
    return wrapper


@dataclass
class _Bucket:
    """Gradients of one dtype packed for one all-reduce."""

    dtype: np.dtype
    grads: list = field(default_factory=list)
    nbytes: int = 0
    pending: Pending | None = None
    results: list | None = None
    mean: bool = False

    def send(self, comm, mean: bool, deterministic: bool) -> None:
        flat = np.concatenate([g.value.reshape(-1) for g in self.grads])
        if deterministic:  # every rank's bucket, added in rank order (blocking)
            self.pending = Pending(comm, None, flat, _in_rank_order(comm.allgather(flat)),
                                   self.dtype, "all_reduce_sum")
        else:
            self.pending = comm.start_allreduce(flat, "sum")
        self.mean = mean

    def result(self, index: int) -> Tensor:
        if self.results is None:
            flat = self.pending.wait()
            if self.mean:
                flat = (flat / self.pending.comm.size).astype(self.dtype)
            starts = np.cumsum([0] + [g.size for g in self.grads])
            self.results = [wrap(np.ascontiguousarray(flat[a:b]).reshape(g.shape))
                            for a, b, g in zip(starts, starts[1:], self.grads)]
        return self.results[index]


def _in_rank_order(stacked: np.ndarray) -> np.ndarray:
    """((x0 + x1) + x2) + ... over the first axis, in its dtype."""
    total = stacked[0].copy()
    for x in stacked[1:]:
        total += x
    return total


@dataclass
class _Future:
    """A gradient being all-reduced: MegEngine's ``Future`` protocol (``get``)."""

    callback: AllreduceCallback
    bucket: _Bucket
    index: int
    backward_pass: int

    def get(self) -> Tensor:
        self.callback._flush(self.backward_pass)  # the walk is over
        result = self.bucket.result(self.index)
        self.callback._received()
        return result


@dataclass
class _Round:
    """Buckets sent together once the ranks agree on ``state`` (see ``_state``): the check of
    its checksum, then the buckets' all-reduces."""

    state: tuple
    buckets: list
    check: Pending | None = None

    @property
    def code(self) -> int:
        return _checksum(self.state)


_FAILED = -1  # the checksum a failed rank sends: no state has it (crc32 is never negative)


def _checksum(state: tuple) -> int:
    return zlib.crc32(repr(state).encode())


def _start_check(comm: Communicator, code: int) -> Pending:
    """The ranks' agreement on ``code``, started: MAX over (-code, code), see ``_agreed``."""
    return comm.start_allreduce(np.array([-code, code], np.int64), "max", "make_allreduce_cb")


def _agreed(check: Pending, code: int) -> bool:
    """Whether every rank sent ``code`` to ``check``: then max(code) == -max(-code) == code."""
    lowest, highest = check.wait()
    return -lowest == highest == code


class AllreduceCallback:
    """The GradManager callback of data-parallel training: each gradient summed
    (``reduce_method="sum"``) or averaged ("mean") over ``group``, sent in buckets of about
    ``bucket_bytes`` per dtype (MegEngine's ``make_allreduce_cb``), each bucket as soon as the
    backward walk has filled it. ``deterministic=True``: each bucket all-gathered and added in
    rank order, ((g0 + g1) + g2) + ..., the same bits whatever MPI's algorithm (as
    ``dist.AllReduce(deterministic=True)`` in a compiled step), a blocking call per bucket.
    ``progress_thread=True``: while buckets are under way, a thread lets MPI move them on
    during the nodes that make no MPI call (``communicator.ProgressThread``; sleeps between
    calls). Off by default: measured on 2 ranks of one thread on 2 cores under load, it left
    the MLP's eager step as it was (0.84-1.04x) and made the convnet's 5-7% slower.

    >>> gm.attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
    """

    def __init__(self, reduce_method: str, group: Group = WORLD, backend: str | None = None,
                 *, bucket_bytes: int = BUCKET_BYTES, deterministic: bool = False,
                 progress_thread: bool = False):
        method = str(reduce_method).lower()
        if method not in ("sum", "mean"):
            raise DistributedError(f"make_allreduce_cb: reduce_method must be 'sum' or 'mean', "
                                   f"got {reduce_method!r}")
        if backend not in (None, "auto", "mpi"):
            raise DistributedError(f"make_allreduce_cb: backend {backend!r}: only MPI is built")
        if type(bucket_bytes) is not int or bucket_bytes < 1:
            raise DistributedError(f"make_allreduce_cb: bucket_bytes must be an int >= 1, got "
                                   f"{bucket_bytes!r}")
        _require("make_allreduce_cb")
        self.reduce_method, self.group, self.bucket_bytes = method, group, bucket_bytes
        self.deterministic = bool(deterministic)
        self.progress_thread = ProgressThread() if progress_thread else None
        self._comm: Communicator | None = None  # the group's duplicate: checks and buckets
        self._checked = False   # the ranks' full lists were compared once
        self._closed = True     # the latest backward pass is all sent (or abandoned)
        self._broken = False    # the ranks disagreed in this pass: nothing more is sent
        self._open: dict = {}      # dtype -> the bucket being filled
        self._rounds: deque = deque()  # rounds not started yet, the first one's check out
        self._buckets: list = []   # the buckets of this backward pass, in the order sent
        self._signature: list = []  # (shape, dtype) of each gradient handed over, in order
        self._passes = 0  # backward passes begun
        self._ended = False  # closed: its communicator freed

    @property
    def buckets(self) -> list[tuple[str, int, int]]:
        """The buckets of the latest backward pass, in the order sent: (dtype, gradients,
        bytes) each."""
        return [(str(b.dtype), len(b.grads), b.nbytes) for b in self._buckets]

    def close(self) -> None:
        """Done with it: the buckets under way are completed, then the communicator the
        callback duplicated is freed and its progress thread ended (what dropping the callback,
        or the GradManager holding it, does). It cannot be called after."""
        for sent in self._buckets:
            with contextlib.suppress(DistributedError):  # the other ranks are gone
                sent.pending.wait()
        self._buckets, self._rounds, self._open, self._closed = [], deque(), {}, True
        if self._comm is not None:
            self._comm.free()
        if self.progress_thread is not None:
            self.progress_thread.close()
        self._comm, self._ended = None, True

    def __del__(self):
        with contextlib.suppress(Exception):  # a half-made callback; the interpreter's exit
            self.close()

    def __call__(self, param: Tensor, grad: Tensor) -> _Future | _TracedFuture:
        if self._ended:
            raise DistributedError("make_allreduce_cb: this callback was closed (its "
                                   "communicator is freed): make a new one")
        if self._closed:  # the first gradient of a backward pass
            self._open, self._rounds, self._buckets, self._signature = {}, deque(), [], []
            self._closed = self._broken = False
            self._passes += 1
        if not isinstance(grad, Tensor):
            raise DistributedError(f"make_allreduce_cb: the gradient of {param!r:.60} is "
                                   f"{type(grad).__name__}, not a Tensor (at {user_location()})")
        if any(r.replays for r in MODE.recorders):  # a trace records the step
            self._signature.append((tuple(grad.shape), str(grad.dtype)))
            return _TracedFuture(self, grad, self._passes)
        self.progress()
        dtype = np.dtype(np.float32) if grad.dtype in HALF_DTYPES else grad.dtype
        bucket = self._open.get(dtype)
        if bucket is None:
            bucket = self._open[dtype] = _Bucket(dtype)
        bucket.grads.append(grad if grad.dtype == dtype else grad.astype(dtype))
        bucket.nbytes += grad.size * dtype.itemsize
        self._signature.append((tuple(grad.shape), str(grad.dtype)))
        future = _Future(self, bucket, len(bucket.grads) - 1, self._passes)
        if bucket.nbytes >= self.bucket_bytes:  # full: sent now; the next gradient opens another
            del self._open[dtype]
            self._send([bucket], closing=False)
        return _HalfFuture(future, grad.dtype) if grad.dtype in HALF_DTYPES else future

    def progress(self) -> None:
        """Move the sends on (the GradManager calls it after each node it walks): start the
        buckets whose check has come back, and test the buckets under way (MPICH moves a
        non-blocking collective's messages only inside MPI calls)."""
        self._pump(block=False)
        for sent in self._buckets:
            sent.pending.test()

    def _flush(self, backward_pass: int) -> None:
        """Backward pass ``backward_pass``'s walk is over: send every bucket not yet full
        (once: the first of its futures resolved does it)."""
        if backward_pass != self._passes or self._closed:
            return
        if self._broken:
            raise DistributedError("make_allreduce_cb: this backward pass was abandoned (the "
                                   "ranks disagreed); its gradients are not available")
        self._send(list(self._open.values()), closing=True)
        self._pump(block=True)
        self._open, self._closed = {}, True

    def _state(self, closing: bool) -> tuple:
        """What the ranks must agree on before a send: every gradient handed over so far,
        whether the walk is over, and the settings that shape the buckets."""
        return (list(self._signature), closing, self.bucket_bytes, self.reduce_method,
                self.deterministic)

    def _send(self, buckets: list, closing: bool) -> None:
        state = self._state(closing)
        if not self._checked:  # the first pass: the full lists, compared before each send
            self._compare(state)
            self._start(buckets)
            return
        self._rounds.append(_Round(state, buckets))
        self._pump(block=False)

    def _start(self, buckets: list) -> None:
        for bucket in buckets:
            bucket.send(self._comm, self.reduce_method == "mean", self.deterministic)
            self._buckets.append(bucket)
        if buckets and self.progress_thread is not None and self._comm.comm is not None:
            self.progress_thread.hold()  # (a group of one process sends nothing)

    def _received(self) -> None:
        """A future was resolved: once every bucket of the pass has arrived, the progress
        thread rests."""
        if self.progress_thread is not None and all(b.results is not None
                                                    for b in self._buckets):
            self.progress_thread.release()

    def _pump(self, block: bool, failure: str | None = None) -> None:
        """Start, in order, the buckets of each round whose check has come back agreeing, the
        next round's check going out then; ``block``: every round, waiting for the checks.
        ``failure``: this rank failed (see ``_tell_failure``), so a disagreement ends the pass
        here without raising."""
        while self._rounds and not self._broken:
            head = self._rounds[0]
            if head.check is None:
                head.check = _start_check(self._comm, head.code)
            if not (block or head.check.test()):
                return
            self._rounds.popleft()
            if not _agreed(head.check, head.code):
                self._compare(head.state, failure)  # names the ranks and what differs
            if not self._broken:
                self._start(head.buckets)

    def backward_failed(self, error: BaseException, during_walk: bool) -> None:
        """The GradManager's hook: its backward pass failed (``during_walk``: before the walk
        was over). The other ranks hear of it if they may still be sending this pass's
        buckets; the sends under way are completed; nothing is returned."""
        if self._ended:
            return  # closed: it sent nothing this pass
        try:
            if not self._broken and (during_walk or not self._closed):
                self._tell_failure(f"{type(error).__name__}: {error}")
        except DistributedError:
            pass  # the other ranks are gone or elsewhere: this rank's own error goes on
        for sent in self._buckets:
            try:
                sent.pending.wait()
            except DistributedError:
                pass
        if self.progress_thread is not None:
            self.progress_thread.release()
        self._open, self._rounds, self._closed, self._broken = {}, deque(), True, False

    def _tell_failure(self, failure: str) -> None:
        """This rank's backward pass failed: the rounds it had filled go out as the other
        ranks send them (their gradients were final), then a failure check (or, in the first
        pass, the full comparison) tells the others, who meet it at their next round."""
        if not self._checked:
            self._compare(self._state(True), failure)
            return
        self._pump(block=True, failure=failure)
        if not self._broken and not _agreed(_start_check(self._comm, _FAILED), _FAILED):
            self._compare(self._state(True), failure)

    def _compare(self, state: tuple, failure: str | None = None) -> None:
        """The ranks' full states (see ``_state``) or failures compared: a DistributedError
        naming both ranks where they differ (a rank that failed itself raises its own error).
        At the first one, the duplicate communicator of the checks and buckets is made."""
        if self._comm is None:
            self._comm = self.group.comm.duplicate("make_allreduce_cb")
        comm = self._comm
        states = comm.allgather_object((state, failure), "make_allreduce_cb")
        if all(s == (state, failure) for s in states):
            self._checked = self._checked or (state[1] and failure is None)
            return
        self._broken = True
        if failure is None:
            _refuse_other_states(comm, state, states)


def _refuse_other_states(comm, state: tuple, states: list) -> None:
    """The DistributedError for ranks whose callbacks' ``states`` (see ``_agree``) differ."""
    for rank, (_, failure) in enumerate(states):
        if failure is not None:
            raise DistributedError(f"make_allreduce_cb: rank {comm.ranks[rank]} failed during "
                                   f"its backward pass ({failure}); no gradient of this step "
                                   f"was applied (at {user_location()})")
    me = comm.ranks[comm.rank]
    _refuse_different(me, [s[0][0] for s in states], comm, "make_allreduce_cb", "gradients")
    for rank, ((_, closing, *settings), _) in enumerate(states):
        if closing != state[1]:
            ended, going = (me, comm.ranks[rank]) if state[1] else (comm.ranks[rank], me)
            raise DistributedError(
                f"make_allreduce_cb: rank {ended} ended its backward pass after "
                f"{len(state[0])} gradients, rank {going} has more: the ranks must train the "
                "same model at every step")
        if settings != list(state[2:]):
            raise DistributedError(
                f"make_allreduce_cb: rank {me} sends (bucket_bytes, reduce_method, "
                f"deterministic) = {tuple(state[2:])}, rank {comm.ranks[rank]} "
                f"{tuple(settings)}")


@dataclass
class _TracedFuture:
    """A gradient of a traced step: resolved as the ``all_reduce`` op, which the trace records
    as a node of its plan, where the planner packs the marks into buckets and overlaps them
    with the backward pass as in ``compile_train_step(all_reduce=...)``.

    Design: the op, not MPI calls from Python, because a trace's later calls run its plan and
    no Python: a reduction done here would be a constant of the plan. Made at ``get()``, once
    the walk is over and the ranks have agreed on every gradient (the recording call runs each
    op at once, so a mismatch would otherwise reach MPI); the plan's calls are not checked
    again, as a compiled step's are not after its first (the ranks retrace at the same calls
    only if their batches' shapes change alike)."""

    callback: AllreduceCallback
    grad: Tensor
    backward_pass: int

    def get(self) -> Tensor:
        cb, grad = self.callback, self.grad
        cb._flush(self.backward_pass)
        group = cb.group
        scale = 1.0 / group.size if cb.reduce_method == "mean" else 1.0
        wide = grad.astype(np.float32) if grad.dtype in HALF_DTYPES else grad
        reduced = all_reduce(wide, group=group.key, scale=scale, bucket_bytes=cb.bucket_bytes,
                             deterministic=cb.deterministic)
        return reduced.astype(grad.dtype) if reduced.dtype != grad.dtype else reduced


@dataclass
class _HalfFuture:
    """A float16 or bfloat16 gradient, all-reduced in float32 and rounded once at the end."""

    future: _Future
    dtype: np.dtype

    def get(self) -> Tensor:
        return self.future.get().astype(self.dtype)


def _described(mine: list, other: list) -> str:
    """``mine`` where it first differs from ``other``: its count, the entry and its index."""
    for i, (a, b) in enumerate(zip(mine, other)):
        if a != b:
            return f"#{i} of {len(mine)} as {a[1]}{list(a[0])}"
    return f"{len(mine)} in all"


make_allreduce_cb = AllreduceCallback
