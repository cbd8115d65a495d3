"""One Winograd layer (a 3x3 convolution at stride 1, bias and relu) through the C runtime
against the Python executor, in one process: the layers of ResNet-18 that run Winograd.

    python benchmarks/c_winograd.py                         # every layer, 1 thread
    python benchmarks/c_winograd.py --threads 2 --baseline /tmp/main 128@28
    python benchmarks/c_winograd.py --runs 3 64@56          # a smoke check
    python benchmarks/c_winograd.py --variant WINO_BLOCK_FLOATS=524288 256@14

Each layer is a plan of one ``conv2d_f32`` (``tune="rules"``, so the path is the rules' choice:
Winograd on this CPU for these shapes; a layer that takes another path says so and is skipped),
saved, exported with ``export_c`` and built as a shared library with ``-O3``, as
``benchmarks/c_runtime.py --in-process`` builds a whole model. The C runtime's ``mgr_run``, the
export made by the mgegraph at ``--baseline ROOT`` (say a checkout of main: the C kernels before
a change) and the executor alone (``plan.executable().executor.run()``) are called in turn (A,
B, C, A, B, C, ...), and the table gives each one's median and its ratio to the executor's: on
a loaded machine the ratio is what holds. The C runtime's outputs are checked against the
executor's first (bitwise where the two run the same tile; see docs/c_runtime.md).

Run it with ``OMP_NUM_THREADS`` equal to ``--threads`` (it restarts itself so, with OpenMP's idle
threads asleep: ``OMP_WAIT_POLICY=PASSIVE``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import c_runtime  # noqa: E402  the shared-library build and the ctypes call of an export

# ResNet-18's Winograd layers (channels @ plane size, batch): 224 x 224 at batch 1, 64 x 64 at 8
LAYERS = ("64@56", "128@28", "256@14", "64@16x8", "128@8x8", "256@4x8")


def _shape(layer: str) -> tuple[int, int, int]:
    """(channels, size, batch) of a layer spelled ``C@S`` or ``C@SxN``."""
    channels, rest = layer.split("@")
    size, _, batch = rest.partition("x")
    return int(channels), int(size), int(batch or 1)


def prepare(layer: str, folder: Path):
    """The layer's plan saved to ``folder/model.mgm`` and exported to ``folder/c``: (plan, x),
    or None where the rules chose another path."""
    import numpy as np  # lazy: the parent process that restarts itself imports no library

    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph.deploy import export_c
    channels, size, batch = _shape(layer)
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input("x", (batch, channels, size, size), "float32")
    w = g.param("w", rng.standard_normal((channels, channels, 3, 3), np.float32) * 0.05)
    b = g.param("b", rng.standard_normal(channels, np.float32))
    plan = mg.compile([F.relu(F.conv2d(x, w, b, padding=1))], tune="rules", freeze=True)
    ways = [ins.choice.path for ins in plan.instructions if ins.choice]
    if not any(way.startswith("winograd") for way in ways):
        print(f"{layer}: the rules chose {ways}, not Winograd: skipped")
        return None
    mg.save(plan, folder / "model.mgm")
    export_c(folder / "model.mgm", folder / "c")
    return plan, rng.standard_normal((batch, channels, size, size), np.float32)


def calls(folder: Path, plan, x, threads: int, baseline, variants=()):
    """{row: a call} of the C runtime, of its build with each ``-D`` flag of ``variants``, the
    baseline's (where given) and the executor alone."""
    rows = {"c": c_runtime.c_call(c_runtime.shared_library(folder / "c"), folder / "c", x,
                                  threads)}
    for k, flag in enumerate(variants):
        copy = folder / f"variant{k}"
        subprocess.run(["cp", "-r", str(folder / "c"), str(copy)], check=True)
        rows[f"c -D{flag}"] = c_runtime.c_call(c_runtime.shared_library(copy, [f"-D{flag}"]),
                                               copy, x, threads)
    if baseline:
        env = {**os.environ, "PYTHONPATH": str(baseline)}
        subprocess.run([sys.executable, "-c", "from mgegraph.deploy import export_c; "
                        "export_c('model.mgm', 'base')"], cwd=folder, env=env, check=True,
                       capture_output=True, timeout=600)
        rows["baseline c"] = c_runtime.c_call(c_runtime.shared_library(folder / "base"),
                                              folder / "base", x, threads)
    (want,) = plan.run({"x": x})
    executable = plan.executable()
    rows["executor"] = lambda: executable.executor.run()
    rows["executor"].keep = executable  # the arena lives with the call
    return rows, want


def check(folder: Path, x, want) -> str:
    """How the C runtime's output compares with the executor's: "bitwise" or the largest
    difference over the largest magnitude."""
    import numpy as np  # lazy: as prepare
    np.save(folder / "x.npy", x)
    subprocess.run(["make", "-s", "-C", str(folder / "c"), "CFLAGS=-O3"], check=True,
                   capture_output=True, timeout=600)
    subprocess.run([str(folder / "c" / "model_run"), str(folder / "c" / "model.mgr"),
                    str(folder / "x.npy"), "-o", str(folder / "out")],
                   capture_output=True, text=True, timeout=600, check=True)
    got = np.load(folder / "out" / "output0.npy")
    if np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        return "bitwise"
    return f"max |diff| / max |y| = {np.abs(got - want).max() / np.abs(want).max():.1e}"


def timed(rows: dict, runs: int) -> dict:
    """Median seconds of each row over ``runs`` interleaved calls, after 3 warm-up rounds."""
    times: dict = {name: [] for name in rows}
    for k in range(runs + 3):
        for name, call in rows.items():
            start = time.perf_counter()
            call()
            if k >= 3:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="*", metavar="LAYER", help=f"of {', '.join(LAYERS)}")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30, help="interleaved calls of each row")
    parser.add_argument("--baseline", type=Path, help="also the export made by the mgegraph "
                        "at this root")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE",
                        help="also the export built with -DNAME=VALUE (a constant of the C "
                        "kernels; repeatable)")
    args = parser.parse_args(argv)
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "OMP_WAIT_POLICY": "PASSIVE",
               "MGEGRAPH_BENCH_THREADS": str(args.threads)}
        return subprocess.run([sys.executable, __file__, *(argv if argv is not None else
                                                           sys.argv[1:])], env=env).returncode
    print(f"{args.threads} thread(s), {args.runs} interleaved calls each, medians in ms "
          "(ratios to the executor's)")
    with tempfile.TemporaryDirectory(prefix="c_winograd_") as tmp:
        for k, layer in enumerate(args.layers or LAYERS):
            folder = Path(tmp) / f"l{k}"
            folder.mkdir()
            made = prepare(layer, folder)
            if made is None:
                continue
            plan, x = made
            rows, want = calls(folder, plan, x, args.threads, args.baseline, args.variant)
            agree = check(folder, x, want)
            medians = timed(rows, args.runs)
            cells = [f"{name} {m * 1e3:.3f} ({m / medians['executor']:.2f})"
                     for name, m in medians.items()]
            print(f"{layer:9} " + "; ".join(cells) + f"; C vs executor: {agree}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
