"""The processes of a distributed job and the collectives between them, over MPI (``mpi4py``).

>>> world = communicator.world()        # the job mpiexec started (mpi4py loaded on first use)
>>> total = world.allreduce(np.ones(3, np.float32), "sum")

Design: this module is the one place that talks to MPI. It knows arrays and ranks, nothing of
tensors, graphs or gradients, so it sits in the lowest layer: eager collectives
(``mgegraph.distributed``) use it now, and a plan's all-reduce kernel can read the same
communicators later without reaching up. Every collective is MPI's non-blocking form followed by
``wait``, which polls with a deadline: a rank that died or hangs makes the others raise
``CollectiveTimeout`` (naming the collective, the group and the wait) instead of blocking
forever. A wait spins (yielding the core between tests) for its first ``WAIT_SPIN`` seconds,
then sleeps (a late or dead rank: the core is not taken from another rank for long).
Reductions of float16 and bfloat16 run in float32 (MPI has no arithmetic for them) and round
once at the end; every other collective moves bytes, so it takes every dtype the engine has.
"""
from __future__ import annotations

import atexit
import os
import pickle
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np
from ml_dtypes import bfloat16

# Environment variables that MPI launchers set in each process they start: MPICH's Hydra
# (PMI_RANK, PMI_SIZE), Open MPI's (OMPI_COMM_WORLD_*) and PMIx-based ones (PMIX_RANK)
LAUNCHER_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "PMIX_RANK")

REDUCE_OPS = ("sum", "max", "min")
_HALF = (np.dtype(np.float16), np.dtype(bfloat16))
_DEFAULT_TIMEOUT = 300.0  # seconds a collective waits for the other ranks
# Seconds a wait tests its request back to back (sched_yield between: another process that
# wants the core gets it) before it sleeps between tests, here and in the plan's kernels
# (_kernels/collective.pyx). MPICH moves an intranode all-reduce in many steps (cells of
# 8 KiB, a handshake per large message), each only inside an MPI call of both ranks: a sleep
# between tests (10 us doubling to 1 ms, as before) delays every step, and made the MLP's
# 5 buckets (7.4 MB) take 2.8x as long as MPI_Wait, the convnet's (0.37 MB) 4.3x, a 64 KiB
# one 14x (benchmarks/allreduce_micro.py, 2 ranks of this 2-core machine under load). 50 ms
# covers a step's transfer and the ranks' usual drift; a rank later than that sleeps.
WAIT_SPIN = 0.05


class DistributedError(RuntimeError):
    """A distributed job cannot start or go on: MPI missing, not launched by mpiexec, a group
    that does not hold this rank, ranks disagreeing on what they exchange."""


class CollectiveTimeout(DistributedError):
    """A collective waited longer than its timeout for the other ranks (one died, hangs or
    never called it)."""


def launched_by_mpiexec() -> bool:
    """Whether an MPI launcher started this process (its environment says so)."""
    return any(name in os.environ for name in LAUNCHER_ENV)


def load_mpi():
    """mpi4py's ``MPI`` module (which initialises MPI), or a DistributedError saying what to
    install."""
    try:
        from mpi4py import MPI  # lazy: optional dependency (mpi4py, the distributed extra)
    except ImportError as exc:
        raise DistributedError(
            "mgegraph.distributed needs mpi4py and an MPI library (pip install "
            "'mgegraph[distributed]', which brings mpi4py and the mpich wheel with its "
            f"mpiexec): {exc}") from exc
    return MPI


def _mpi_type(MPI, dtype: np.dtype):
    """The MPI datatype reductions use for ``dtype`` (float32 for the half types)."""
    table = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE,
             np.dtype(np.int32): MPI.INT32_T, np.dtype(np.int64): MPI.INT64_T,
             np.dtype(np.int16): MPI.INT16_T, np.dtype(np.int8): MPI.INT8_T,
             np.dtype(np.uint8): MPI.UINT8_T, np.dtype(np.bool_): MPI.C_BOOL}
    return table[np.dtype(np.float32) if dtype in _HALF else dtype]


def _mpi_op(MPI, op: str, dtype: np.dtype):
    # NumPy's reductions of bools are logical (np.add.reduce is "or"); MPI's need the L ops
    if dtype == np.bool_:
        return {"sum": MPI.LOR, "max": MPI.LOR, "min": MPI.LAND}[op]
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]


