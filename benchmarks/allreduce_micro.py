"""The all-reduce of a training step's gradient bytes between 2 processes on this machine:
MPI's calls, MPICH's algorithms, the package's waits and PyTorch's gloo, interleaved in one
pair of processes.

    python benchmarks/allreduce_micro.py                      # 15 rounds, the default sizes
    python benchmarks/allreduce_micro.py --rounds 30 --sizes 7454760 65536
    python benchmarks/allreduce_micro.py --setting MPIR_CVAR_CH4_CMA_ENABLE=0 --jobs 3

Its own command, never in the test run. One ``mpiexec -n 2`` job of this script (``--child``);
each round times every way on every size once, one after the other (A B C ... A B C ...), both
ranks meeting at a barrier before each call, so a burst of the machine's load falls on all
alike; the table gives each way's median over the rounds (rank 0's clock), its bandwidth
(bytes / time, the all-reduce's own bytes once) and its time over ``Iallreduce+Wait``'s, the
plan's call awaited by MPICH itself. The ways, float32 in place unless said:

- ``memcpy``: np.copyto of the bytes, both ranks at once (the machine's copy, no MPI);
- ``Allreduce``: the blocking call, out of place; ``Allreduce in place``: MPI_IN_PLACE;
- ``Iallreduce+Wait``: started and awaited at once by MPI_Wait (MPICH polls, yielding the core
  every ``MPIR_CVAR_POLLS_BEFORE_YIELD`` polls); ``out of place``: into another array, as the
  eager collectives' ``start_allreduce`` does;
- ``Iallreduce+sleep wait``: awaited as the package did before (``sleeping_wait``): MPI_Test,
  then a sleep of 10 us doubling to 1 ms; ``Iallreduce+package wait``: ``Communicator.wait``
  now;
- ``plan all_reduce``: a compiled graph of one ``all_reduce`` node (the executor's kernel,
  ``_kernels/collective.pyx``: MPI_Iallreduce in place and its C wait), run by ``plan.run``;
- ``Allreduce <algorithm>`` and ``Iallreduce+Wait <algorithm>``: MPICH's algorithm forced
  for that call (``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``, ``MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM``,
  ``MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM``: written through MPI's tool interface, MPI_T,
  by both ranks before the call and set back after it, the same as the environment variable
  read at MPI_Init, without a job per setting);
- ``gloo``: torch.distributed's ``all_reduce`` of the same bytes (a tensor over the array) in
  a gloo group of the same two processes.

Then each workload's buckets as the planner cuts them (``distributed_scaling.BUCKET_MB``):
started back to back, then awaited in the plan's order (the last one started first), by
MPI_Wait, by the old sleeping wait, by the package's wait, and gloo's ``async_op`` handles.

MPICH's settings read only at MPI_Init (the CH4 shared-memory ones: ``mpivars`` lists them)
need a job each: ``--setting NAME=VALUE`` (repeatable) runs ``--jobs`` jobs with them and as
many without, alternating, and prints each way's median over its jobs of its time over gloo's
in the same job (gloo does not read MPICH's settings, so the ratio takes out the load that
differed between jobs), for each variant.

Under load (other processes on these cores) the absolute figures mean little; compare the
ratios of one run.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# the MLP's 7.4 MB of float32 gradients whole, its largest bucket (the second layer's
# weight), 1 MiB, the convnet's 0.37 MB whole and a 64 KiB bucket
SIZES = (7454760, 4194304, 1048576, 378152, 65536)
# MPICH's algorithms to force, by control variable: every name is listed by `mpivars`, which
# gives a variable's values in the order of their numbers (0: auto)
ALGORITHMS = {
    "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": (
        "Allreduce", ("auto", "nb", "smp", "recursive_doubling", "recursive_multiplying",
                      "reduce_scatter_allgather", "tree", "recexch", "ring",
                      "k_reduce_scatter_allgather", "ccl"),
        ("recursive_doubling", "reduce_scatter_allgather", "ring", "recexch")),
    "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": (
        "Iallreduce+Wait", ("auto", "sched_auto", "sched_naive", "sched_smp",
                            "sched_recursive_doubling", "sched_reduce_scatter_allgather",
                            "tsp_recexch_single_buffer", "tsp_recexch_multiple_buffer",
                            "tsp_tree", "tsp_ring",
                            "tsp_recexch_reduce_scatter_recexch_allgatherv"),
        ("sched_recursive_doubling", "sched_reduce_scatter_allgather", "tsp_ring",
         "tsp_recexch_single_buffer")),
    "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM": (
        "Allreduce", ("mpir", "release_gather", "auto"), ("mpir", "release_gather")),
}
REFERENCE = "Iallreduce+Wait"


def sleeping_wait(request) -> None:
    """The package's wait before the spin (communicator.Communicator.wait and the kernel's):
    MPI_Test, then a sleep of 10 us doubling up to 1 ms, until the request completes."""
    delay = 0.0
    while not request.Test():
        time.sleep(delay)
        delay = min(2 * delay + 1e-5, 1e-3)


# -- MPI_T: a control variable written at run time ------------------------------------------
class ControlVariable:
    """One of MPICH's control variables of type int, read and written through MPI_T (every
    rank writes the same value at the same point: the collectives' selection reads it at each
    call)."""

    def __init__(self, lib, name: str):
        index = ctypes.c_int()
        if lib.MPI_T_cvar_get_index(name.encode(), ctypes.byref(index)) != 0:
            raise RuntimeError(f"MPI_T knows no control variable {name}")
        self._handle, count = ctypes.c_void_p(), ctypes.c_int()
        if lib.MPI_T_cvar_handle_alloc(index, None, ctypes.byref(self._handle),
                                       ctypes.byref(count)) != 0:
            raise RuntimeError(f"MPI_T_cvar_handle_alloc({name}) failed")
        self._lib, self.name = lib, name
        self.default = self.read()

    def read(self) -> int:
        value = ctypes.c_int()
        self._lib.MPI_T_cvar_read(self._handle, ctypes.byref(value))
        return value.value

    def write(self, value: int) -> None:
        if self._lib.MPI_T_cvar_write(self._handle, ctypes.byref(ctypes.c_int(value))) != 0:
            raise RuntimeError(f"MPI_T_cvar_write({self.name}, {value}) failed")


def _mpi_tool_library():
    from mgegraph.communicator import _loaded_library  # lazy: after the path is set

    lib = ctypes.CDLL(_loaded_library("libmpi.so.12"))
    provided = ctypes.c_int()
    if lib.MPI_T_init_thread(3, ctypes.byref(provided)) != 0:  # 3: MPI_THREAD_MULTIPLE
        raise RuntimeError("MPI_T_init_thread failed")
    return lib


def _forced(variable: ControlVariable, value: int, call):
    def run():
        variable.write(value)
        try:
            call()
        finally:
            variable.write(variable.default)
    return run


# -- one rank ----------------------------------------------------------------------------------
def _ways(comm, MPI, size: int, gloo) -> dict:
    """name -> a call all-reducing (or copying) ``size`` bytes of float32, its buffers made
    now."""
    import mgegraph.distributed as dist

    count = size // 4
    data, out = np.ones(count, np.float32), np.empty(count, np.float32)
    package = dist.WORLD.comm
    ways = {
        "memcpy": lambda: np.copyto(out, data),
        "Allreduce": lambda: comm.Allreduce(data, out),
        "Allreduce in place": lambda: comm.Allreduce(MPI.IN_PLACE, data),
        REFERENCE: lambda: comm.Iallreduce(MPI.IN_PLACE, data).Wait(),
        "Iallreduce+Wait out of place": lambda: comm.Iallreduce(data, out).Wait(),
        "Iallreduce+sleep wait": lambda: sleeping_wait(comm.Iallreduce(MPI.IN_PLACE, data)),
        "Iallreduce+package wait": lambda: package.wait(comm.Iallreduce(MPI.IN_PLACE, data),
                                                        "benchmark"),
        "plan all_reduce": _plan_all_reduce(count),
    }
    lib = _mpi_tool_library()
    for name, (kind, values, chosen) in ALGORITHMS.items():
        variable = ControlVariable(lib, name)
        base = ways["Allreduce in place" if kind == "Allreduce" else REFERENCE]
        for algorithm in chosen:
            label = "posix " + algorithm if "POSIX" in name else algorithm
            ways[f"{kind} {label}"] = _forced(variable, values.index(algorithm), base)
    if gloo is not None:
        tensor = gloo.tensor_of(data)
        ways["gloo"] = lambda: gloo.all_reduce(tensor)
    return ways


def _plan_all_reduce(count: int):
    import mgegraph as mg
    import mgegraph.distributed as dist
    from mgegraph.ir.graph import Graph
    from mgegraph.ops.collective import all_reduce

    g = Graph()
    x = g.input("x", (count,), "float32")
    plan = mg.compile([all_reduce(x, group=dist.WORLD.key)])
    feed = {"x": np.ones(count, np.float32)}
    return lambda: plan.run(feed)


class _Gloo:
    """torch.distributed's gloo group of this job's two processes (None without torch)."""

    def __init__(self, rank: int, size: int):
        import torch
        import torch.distributed as tdist

        torch.set_num_threads(1)
        tdist.init_process_group("gloo", rank=rank, world_size=size)
        self.torch, self.dist = torch, tdist

    def tensor_of(self, array):
        return self.torch.from_numpy(array)

    def all_reduce(self, tensor) -> None:
        self.dist.all_reduce(tensor)

    def buckets(self, tensors) -> None:
        handles = [self.dist.all_reduce(t, async_op=True) for t in tensors]
        for handle in reversed(handles):
            handle.wait()


def _gloo(rank: int, size: int):
    try:
        return _Gloo(rank, size)
    except ImportError:
        return None


def _bucket_sizes() -> dict:
    """{workload: the bytes of each float32 bucket of its compiled step's plan, in the order
    they are sent}, cut as distributed_scaling.py's steps cut them."""
    import distributed_scaling as S
    import workloads as W

    import mgegraph as mg
    import mgegraph.distributed as dist
    import mgegraph.functional as F
    from mgegraph import optim

    sizes = {}
    for workload in ("mlp-train", "convnet-train"):
        shape, kind, _ = S.WORKLOADS[workload]
        x, y = S._rank_batch(shape, dist.get_rank())
        model = W._mlp_module() if kind == "mlp" else W._convnet()
        step = mg.compile_train_step(model, F.cross_entropy,
                                     optim.SGD(model.parameters(), lr=0.01), (x, y),
                                     all_reduce=dist.AllReduce(S.BUCKET_MB[workload]))
        buckets = json.loads(step.plan.memory_report(format="json"))["buckets"]
        sizes[workload] = [b["bytes"] for b in sorted(buckets, key=lambda b: b["sent"])]
    return sizes


