"""The int8 GEMV of few columns against the tiles, in one process, interleaved: on the
layers of the int8 MLP (784-1024-1024-10), for 1 to 8 columns (a linear layer's rows), the
weights packed once (as the plan's prepack pass packs them), and on ResNet-18's last-stage
convolutions at 64x64 (at most 2x2 output cells, one image), the
epilogue requantising to uint8 with relu, on the variant in use (MGEGRAPH_INT8_ISA picks
another).

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
# name: (in channels, out channels, input size, kernel, stride, padding)
CONVS = {"512->512 3x3 2x2": (512, 512, 2, 3, 1, 1), "256->512 3x3 s2 4x4": (256, 512, 4, 3, 2, 1),
         "256->512 1x1 s2 4x4": (256, 512, 4, 1, 2, 0), "512->512 1x1 1x1": (512, 512, 1, 1, 1, 0)}


def _operands(k: int, m: int, columns: int, rng):
    x = rng.integers(0, 256, (columns, k)).astype(np.uint8)
    w = rng.integers(-128, 128, (m, k)).astype(np.int8)
    zw = np.zeros(m, np.int32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    mult = rng.uniform(1e-4, 3e-4, m).astype(np.float32)
    return x, w, zw, bias, mult, qgemm.packed_weights(w, zw, bias, 1, False, 0)


def _linear(k: int, m: int, columns: int, threads: int, seed: int = 0):
    x, w, zw, bias, mult, packed = _operands(k, m, columns, np.random.default_rng(seed))
    return lambda way: qgemm.linear(x, 0, w, zw, bias, mult, "uint8", 0, True, threads, way,
                                    packed)


def _conv(c: int, oc: int, size: int, kernel: int, stride: int, padding: int, threads: int):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, c, size, size)).astype(np.uint8)
    w = rng.integers(-128, 128, (oc, c, kernel, kernel)).astype(np.int8)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    mult = rng.uniform(1e-4, 3e-4, oc).astype(np.float32)
    packed = qgemm.packed_weights(w, 0, bias)
    return lambda way: qgemm.conv2d(x, 0, w, 0, bias, mult, (stride,) * 2, (padding,) * 2,
                                    (1, 1), 1, "uint8", 0, True, threads, way, packed)


def interleaved(run, calls: int):
    """(median GEMV seconds, median tiles seconds) of ``run(way)``, the two ways alternating
    call by call; the results are checked equal first."""
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
    print(f"{'layer':>20} {'cols':>4} {'threads':>7} {'gemv':>8} {'tiles':>8} {'ratio':>6}")
    for name, (k, m) in LAYERS.items():
        for columns in args.columns:
            for threads in args.threads:
                _row(name, columns, threads, interleaved(_linear(k, m, columns, threads),
                                                         args.calls))
    for name, geometry in CONVS.items():
        for threads in args.threads:
            _row(name, "", threads, interleaved(_conv(*geometry, threads), args.calls))


def _row(name, columns, threads, times) -> None:
    gemv, tiles = times
    print(f"{name:>20} {columns:>4} {threads:>7} {gemv * 1e3:8.4f} {tiles * 1e3:8.4f} "
          f"{gemv / tiles:6.2f}")


if __name__ == "__main__":
    main()
