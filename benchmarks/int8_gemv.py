"""The int8 GEMV of few columns against the tiles, in one process, interleaved: on the
layers of the int8 MLP (784-1024-1024-10), for 1 to 8 columns (a linear layer's rows), the
weights packed once (as the plan's prepack pass packs them) and the epilogue requantising to
uint8 with relu, on the variant in use (MGEGRAPH_INT8_ISA picks another).

    python benchmarks/int8_gemv.py                       # 1 and 2 threads, 25 calls each way
    python benchmarks/int8_gemv.py --threads 1 --calls 40 --columns 1 4

Per layer, columns and threads: the medians of the GEMV's and the tiles' times (the two
alternate call by call, A B A B ..., so a loaded machine slows both alike) and their ratio,
GEMV / tiles. On a shared machine only the ratio means anything.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from mgegraph._kernels import qgemm

LAYERS = {"784->1024": (784, 1024), "1024->1024": (1024, 1024), "1024->10": (1024, 10)}


def _operands(k: int, m: int, columns: int, rng):
    x = rng.integers(0, 256, (columns, k)).astype(np.uint8)
    w = rng.integers(-128, 128, (m, k)).astype(np.int8)
    zw = np.zeros(m, np.int32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    mult = rng.uniform(1e-4, 3e-4, m).astype(np.float32)
    return x, w, zw, bias, mult, qgemm.packed_weights(w, zw, bias, 1, False, 0)


def interleaved(k: int, m: int, columns: int, threads: int, calls: int, seed: int = 0):
    """(median GEMV seconds, median tiles seconds), the two ways alternating call by call; the
    results are checked equal first."""
    x, w, zw, bias, mult, packed = _operands(k, m, columns, np.random.default_rng(seed))

    def run(way):
        return qgemm.linear(x, 0, w, zw, bias, mult, "uint8", 0, True, threads, way, packed)

    np.testing.assert_array_equal(run("gemv"), run("tiles"))
    times = {"gemv": [], "tiles": []}
    for _ in range(calls):
        for way in times:
            t0 = time.perf_counter()
            run(way)
            times[way].append(time.perf_counter() - t0)
    return statistics.median(times["gemv"]), statistics.median(times["tiles"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--columns", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8])
    parser.add_argument("--calls", type=int, default=25)
    args = parser.parse_args(argv)
    print(f"variant {qgemm.int8_isa()}; GEMV up to {qgemm.gemv_columns(qgemm.int8_isa())} "
          "columns by the rule; medians of interleaved calls, ms")
    print(f"{'layer':>11} {'cols':>4} {'threads':>7} {'gemv':>8} {'tiles':>8} {'ratio':>6}")
    for name, (k, m) in LAYERS.items():
        for columns in args.columns:
            for threads in args.threads:
                gemv, tiles = interleaved(k, m, columns, threads, args.calls)
                print(f"{name:>11} {columns:>4} {threads:>7} {gemv * 1e3:8.4f} "
                      f"{tiles * 1e3:8.4f} {gemv / tiles:6.2f}")


if __name__ == "__main__":
    main()
