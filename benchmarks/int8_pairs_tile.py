"""AVX2's two int8 tiles on ResNet-18's 3x3 convolutions with 7-bit weights: the vpmaddubsw
tile (the packed weights carry the proof, qgemm.h's qg_pairs_fit) against the widening vpmaddwd
tile (the same packed weights with the proof cleared), in one process, interleaved (A, B, A, B,
...), the medians of each and their ratio. Both give the same integers (checked here too).

    python benchmarks/int8_pairs_tile.py                 # 1 thread, 25 calls each
    python benchmarks/int8_pairs_tile.py --runs 5 --sets 8x64   # a smoke check

The layers: batch 1 at 224x224 (benchmarks/int8_kernels.py's) and batch 8 at 64x64 (the shape
benchmarks/resnet18_int8.py times), uint8 input, int8 weights in [-64, 63], uint8 + relu out.
Wall and this process's CPU time (at one thread the truer figure where other processes take
the cores). Ratios only: on a shared machine the absolute times are noise.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

# name: (batch, in channels, out channels, input size, stride)
SETS = {
    "1x224": {f"{c}->{o} {s} s{st}": (1, c, o, s, st) for c, o, s, st in
              [(64, 64, 56, 1), (64, 128, 56, 2), (128, 128, 28, 1), (128, 256, 28, 2),
               (256, 256, 14, 1), (256, 512, 14, 2), (512, 512, 7, 1)]},
    "8x64": {f"{c}->{o} {s} s{st}": (8, c, o, s, st) for c, o, s, st in
             [(64, 64, 16, 1), (64, 128, 16, 2), (128, 128, 8, 1), (128, 256, 8, 2),
              (256, 256, 4, 1), (256, 512, 4, 2), (512, 512, 2, 1)]},
}


def interleaved(a, b, runs: int, clock) -> tuple[float, float]:
    """medians of a's and b's times on ``clock``, called in turn"""
    a(), b()
    ta, tb = [], []
    for _ in range(runs):
        for fn, times in ((a, ta), (b, tb)):
            t0 = clock()
            fn()
            times.append(clock() - t0)
    return statistics.median(ta), statistics.median(tb)


def layer_calls(batch, c, oc, size, stride, threads):
    """(with the proof, without) calls of one convolution, and whether their results agree"""
    from mgegraph._kernels import qgemm  # lazy: the compiled kernels
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (batch, c, size, size)).astype(np.uint8)
    w = rng.integers(-64, 64, (oc, c, 3, 3)).astype(np.int8)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    zw = np.zeros(oc, np.int32)
    proven = qgemm.packed_weights(w, zw, bias, 1, False, 128)
    assert qgemm.packed_pairs_fit(proven)
    widening = qgemm.without_pairs_fit(proven)

    def call(packed):
        return lambda: qgemm.conv2d(x, 128, w, zw, bias, 0.01, (stride,) * 2, (1, 1), (1, 1),
                                    1, "uint8", 0, True, threads, "tiles", packed)
    same = np.array_equal(call(proven)(), call(widening)())
    return call(proven), call(widening), same


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from mgegraph._kernels import qgemm  # lazy: the compiled kernels
    if "avx2" not in qgemm.available_isas():
        print("this CPU has no AVX2: nothing to compare")
        return 0
    qgemm.set_int8_isa("avx2")
    print(f"{args.threads} thread(s), AVX2 variant, medians of {args.runs} interleaved calls")
    print(f"{'set':6} {'layer':16} {'pairs us':>9} {'widen us':>9} {'ratio':>6} "
          f"{'cpu ratio':>9}  same")
    ratios = {"wall": [], "cpu": []}
    for name in args.sets:
        for layer, shape in SETS[name].items():
            proven, widening, same = layer_calls(*shape, args.threads)
            a, b = interleaved(proven, widening, args.runs, time.perf_counter)
            ca, cb = interleaved(proven, widening, args.runs, time.process_time)
            ratios["wall"].append(a / b)
            ratios["cpu"].append(ca / cb)
            print(f"{name:6} {layer:16} {a * 1e6:9.0f} {b * 1e6:9.0f} {a / b:6.2f} "
                  f"{ca / cb:9.2f}  {same}")
    for clock, r in ratios.items():
        print(f"pairs / widening ({clock}): median {statistics.median(r):.2f}, "
              f"range {min(r):.2f}-{max(r):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
