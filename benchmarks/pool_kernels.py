"""The float32 pooling kernels of the Python executor (_kernels/pool.pyx) and of the C runtime
(deploy/csrc/kernels/pool2d*.c), this checkout's against another's, in one process.

    python benchmarks/pool_kernels.py --baseline DIR                  # 1 and 2 threads
    python benchmarks/pool_kernels.py --baseline DIR --threads 1 --runs 30

DIR is a checkout (or a copy of its ``mgegraph/_kernels`` and ``mgegraph/deploy/csrc``) whose
compiled ``pool`` module and C sources are the baseline. Each kernel is called by its address
(the executor's ``KERNELS`` table, through ctypes: the executor's own call with no Python around
it) on the parameter block the lowering packs, its threads field set to the row's count, every
row on the same buffers (their alignment moved a 7x7 global average by 12%); the C
sources are built with their thread pool into a shared library as an export builds them
(``-O3 -ffp-contract=off``) and called likewise. Calls are interleaved (this, baseline, this,
...) and the medians of their wall and CPU times printed with the ratios: on a loaded machine
the ratios, not the times, are what hold (and a descheduled call's wall clock keeps running:
at one thread the CPU times mislead less). Each row checks first that all give the same bits.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.machinery
import importlib.util
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import pool as this_pool

HERE = Path(__file__).resolve().parent
FLAGS = ["-O3", "-std=gnu11", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-pthread", "-fPIC", "-shared"]

# name: (input shape, the pooling; "grad": the max pooling's gradient, 3x3/2 pad 1)
WORKLOADS = {
    "max 3x3/2 p1 8x64x112x112": ((8, 64, 112, 112), lambda x: F.max_pool2d(x, 3, 2, 1)),
    "max 2x2/2 8x64x112x112": ((8, 64, 112, 112), lambda x: F.max_pool2d(x, 2)),
    "avg 3x3/1 p1 include 8x64x56x56": (
        (8, 64, 56, 56), lambda x: F.avg_pool2d(x, 3, 1, 1, mode="average")),
    "avg 3x3/1 p1 exclude 8x64x56x56": ((8, 64, 56, 56), lambda x: F.avg_pool2d(x, 3, 1, 1)),
    "global avg 8x512x7x7": ((8, 512, 7, 7), lambda x: F.adaptive_avg_pool2d(x, 1)),
    "adaptive avg to 7x7 8x512x15x15": (
        (8, 512, 15, 15), lambda x: F.adaptive_avg_pool2d(x, (7, 7))),
    "max grad 3x3/2 p1 8x64x112x112": ((8, 64, 112, 112), "grad"),
}


class Call(ctypes.Structure):  # abi.pxd's Call and mgr_kernel.h's mgr_call
    _fields_ = [("bufs", ctypes.POINTER(ctypes.c_void_p)),
                ("ints", ctypes.POINTER(ctypes.c_int64)),
                ("floats", ctypes.POINTER(ctypes.c_double))]


KERNEL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Call))

SHIM = """
#include "mgr_kernel.h"
void bench_threads(int t) { mgr_set_run_threads(t); }
"""


def load_pool_module(root: Path):
    """The compiled pool module of the checkout at ``root``, beside this one's."""
    path = next((root / "mgegraph/_kernels").glob("pool.cpython-*.so"))
    loader = importlib.machinery.ExtensionFileLoader("mgegraph._kernels.pool", str(path))
    spec = importlib.util.spec_from_file_location("mgegraph._kernels.pool", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build_c(root: Path, folder: Path) -> ctypes.CDLL:
    """The float pooling kernels of the C runtime at ``root`` with its thread pool."""
    csrc, shared = root / "mgegraph/deploy/csrc", root / "mgegraph/_kernels"
    sources = [p for p in (csrc / "kernels").glob("pool2d*.c") if p.name != "pool2d_i8.c"]
    (folder / "shim.c").write_text(SHIM)
    library = folder / "libpool.so"
    subprocess.run(["cc", *FLAGS, f"-I{csrc}", f"-I{csrc}/kernels", f"-I{shared}", "-o",
                    str(library), str(folder / "shim.c"), str(csrc / "mgr_threads.c"),
                    *map(str, sources)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.bench_threads.argtypes = [ctypes.c_int]
    return lib


def instruction(shape, pool):
    """(kernel name, ints, the buffers' arrays) of the workload's one pooling instruction."""
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input("x", shape, "float32")
    if pool == "grad":
        y = F.max_pool2d(x, 3, 2, 1)
        (dx,) = mg.grad(F.sum(y * g.input("dy", y.shape, "float32")), [x])
        plan = mg.compile([dx])
        kernel = "max_pool2d_backward_f32"
    else:
        y = pool(x)
        plan = mg.compile([y], optimize=0)
        kernel = "pool2d_f32"
    (ins,) = [i for i in plan.instructions if i.kernel == kernel]
    arrays = [rng.standard_normal(plan.slots[s].type.shape, dtype=np.float32)
              for s in ins.inputs]
    arrays += [np.empty(plan.slots[s].type.shape, np.float32) for s in ins.outputs]
    return kernel, np.array(ins.ints, np.int64), arrays


def caller(fn, ints: np.ndarray, bufs: list, threads: int):
    """A call of kernel ``fn`` over the buffers ``bufs`` (every row's: the same alignment)."""
    block = ints.copy()
    block[-1] = threads  # kernel_abi/pool.py's FIELDS end with threads
    pointers = (ctypes.c_void_p * len(bufs))(*(b.ctypes.data for b in bufs))
    call = Call(pointers, block.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), None)

    def run():
        status = fn(ctypes.byref(call))
        assert status == 0, status
    run.keep = (bufs, block, pointers, call)
    return run


def rows_of(name: str, libs: dict, modules: dict, threads: int) -> dict:
    shape, pool = WORKLOADS[name]
    kernel, ints, bufs = instruction(shape, pool)
    rows = {}
    for label, module in modules.items():
        rows[f"executor {label}"] = caller(KERNEL(module.KERNELS[kernel]), ints, bufs, threads)
    for label, lib in libs.items():
        run = caller(KERNEL(ctypes.cast(getattr(lib, f"mgr_{kernel}"), ctypes.c_void_p).value),
                     ints, bufs, threads)

        def c_run(run=run, lib=lib):
            lib.bench_threads(threads)
            run()
        rows[f"C {label}"] = c_run
    outs = {}
    for row, run in rows.items():  # NaN-free inputs: the same bits everywhere
        run()
        outs[row] = bufs[-1].tobytes()
    assert len(set(outs.values())) == 1, (name, outs.keys())
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    modules = {"this": this_pool, "baseline": load_pool_module(args.baseline)}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "this").mkdir()
        (Path(tmp) / "base").mkdir()
        libs = {"this": build_c(HERE.parent, Path(tmp) / "this"),
                "baseline": build_c(args.baseline, Path(tmp) / "base")}
        for threads in args.threads:
            for name in args.workloads:
                rows = rows_of(name, libs, modules, threads)
                wall, cpu = {row: [] for row in rows}, {row: [] for row in rows}
                for _ in range(args.runs):
                    for row, run in rows.items():
                        start, start_cpu = time.perf_counter(), time.process_time()
                        run()
                        wall[row].append(time.perf_counter() - start)
                        cpu[row].append(time.process_time() - start_cpu)
                for side in ("executor", "C"):
                    this, base = (statistics.median(wall[f"{side} {w}"]) * 1e3
                                  for w in ("this", "baseline"))
                    this_cpu, base_cpu = (statistics.median(cpu[f"{side} {w}"]) * 1e3
                                          for w in ("this", "baseline"))
                    print(f"{name:>34} {threads}t {side:>8}: wall this {this:7.3f} ms, "
                          f"baseline {base:7.3f} ms, {this / base:5.3f}x; CPU {this_cpu:7.3f} / "
                          f"{base_cpu:7.3f} ms, {this_cpu / base_cpu:5.3f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
