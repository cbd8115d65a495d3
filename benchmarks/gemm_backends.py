"""GEMM backends on the `mlp-*` shapes of shared/BENCHMARKS.md, each as zero-arg callables.

Every callable computes one float32 row-major C = op(A) @ op(B) into a preallocated buffer,
with op(A) = A^T (A stored K x M) for the weight grads and op(B) = B^T (B stored N x K) for
the input grads, as the training step stores them; nothing is copied or transposed per call.

Backends:
  "scipy openblas": scipy.linalg.blas.sgemm, overwrite_c=True, on transposed views: the library
                    behind scipy.linalg.cython_blas, the one mgegraph's kernels call
                    (row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T).
  "numpy openblas": np.matmul(a, b, out=c), NumPy's own bundled OpenBLAS.
  "mkl":            cblas_sgemm from libmkl_rt of the PyPI `mkl` wheel through ctypes (not a
                    project dependency; left out when it is not installed).

`python benchmarks/gemm_backends.py RESULT.json` sums the medians of a
`--benchmark-json` run per workload (forward batch 1, forward batch 128, training step).
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
# Imported here, not lazily: benchmarks/conftest.py's threadpool_limits (entered at session start)
# only reaches BLAS libraries already loaded, and this loads SciPy's OpenBLAS at collection.
from scipy.linalg import blas as scipy_blas

from mgegraph._kernels import blas_select

SEED = 0
THREADS = int(os.environ.get("MGEGRAPH_BENCH_THREADS", "2"))  # as benchmarks/conftest.py
BACKENDS = ["scipy openblas", "numpy openblas", "mkl"]  # the first is the ratio baseline


@dataclass(frozen=True)
class Gemm:
    """C (M x N) = op(A) (M x K) @ op(B) (K x N), row-major."""
    name: str
    m: int
    k: int
    n: int
    trans_a: bool = False  # A stored K x M, used as A^T
    trans_b: bool = False  # B stored N x K, used as B^T

    @property
    def label(self) -> str:
        ta, tb = ("A^T" if self.trans_a else "A"), ("B^T" if self.trans_b else "B")
        return f"{self.name} {ta}@{tb} (M,K,N)=({self.m},{self.k},{self.n})"


MLP_LAYERS = (784, 1024, 1024, 10)
_PAIRS = list(zip(MLP_LAYERS[:-1], MLP_LAYERS[1:]))  # (fan in, fan out) per layer


def forward(batch: int) -> list[Gemm]:
    return [Gemm(f"fwd b{batch} L{i}", batch, fi, fo) for i, (fi, fo) in enumerate(_PAIRS)]


def weight_grads(batch: int = 128) -> list[Gemm]:
    """dW_i = H_i^T @ G_i: H_i stored batch x fan_in."""
    return [Gemm(f"dW b{batch} L{i}", fi, batch, fo, trans_a=True) for i, (fi, fo) in enumerate(_PAIRS)]


def input_grads(batch: int = 128) -> list[Gemm]:
    """dH_i = G_i @ W_i^T: W_i stored fan_in x fan_out; none for layer 0 (the input x)."""
    return [Gemm(f"dX b{batch} L{i}", batch, fo, fi, trans_b=True)
            for i, (fi, fo) in enumerate(_PAIRS) if i > 0]


WORKLOADS = {
    "mlp-infer b1 (3 fwd GEMMs)": forward(1),
    "mlp-infer b128 (3 fwd GEMMs)": forward(128),
    "mlp-train b128 (3 fwd + 3 dW + 2 dX GEMMs)": forward(128) + weight_grads() + input_grads(),
}
SHAPES = list(dict.fromkeys(g for gs in WORKLOADS.values() for g in gs))


def operands(g: Gemm):
    rng = np.random.default_rng(SEED)
    a = rng.standard_normal((g.k, g.m) if g.trans_a else (g.m, g.k), dtype=np.float32)
    b = rng.standard_normal((g.n, g.k) if g.trans_b else (g.k, g.n), dtype=np.float32)
    b /= np.float32(np.sqrt(g.k))
    return a, b, np.empty((g.m, g.n), np.float32)


def _op(g: Gemm, a, b):
    return (a.T if g.trans_a else a), (b.T if g.trans_b else b)


# -- backends: each returns (callable, c) -------------------------------------------------------
def scipy_openblas(g: Gemm):
    blas = scipy_blas
    a, b, c = operands(g)
    # a.T / b.T are Fortran-ordered, so f2py passes them through; trans flags swap roles.
    fa, fb, fc = b.T, a.T, c.T
    ta, tb = int(g.trans_b), int(g.trans_a)

    def run():
        return blas.sgemm(1.0, fa, fb, beta=0.0, c=fc, trans_a=ta, trans_b=tb, overwrite_c=True)

    return run, c, (a, b)


def numpy_openblas(g: Gemm):
    a, b, c = operands(g)
    opa, opb = _op(g, a, b)
    matmul = np.matmul

    def run():
        return matmul(opa, opb, out=c)

    return run, c, (a, b)


def mkl_library_path() -> Path | None:
    path = blas_select.mkl_path()  # the locator mgegraph's own BLAS choice uses
    return None if path is None else Path(path)


_MKL = None


def mkl_library():
    """libmkl_rt (LP64) with its threads set to THREADS, or None when mkl is not installed."""
    global _MKL
    if _MKL is None:
        path = mkl_library_path()
        if path is None:
            return None
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib.MKL_Set_Num_Threads(ctypes.c_int(THREADS))
        lib.MKL_Get_Max_Threads.restype = ctypes.c_int
        f = lib.cblas_sgemm
        f.restype = None
        i, p, s = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
        f.argtypes = [i, i, i, i, i, i, s, p, i, p, i, s, p, i]
        _MKL = lib
    return _MKL


def mkl_info() -> str:
    lib = mkl_library()
    if lib is None:
        return "mkl not installed"
    buf = ctypes.create_string_buffer(256)
    lib.MKL_Get_Version_String(buf, 256)
    return f"{buf.value.decode()} ({mkl_library_path()}), {lib.MKL_Get_Max_Threads()} threads"


def mkl(g: Gemm):
    lib = mkl_library()
    if lib is None:
        return None
    a, b, c = operands(g)
    lda = g.m if g.trans_a else g.k
    ldb = g.k if g.trans_b else g.n
    args = [ctypes.c_int(101), ctypes.c_int(112 if g.trans_a else 111),
            ctypes.c_int(112 if g.trans_b else 111), ctypes.c_int(g.m), ctypes.c_int(g.n),
            ctypes.c_int(g.k), ctypes.c_float(1.0), ctypes.c_void_p(a.ctypes.data),
            ctypes.c_int(lda), ctypes.c_void_p(b.ctypes.data), ctypes.c_int(ldb),
            ctypes.c_float(0.0), ctypes.c_void_p(c.ctypes.data), ctypes.c_int(g.n)]
    sgemm = lib.cblas_sgemm

    def run():
        sgemm(*args)

    return run, c, (a, b)  # a, b kept alive with the callable


def _is_lib(backend: str, info: dict) -> bool:
    if backend == "mkl":
        return info["internal_api"] == "mkl"
    where = {"scipy openblas": "scipy.libs", "numpy openblas": "numpy.libs"}[backend]
    return info["internal_api"] == "openblas" and where in info["filepath"]


def library_info(backend: str) -> dict:
    """threadpoolctl's record of the library behind backend (num_threads, architecture, ...)."""
    from threadpoolctl import threadpool_info

    found = [i for i in threadpool_info() if _is_lib(backend, i)]
    if len(found) != 1:
        raise RuntimeError(f"{backend}: expected one library, threadpoolctl sees {found}")
    return found[0]