def _bucket_ways(comm, MPI, sizes: list[int], gloo) -> dict:
    """name -> a call that all-reduces buckets of ``sizes`` bytes as a plan does: started back
    to back, awaited the last first."""
    import mgegraph.distributed as dist

    arrays = [np.ones(size // 4, np.float32) for size in sizes]
    package = dist.WORLD.comm

    def buckets(wait):
        def run():
            requests = [comm.Iallreduce(MPI.IN_PLACE, a) for a in arrays]
            for request in reversed(requests):
                wait(request)
        return run

    ways = {REFERENCE: buckets(lambda r: r.Wait()),
            "Iallreduce+sleep wait": buckets(sleeping_wait),
            "Iallreduce+package wait": buckets(lambda r: package.wait(r, "benchmark"))}
    if gloo is not None:
        tensors = [gloo.tensor_of(a) for a in arrays]
        ways["gloo"] = lambda: gloo.buckets(tensors)
    return ways


def child(rounds: int, sizes: list[int], buckets: bool) -> None:
    sys.path.insert(0, str(HERE))
    import mgegraph.distributed as dist
    from mgegraph.communicator import load_mpi

    dist.init_process_group(timeout=120)
    MPI, rank = load_mpi(), dist.get_rank()
    comm = MPI.COMM_WORLD
    gloo = _gloo(rank, dist.get_world_size())
    cases = {f"{size} B": (size, _ways(comm, MPI, size, gloo)) for size in sizes}
    if buckets:
        for workload, bucket_sizes in _bucket_sizes().items():
            cases[f"{workload} buckets {bucket_sizes}"] = (
                sum(bucket_sizes), _bucket_ways(comm, MPI, bucket_sizes, gloo))
    times = {(case, way): [] for case, (_, ways) in cases.items() for way in ways}
    for r in range(rounds + 1):  # the first round warms up
        for case, (_, ways) in cases.items():
            for way, call in ways.items():
                comm.Barrier()
                begin = time.perf_counter()
                call()
                if r:
                    times[case, way].append(time.perf_counter() - begin)
    if rank == 0:
        result = {case: {"bytes": size,
                         "ways": {way: statistics.median(times[case, way]) for way in ways}}
                  for case, (size, ways) in cases.items()}
        print("RESULT " + json.dumps(result), flush=True)


# -- the jobs and the table --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(rounds: int, sizes: list[int], buckets: bool, settings: dict) -> dict:
    """Rank 0's medians of one ``mpiexec -n 2`` job with MPICH's ``settings``."""
    from mgegraph.distributed.launcher import mpiexec  # lazy: after the path is set

    env = {**os.environ, **settings, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    command = [mpiexec(), "-n", "2", sys.executable, __file__, "--child", "--rounds",
               str(rounds), "--sizes", *map(str, sizes)] + ([] if buckets else ["--no-buckets"])
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900,
                          check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"the job failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout)[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def table(result: dict) -> list[str]:
    lines = []
    for case, entry in result.items():
        ways = entry["ways"]
        lines += [f"{case}", f"  {'way':42} {'median ms':>9} {'GB/s':>6} "
                             f"{'/ ' + REFERENCE:>18}"]
        for way, seconds in ways.items():
            lines.append(f"  {way:42} {seconds * 1e3:9.3f} {entry['bytes'] / seconds / 1e9:6.2f} "
                         f"{seconds / ways[REFERENCE]:18.2f}")
    return lines


def settings_table(variants: dict) -> list[str]:
    """Each way's median over its jobs of its time over gloo's in the same job, per
    variant (the settings of its jobs)."""
    names = list(variants)
    lines = [f"  {'case / way':50} " + " ".join(f"{n[:28]:>28}" for n in names)]
    first = variants[names[0]][0]
    for case, entry in first.items():
        lines.append(case)
        for way in entry["ways"]:
            cells = []
            for name in names:
                ratios = [r[case]["ways"][way] / r[case]["ways"]["gloo"]
                          for r in variants[name] if "gloo" in r[case]["ways"]]
                cells.append(f"{statistics.median(ratios):28.2f}" if ratios else f"{'-':>28}")
            lines.append(f"  {way:48} " + " ".join(cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="bytes of float32 to all-reduce (default: %(default)s)")
    parser.add_argument("--no-buckets", action="store_true",
                        help="leave out the workloads' buckets")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="an MPICH setting read at MPI_Init for a variant of the job "
                             "(repeatable); compared with jobs without it, over gloo")
    parser.add_argument("--jobs", type=int, default=2,
                        help="jobs per variant with --setting (alternating)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rounds, args.sizes, not args.no_buckets)
        return
    sys.path.insert(0, str(ROOT))
    buckets = not args.no_buckets
    if not args.setting:
        print("\n".join(table(job(args.rounds, args.sizes, buckets, {}))))
        return
    settings = dict(s.split("=", 1) for s in args.setting)
    variants = {"MPICH defaults": [], " ".join(args.setting): []}
    for _ in range(args.jobs):
        for name, env in zip(variants, ({}, settings)):
            variants[name].append(job(args.rounds, args.sizes, buckets, env))
            print(f"{name}: job {len(variants[name])} of {args.jobs}\n" +
                  "\n".join(table(variants[name][-1])), flush=True)
    print("time over gloo's in the same job, median over the jobs")
    print("\n".join(settings_table(variants)))


if __name__ == "__main__":
    main()