@dataclass
class Communicator:
    """The processes of one group: ``ranks`` (world ranks, the first the root), this process's
    ``rank`` among them, and the MPI communicator (None for a group of one, which needs no
    MPI). Collectives take and return C-contiguous NumPy arrays; each rank must call the same
    collectives in the same order with arrays of the same size and dtype."""

    comm: object
    ranks: tuple[int, ...]
    rank: int
    timeout: float = _DEFAULT_TIMEOUT
    _free: weakref.finalize | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def key(self) -> str:
        return ",".join(map(str, self.ranks))

    # -- waiting ------------------------------------------------------------------------
    def wait(self, request, what: str) -> None:
        """Wait for ``request`` (an MPI request), at most ``timeout`` seconds: tests back to
        back for ``WAIT_SPIN`` seconds, yielding the core between, then sleeping between."""
        now = time.monotonic()
        deadline, spin_until, delay = now + self.timeout, now + WAIT_SPIN, 0.0
        while not request.Test():
            now = time.monotonic()
            if now > deadline:
                raise CollectiveTimeout(
                    f"{what}: rank {self.rank} of group [{self.key}] waited {self.timeout:g} s "
                    "for the other ranks (one died, hangs, or did not call the same collective)")
            if now < spin_until:
                os.sched_yield()
                continue
            time.sleep(delay)
            delay = min(2 * delay + 1e-5, 1e-3)

    def _run(self, start, what: str) -> None:
        self.wait(start(), what)

    # -- reductions ---------------------------------------------------------------------
    def allreduce(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """Every rank gets ``op`` ("sum", "max", "min") over the ranks' ``x``."""
        return self.start_allreduce(x, op).wait()

    def start_allreduce(self, x: np.ndarray, op: str = "sum", what: str | None = None
                        ) -> Pending:
        """``allreduce`` started: its ``wait()`` gives the result (``x`` must stay unchanged
        until then); ``what`` names it in a timeout (``all_reduce_<op>`` by default)."""
        what = what or f"all_reduce_{op}"
        # reduced in place in an array of its own (the half types' float32 copy is one): MPICH's
        # all-reduce of 1-7 MB out of place took 1.1-1.7x the in-place one, a copy 0.1x
        # (benchmarks/allreduce_micro.py, 2 ranks)
        out = _widened(x) if x.dtype in _HALF else np.array(x, order="C")
        if self.comm is None:
            return Pending(self, None, out, out, x.dtype, what)
        MPI = load_mpi()
        kind = _mpi_type(MPI, x.dtype)
        request = self.comm.Iallreduce(MPI.IN_PLACE, [out, kind], _mpi_op(MPI, op, x.dtype))
        return Pending(self, request, out, out, x.dtype, what)

    def reduce(self, x: np.ndarray, op: str = "sum") -> np.ndarray | None:
        """The root (group rank 0) gets ``op`` over the ranks' ``x``; the others None."""
        if self.comm is None:
            return x.copy()
        MPI, send = load_mpi(), _widened(x)
        out = np.empty_like(send) if self.rank == 0 else None
        kind = _mpi_type(MPI, x.dtype)
        self._run(lambda: self.comm.Ireduce([send, kind], None if out is None else [out, kind],
                                            _mpi_op(MPI, op, x.dtype), root=0), f"reduce_{op}")
        return None if out is None else out.astype(x.dtype, copy=False)

    def reduce_scatter(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """``x`` (size * n values) reduced over the ranks, block ``rank`` of it (n values)."""
        flat = x.reshape(-1)
        if self.comm is None:
            return flat.copy()
        MPI, send = load_mpi(), _widened(flat)
        out = np.empty(flat.size // self.size, send.dtype)
        kind = _mpi_type(MPI, x.dtype)
        self._run(lambda: self.comm.Ireduce_scatter_block(
            [send, kind], [out, kind], _mpi_op(MPI, op, x.dtype)), "reduce_scatter_sum")
        return out.astype(x.dtype, copy=False)

    # -- moving bytes -------------------------------------------------------------------
    def allgather(self, x: np.ndarray, what: str = "all_gather") -> np.ndarray:
        """The ranks' ``x`` stacked in rank order: shape (size, *x.shape)."""
        out = np.empty((self.size,) + x.shape, x.dtype)
        if self.comm is None:
            out[0] = x
            return out
        self._run(lambda: self.comm.Iallgather(_bytes(x), _bytes(out)), what)
        return out

    def gather(self, x: np.ndarray) -> np.ndarray | None:
        """The root gets the ranks' ``x`` stacked in rank order; the others None."""
        out = np.empty((self.size,) + x.shape, x.dtype) if self.rank == 0 else None
        if self.comm is None:
            out[0] = x
            return out
        self._run(lambda: self.comm.Igather(_bytes(x), None if out is None else _bytes(out),
                                            root=0), "gather")
        return out

    def broadcast(self, x: np.ndarray | None, shape, dtype) -> np.ndarray:
        """The root's ``x`` on every rank (the others pass None, or an array to overwrite)."""
        out = x.copy() if self.rank == 0 else np.empty(shape, dtype)
        if self.comm is not None:
            self._run(lambda: self.comm.Ibcast(_bytes(out), root=0), "broadcast")
        return out

    def scatter(self, x: np.ndarray | None, block_shape, dtype) -> np.ndarray:
        """Block ``rank`` of the root's ``x`` (size blocks of ``block_shape`` along axis 0)."""
        out = np.empty(block_shape, dtype)
        if self.comm is None:
            out[...] = x.reshape(block_shape)
            return out
        send = _bytes(np.ascontiguousarray(x)) if self.rank == 0 else None
        self._run(lambda: self.comm.Iscatter(send, _bytes(out), root=0), "scatter")
        return out

    def alltoall(self, x: np.ndarray) -> np.ndarray:
        """Block j of ``x`` (size blocks along axis 0) to rank j; block i of the result from
        rank i."""
        out = np.empty_like(x)
        if self.comm is None:
            out[...] = x
            return out
        self._run(lambda: self.comm.Ialltoall(_bytes(x), _bytes(out)), "all_to_all")
        return out

    def barrier(self) -> None:
        if self.comm is not None:
            self._run(self.comm.Ibarrier, "group_barrier")

    def duplicate(self, what: str) -> Communicator:
        """The same ranks over a new MPI communicator (MPI_Comm_idup, awaited with the
        timeout), called by every rank at the same point: collectives on it are matched apart
        from this one's, so a caller may keep two orders of non-blocking collectives under way
        (a bucket's sum here, the ranks' agreement on the next bucket there). Not registered
        by key (``by_key`` names this one). MPI's communicators are few (MPICH has about 2000
        context ids), so the copy is freed by its ``free()``, when it is dropped, or at exit
        before MPI_Finalize, whichever comes first."""
        if self.comm is None:
            return Communicator(None, self.ranks, self.rank, self.timeout)
        copy, request = self.comm.Idup()
        self.wait(request, what)
        made = Communicator(copy, self.ranks, self.rank, self.timeout)
        made._free = weakref.finalize(made, _free_mpi_communicator, copy)
        return made

    def free(self) -> None:
        """Give MPI back the communicator ``duplicate`` made (collectives on it must have
        ended); nothing for the others, which MPI_Finalize frees. It cannot be used after."""
        if self._free is not None:
            self._free()

    def allgather_object(self, obj, what: str) -> list:
        """Every rank's ``obj`` (a small picklable value), in rank order."""
        if self.comm is None:
            return [obj]
        data = np.frombuffer(_pickled(obj), np.uint8)
        sizes = self.allgather(np.array([data.size], np.int64), what)[:, 0]
        out = np.zeros(int(sizes.max()) * self.size, np.uint8)
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[:data.size] = data
        self._run(lambda: self.comm.Iallgather(padded, out), what)
        blocks = out.reshape(self.size, -1)
        return [_unpickled(blocks[i, :sizes[i]].tobytes()) for i in range(self.size)]


@dataclass
class Pending:
    """A collective under way: ``wait()`` waits for it (at most the group's timeout) and gives
    its result, rounded to the input's dtype."""

    comm: Communicator
    request: object
    send: np.ndarray  # held: MPI reads it until the request completes
    out: np.ndarray  # (for an all-reduce, the same array: reduced in place)
    dtype: np.dtype
    what: str

    def test(self) -> bool:
        """Whether it has completed; each call lets MPI move its messages on (MPICH progresses
        a non-blocking collective only inside MPI calls)."""
        if self.request is not None and self.request.Test():
            self.request = None
        return self.request is None

    def wait(self) -> np.ndarray:
        if self.request is not None:
            self.comm.wait(self.request, self.what)
            self.request = None
        return self.out.astype(self.dtype, copy=False)


def _free_mpi_communicator(comm) -> None:
    # weakref.finalize runs this at exit too, before mpi4py's MPI_Finalize (a Py_AtExit
    # function); MPICH's MPI_Comm_free is local, so ranks need not free at the same moment
    if not load_mpi().Is_finalized():
        comm.Free()


def _widened(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.astype(np.float32) if x.dtype in _HALF else x


def _bytes(x: np.ndarray) -> np.ndarray:
    """``x``'s bytes as a uint8 view (MPI moves them whatever the dtype)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def _pickled(obj) -> bytes:
    return pickle.dumps(obj)


def _unpickled(data: bytes):
    return pickle.loads(data)  # the job's own ranks wrote it


def world(timeout: float = _DEFAULT_TIMEOUT) -> Communicator:
    """The job's processes (MPI's COMM_WORLD)."""
    MPI = load_mpi()
    comm = MPI.COMM_WORLD
    return _known(Communicator(comm if comm.Get_size() > 1 else None,
                               tuple(range(comm.Get_size())), comm.Get_rank(), timeout))


# The communicators this process made, by group key: what a plan's collective (whose op names
# its group by key, ops/collective.py) runs over. MPI keeps them per process likewise.
_GROUPS: dict[str, Communicator] = {}


def _known(comm: Communicator) -> Communicator:
    _GROUPS[comm.key] = comm
    return comm


def by_key(key: str) -> Communicator:
    """The communicator of the group ``key`` ("0,1": its world ranks), made in this process by
    ``world`` or ``subgroup``; a DistributedError if none was."""
    try:
        return _GROUPS[key]
    except KeyError:
        raise DistributedError(f"no process group [{key}] in this process (groups: "
                               f"{sorted(_GROUPS) or 'none'}): call "
                               "dist.init_process_group() first") from None


@dataclass(frozen=True)
class MpiAbi:
    """What a compiled kernel needs to call MPI itself: the addresses of ``MPI_Iallreduce``,
    ``MPI_Test`` and ``MPI_Iallgather`` in the loaded library, and the handles (C ints in
    MPICH's binary interface) of the communicator, the datatype and MPI_SUM."""

    iallreduce: int
    test: int
    comm: int
    datatype: int
    op: int
    iallgather: int


def mpi_abi(comm: Communicator, dtype: np.dtype) -> MpiAbi | None:
    """The MPI entry points and handles for an all-reduce (sum) of ``dtype`` over ``comm``;
    None for a group of one process (nothing to call). Only MPICH's binary interface
    (libmpi.so.12: MPICH, Intel MPI, MVAPICH) is known to the kernels; another MPI is a
    DistributedError naming it."""
    if comm.comm is None:
        return None
    import ctypes  # lazy: only planned collectives need the library's symbols

    MPI = load_mpi()
    version = MPI.Get_library_version()
    path = _loaded_library("libmpi.so.12")
    if not version.startswith("MPICH") or path is None:
        raise DistributedError(
            "a planned collective calls MPI from compiled code and knows MPICH's binary "
            f"interface only (libmpi.so.12), but this MPI is {version.splitlines()[0]!r}; "
            "install the mpich wheel (pip install mpich) or use the eager callback "
            "(dist.make_allreduce_cb)")
    lib = ctypes.CDLL(path)
    address = ctypes.cast  # the functions' addresses, as integers
    return MpiAbi(address(lib.MPI_Iallreduce, ctypes.c_void_p).value,
                  address(lib.MPI_Test, ctypes.c_void_p).value,
                  comm.comm.handle, _mpi_type(MPI, dtype).handle, MPI.SUM.handle,
                  address(lib.MPI_Iallgather, ctypes.c_void_p).value)


def _loaded_library(name: str) -> str | None:
    """The path of the shared library ``name`` this process has mapped, or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path) == name:
                return path
    return None


PROGRESS_INTERVAL = 5e-4  # seconds between a ProgressThread's calls (see its design)
_STREAM_NULL = 0x3C000000  # MPIX_STREAM_NULL in MPICH's binary interface: every message
_PROGRESS_THREADS: weakref.WeakSet = weakref.WeakSet()  # stopped before MPI_Finalize


class ProgressThread:
    """Lets MPI move the messages under way while this process computes without calling MPI
    (a long kernel of eager mode), for as long as it is held: a thread that calls MPICH's
    ``MPIX_Stream_progress`` every ``interval`` seconds, sleeping between.

    >>> poller = ProgressThread(); poller.hold(); ...; poller.release()

    Design: MPICH moves a non-blocking collective's messages only inside MPI calls, and an
    eager node (a GEMM of milliseconds) makes none. MPICH's own progress thread
    (``MPIR_CVAR_ASYNC_PROGRESS=1``, read at MPI_Init) spins on a core for the whole job; this
    one sleeps between calls and waits on an event while released, so it costs nothing when no
    bucket is under way (a job of one process never starts it). ``MPIX_Stream_progress``
    touches no request (testing a request that the main thread also tests would be
    erroneous); the call releases the GIL (ctypes) and MPI serialises it with the main
    thread's calls, which needs MPI_THREAD_MULTIPLE (mpi4py's default). Without that level, or
    with another MPI than MPICH's binary interface, ``hold`` does nothing. The interval: a
    1 MiB all-reduce left behind 4 GEMMs of 512 (one thread each, 2 ranks on this 2-core
    machine under load) was done when they ended at 5e-5 to 2e-3 s; 5e-5 slowed the GEMMs by
    half, 5e-4 to 2e-3 gave steps 0-17% shorter than no thread (interleaved, one run each)."""

    def __init__(self, interval: float = PROGRESS_INTERVAL):
        self.interval = interval
        self._wanted = threading.Event()
        self._thread: threading.Thread | None = None
        self._poke = None  # MPIX_Stream_progress, or False where it cannot be called
        self._closing = False
        _PROGRESS_THREADS.add(self)

    @property
    def available(self) -> bool:
        """Whether this process's MPI lets a thread make progress (see the design)."""
        if self._poke is None:
            self._poke = _progress_function() or False
        return bool(self._poke)

    def hold(self) -> None:
        """Make progress from now on (the thread starts at the first call)."""
        if self._closing or not self.available:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mgegraph-mpi-progress",
                                            daemon=True)
            self._thread.start()
        self._wanted.set()

    def release(self) -> None:
        """Stop making progress (the thread waits until the next ``hold``)."""
        self._wanted.clear()

    def close(self) -> None:
        """End the thread (before MPI_Finalize: atexit does it for every one)."""
        self._closing = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while self._wanted.wait() and not self._closing:
            self._poke(_STREAM_NULL)
            time.sleep(self.interval)


def _progress_function():
    """libmpi's ``MPIX_Stream_progress`` as a ctypes function, or None where a thread may not
    call it (see ``ProgressThread``)."""
    import ctypes  # lazy: only a progress thread needs the library's symbols

    MPI = load_mpi()
    path = _loaded_library("libmpi.so.12")
    if (MPI.Query_thread() != MPI.THREAD_MULTIPLE or path is None
            or not MPI.Get_library_version().startswith("MPICH")):
        return None
    function = getattr(ctypes.CDLL(path), "MPIX_Stream_progress", None)
    if function is not None:
        function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
    return function


@atexit.register
def _close_progress_threads() -> None:
    # mpi4py finalises MPI in a Py_AtExit function, which runs after every atexit handler
    for poller in list(_PROGRESS_THREADS):
        poller.close()


def subgroup(parent: Communicator, ranks: tuple[int, ...]) -> Communicator:
    """The communicator of ``ranks`` (world ranks, the first the root), made by those ranks
    only (MPI_Comm_create_group); this process must be one of them."""
    me = parent.ranks[parent.rank]
    if parent.comm is None or len(ranks) == 1:
        return Communicator(None, ranks, 0, parent.timeout)
    MPI = load_mpi()
    members = MPI.COMM_WORLD.Get_group().Incl(list(ranks))
    comm = MPI.COMM_WORLD.Create_group(members, tag=_group_tag(ranks))
    members.Free()
    return _known(Communicator(comm, ranks, ranks.index(me), parent.timeout))


def _group_tag(ranks) -> int:
    # groups made at once by disjoint ranks may share a tag; overlapping ones are made in the
    # same order by their common ranks, so a tag from the ranks keeps their messages apart
    return hash(tuple(ranks)) & 0x7FFF
