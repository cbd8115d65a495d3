"""NCCL, NVIDIA's collectives between GPUs, through ctypes over ``libnccl.so.2``: the library
(the ``nvidia-nccl-cu12`` wheel's, or the system's), its dtypes, and a communicator per group
and device that a ``device="cuda"`` plan's collectives run on.

>>> nccl.version()                      # doctest: +SKIP
(2, 32, 3)
>>> comm = nccl.communicator_of(dist.WORLD.comm, device=0)   # doctest: +SKIP

Design: nothing here loads before a CUDA plan or a caller asks (``library()``), so importing
mgegraph never needs the wheel. Every NCCL call goes through ``_call``, which turns a result
other than ``ncclSuccess`` into an ``NcclError`` quoting NCCL's own string and its last error
message. A communicator is made as MegEngine and PyTorch make theirs: rank 0 draws the unique id
(``ncclGetUniqueId``), the group's MPI communicator broadcasts it, and every rank calls
``ncclCommInitRank`` with its rank in the group; an MPI barrier first (with the group's
timeout), so a rank that died before it is a ``CollectiveTimeout``, not a hang inside NCCL's
blocking init. A communicator is blocking (NCCL's default): a collective call returns once it
is enqueued on its stream; what waits is ``NcclCommunicator.wait``, which polls the GPU's
progress and ``ncclCommGetAsyncError`` and aborts the communicator (``ncclCommAbort``, which
also ends its kernels still on the GPU) when NCCL reports an error or the group's timeout
passes, raising an error that names the rank: never a hang.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..communicator import CollectiveTimeout, Communicator, DistributedError
from ..ir.types import BFLOAT16

WHEEL = "nvidia-nccl-cu12"
LIBRARY = "libnccl.so.2"
UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
IN_PROGRESS = 7        # ncclInProgress: an asynchronous call not finished yet
CAPTURE_VERSION = 20906  # NCCL 2.9.6: collectives may be captured into CUDA graphs
SUM = 0                  # ncclSum

# mgegraph's dtypes -> ncclDataType_t (nccl.h). NCCL has no bool and no int16: refused by name.
DTYPES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2,
          np.dtype(np.int64): 4, np.dtype(np.float16): 6, np.dtype(np.float32): 7,
          np.dtype(np.float64): 8, BFLOAT16: 9}
UINT8 = DTYPES[np.dtype(np.uint8)]  # what moving bytes of any dtype (broadcast, gather) uses


class NcclError(DistributedError):
    """NCCL is missing, or an NCCL call returned an error (the message quotes NCCL's)."""


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes, passed by value."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


_VOID_P, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
# name -> argument types (every function returns ncclResult_t, an int, but the two strings)
_SIGNATURES = {
    "ncclGetVersion": [ctypes.POINTER(_INT)],
    "ncclGetUniqueId": [ctypes.POINTER(UniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(_VOID_P), _INT, UniqueId, _INT],
    "ncclCommDestroy": [_VOID_P],
    "ncclCommAbort": [_VOID_P],
    "ncclCommGetAsyncError": [_VOID_P, ctypes.POINTER(_INT)],
    "ncclAllReduce": [_VOID_P, _VOID_P, _SIZE, _INT, _INT, _VOID_P, _VOID_P],
    "ncclBroadcast": [_VOID_P, _VOID_P, _SIZE, _INT, _INT, _VOID_P, _VOID_P],
    "ncclAllGather": [_VOID_P, _VOID_P, _SIZE, _INT, _VOID_P, _VOID_P],
    "ncclReduceScatter": [_VOID_P, _VOID_P, _SIZE, _INT, _INT, _VOID_P, _VOID_P],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
}
_STRINGS = {"ncclGetErrorString": [_INT], "ncclGetLastError": [_VOID_P]}


def candidates() -> list[str]:
    """Where ``libnccl.so.2`` is looked for, in order: the wheel's folder, then the system's
    loader (LD_LIBRARY_PATH, ldconfig)."""
    found = []
    try:
        import nvidia.nccl  # lazy: optional dependency (the nvidia-nccl-cu12 wheel)
        found += [os.path.join(p, "lib", LIBRARY) for p in nvidia.nccl.__path__]
    except ImportError:
        pass
    return [p for p in found if os.path.exists(p)] + [LIBRARY]


@functools.cache
def library() -> ctypes.CDLL:
    """The loaded NCCL library with its functions typed; an NcclError saying what to install
    where none loads."""
    errors = []
    for path in candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as exc:
            errors.append(str(exc))
    else:
        raise NcclError(f"NCCL is not installed (pip install {WHEEL}, or 'mgegraph[nccl]'): "
                        f"{'; '.join(errors)}")
    for name, args in _SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, _INT
    for name, args in _STRINGS.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, ctypes.c_char_p
    return lib


def error_string(result: int) -> str:
    """NCCL's string for a ncclResult_t."""
    return library().ncclGetErrorString(result).decode()


def _call(name: str, *args, comm=None, what: str = "") -> None:
    """``name(*args)``; an NcclError with NCCL's strings where it does not succeed."""
    lib = library()
    result = getattr(lib, name)(*args)
    if result != 0:
        last = (lib.ncclGetLastError(comm) or b"").decode()
        detail = f": {last}" if last else ""
        raise NcclError(f"{what or name}: NCCL's {name} returned {result} "
                        f"({error_string(result)}){detail}")


@functools.cache
def version_code() -> int:
    """NCCL's version as one number (2.32.3: 23203)."""
    code = _INT()
    _call("ncclGetVersion", ctypes.byref(code))
    return code.value


def version() -> tuple[int, int, int]:
    """NCCL's (major, minor, patch)."""
    code = version_code()
    return (code // 10000, code // 100 % 100, code % 100) if code >= 10000 else \
        (code // 1000, code // 100 % 10, code % 100)


def captures() -> bool:
    """Whether this NCCL's collectives may be recorded into a CUDA graph (2.9.6 on)."""
    return version_code() >= CAPTURE_VERSION


def nccl_dtype(dtype, what: str) -> int:
    """The ncclDataType_t of ``dtype``; an NcclError naming it where NCCL has none."""
    dtype = np.dtype(dtype)
    if dtype not in DTYPES:
        names = ", ".join(str(d) for d in DTYPES)
        raise NcclError(f"{what}: NCCL has no {dtype} (it reduces {names})")
    return DTYPES[dtype]


@contextlib.contextmanager
def grouped():
    """NCCL calls made inside run as one (ncclGroupStart ... ncclGroupEnd): what several
    collectives that must progress together need.

    >>> with nccl.grouped():                                       # doctest: +SKIP
    ...     comm.all_reduce(a, a, n, np.float32, stream)
    """
    _call("ncclGroupStart")
    try:
        yield
    finally:
        _call("ncclGroupEnd")


def unique_id() -> bytes:
    """A new ncclUniqueId (rank 0's, for the group to share)."""
    uid = UniqueId()
    _call("ncclGetUniqueId", ctypes.byref(uid))
    return bytes(uid)  # all 128 bytes (``uid.internal`` would stop at the first zero)


@dataclass
class NcclCommunicator:
    """One group's NCCL communicator on one GPU: ``handle`` (ncclComm_t), this process's
    ``rank`` among ``size``, the group's ``key`` and ``timeout`` (seconds a wait waits).
    Buffers are device addresses (ints), streams CUDA stream handles (ints).

    It ends once, by ``abort`` (a failure) or ``destroy`` (its work done); after that, and in
    a child forked from the process that made it (``pid``: the handle and its GPU state are the
    parent's), ``ended`` is true: a collective is refused and neither ends it again."""

    handle: int
    rank: int
    size: int
    key: str
    device: int
    timeout: float
    aborted: bool = False
    destroyed: bool = False
    pid: int = field(default_factory=os.getpid)

    @property
    def ended(self) -> bool:
        return self.aborted or self.destroyed or self.pid != os.getpid()

    def _where(self, what: str) -> str:
        return f"{what} on rank {self.rank} of group [{self.key}] (cuda:{self.device})"

    def _enqueue(self, name: str, *args, stream: int, what: str) -> None:
        """``name(*args, comm, stream)``: every collective takes the two last."""
        if self.ended:
            why = ("was aborted by an earlier failure" if self.aborted else
                   "was destroyed when the process group's NCCL ended" if self.destroyed else
                   f"belongs to process {self.pid} (this one is a fork of it)")
            raise NcclError(f"{self._where(what)}: the communicator {why}; make a new process "
                            "group")
        _call(name, *args, self.handle, int(stream), comm=self.handle, what=self._where(what))

    @property
    def captures(self) -> bool:
        """Whether its calls may be captured into a CUDA graph."""
        return captures()

    def all_reduce(self, send: int, recv: int, count: int, dtype, stream: int) -> None:
        """recv = the sum over the ranks of send (``count`` elements; may be in place)."""
        self._enqueue("ncclAllReduce", send, recv, count, nccl_dtype(dtype, "all_reduce"),
                      SUM, stream=stream, what="all_reduce")

    def all_gather(self, send: int, recv: int, count: int, dtype, stream: int) -> None:
        """recv = the ranks' ``count`` elements of send, one after another in rank order."""
        self._enqueue("ncclAllGather", send, recv, count * np.dtype(dtype).itemsize, UINT8,
                      stream=stream, what="all_gather")

    def broadcast(self, send: int, recv: int, count: int, dtype, stream: int,
                  root: int = 0) -> None:
        """recv = rank ``root``'s send on every rank."""
        self._enqueue("ncclBroadcast", send, recv, count * np.dtype(dtype).itemsize, UINT8,
                      root, stream=stream, what="broadcast")

    def reduce_scatter(self, send: int, recv: int, count: int, dtype, stream: int) -> None:
        """recv = block ``rank`` (``count`` elements) of the sum over the ranks of send."""
        self._enqueue("ncclReduceScatter", send, recv, count,
                      nccl_dtype(dtype, "reduce_scatter"), SUM, stream=stream,
                      what="reduce_scatter")

    def async_error(self) -> str | None:
        """NCCL's asynchronous error on this communicator (a peer lost, a network error), or
        None while there is none."""
        result = _INT()
        _call("ncclCommGetAsyncError", self.handle, ctypes.byref(result), comm=self.handle,
              what=self._where("ncclCommGetAsyncError"))
        if result.value in (0, IN_PROGRESS):
            return None
        return f"{error_string(result.value)} ({result.value})"

    def wait(self, done, what: str) -> None:
        """Poll ``done()`` (has the GPU finished the work, e.g. an event's query) until it says
        so; where NCCL reports an error, or ``timeout`` seconds pass first, abort the
        communicator and raise (a CollectiveTimeout for the timeout), naming this rank."""
        deadline, delay = time.monotonic() + self.timeout, 0.0
        while not done():
            error = self.async_error()
            if error is not None:
                self.abort()
                raise NcclError(f"{self._where(what)}: NCCL reported {error}; the "
                                "communicator was aborted")
            if time.monotonic() > deadline:
                self.abort()
                raise NcclTimeout(f"{self._where(what)}: waited {self.timeout:g} s for the "
                                  "other ranks (one died, hangs, or did not run the same "
                                  "collective); the communicator was aborted")
            time.sleep(delay)
            delay = min(2 * delay + 1e-5, 1e-3)

    def abort(self) -> None:
        """End the communicator at once, its kernels still on the GPU too (ncclCommAbort)."""
        if not self.ended:
            self.aborted = True
            library().ncclCommAbort(self.handle)

    def destroy(self) -> None:
        """Free the communicator once its work is done (ncclCommDestroy: the caller has
        waited for its kernels, and the CUDA context is still there)."""
        if not self.ended:
            self.destroyed = True
            _call("ncclCommDestroy", self.handle, comm=self.handle,
                  what=self._where("ncclCommDestroy"))


class NcclTimeout(NcclError, CollectiveTimeout):
    """An NCCL wait ran past the group's timeout (the communicator is aborted)."""


def shared_unique_id(group: Communicator) -> bytes:
    """Rank 0's new unique id on every rank of ``group`` (over its MPI communicator), after
    which all of them have arrived (a barrier), so NCCL's blocking init finds them all."""
    mine = np.frombuffer(unique_id(), np.uint8) if group.rank == 0 else None
    shared = group.broadcast(mine, (UNIQUE_ID_BYTES,), np.uint8)
    group.barrier()
    return shared.tobytes()


def init_rank(uid: bytes, size: int, rank: int, what: str) -> int:
    """ncclCommInitRank on the current CUDA device: the new communicator's handle."""
    handle = _VOID_P()
    _call("ncclCommInitRank", ctypes.byref(handle), size, UniqueId.from_buffer_copy(uid), rank,
          what=what)
    return handle.value


def communicator_of(group: Communicator, device: int) -> NcclCommunicator:
    """The NCCL communicator of ``group`` (an MPI Communicator) on GPU ``device``, whose
    context must be current; every rank of the group calls it together."""
    what = f"NCCL communicator of rank {group.rank} of group [{group.key}] on cuda:{device}"
    uid = shared_unique_id(group) if group.size > 1 else unique_id()
    handle = init_rank(uid, group.size, group.rank, what)
    return NcclCommunicator(handle, group.rank, group.size, group.key, device, group.timeout)
