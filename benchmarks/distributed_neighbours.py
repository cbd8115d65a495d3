"""What a second process costs a training step that does not communicate: rank 0 times the
step (one thread) while rank 1 idles, spins, sweeps a buffer or runs the same step.

    python benchmarks/distributed_neighbours.py                      # convnet-train, mgegraph
    python benchmarks/distributed_neighbours.py --impl torch mlp-train --rounds 8

Its own command, never in the test run. ``distributed_scaling.py``'s "+machine" (the 2-process
step without all-reduce over the 1-process step) mixes what the second process takes from this
one: a core (on a loaded machine, time slices), the shared L3 and memory bandwidth, the clock.
Here one ``mpiexec -n 2`` job (OMP_NUM_THREADS=1) runs the step on rank 0 in rounds of phases,
each phase a different neighbour on rank 1, interleaved (idle, spin, sweep 8/16/32 MiB, step;
idle, ...) so the machine's load falls on all alike:

- ``idle``: rank 1 sleeps (the 1-process step);
- ``spin``: a Python loop of float multiplications (a busy core, no memory traffic);
- ``gemm``: float32 GEMMs of 96x96 again and again (the FMA units busy, in L2: were the two
  cores hyperthreads of one, this would slow an FMA-bound step as the same step does);
- ``sweep N``: ``buffer += 1`` over N MiB again and again (memory and L3 traffic, no FMA);
- ``step``: the same step on its own batch (the 2-process step without the all-reduce).

Per phase rank 0 prints the median step's wall time and its thread's CPU time
(``time.thread_time``: the time it ran, not the time another process held the core, so on a
loaded machine the CPU time is what shows the contention for caches, memory and the FMA units),
over the idle phase's; for mgegraph also each instruction's median wall time per phase
(``mg.profile``), the instructions of at least ``--min-ms``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PHASES = ("idle", "spin", "gemm", "sweep 8", "sweep 16", "sweep 32", "step")


def _step(impl: str, workload: str, rank: int):
    """(a call running one training step, its plan or None)."""
    import distributed_scaling as S
    import workloads as W

    shape, kind, _ = S.WORKLOADS[workload]
    x, y = S._rank_batch(shape, rank)
    if impl == "mgegraph":
        import mgegraph as mg
        import mgegraph.functional as F
        from mgegraph import optim

        mg.nn.init.manual_seed(W.SEED)
        model = W._mlp_module() if kind == "mlp" else W._convnet()
        step = mg.compile_train_step(model, F.cross_entropy,
                                     optim.SGD(model.parameters(), lr=0.01), (x, y))
        return (lambda: step(x, y)), step.plan
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(W.SEED)
    return W._torch_train_step(torch, None, x, y, kind), None


def _neighbour(phase: str, step, done) -> None:
    """Rank 1's work in ``phase`` until the request ``done`` completes (rank 0 has timed)."""
    if phase == "idle":
        while not done.Test():
            time.sleep(1e-3)
    elif phase == "spin":
        value = 1.0
        while not done.Test():
            for _ in range(20000):
                value *= 1.0000001
    elif phase == "step":
        while not done.Test():
            step()
    elif phase == "gemm":
        a = np.ones((96, 96), np.float32)
        while not done.Test():
            for _ in range(50):
                a @ a
    else:
        buffer = np.ones(int(phase.split()[1]) * 2**20 // 4, np.float32)
        while not done.Test():
            buffer += 1.0


def child(impl: str, workload: str, rounds: int, steps: int, min_ms: float) -> None:
    sys.path.insert(0, str(HERE))
    from mpi4py import MPI

    import mgegraph as mg

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    step, plan = _step(impl, workload, rank)
    for _ in range(3):
        step()
    walls = {p: [] for p in PHASES}
    cpus = {p: [] for p in PHASES}
    instructions = {p: [] for p in PHASES}
    for _ in range(rounds):
        for phase in PHASES:
            comm.Barrier()
            if rank == 1:
                _neighbour(phase, step, comm.Ibarrier())
                continue
            with (mg.profile() if plan is not None else contextlib.nullcontext()) as prof:
                for _ in range(steps):
                    cpu, wall = time.thread_time(), time.perf_counter()
                    step()
                    walls[phase].append(time.perf_counter() - wall)
                    cpus[phase].append(time.thread_time() - cpu)
            if plan is not None:
                instructions[phase].append(prof.instruction_times(plan))
            comm.Ibarrier().Wait()
    if rank == 0:
        print("\n".join(table(impl, workload, walls, cpus, plan, instructions, min_ms)))


def table(impl, workload, walls, cpus, plan, instructions, min_ms: float) -> list[str]:
    med = statistics.median
    idle_wall, idle_cpu = med(walls["idle"]), med(cpus["idle"])
    lines = [f"{impl} {workload}: rank 0's step, medians (ms) per neighbour on rank 1",
             f"  {'neighbour':10} {'wall':>8} {'/ idle':>6} {'cpu':>8} {'/ idle':>6}"]
    for phase in PHASES:
        wall, cpu = med(walls[phase]), med(cpus[phase])
        lines.append(f"  {phase:10} {wall * 1e3:8.2f} {wall / idle_wall:6.2f} {cpu * 1e3:8.2f} "
                     f"{cpu / idle_cpu:6.2f}")
    if plan is None:
        return lines
    per = {p: np.median(np.array(instructions[p]), axis=0) * 1e3 for p in PHASES}
    lines.append(f"  instruction wall ms: {'#':>4} {'op':26} " +
                 " ".join(f"{p:>9}" for p in PHASES) + "  step / idle")
    for i, ins in enumerate(plan.instructions):
        if per["idle"][i] >= min_ms:
            lines.append(f"  {'':20} {i:4d} {ins.op:26} " +
                         " ".join(f"{per[p][i]:9.2f}" for p in PHASES) +
                         f"  {per['step'][i] / per['idle'][i]:11.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="convnet-train",
                        choices=["mlp-train", "convnet-train"])
    parser.add_argument("--impl", default="mgegraph", choices=["mgegraph", "torch"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="steps per phase and round")
    parser.add_argument("--min-ms", type=float, default=0.5,
                        help="the instructions listed: at least this long when idle")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.impl, args.workload, args.rounds, args.steps, args.min_ms)
        return
    sys.path.insert(0, str(ROOT))
    from mgegraph.distributed.launcher import mpiexec

    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    command = [mpiexec(), "-n", "2", sys.executable, __file__, "--child", args.workload,
               "--impl", args.impl, "--rounds", str(args.rounds), "--steps", str(args.steps),
               "--min-ms", str(args.min_ms)]
    sys.exit(subprocess.run(command, env=env, timeout=1800, check=False).returncode)


if __name__ == "__main__":
    main()
