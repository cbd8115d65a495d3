"""MobileNet-v2's block layer by layer at one and two threads, on the kernels' own code split as
the kernels split it (``mobilenet_threads.c``): where two threads lose time.

    python benchmarks/mobilenet_threads.py                   # s1 56, s2 56, s1 28
    python benchmarks/mobilenet_threads.py --blocks "s1 28" --rounds 20 --runs 50

For each layer: the median wall time of a call on one thread and on two, and on two each
thread's CPU time in its part and how long after the caller the worker began its part. A split
that does more work on two threads shows in the CPU times (their sum over one thread's); a
worker that starts late or loses its core to another process shows as wall time beyond the
slower thread's CPU time. One and two threads alternate in rounds, so a burst of load on a
shared machine hits both. The C harness leaves out what a plan adds (the executor, Python);
``fresh_process.py mobilenet`` times whole plans.
"""
from __future__ import annotations

import argparse
import ctypes
import shutil
import statistics
import subprocess
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "mgegraph" / "_kernels"
BLOCKS = {"s1 56": (56, 1), "s2 56": (56, 2), "s1 28": (28, 1)}  # vision_workloads.BLOCKS'
LAYERS, FIGURES = ("expand", "depthwise", "project", "add"), 4


def _library():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        raise SystemExit(f"no C compiler ({cc}) to build mobilenet_threads.c")
    lib = Path(tempfile.mkdtemp(prefix="mgegraph_mbv_")) / "mobilenet_threads.so"
    subprocess.run([cc, "-O3", "-fno-math-errno", "-fno-trapping-math", "-fopenmp", "-shared",
                    "-fPIC", f"-I{KERNELS}", str(HERE / "mobilenet_threads.c"), "-o", str(lib)],
                   check=True)
    so = ctypes.CDLL(str(lib))
    so.block_setup.argtypes = [ctypes.c_int, ctypes.c_int]
    so.block_run.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    return so


def measure(so, size: int, stride: int, rounds: int, runs: int) -> dict:
    """{threads: per layer, the medians of (wall, CPU of thread 0, of thread 1, worker start)}
    in microseconds, over rounds x runs calls alternating one and two threads by round."""
    if so.block_setup(size, stride) != 0:
        raise SystemExit(f"mobilenet_threads.c: no block of size {size}, stride {stride}")
    figures = (ctypes.c_double * (len(LAYERS) * FIGURES))()
    calls = {1: [], 2: []}
    for _ in range(3):
        for threads in calls:
            so.block_run(threads, figures)
    for _ in range(rounds):
        for threads, kept in calls.items():
            for _ in range(runs):
                so.block_run(threads, figures)
                kept.append(tuple(figures))
    return {threads: [[statistics.median(c[layer * FIGURES + k] for c in kept)
                       for k in range(FIGURES)] for layer in range(len(LAYERS))]
            for threads, kept in calls.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", nargs="+", default=list(BLOCKS), choices=list(BLOCKS))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    so = _library()
    print(f"{'block':8} {'layer':10} {'1t wall':>8} {'2t wall':>8} {'2t/1t':>6} "
          f"{'cpu t0':>7} {'cpu t1':>7} {'cpu sum/1t':>10} {'start':>6}   (us, medians)")
    for block in args.blocks:
        times = measure(so, *BLOCKS[block], args.rounds, args.runs)
        for layer, name in enumerate(LAYERS):
            one, two = times[1][layer], times[2][layer]
            ratio = two[0] / one[0] if one[0] else float("nan")
            spread = (two[1] + two[2]) / one[1] if one[1] else float("nan")
            print(f"{block:8} {name:10} {one[0]:8.0f} {two[0]:8.0f} {ratio:6.2f} {two[1]:7.0f} "
                  f"{two[2]:7.0f} {spread:10.2f} {two[3]:6.1f}")


if __name__ == "__main__":
    main()
