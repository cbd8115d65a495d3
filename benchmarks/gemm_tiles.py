"""The Python executor's float32 "tiles" way against the BLAS on the GEMMs of the workloads, in
one process: each GEMM compiled twice as a one-instruction plan (its operands the plan's
weights, so a call copies nothing in), the tiles way and the BLAS way, run interleaved call by
call (A, B, A, B, ...) and compared by medians and by the fastest calls.

    python benchmarks/gemm_tiles.py                      # every shape, 1 and 2 threads
    python benchmarks/gemm_tiles.py --threads 2 --calls 200 --only mlp

On AVX2 the tiles are gemm_tile.h's panels (the C runtime's GEMM), on AVX-512 linalg.pyx's
gather tiles; lowering/matmul.py's tiles_rule is fitted on these figures. Each row prints the
median time per call of each way, then tiles / BLAS by the medians and by the fastest calls (on
a loaded machine the calls other processes held up least): the ratios, not the times, are what
hold. Shapes are (m, n, k) of C (m, n) over k, with the layouts the workloads store:
``B^T`` a linear's weight (n, k), ``A^T`` a weight's gradient g^T x.
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import numpy as np
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels.lowering import matmul as lowering

# (workload, m, n, k, transpose_a, transpose_b)
SHAPES = (
    # mlp-infer: x @ w over 784-1024-1024-10 at batches 2..128 (a single row is the GEMV's)
    *(("mlp-infer", b, n, k, False, False) for b in (2, 4, 8, 16, 32, 64, 128)
      for k, n in ((784, 1024), (1024, 1024), (1024, 10))),
    # mlp-infer's nn.Linear form and mlp-train's forward: weights stored (out, in)
    *(("mlp linear", b, n, k, False, True) for b in (4, 16, 128)
      for k, n in ((784, 1024), (1024, 1024), (1024, 10))),
    # mlp-train's backward at batch 128: weight gradients g^T x, input gradients g @ w
    ("mlp-train dw", 1024, 784, 128, True, False), ("mlp-train dw", 1024, 1024, 128, True, False),
    ("mlp-train dw", 10, 1024, 128, True, False),
    ("mlp-train dx", 128, 1024, 1024, False, False), ("mlp-train dx", 128, 1024, 10, False, False),
    # convnet-train's linear (batch 32, 128 -> 10) and its gradients; ResNet-18's fc at batch 8
    ("convnet fc", 32, 10, 128, False, True), ("convnet fc dw", 10, 128, 32, True, False),
    ("convnet fc dx", 32, 128, 10, False, False), ("resnet fc", 8, 1000, 512, False, True),
    ("resnet fc", 32, 1000, 512, False, True),
    # the U-Net's transposed convolution as one GEMM (benchmarks/unet_layers.py): the thin product
    ("unet convt", 288, 1024, 64, False, False),
)


@contextmanager
def forced_way(tiles: bool):
    """Plans compiled inside take (or leave) the tiles for every GEMM the tiles apply to."""
    rule = lowering.tiles_rule
    lowering.tiles_rule = lambda dtype, m, n, k, tb, ta=False: \
        tiles and lowering.tiles_apply(dtype, m, n, k)
    try:
        yield
    finally:
        lowering.tiles_rule = rule


def plan_of(m, n, k, ta, tb, tiles):
    """A one-GEMM plan on weights (nothing fed in), and whether it took the tiles."""
    rng = np.random.default_rng(0)
    g = mg.Graph()
    a = g.param("a", rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32))
    b = g.param("b", rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32))
    with forced_way(tiles):
        plan = mg.compile([F.matmul(a, b, transpose_a=ta, transpose_b=tb)], optimize=0,
                          tune="rules")
    (ins,) = [i for i in plan.instructions if i.op == "matmul"]
    return plan, bool(ins.ints[6])


def compare(m, n, k, ta, tb, calls) -> dict[str, tuple[float, float]] | None:
    """{statistic: (tiles, BLAS)} seconds per call, the ways interleaved call by call: the
    median, and the fastest call (the one other processes disturbed least: on a loaded machine
    the figure closest to each way's own speed); None where the tiles do not apply. The
    outputs agree within float32 rounding first."""
    (tiled, on_tiles), (blas, _) = plan_of(m, n, k, ta, tb, True), plan_of(m, n, k, ta, tb, False)
    if not on_tiles:
        return None
    want = blas.run({})[0]
    np.testing.assert_allclose(tiled.run({})[0], want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    times = ([], [])
    for _ in range(calls):
        for plan, out in zip((tiled, blas), times):
            start = time.perf_counter()
            plan.run({})
            out.append(time.perf_counter() - start)
    return {"median": tuple(statistics.median(t) for t in times),
            "fastest": tuple(min(t) for t in times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--calls", type=int, default=100, help="calls of each way")
    parser.add_argument("--only", default="", help="shapes whose workload contains this")
    args = parser.parse_args()
    print(f"tiles on {lowering.tiles_isa()}; the rule's choice in the last column")
    for threads in args.threads:
        with threadpool_limits(threads):
            for name, m, n, k, ta, tb in SHAPES:
                if args.only not in name:
                    continue
                got = compare(m, n, k, ta, tb, args.calls)
                label = f"{name:14} ({m}, {n}, {k}){' A^T' * ta}{' B^T' * tb}"
                if got is None:
                    print(f"{threads}t {label:40} the tiles do not apply")
                    continue
                rule = lowering.tiles_rule(np.float32, m, n, k, tb, ta)
                (tiles, blas), (tiles_min, blas_min) = got["median"], got["fastest"]
                print(f"{threads}t {label:40} tiles {tiles * 1e6:8.1f} us  blas "
                      f"{blas * 1e6:8.1f} us  ratio {tiles / blas:5.2f}  fastest "
                      f"{tiles_min / blas_min:5.2f}  {'tiles' if rule else 'blas'}", flush=True)


if __name__ == "__main__":
    main()
