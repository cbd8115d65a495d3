"""One depthwise 3x3 convolution alone (MobileNet-v2's middle layer), in GFLOP/s.

    python benchmarks/depthwise_layer.py                      # 3 fresh processes per row
    python benchmarks/depthwise_layer.py --threads 1 2 --rounds 3

Each row is N=1, C=144 channels, 3x3, padding 1, bias and no activation, at stride 1 and 2, timed
in a fresh process per (row, threads, round) with its median over ``--runs`` calls of the plan
(``freeze=True``, the rules' kernel way); the table gives the median of the rounds' medians. The
FLOPs are the layer's multiply-adds, two per tap and output cell (the conv2d op's own count). A
depthwise layer reads and writes each cell about once, so the bytes moved (input, output: 4 bytes
a cell) bound it rather than arithmetic: the last column is those bytes over the median time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

# (channels, size, stride)
LAYERS = {"s1 56": (144, 56, 1), "s2 56": (144, 56, 2), "s1 28": (144, 28, 1),
          "s1 14": (384, 14, 1)}


def _plan(channels: int, size: int, stride: int):
    import mgegraph as mg
    import mgegraph.functional as F
    rng = np.random.default_rng(0)
    g = mg.Graph()
    w = g.param("w", rng.standard_normal((channels, 1, 3, 3), dtype=np.float32))
    b = g.param("b", rng.standard_normal(channels, dtype=np.float32))
    y = F.conv2d(g.input("x", (1, channels, size, size)), w, b, stride=stride, padding=1,
                 groups=channels)
    x = rng.standard_normal((1, channels, size, size), dtype=np.float32)
    plan = mg.compile([y], freeze=True, tune="rules")
    return plan, x, tuple(y.shape)


def measure(layer: str, runs: int) -> dict:
    """One row in this process: median seconds, GFLOP/s and GB/s."""
    channels, size, stride = LAYERS[layer]
    plan, x, out = _plan(channels, size, stride)
    for _ in range(5):
        plan.run({"x": x})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        plan.run({"x": x})
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = 2 * 9 * int(np.prod(out))
    moved = 4 * (x.size + int(np.prod(out)))
    return {"seconds": seconds, "gflops": flops / seconds / 1e9, "gbps": moved / seconds / 1e9}


def child(layer: str, threads: int, runs: int) -> dict:
    env = {"OMP_NUM_THREADS": str(threads), "MGEGRAPH_BENCH_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", layer, str(runs)],
                          env={**__import__("os").environ, **env}, capture_output=True,
                          text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="*", metavar="LAYER", help=f"some of {list(LAYERS)}")
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200, help="timed calls per process")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]))))
        return 0
    chosen = args.layers or list(LAYERS)
    got: dict = {}
    for _ in range(args.rounds):  # rounds interleaved: a burst of load hits every row
        for layer in chosen:
            for t in args.threads:
                got.setdefault((layer, t), []).append(child(layer, t, args.runs))
    print(f"{'layer':8} {'threads':>7} {'median us':>10} {'GFLOP/s':>8} {'GB/s':>6}  "
          "each round's GFLOP/s")
    for (layer, t), rows in got.items():
        us = statistics.median(r["seconds"] for r in rows) * 1e6
        gflops = statistics.median(r["gflops"] for r in rows)
        gbps = statistics.median(r["gbps"] for r in rows)
        each = " ".join(f"{r['gflops']:.2f}" for r in rows)
        print(f"{layer:8} {t:>7} {us:>10.1f} {gflops:>8.2f} {gbps:>6.1f}  {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
