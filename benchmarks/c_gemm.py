"""The C runtime's float32 GEMM against the BLAS NumPy calls, per shape, in one process.

    python benchmarks/c_gemm.py                              # mlp-infer's GEMMs, 1 and 2 threads
    python benchmarks/c_gemm.py --baseline /work/main        # and the C GEMM of another checkout
    python benchmarks/c_gemm.py --shapes 128x1024x1024 --threads 2 --runs 20

The C runtime's GEMM (``_kernels/gemm_tile.h`` through ``deploy/csrc/kernels/gemm_c.h``) is
built with the runtime's thread pool into a small shared library (``-O3 -ffp-contract=fast``, as
an export builds it) and called through ctypes: ``mgr_gemm`` packs op(B) on each call, as a
product of two activations does; "packed" runs on op(B) packed beforehand, as the exporter packs
a weight. It is timed against
``np.matmul`` (SciPy's or NumPy's OpenBLAS, its threads set by threadpoolctl), call by call
interleaved (A, B, C, A, B, C, ...), and prints medians with GFLOP/s: on a loaded machine the
ratios between rows, not the times, are what hold. Each shape is ``MxNxK`` (C = A B, A (M, K),
B (K, N)); ``t`` after K stores B transposed (``NxK``, a linear layer's weight). A single row
(``1xNxK``) runs the GEMV as a plan's matmul runs it, split by parts of k with their workspace:

    python benchmarks/c_gemm.py --baseline /work/main --shapes 1x1024x784 1x1024x1024 --threads 2
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from mgegraph._kernels import linalg  # gemv_parts: a single row's parts of k (gemv_row.h)
from mgegraph.deploy.export import gemm_panels  # the exporter's layout of a packed weight

HERE = Path(__file__).resolve().parent
# mlp-infer's layers (784-1024-1024-10) at batch 128, and the same as nn.Linear stores them
SHAPES = ("128x1024x784", "128x1024x1024", "128x10x1024", "128x1024x1024t", "32x1024x1024")

SHIM = r"""
#include "mgr_kernel.h"
#include GEMM_HEADER
void bench_threads(int t) { mgr_set_run_threads(t); }
int bench_gemm(int tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
               float* partials)
{
#ifdef MGR_GEMM_INLINE /* a GEMM whose mgr_gemm takes a single row's workspace */
    return mgr_gemm(0, tb, m, n, k, a, b, c, partials);
#else
    (void)partials;
    return mgr_gemm(0, tb, m, n, k, a, b, c);
#endif
}
#if PANELS
int64_t bench_panel(void) { return mg_gemm_panel(); }
void bench_packed(int64_t m, int64_t n, int64_t k, const float* a, const float* panels,
                  int64_t panel, float* c) {
#if PANELS == 2 /* _kernels/gemm_tile.h through gemm_c.h */
    mg_gemm_job g = {0, m, n, k, panel, a, panels, c, NULL, 0};
    mgr_gemm_packed_run(&g, 0, NULL);
#else /* csrc/kernels/gemm_fma.h */
    mgr_gemm_job g = {0, m, n, k, panel, a, panels, c, NULL, 0};
    mgr_gemm_on_panels(&g);
#endif
}
#endif
"""


def build(root: Path, folder: Path) -> ctypes.CDLL:
    """The GEMM of the mgegraph at ``root`` with its thread pool, as a shared library: the
    shared header ``_kernels/gemm_tile.h`` through ``csrc/kernels/gemm_c.h``, or in checkouts
    from before it ``csrc/kernels/gemm_fma.h`` (with or without its panels)."""
    csrc, shared = root / "mgegraph/deploy/csrc", root / "mgegraph/_kernels"
    if (csrc / "kernels/gemm_c.h").exists():
        header, panels = "gemm_c.h", 2
    else:
        header = "gemm_fma.h"
        panels = int("mgr_gemm_on_panels" in (csrc / "kernels/gemm_fma.h").read_text())
    (folder / "shim.c").write_text(SHIM.replace("mg_gemm_panel()", "mgr_gemm_panel()")
                                   if panels == 1 else SHIM)
    library = folder / "libgemm.so"
    subprocess.run(["cc", "-O3", "-std=gnu11", "-ffp-contract=fast", "-fPIC", "-shared",
                    "-pthread", f"-DPANELS={panels}", f'-DGEMM_HEADER="{header}"', f"-I{csrc}",
                    f"-I{csrc}/kernels", f"-I{shared}", "-o", str(library),
                    str(folder / "shim.c"), str(csrc / "mgr_threads.c")], check=True)
    lib = ctypes.CDLL(str(library))
    lib.bench_gemm.argtypes = [ctypes.c_int, *[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 4]
    if panels:
        lib.bench_panel.restype = ctypes.c_int64
        lib.bench_packed.argtypes = [*[ctypes.c_int64] * 3, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_void_p]
    lib.panels = panels
    return lib


def calls(shape: str, libs: dict, threads: int, blas: bool = True) -> dict:
    """{row: a call} for one shape, each writing its own C; checked against float64 first."""
    m, n, k = (int(s) for s in shape.rstrip("t").split("x"))
    tb = shape.endswith("t")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    opb = b.T if tb else b
    want = a.astype(np.float64) @ opb.astype(np.float64)
    rows = {"openblas": lambda c: np.matmul(a, opb, out=c)} if blas else {}
    # a single row's parts' sums (the plan's gemv_split workspace), as matmul's kernel gives it
    partials = np.empty(linalg.gemv_parts(k) * n if m == 1 and not tb else 1, np.float32)
    for name, lib in libs.items():
        rows[f"C {name}"] = lambda c, lib=lib: lib.bench_gemm(
            int(tb), m, n, k, a.ctypes.data, b.ctypes.data, c.ctypes.data, partials.ctypes.data)
        if lib.panels:
            panels = gemm_panels(np.ascontiguousarray(opb), lib.bench_panel())
            rows[f"C {name} packed"] = lambda c, lib=lib, p=panels: lib.bench_packed(
                m, n, k, a.ctypes.data, p.ctypes.data, p.shape[2], c.ctypes.data)
    outs = {}
    for row, call in rows.items():
        for lib in libs.values():
            lib.bench_threads(threads)
        outs[row] = np.empty((m, n), np.float32)
        call(outs[row])
        np.testing.assert_allclose(outs[row], want, rtol=1e-3, atol=1e-3 * np.sqrt(k))
    return {row: (lambda call=call, c=outs[row]: call(c)) for row, call in rows.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--baseline", type=Path, help="a checkout whose C GEMM joins the rows")
    parser.add_argument("--no-blas", action="store_true", help="leave the BLAS's row out (its "
                        "idle threads spin beside the C pool's): ratios to the first row")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits  # lazy: optional dependency (the BLAS's threads)

    with tempfile.TemporaryDirectory() as tmp:
        libs = {"this": build(HERE.parent, Path(tmp))}
        if args.baseline:
            (Path(tmp) / "base").mkdir()
            libs["baseline"] = build(args.baseline, Path(tmp) / "base")
        for threads in args.threads:
            with threadpool_limits(threads):
                for lib in libs.values():
                    lib.bench_threads(threads)
                for shape in args.shapes:
                    m, n, k = (int(s) for s in shape.rstrip("t").split("x"))
                    rows = calls(shape, libs, threads, blas=not args.no_blas)
                    times = {row: [] for row in rows}
                    for _ in range(args.runs):
                        for row, call in rows.items():
                            start = time.perf_counter()
                            call()
                            times[row].append(time.perf_counter() - start)
                    first = next(iter(times))  # the BLAS, or with --no-blas the first C row
                    base = statistics.median(times[first])
                    for row, ts in times.items():
                        t = statistics.median(ts)
                        print(f"{shape:>15} {threads}t {row:>18}: {t * 1e3:8.3f} ms "
                              f"{2 * m * n * k / t / 1e9:6.1f} GFLOP/s  {t / base:5.2f}x {first}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
