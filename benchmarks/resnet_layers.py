"""ResNet-18's instructions one by one: the time of each under the rules' choice of kernel way
and under the ways measured on this machine (``compile(tune="measure")``), as GFLOP/s and as a
share of the machine's float32 peak (a register-only FMA loop, ``peak_fma.c``).

    python benchmarks/resnet_layers.py                    # 1x3x224x224 at 1 and 2 threads
    python benchmarks/resnet_layers.py --shape 8x64 --threads 2 --rounds 5

Each thread count runs in a fresh process (OMP_NUM_THREADS). In it, the model (the ResNet-18 of
``test_deploy.model``, eval form, compile's defaults) is compiled twice, with ``tune="rules"``
and ``tune="measure"`` (the measuring time is printed; its store is a temporary file), and both
plans run under the profiler in alternating rounds, so a burst of load on a shared machine hits
both; each instruction's time is the median over the rounds of its mean per run. FLOPs are the
op registry's (a Winograd or packed convolution is credited with the direct convolution's), so
a share of the peak above 100% means a way that does fewer multiply-adds.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def peak_gflops(threads: int) -> float:
    """The float32 FMA peak of ``threads`` threads, best of 5 loops of about 0.2 s."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        raise SystemExit(f"no C compiler ({cc}) to build peak_fma.c")
    lib = Path(tempfile.mkdtemp(prefix="mgegraph_peak_")) / "peak_fma.so"
    subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                    str(HERE / "peak_fma.c"), "-o", str(lib)], check=True)
    fn = ctypes.CDLL(str(lib)).peak_fma
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_long, ctypes.c_int]
    iterations, best = 4_000_000, 0.0
    for _ in range(5):
        began = time.perf_counter()
        fn(iterations, threads)
        took = time.perf_counter() - began
        best = max(best, iterations * 12 * 16 * 2 * threads / took / 1e9)
    return best


def child(shape: str, threads: int, rounds: int, runs: int) -> None:
    os.environ["MGEGRAPH_TUNE_CACHE"] = str(Path(tempfile.mkdtemp()) / "choices.json")
    sys.path.insert(0, str(HERE))
    import numpy as np
    import test_deploy

    import mgegraph as mg
    batch, size = (1, 224) if shape == "1x224" else (8, 64)
    x = np.random.default_rng(1).standard_normal((batch, 3, size, size), dtype=np.float32)
    model = test_deploy.model()
    began = time.perf_counter()
    rules = mg.compile_module(model, (x,), tune="rules")
    compile_seconds = time.perf_counter() - began
    began = time.perf_counter()
    tuned = mg.compile_module(model, (x,), tune="measure")
    tune_seconds = time.perf_counter() - began
    np.testing.assert_allclose(tuned(x), rules(x), rtol=1e-3, atol=1e-3)
    times = {"rules": [], "measured": []}
    for _ in range(rounds):
        for name, fn in (("rules", rules), ("measured", tuned)):
            for _ in range(3):
                fn(x)
            with mg.profile() as prof:
                for _ in range(runs):
                    fn(x)
            times[name].append({r.index: (r.seconds / r.calls, r) for r in prof.instructions()
                                if r.calls})
    peak = peak_gflops(threads)
    print(f"ResNet-18 {shape}, {threads} thread(s): peak {peak:.0f} GFLOP/s; compile "
          f"{compile_seconds:.2f} s with the rules, {tune_seconds:.2f} s measuring")
    _table(rules.plan, tuned.plan, times, peak)


def _table(rules_plan, tuned_plan, times, peak) -> None:
    """A row per instruction of the measured plan beside the rules' instruction of the same
    input and output types (the schedules may order them differently)."""
    print(f"{'#':>3} {'op':14} {'rules: way':30} {'us':>8} {'measured: way':30} {'us':>8} "
          f"{'ratio':>6} {'GFLOP/s':>8} {'peak':>5}  input")
    rules = {}
    for row in _rows(rules_plan, times["rules"]):
        rules.setdefault(row["key"], []).append(row)
    total_rules = total_tuned = 0.0
    for row in _rows(tuned_plan, times["measured"]):
        twin = rules[row["key"]].pop(0)
        total_rules, total_tuned = total_rules + twin["us"], total_tuned + row["us"]
        gflops = row["flops"] / row["us"] / 1e3
        print(f"{row['index']:>3} {row['op']:14} {twin['way']:30} {twin['us']:>8.1f} "
              f"{row['way']:30} {row['us']:>8.1f} {row['us'] / twin['us']:>6.2f} "
              f"{gflops:>8.1f} {gflops / peak:>5.0%}  {row['key'][0]}")
    print(f"total: rules {total_rules / 1e3:.2f} ms, measured {total_tuned / 1e3:.2f} ms "
          f"({total_tuned / total_rules:.2f})")


def _rows(plan, rounds):
    """Per instruction: its index, op, way, median microseconds, FLOPs per call and its key
    (the types of its first input and its output)."""
    for i, ins in enumerate(plan.instructions):
        seconds = [r[i][0] for r in rounds if i in r]
        if not seconds:
            continue
        row = rounds[0][i][1]
        yield {"index": i, "op": ins.op, "way": ins.choice.path if ins.choice else ins.kernel,
               "us": statistics.median(seconds) * 1e6,
               "flops": (row.flops or 0) / row.calls,
               "key": (str(plan.slots[ins.inputs[0]].type) if ins.inputs else "",
                       str(plan.slots[ins.outputs[0]].type))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("1x224", "8x64"), default="1x224")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10, help="profiled runs per round")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.shape, args.child, args.rounds, args.runs)
        return 0
    for threads in args.threads:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run([sys.executable, __file__, "--shape", args.shape, "--rounds",
                        str(args.rounds), "--runs", str(args.runs), "--child", str(threads)],
                       env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
