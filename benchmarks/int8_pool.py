"""int8/uint8 pooling (_kernels/pool_int.pxi, pool_int.h): each variant of the kernel against the
per-window loop ("scalar", the kernel before the row passes), on the poolings of ResNet-18's int8
plan and a few common others.

    python benchmarks/int8_pool.py                       # 1 thread, every variant
    python benchmarks/int8_pool.py --threads 2 --runs 30

Each (variant, threads) runs in a fresh process (OMP_NUM_THREADS and set_int8_pool_isa set
before any plan is built): per workload, the median wall and CPU times of ``--runs`` runs of a
one-instruction plan (optimize=0), in microseconds. The parent prints one table with each
variant's CPU time as a ratio of the scalar loop's (on a shared machine the wall times mislead:
a descheduled process keeps its wall clock running).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name: (dtype, shape, pooling)
WORKLOADS = {
    "resnet stem max 3x3/2 p1, 1x64x112x112 s8": ("int8", (1, 64, 112, 112), "max3s2"),
    "resnet 8x64 max 3x3/2 p1, 8x64x32x32 s8": ("int8", (8, 64, 32, 32), "max3s2"),
    "max 2x2/2, 8x64x56x56 u8": ("uint8", (8, 64, 56, 56), "max2"),
    "avg 3x3/1 p1, 8x64x56x56 s8": ("int8", (8, 64, 56, 56), "avg3s1"),
    "avg 2x2/2, 8x64x56x56 u8": ("uint8", (8, 64, 56, 56), "avg2"),
    "global avg, 8x512x7x7 s8": ("int8", (8, 512, 7, 7), "global"),
}


def _pool(x, kind: str):
    import mgegraph.functional as F  # lazy: the parent process only starts children
    return {"max3s2": lambda: F.max_pool2d(x, 3, 2, 1), "max2": lambda: F.max_pool2d(x, 2),
            "avg3s1": lambda: F.avg_pool2d(x, 3, 1, 1, count_include_pad=True),
            "avg2": lambda: F.avg_pool2d(x, 2),
            "global": lambda: F.global_avg_pool2d(x)}[kind]()


def _medians(fn, runs: int) -> tuple[float, float]:
    fn()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall) * 1e6, statistics.median(cpu) * 1e6


def child(isa: str, runs: int) -> None:
    import numpy as np

    import mgegraph as mg  # lazy: the parent process only starts children
    from mgegraph._kernels import pool  # lazy: as above
    from mgegraph.ir.quant import per_tensor  # lazy: as above
    pool.set_int8_pool_isa(isa)
    rows = {}
    for name, (dtype, shape, kind) in WORKLOADS.items():
        info = np.iinfo(dtype)
        q = np.random.default_rng(0).integers(info.min, info.max + 1, shape).astype(dtype)
        x = mg.Graph().input("q", shape, dtype, per_tensor(0.05, 3))
        plan = mg.compile([_pool(x, kind)], optimize=0)
        rows[name] = _medians(lambda plan=plan, q=q: plan.run({"q": q}), runs)
    print(json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.runs)
        return
    from mgegraph._kernels import pool  # lazy: the parent process only starts children
    for threads in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        results = {}
        for isa in pool.int8_pool_isas():
            out = subprocess.run([sys.executable, __file__, "--child", isa, "--runs",
                                  str(args.runs)], env=env, check=True, capture_output=True,
                                 text=True).stdout
            results[isa] = json.loads(out)
        print(f"\n{threads} thread(s): median wall (CPU) microseconds; CPU time / scalar's")
        print("workload".ljust(44) + "".join(isa.rjust(22) for isa in results))
        for name in WORKLOADS:
            base = results["scalar"][name][1]
            cells = [f"{r[name][0]:.0f} ({r[name][1]:.0f}) {r[name][1] / base:.2f}x"
                     for r in results.values()]
            print(name.ljust(44) + "".join(c.rjust(22) for c in cells))


if __name__ == "__main__":
    main()