BUILDERS = {"scipy openblas": scipy_openblas, "numpy openblas": numpy_openblas, "mkl": mkl}


def build(backend: str, g: Gemm):
    """A verified zero-arg callable for backend on g, or None when the backend is missing."""
    built = BUILDERS[backend](g)
    if built is None:
        return None
    run, c, (a, b) = built
    c.fill(np.nan)
    run()
    opa, opb = _op(g, a.astype(np.float64), b.astype(np.float64))
    ref = np.matmul(opa, opb)
    if not np.allclose(c, ref, rtol=1e-4, atol=1e-4):
        raise AssertionError(f"{backend} on {g.label}: max |err| {np.nanmax(np.abs(c - ref))}")
    info = library_info(backend)
    if info["num_threads"] != THREADS:
        raise RuntimeError(f"{backend} runs {info['num_threads']} threads, not {THREADS}")
    run.keep = (a, b, c)
    run.info = {k: info.get(k) for k in ("version", "architecture", "threading_layer",
                                           "num_threads", "filepath")}
    return run


def summarize(json_path: str) -> None:
    """Sums of medians (and of minima) per workload and backend from a --benchmark-json file."""
    import json

    data = json.loads(Path(json_path).read_text())
    stats = {(b["params"]["backend"], b["params"]["shape"]): b["stats"] for b in data["benchmarks"]}
    for wl, gemms in WORKLOADS.items():
        print(f"{wl}: sum of medians (sum of minima), ratio to {BACKENDS[0]}")
        sums = {be: [sum(stats[(be, g.label)][k] for g in gemms) for k in ("median", "min")]
                for be in BACKENDS if all((be, g.label) in stats for g in gemms)}
        base = sums.get(BACKENDS[0])
        for be, (med, mn) in sums.items():
            r = f"x{med / base[0]:6.3f} (x{mn / base[1]:6.3f})" if base else ""
            print(f"  {be:16s} {med * 1e6:10.1f} us ({mn * 1e6:9.1f} us)  {r}")


if __name__ == "__main__":
    summarize(sys.argv[1])
