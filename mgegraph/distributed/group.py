"""Process groups, MegEngine's ``megengine.distributed.group``: ``init_process_group``, the ranks,
``Group`` and ``WORLD``, ``new_group``, ``group_barrier``.

>>> dist.init_process_group()      # in each process mpiexec started
>>> dist.get_rank(), dist.get_world_size()
(0, 2)

Design: MegEngine meets its processes through a server at ``master_ip:port``; here MPI's
launcher (``mpiexec``) has already met them, so ``init_process_group`` reads the ranks from MPI
and only checks what the caller says against them. The job's state is one ``_Job`` value set
once per process, as MegEngine's ``_sd``. Once initialised, an exception that nothing catches
aborts the whole job (MPI_Abort) after printing which rank raised: a rank that just exits
would leave the others waiting in their next collective. mpiexec may end before it has passed
on what a rank wrote just before MPI_Abort, so under ``mgegraph launch`` (which names a folder
in ``FAILURE_FOLDER_ENV``) the report goes to a file there, which the launcher prints once the
job has ended.
"""
from __future__ import annotations

import atexit
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

from .. import communicator
from ..communicator import Communicator, DistributedError
from . import nccl

# MegEngine's spelling: "nccl" (and "auto") run a device="cuda" plan's collectives over NCCL
# (nccl.py); the host's collectives, and NCCL's unique id, go over MPI whatever the choice
BACKENDS = ("auto", "mpi", "nccl")
FAILURE_FOLDER_ENV = "MGEGRAPH_LAUNCH_FAILURES"  # where a rank's uncaught error is reported


@dataclass
class _Job:
    world: Communicator
    backend: str
    device: int
    groups: dict = field(default_factory=dict)  # ranks -> Communicator
    nccl: dict = field(default_factory=dict)  # (group key, GPU) -> NcclCommunicator


_job: _Job | None = None


class Group:
    """Ranks that run collectives together, the first one the root (MegEngine's ``Group``).
    Collectives default to ``WORLD``, every process of the job.

    >>> pair = dist.new_group([1, 0])    # rank 1 is its root
    """

    def __init__(self, proc_ranks):
        self.proc_ranks = None
        if len(proc_ranks):
            self.reset(proc_ranks)

    def reset(self, proc_ranks) -> None:
        job = _require("Group")
        ranks = tuple(proc_ranks)
        bad = [r for r in ranks if type(r) is not int or not 0 <= r < job.world.size]
        if bad or len(set(ranks)) != len(ranks):
            raise DistributedError(f"Group({list(proc_ranks)}): ranks must be distinct ints in "
                                   f"[0, {job.world.size}), got {list(proc_ranks)}")
        if job.world.rank not in ranks:
            raise DistributedError(f"Group({list(ranks)}): this process (rank "
                                   f"{job.world.rank}) is not one of its ranks; only they make "
                                   "it and run its collectives")
        self.proc_ranks = list(ranks)

    @property
    def comm(self) -> Communicator:
        """This group's communicator (made on first use, by its ranks together)."""
        job = _require("a collective")
        if self.proc_ranks is None:
            raise DistributedError("an empty Group runs no collective")
        ranks = tuple(self.proc_ranks)
        if ranks == job.world.ranks:
            return job.world
        if ranks not in job.groups:
            job.groups[ranks] = communicator.subgroup(job.world, ranks)
        return job.groups[ranks]

    @property
    def size(self) -> int:
        return len(self._ranks())

    @property
    def rank(self) -> int:
        """This process's rank in the group (0: the root)."""
        return self._ranks().index(get_rank())

    @property
    def key(self) -> str:
        return ",".join(map(str, self._ranks()))

    def _ranks(self) -> list[int]:
        if self.proc_ranks is None:
            raise DistributedError("the group is empty (WORLD before init_process_group)")
        return self.proc_ranks

    def __repr__(self) -> str:
        return f"Group({self.proc_ranks})"


WORLD = Group([])


def init_process_group(master_ip: str | None = None, port: int | None = None,
                       world_size: int | None = None, rank: int | None = None, device: int = 0,
                       backend: str = "auto", device_type: str = "xpu", *,
                       timeout: float = 300.0) -> None:
    """Join the job ``mpiexec`` started (MegEngine's arguments: ``master_ip`` and ``port`` are
    not needed, MPI's launcher has met the processes; ``world_size`` and ``rank``, when given,
    must be MPI's). ``timeout``: seconds a collective waits for the other ranks before raising
    ``CollectiveTimeout``. Called once per process; a script run without mpiexec is a job of one.
    ``backend``: "auto" (MegEngine's default) and "nccl" run the collectives of ``device="cuda"``
    plans over NCCL, each GPU's communicator made at the first such run ("nccl" checks now that
    NCCL loads); "mpi" leaves CUDA plans without collectives. Host collectives use MPI always.

    >>> dist.init_process_group()
    """
    global _job
    if _job is not None:
        raise DistributedError("init_process_group: already called in this process")
    if backend not in BACKENDS:
        raise DistributedError(f"init_process_group: backend must be one of {BACKENDS} (MPI "
                               f"on the CPU, NCCL for device='cuda' plans), got {backend!r}")
    if not timeout > 0:
        raise DistributedError(f"init_process_group: timeout must be > 0 s, got {timeout!r}")
    if not communicator.launched_by_mpiexec() and world_size not in (None, 1):
        raise DistributedError(
            f"init_process_group(world_size={world_size}): this process was not started by "
            f"mpiexec; run `mpiexec -n {world_size} python script.py` or `mgegraph launch -n "
            f"{world_size} script.py`")
    world = communicator.world(float(timeout))
    for what, given, actual in (("world_size", world_size, world.size), ("rank", rank,
                                                                          world.rank)):
        if given is not None and given != actual:
            raise DistributedError(f"init_process_group({what}={given}): mpiexec started this "
                                   f"process with {what} {actual}")
    if backend == "nccl":
        nccl.library()  # a missing wheel is said now, not at the first CUDA plan
    _job = _Job(world, "nccl" if backend == "nccl" else "mpi", int(device))
    WORLD.reset(list(world.ranks))
    if backend != "mpi":
        _cuda_collectives().install_communicators(_nccl_communicator)
    if world.size > 1:
        sys.excepthook = _abort_on_uncaught


