"""The int8 convolution kernels (_kernels/qgemm.pyx) against the machine's AMX and VNNI peaks and
against mgegraph's float32 convolution, on ResNet-18's 3x3 convolutions (batch 1, 224x224 input).

    python benchmarks/int8_kernels.py                    # 1 and 2 threads, each in its process
    python benchmarks/int8_kernels.py --threads 1 --runs 20
    MGEGRAPH_INT8_ISA=avx512vnni python benchmarks/int8_kernels.py   # the VNNI variant

The peaks are register-only loops on one thread, int8 ops per CPU second, counting a
multiply-add as 2 ops: vpdpbusd (16 independent accumulators, 64 multiply-adds each) and, where
the tiles are granted, TDPBSUD (4 independent tiles, 16 x 16 x 64 each, on operands of ones). The
share of peak is against the peak of the variant in use (AMX's for "amx"). Each
layer is a GEMM of M output channels, K = 9 input channels and N output cells; its ops are
2 M K N. Per layer and thread count (OMP_NUM_THREADS, a fresh process each): the medians over
``--runs`` runs of the int8 plan (one quantized_conv2d of a constant weight: the prepack pass
packs it once, so the plan is one quantized_conv2d_packed on the widest variant) in wall and in
CPU time (the process's: on a shared machine the wall times mislead, and at one thread the
CPU time is the truer figure), its rate (wall) as a share of the threads' peak (the one-thread
peak times the threads), what packing the weights would add to each run (its time as a share of
the run's), and the same two medians of the float32 ``conv2d`` plan of the same shape
(``freeze=True``) with the ratios int8 / float32.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# name: (in channels, out channels, input size, stride)
LAYERS = {"64->64 56 s1": (64, 64, 56, 1), "64->128 56 s2": (64, 128, 56, 2),
          "128->128 28 s1": (128, 128, 28, 1), "128->256 28 s2": (128, 256, 28, 2),
          "256->256 14 s1": (256, 256, 14, 1), "256->512 14 s2": (256, 512, 14, 2),
          "512->512 7 s1": (512, 512, 7, 1)}
PEAK_ITERATIONS = 20_000_000


def _median_seconds(fn, runs: int, clock=time.perf_counter) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def _peak(loop, iterations: int, ops_per_iteration: int) -> float:
    if loop(10) == -1:
        return 0.0
    seconds = min(_median_seconds(lambda: loop(iterations), 3, time.process_time)
                  for _ in range(3))
    return iterations * ops_per_iteration / seconds


def peak_ops() -> dict:
    """int8 ops per second of one thread's register-only loops, per variant (0: not run here)."""
    from mgegraph._kernels import qgemm  # lazy: the parent process only starts children
    return {"avx512vnni": _peak(qgemm.vnni_peak_loop, PEAK_ITERATIONS, 16 * 64 * 2),
            "amx": _peak(qgemm.amx_peak_loop, PEAK_ITERATIONS // 16, 4 * 16 * 16 * 64 * 2)}


def _float_plan(c: int, oc: int, size: int, stride: int, x: np.ndarray):
    import mgegraph as mg  # lazy: the parent process only starts children
    import mgegraph.functional as F  # lazy: as above
    rng = np.random.default_rng(1)
    g = mg.Graph()
    w = g.param("w", rng.standard_normal((oc, c, 3, 3), dtype=np.float32))
    y = F.conv2d(g.input("x", x.shape), w, stride=stride, padding=1)
    plan = mg.compile([y], freeze=True, tune="rules")
    return lambda: plan.run({"x": x})


def _int8_plan(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int):
    import mgegraph as mg  # lazy: the parent process only starts children
    from mgegraph.ir.quant import per_tensor  # lazy: as above
    from mgegraph.ops.quantized import quantized_conv2d  # lazy: as above
    g = mg.Graph()
    y = quantized_conv2d(g.input("x", x.shape, "uint8", quant=per_tensor(0.02, 128)),
                         g.const(w, quant=per_tensor(0.01)), g.const(bias), stride=stride,
                         padding=1, out_dtype="uint8", out_scale=0.5, relu=True)
    plan = mg.compile([y], tune="rules")
    assert [i.op for i in plan.instructions] == ["quantized_conv2d_packed"]
    return lambda: plan.run({"x": x})


def measure(layer: str, runs: int) -> dict:
    from mgegraph._kernels import qgemm  # lazy: as above
    c, oc, size, stride = LAYERS[layer]
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, c, size, size)).astype(np.uint8)
    w = rng.integers(-128, 128, (oc, c, 3, 3)).astype(np.int8)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    out = (size + 2 - 3) // stride + 1
    int8 = _int8_plan(x, w, bias, stride)
    floats = _float_plan(c, oc, size, stride, rng.standard_normal(x.shape, dtype=np.float32))
    return {"ops": 2.0 * oc * c * 9 * out * out, "int8": _median_seconds(int8, runs),
            "int8 cpu": _median_seconds(int8, runs, time.process_time),
            "pack": _median_seconds(lambda: qgemm.packed_weights(w, 0, bias), runs),
            "float32": _median_seconds(floats, runs),
            "float32 cpu": _median_seconds(floats, runs, time.process_time)}


def child(threads: int, runs: int) -> None:
    from mgegraph._kernels import qgemm  # lazy: as above
    peaks = peak_ops()
    peak = peaks.get(qgemm.int8_isa(), 0.0)
    print(f"\n{threads} thread(s), variant {qgemm.int8_isa()}; one-thread peaks: VNNI "
          f"{peaks['avx512vnni'] / 1e9:.0f}, AMX {peaks['amx'] / 1e9:.0f} Gop/s (int8 ops, a "
          f"multiply-add = 2; 0: not on this machine)")
    print(f"{'layer':16} {'int8 us':>8} {'cpu us':>8} {'Gop/s':>6} {'% peak':>7} {'pack %':>7} "
          f"{'f32 us':>8} {'cpu us':>8} {'int8/f32':>8} {'(cpu)':>6}")
    for layer in LAYERS:
        r = measure(layer, runs)
        rate = r["ops"] / r["int8"]
        share = f"{100 * rate / (peak * threads):6.1f}%" if peak else "     -"
        print(f"{layer:16} {r['int8'] * 1e6:8.0f} {r['int8 cpu'] * 1e6:8.0f} {rate / 1e9:6.0f} "
              f"{share:>7} {100 * r['pack'] / r['int8']:6.1f}% {r['float32'] * 1e6:8.0f} "
              f"{r['float32 cpu'] * 1e6:8.0f} {r['int8'] / r['float32']:8.2f} "
              f"{r['int8 cpu'] / r['float32 cpu']:6.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.runs)
        return 0
    for threads in args.threads:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run([sys.executable, __file__, "--runs", str(args.runs), "--child",
                        str(threads)], env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
