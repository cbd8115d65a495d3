"""Which BLAS the CPU kernels call: a measured choice, made once per machine.

SciPy's OpenBLAS is always there. When Intel's MKL is installed too (``pip install
"mgegraph[mkl]"``), a short calibration times both on the GEMM shapes of an MLP training step
(BENCHMARKS.md's mlp-train) and the faster one wins; the result is cached per machine (CPU
model, libraries, thread count) in ``$XDG_CACHE_HOME/mgegraph/blas.json``, so later processes
choose at once. ``MGEGRAPH_BLAS=openblas`` or ``=mkl`` overrides the measurement.

Design: MKL is driven through its GNU threading layer, i.e. by the same OpenMP runtime
(libgomp) as the fused and convolution kernels: one pool of threads for every parallel kernel,
which cannot spin against a second one. MKL on AMD processors is often slower than OpenBLAS,
and MKL on Intel often faster: hence a measurement, not a rule.

>>> from mgegraph._kernels import blas_select
>>> blas_select.choice().name         # "openblas" or "mkl"
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..disk_cache import cache_root
from ..ir.errors import GraphError
from .blas_table import ROUTINES, time_sgemm
from .blas_table import use as use_blas

ENV = "MGEGRAPH_BLAS"
CHOICES = ("auto", "openblas", "mkl")
# (m, n, k) of mlp-train's forward and backward GEMMs (784-1024-1024-10, batch 128)
PROBE_SHAPES = ((128, 1024, 784), (128, 1024, 1024), (1024, 1024, 128), (128, 784, 1024))
PROBE_REPEATS = 7
# a library must be this much faster to displace OpenBLAS: a measurement on a busy machine
# wanders by a few percent, and OpenBLAS is the one every test runs on in CI
MARGIN = 1.05
_MKL_THREADING_GNU, _MKL_INTERFACE_LP64 = 3, 0


@dataclass(frozen=True)
class BlasChoice:
    """The BLAS in use, why, and the calibration's seconds per library (summed over the
    probe shapes), when one ran."""

    name: str
    reason: str
    seconds: dict = field(default_factory=dict)


_LOCK = threading.Lock()
_CHOICE: BlasChoice | None = None


def choice() -> BlasChoice:
    """The BLAS the kernels call, chosen on first use (see the module's doc)."""
    global _CHOICE
    with _LOCK:
        if _CHOICE is None:
            _CHOICE = select(os.environ.get(ENV, "auto"))
        return _CHOICE


def select(wanted: str, cache: Path | None = None) -> BlasChoice:
    """Route the kernels to the BLAS ``wanted`` ("auto", "openblas" or "mkl") names and say
    which it is; "auto" measures (or reads the cached measurement)."""
    if wanted not in CHOICES:
        raise GraphError(f"{ENV}={wanted!r} is not one of {', '.join(CHOICES)}")
    mkl, missing = load_mkl()
    if wanted == "openblas" or (wanted == "auto" and mkl is None):
        use_blas("openblas", openblas_addresses())
        why = f"{ENV}=openblas" if wanted == "openblas" else f"MKL not used: {missing}"
        return BlasChoice("openblas", why)
    if mkl is None:
        raise GraphError(f"{ENV}=mkl, but MKL cannot be used: {missing} "
                         '(pip install "mgegraph[mkl]")')
    if wanted == "mkl":
        use_blas("mkl", mkl)
        return BlasChoice("mkl", f"{ENV}=mkl")
    return _measured(mkl, cache or cache_file())


def _measured(mkl: dict, path: Path) -> BlasChoice:
    key = machine_key(mkl)
    found = _read_cache(path).get(key)
    if found is not None:
        seconds = found
    else:
        seconds = calibrate(mkl)
        _write_cache(path, key, seconds)
    name = _faster(seconds)
    use_blas(name, mkl if name == "mkl" else openblas_addresses())
    how = "cached measurement" if found is not None else "measured"
    return BlasChoice(name, f"{how}: mlp-train GEMMs take {seconds['openblas'] * 1e3:.2f} ms "
                            f"through OpenBLAS, {seconds['mkl'] * 1e3:.2f} ms through MKL",
                      dict(seconds))


def _faster(seconds: dict) -> str:
    return "mkl" if seconds["mkl"] * MARGIN < seconds["openblas"] else "openblas"


def expected_name() -> str | None:
    """The BLAS ``choice()`` will pick in this process, known without loading either library
    (from MGEGRAPH_BLAS, the installed packages and the cached measurement), or None where it
    must still be measured. The thread policy is decided from it before the OpenMP runtime
    loads (see _kernels/__init__.py)."""
    wanted = os.environ.get(ENV, "auto")
    path = mkl_path()
    if wanted == "openblas" or path is None:
        return "openblas"
    if wanted == "mkl":
        return "mkl"
    seconds = _read_cache(cache_file()).get(machine_key({"path": path}))
    return _faster(seconds) if seconds is not None else None


def calibrate(mkl: dict) -> dict[str, float]:
    """Seconds the probe GEMMs take through each library (the fastest of a few calls per
    shape, summed), timed alternately so a burst of load on the machine hits both."""
    rng = np.random.default_rng(0)
    size = max(m * k + k * n + m * n for m, n, k in PROBE_SHAPES)
    a, b, c = (rng.standard_normal(size, dtype=np.float32) for _ in range(3))
    seconds = {"openblas": 0.0, "mkl": 0.0}
    try:
        for m, n, k in PROBE_SHAPES:
            best = {"openblas": float("inf"), "mkl": float("inf")}
            for name in ("openblas", "mkl", "openblas", "mkl"):
                use_blas(name, mkl if name == "mkl" else None)
                best[name] = min(best[name], time_sgemm(m, n, k, a, b, c,
                                                                   PROBE_REPEATS))
            for name in seconds:
                seconds[name] += best[name]
    finally:
        use_blas("openblas", openblas_addresses())
    return seconds


def load_mkl() -> tuple[dict | None, str]:
    """The addresses of MKL's four routines (the LP64 Fortran interface, GNU threading
    layer), or None and why not."""
    path = mkl_path()
    if path is None:
        return None, "libmkl_rt is not installed"
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return None, f"{path} does not load ({exc})"
    # before any other MKL call: threads from libgomp, 32-bit integers
    lib.MKL_Set_Threading_Layer(_MKL_THREADING_GNU)
    lib.MKL_Set_Interface_Layer(_MKL_INTERFACE_LP64)
    _single_threaded_after_fork(lib)
    return {r: ctypes.cast(getattr(lib, f"{r}_"), ctypes.c_void_p).value
            for r in ROUTINES} | {"path": path,
                                             "local_threads": _address(lib, LOCAL_THREADS)}, ""


# the per-thread thread-count calls, by the names the libraries export them under
LOCAL_THREADS = ("openblas_set_num_threads_local", "scipy_openblas_set_num_threads_local",
                 "MKL_Set_Num_Threads_Local")


def _address(lib, names) -> int:
    for name in names:
        if hasattr(lib, name):
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    return 0


@functools.cache
def openblas_addresses() -> dict:
    """{"local_threads": address} of SciPy's OpenBLAS (whose GEMMs the kernels call by default),
    or {} where it cannot be found: its library is the LP64 OpenBLAS mapped into the process
    (NumPy's own is the ILP64 one, "64_"), loaded with blas_table, so one search serves every
    later selection."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1]}
    except OSError:  # not Linux: no guard, the kernels still give the same results
        return {}
    for path in sorted(p for p in paths if "64_" not in Path(p).name):
        try:
            address = _address(ctypes.CDLL(path), LOCAL_THREADS[:2])
        except OSError:
            continue
        if address:
            return {"local_threads": address}
    return {}


_FORK_HOOKED: set[str] = set()


def _single_threaded_after_fork(lib) -> None:
    """GCC's OpenMP pool does not survive fork(): a GEMM that opened a parallel region in a
    forked child whose parent had used the pool would hang, so MKL runs on one thread there
    (as the fused and convolution kernels do). The forking thread's own count is set too: a
    per-thread count (threadpoolctl restores MKL's through one) outranks the global one."""
    if lib._name not in _FORK_HOOKED:
        _FORK_HOOKED.add(lib._name)

        def one_thread():
            lib.MKL_Set_Num_Threads(1)
            lib.MKL_Set_Num_Threads_Local(1)

        os.register_at_fork(after_in_child=one_thread)


def mkl_path() -> str | None:
    """libmkl_rt of the installed ``mkl`` package (found through its metadata, so a user or
    venv install is found too), or None."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if Path(str(f)).name.startswith("libmkl_rt.so"):
            located = Path(f.locate()).resolve()
            if located.exists():
                return str(located)
    return None


def machine_key(mkl: dict) -> str:
    """What a measurement holds for: the CPU, both libraries and the thread count."""
    import scipy  # lazy: startup cost (SciPy is read for its version only, here)

    threads = [len(os.sched_getaffinity(0)), os.environ.get("OMP_NUM_THREADS")]
    text = json.dumps([cpu_model(), platform.machine(), scipy.__version__, mkl["path"],
                       os.path.getsize(mkl["path"]), threads])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), for what a measurement holds for."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cache_file() -> Path:
    return cache_root() / "blas.json"


def _read_cache(path: Path) -> dict:
    """The cached measurements; an unreadable or malformed file is no cache (it is measured
    again and rewritten)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: a hostile nesting
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)
            and all(type(v.get(n)) in (int, float) and math.isfinite(v[n]) and v[n] > 0
                    for n in ("openblas", "mkl"))}


def _write_cache(path: Path, key: str, seconds: dict) -> None:
    data = _read_cache(path) | {key: seconds}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        pass  # a read-only home: measured again next time, nothing else changes


def describe() -> dict:
    """The choice as plain data (for reports and the benchmark table)."""
    return asdict(choice())