def _cuda_collectives():
    from ..cuda import collective  # lazy: the CUDA backend's hook, only where NCCL may run
    return collective


def _nccl_communicator(key: str, device: int):
    """The NCCL communicator of group ``key`` on GPU ``device`` (made once, by the group's
    ranks together, the first time a CUDA plan of theirs runs a collective; ended at exit)."""
    job = _require("a CUDA plan's collective")
    if (key, device) not in job.nccl:
        made = nccl.communicator_of(communicator.by_key(key), device)
        _end_nccl_at_exit()
        job.nccl[key, device] = made
    return job.nccl[key, device]


def end_nccl() -> None:
    """End this process's NCCL communicators, as PyTorch's and MegEngine's process groups do
    before the process ends: every CUDA executable with collectives closed first (its captured
    graph destroyed, both its streams' work awaited, at most the group's timeout, then
    aborted), then each communicator destroyed (ncclCommDestroy), newest first, while the CUDA
    context is still there. Once: a second call does nothing, and no communicator is ended in
    a child forked from the process that made it (nor does the exit hook run there); a later
    CUDA plan makes new communicators (all ranks together again). An NcclError names every
    destroy that failed, after the others were done."""
    job = _job
    if job is None or not job.nccl:
        return
    _cuda_collectives().close_plans()
    comms, job.nccl = list(job.nccl.values()), {}
    failed = []
    for comm in reversed(comms):
        try:
            comm.destroy()
        except nccl.NcclError as exc:
            failed.append(str(exc))
    if failed:
        raise nccl.NcclError("; ".join(failed))


_exit_hook_pid: int | None = None  # the process whose exit ends its communicators


def _end_nccl_at_exit() -> None:
    """Register, once per process, the end of NCCL at interpreter exit: an atexit function,
    which runs before mpi4py's MPI_Finalize and before the CUDA driver tears its contexts
    down, and does nothing in a child forked after it was registered."""
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():  # (a fork registers its own)
        _exit_hook_pid = os.getpid()
        atexit.register(_end_nccl_at_exit_now)


def _end_nccl_at_exit_now() -> None:
    if os.getpid() != _exit_hook_pid:
        return  # a fork: the communicators and the GPU's state are the parent's
    try:
        end_nccl()
    except Exception as exc:  # exiting anyway: say it, do not raise out of atexit
        sys.stderr.write(f"mgegraph.distributed: ending NCCL at exit: {exc}\n")


def _abort_on_uncaught(kind, value, tb) -> None:
    """Print the exception with this rank's number, then abort every rank of the job."""
    head = f"mgegraph.distributed: rank {get_rank()} of {get_world_size()} raised; aborting " \
           "the job\n"
    report = head + "".join(traceback.format_exception(kind, value, tb))
    sys.stdout.flush()
    if not _report_to_launcher(report):
        sys.stderr.write(report)
        sys.stderr.flush()
        time.sleep(0.5)  # mpiexec's forwarding of the write races MPI_Abort's teardown
    communicator.load_mpi().COMM_WORLD.Abort(1)


def _report_to_launcher(report: str) -> bool:
    """Write ``report`` into the folder ``mgegraph launch`` named; False where there is none
    (plain mpiexec) or it cannot be written."""
    folder = os.environ.get(FAILURE_FOLDER_ENV)
    if not folder:
        return False
    try:
        with open(os.path.join(folder, f"rank-{get_rank()}.txt"), "x") as out:
            out.write(report)
    except OSError:
        return False
    return True


def _require(what: str) -> _Job:
    if _job is None:
        raise DistributedError(f"{what} needs the process group: call "
                               "dist.init_process_group() first (in each process mpiexec "
                               "started)")
    return _job


def is_distributed() -> bool:
    """Whether ``init_process_group`` was called in this process."""
    return _job is not None


def get_rank() -> int:
    """This process's rank in the job (0 when not distributed)."""
    return _job.world.rank if _job is not None else 0


def get_world_size() -> int:
    """The number of processes in the job (1 when not distributed)."""
    return _job.world.size if _job is not None else 1


def get_backend() -> str:
    """The communication backend: "nccl" where ``init_process_group(backend="nccl")`` asked for
    it, else "mpi" (with "auto", device="cuda" plans still run their collectives on NCCL)."""
    return _require("get_backend").backend


def get_local_device_id() -> int:
    """The device number given to ``init_process_group``."""
    return _job.device if _job is not None else 0


def new_group(proc_ranks) -> Group:
    """A group of ``proc_ranks`` (the first its root); every one of them must make it."""
    return Group(proc_ranks)


def group_barrier(group: Group = WORLD) -> None:
    """Wait until every rank of ``group`` reaches here (nothing when not distributed)."""
    if _job is None:
        return
    group.comm.barrier()
