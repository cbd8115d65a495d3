"""The C runtime's latency (``mg.deploy.export_c``) against the Python runtime and ONNX Runtime.

    python benchmarks/c_runtime.py                          # every workload, 1 and 2 threads
    python benchmarks/c_runtime.py --rounds 1 --runs 3 mlp-infer     # a smoke check
    python benchmarks/c_runtime.py --in-process conv-transpose       # unet_layers.py's layer

The conv-transpose rows are ``benchmarks/unet_layers.py``'s layer (64 -> 32 channels, 3x3 from
32x32): at stride 2 the executor's GEMM and col2im, at stride 1 its Winograd.

Each workload's model is saved once (``mg.save``, ``freeze=True``: the executor runs no
prologue), exported from that file with ``export_c`` and built with the export's Makefile
(``-O3``; the kernels pick the widest instruction set the CPU runs, as the package's do). Every
row then runs alone in a fresh process, rounds interleaved so a burst of load on a shared
machine hits every row, and the table prints the median of the rounds' medians with each row's
ratio to the Python executor alone (the issue's target: the C runtime within 1.05x of it) and
to ONNX Runtime:

- "c runtime": ``model_run model.mgr x.npy --threads T --runs N``, which times ``mgr_run``
  alone (the inputs set once, before) and prints the median: the export's own command rather
  than a second driver, so what is timed is what a user runs. Its first run (the thread pool
  starting, cold caches) is one of N, so N should be 20 or more for the median to skip it.
- "mgegraph runtime.load().run": ``mgegraph.runtime.load(model.mgm).run(feeds)`` (feeds
  checked and copied in, outputs copied out);
- "mgegraph plan.run": the loaded predictor's ``plan.run(feeds)``;
- "mgegraph executor": the plan's executor alone (``plan.executable().executor.run()``, the
  inputs left in its arena by one ``plan.run``), as the C runtime's ``mgr_run`` is timed;
- "onnxruntime": ONNX Runtime on the same network (benchmarks/fresh_process.py's sessions).

The Python rows run with ``OMP_NUM_THREADS`` and ``MGEGRAPH_BENCH_THREADS`` at T, the C runtime
with ``--threads T``. Every timed call comes after 3 warm-up calls (the C runtime's: see above).
The C runtime's outputs are checked against the Python executor's once, before timing.

``--in-process`` times instead, in this one process, the export built as a shared library (its
C API through ctypes) and the Python executor alone, interleaved call by call (A, B, A, B, ...),
and prints the medians' ratio: on a loaded machine, where fresh processes see different loads,
the ratio is what holds (OpenMP's idle threads made to sleep, ``OMP_WAIT_POLICY=PASSIVE``, so
the executor's pool does not spin beside the C runtime's). ``--baseline ROOT`` adds the export
made by the mgegraph at ROOT (say, a checkout of main: its C kernels before a change) to the
same interleaving.

    python benchmarks/c_runtime.py --in-process --baseline /work/main --threads 1 resnet-infer

``--in-process --layers`` times each instruction instead: the export built with
``-DMGR_PROFILE`` (``mgr_instruction_ns``) and the executor's timed loop (``run_timed``),
interleaved, a row per layer with the two medians and their ratio, and the sums per kind of layer
(op and the way its kernel took): which layers make the whole's ratio.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fresh_process  # noqa: E402  its timing loop and ONNX Runtime sessions (stdlib only here)

WORKLOADS = ("resnet-infer 1x224", "resnet-infer 8x64", "mlp-infer 1", "mlp-infer 128",
             "conv-transpose s2", "conv-transpose s1")
C_ROW, EXECUTOR = "c runtime", "mgegraph executor"
PY_ROWS = ("mgegraph runtime.load().run", "mgegraph plan.run", EXECUTOR)
ROWS = (C_ROW, *PY_ROWS, "onnxruntime")
# outputs of the C runtime against the Python executor's: the convolutions the Python plan runs
# through Winograd or the BLAS agree within float32 rounding (docs/c_runtime.md)
RTOL, ATOL = 1e-4, 1e-4


def _inputs(workload: str):
    """The workload's model (a Module, or None: a graph _graph_plan builds) and its input, as
    fresh_process.py makes them."""
    import numpy as np  # lazy: the parent process of the timed rows imports no library
    sys.path.insert(0, str(HERE))
    import test_deploy
    import workloads
    rng = np.random.default_rng(workloads.SEED + 1)
    if workload.startswith("resnet-infer"):
        batch, size = (1, 224) if workload.endswith("1x224") else (8, 64)
        return test_deploy.model(), rng.standard_normal((batch, 3, size, size), np.float32)
    if workload.startswith("conv-transpose"):
        return None, rng.standard_normal(CONV_TRANSPOSE_INPUT, np.float32)
    return None, rng.standard_normal((int(workload.split()[-1]), workloads.MLP_LAYERS[0]),
                                     np.float32)


# the conv-transpose rows: vision_workloads.py's layer (benchmarks/unet_layers.py's), 64 -> 32
# channels 3x3 from 32x32, at stride 2 (padding 1, output padding 1: the executor's GEMM and
# col2im) and at stride 1 (padding 1: its Winograd by the rules)
CONV_TRANSPOSE_INPUT = (1, 64, 32, 32)


def _conv_transpose_plan(workload: str, x):
    import numpy as np  # lazy: as _inputs
    import vision_workloads as vw

    import mgegraph as mg
    import mgegraph.functional as F
    rng = np.random.default_rng(vw.SEED)
    g = mg.Graph()
    w, b = g.param("w", vw._weight(rng, 64, 32, 3, 3)), g.param("b", vw._weight(rng, 32, 1)[:, 0])
    strided = dict(stride=2, output_padding=1) if workload.endswith("s2") else {}
    y = F.conv_transpose2d(g.input("x", x.shape, "float32"), w, b, padding=1, **strided)
    return mg.compile([y], tune="rules")


def _graph_plan(workload: str, x):
    return _conv_transpose_plan(workload, x) if workload.startswith("conv-transpose") \
        else _mlp_plan(x)


def _mlp_plan(x):
    """mlp-infer's plan (benchmarks/workloads.py's graph), its input named "x"."""
    import workloads

    import mgegraph as mg  # lazy: as _inputs
    import mgegraph.functional as F
    g = mg.Graph()
    h = g.input("x", x.shape, "float32")
    weights = workloads.mlp_weights()
    for k, (w, b) in enumerate(weights):
        h = h @ g.param(f"w{k}", w) + g.param(f"b{k}", b)
        if k < len(weights) - 1:
            h = F.relu(h)
    return mg.compile([h], tune="rules")


def prepare(workload: str, folder: Path) -> Path:
    """Save the workload's model to ``folder/model.mgm``, export it to ``folder/c``, build it and
    check its outputs against the Python executor's; the export's folder."""
    import numpy as np  # lazy: as _inputs

    import mgegraph as mg
    from mgegraph import runtime
    from mgegraph.deploy import export_c
    module, x = _inputs(workload)
    if module is not None:
        saved = mg.compile_module(module, (x,), freeze=True, tune="rules")
    else:
        saved = _graph_plan(workload, x)
    mg.save(saved, folder / "model.mgm")
    np.save(folder / "x.npy", x)
    exported = export_c(folder / "model.mgm", folder / "c")
    subprocess.run(["make", "-s", "-C", str(exported.directory), "CFLAGS=-O3"], check=True,
                   capture_output=True, timeout=600)
    done = subprocess.run([str(exported.directory / "model_run"), str(exported.directory /
                                                                      "model.mgr"),
                           str(folder / "x.npy"), "-o", str(folder / "out")],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{workload}: model_run failed: {done.stderr.strip()}")
    want = runtime.load(folder / "model.mgm").run([x])[0]
    np.testing.assert_allclose(np.load(folder / "out" / "output0.npy"), want, rtol=RTOL,
                               atol=ATOL * float(np.abs(want).max()), err_msg=workload)
    return exported.directory


def python_call(row: str, workload: str, folder: Path):
    """The call a Python row times (run in the child process)."""
    import numpy as np  # lazy: the child process's library, loaded after its thread settings

    from mgegraph import runtime
    x = np.load(folder / "x.npy")
    if row == "onnxruntime":
        if workload == "conv-transpose s2":
            import vision_workloads
            return vision_workloads.conv_transpose_call("onnxruntime", workload)
        if workload.startswith("conv-transpose"):
            raise ValueError(f"no ONNX Runtime row for {workload}")
        call = fresh_process.resnet_call if workload.startswith("resnet") else \
            fresh_process.mlp_infer_call
        return call("onnxruntime", workload)
    predictor = runtime.load(folder / "model.mgm")
    feeds = dict(zip(predictor.input_names, [x]))
    if row == "mgegraph runtime.load().run":
        return lambda: predictor.run(feeds)
    plan = predictor.plan
    if row == "mgegraph plan.run":
        return lambda: plan.run(feeds)
    plan.run(feeds)  # the inputs into the executor's arena, once
    executable = plan.executable()
    # NOTE: the closure holds the executable, which owns the arena: the executor's bound run
    # alone does not keep it alive (once the plan went, the run read freed memory and crashed)
    return lambda: executable.executor.run()


def measure(row: str, workload: str, folder: Path, runs: int) -> float:
    """Median seconds of ``runs`` calls after 3 warm-up calls (in the child)."""
    return fresh_process.median_seconds(python_call(row, workload, folder), runs)


def c_runtime(directory: Path, folder: Path, threads: int, runs: int) -> float | str:
    """model_run's median seconds over ``runs`` runs, or why it failed."""
    done = subprocess.run([str(directory / "model_run"), str(directory / "model.mgr"),
                           str(folder / "x.npy"), "-o", str(folder / "out"), "--threads",
                           str(threads), "--runs", str(max(runs, 2))],
                          capture_output=True, text=True, timeout=900, check=False)
    found = re.search(r"median of \d+ runs: ([0-9.]+) ms", done.stdout)
    if done.returncode != 0 or not found:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return float(found.group(1)) / 1e3


def child(row: str, workload: str, folder: Path, threads: int, runs: int) -> float | str:
    """Seconds of one Python row in a fresh process, or why it could not run."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MGEGRAPH_BENCH_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", row, workload, str(folder),
                           str(runs)], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def shared_library(directory: Path, defines=()) -> Path:
    """The export in ``directory`` built as a shared library (-O3), as its Makefile builds it,
    with ``defines`` (``-D`` flags: ``-DMGR_PROFILE`` times each instruction)."""
    sys.path.insert(0, str(HERE.parent))
    from mgegraph.deploy.kernels import CONTRACTED  # lazy: as _inputs
    sources = ["mgr_runtime.c", "mgr_threads.c", "model_kernels.c",
               *sorted(str(p.relative_to(directory)) for p in directory.glob("kernels/*.c"))]
    objects = []
    for source in sources:
        objects.append(source.replace("/", "_")[:-2] + ".pic.o")
        contract = "-ffp-contract=fast" if source in CONTRACTED else "-ffp-contract=off"
        subprocess.run(["cc", "-O3", "-std=gnu11", contract, "-fno-math-errno",
                        "-fno-trapping-math", "-pthread", *defines, "-fPIC", "-I", ".", "-I",
                        "kernels", "-c", source, "-o", objects[-1]],
                       cwd=directory, check=True, capture_output=True, timeout=600)
    subprocess.run(["cc", "-shared", "-o", "libmgr_model.so", *objects, "-lm", "-pthread"],
                   cwd=directory, check=True, capture_output=True, timeout=600)
    return directory / "libmgr_model.so"


def c_call(library: Path, directory: Path, x, threads: int):
    """A call of ``mgr_run`` on the export's model loaded through ``library``, x set once (its
    ``times()``: each instruction's last nanoseconds, where the library was built to time
    them)."""
    lib = ctypes.CDLL(str(library))  # RTLD_LOCAL: two builds' mgr_* symbols stay apart
    lib.mgr_load_file.restype = ctypes.c_void_p
    lib.mgr_load_file.argtypes = [ctypes.c_char_p]
    lib.mgr_last_error.restype = ctypes.c_char_p
    for name, args in (("mgr_set_input", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                          ctypes.c_size_t]),
                       ("mgr_set_threads", [ctypes.c_void_p, ctypes.c_int]),
                       ("mgr_run", [ctypes.c_void_p])):
        getattr(lib, name).argtypes = args
    model = lib.mgr_load_file(str(directory / "model.mgr").encode())
    if not model:
        raise RuntimeError(lib.mgr_last_error().decode())
    if lib.mgr_set_input(model, 0, x.ctypes.data, x.nbytes) or \
            lib.mgr_set_threads(model, threads):
        raise RuntimeError(lib.mgr_last_error().decode())

    def run():
        if lib.mgr_run(model):
            raise RuntimeError(lib.mgr_last_error().decode())
    run.keep = (lib, x)  # the library and the input the model reads stay alive with the call
    if hasattr(lib, "mgr_instruction_ns"):
        lib.mgr_instruction_ns.restype = ctypes.c_int64
        lib.mgr_instruction_ns.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        run.times = lambda n: [lib.mgr_instruction_ns(model, i) for i in range(n)]
    return run


def in_process(workload: str, folder: Path, threads: int, runs: int, baseline) -> str:
    """The C runtime (and the baseline's) against the executor alone, interleaved in this
    process: a line of medians and ratios."""
    import numpy as np  # lazy: as _inputs
    x = np.load(folder / "x.npy")
    calls = {"c runtime": c_call(shared_library(folder / "c"), folder / "c", x, threads)}
    if baseline:
        env = {**os.environ, "PYTHONPATH": str(baseline)}
        subprocess.run([sys.executable, "-c", "from mgegraph.deploy import export_c; "
                        "export_c('model.mgm', 'base')"], cwd=folder, env=env, check=True,
                       capture_output=True, timeout=600)
        calls["baseline c runtime"] = c_call(shared_library(folder / "base"), folder / "base", x,
                                             threads)
    calls[EXECUTOR] = python_call(EXECUTOR, workload, folder)
    times: dict = {name: [] for name in calls}
    for _ in range(3):
        for call in calls.values():
            call()
    for _ in range(runs):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    cells = [f"{name} {m * 1e3:.3f} ms ({m / medians[EXECUTOR]:.2f}x exec)"
             for name, m in medians.items()]
    return f"{workload:20} {threads} threads, in one process, {runs} interleaved: " + \
        "; ".join(cells)


def _label(plan, ins) -> str:
    """An instruction as the layer table names it: op, the way its kernel took, output shape."""
    way = ins.choice.path if ins.choice else ins.kernel
    shape = "x".join(map(str, plan.slots[ins.outputs[0]].type.shape)) if ins.outputs else ""
    return f"{ins.op} [{way}] {shape}"


def layers(workload: str, folder: Path, threads: int, runs: int) -> list[str]:
    """Each instruction's median time in the C runtime (built with ``-DMGR_PROFILE``) and in
    the executor's timed loop (``run_timed``), the two runs interleaved in this process: the
    layers that make the whole's ratio, slowest in C first, and the totals per kind of
    layer."""
    import numpy as np  # lazy: as _inputs

    from mgegraph import runtime
    x = np.load(folder / "x.npy")
    c = c_call(shared_library(folder / "c", ["-DMGR_PROFILE"]), folder / "c", x, threads)
    predictor = runtime.load(folder / "model.mgm")
    plan = predictor.plan
    plan.run(dict(zip(predictor.input_names, [x])))
    executable = plan.executable()
    n = len(plan.instructions)
    py_ns = np.zeros((n, 2), np.int64)
    c_times, py_times = [], []
    for k in range(runs + 3):
        c()
        executable.executor.run_timed()
        executable.executor.copy_times(py_ns)
        if k >= 3:  # after the warm-up calls
            c_times.append(c.times(n))
            py_times.append(py_ns[:, 1].copy())
    c_med = np.median(np.array(c_times), axis=0) / 1e6
    py_med = np.median(np.array(py_times), axis=0) / 1e6
    lines = [f"{workload}, {threads} threads, {runs} interleaved runs, median ms per "
             "instruction (in one process)",
             f"{'#':>4} {'C':>8} {'executor':>9} {'C/exec':>7}  instruction"]
    kinds: dict = {}
    for i in np.argsort(-c_med):
        ins = plan.instructions[i]
        label = _label(plan, ins)
        kind = label.split(" [")[0] + " [" + label.split(" [")[1].split("]")[0] + "]"
        total = kinds.setdefault(kind, [0.0, 0.0, 0])
        total[0] += c_med[i]
        total[1] += py_med[i]
        total[2] += 1
        if c_med[i] >= 0.01 * c_med.sum():
            lines.append(f"{i:>4} {c_med[i]:>8.3f} {py_med[i]:>9.3f} "
                         f"{c_med[i] / max(py_med[i], 1e-9):>7.2f}  {label}")
    lines.append(f"{'n':>4} {'C':>8} {'executor':>9} {'C/exec':>7}  kind (sums of medians)")
    for kind, (tc, tp, count) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{count:>4} {tc:>8.3f} {tp:>9.3f} {tc / max(tp, 1e-9):>7.2f}  {kind}")
    lines.append(f"{n:>4} {c_med.sum():>8.3f} {py_med.sum():>9.3f} "
                 f"{c_med.sum() / py_med.sum():>7.2f}  all")
    return lines


def table(results: dict, skipped: dict, chosen, threads) -> list[str]:
    """Each row's median of round medians, and its ratio to the executor alone and to ONNX
    Runtime."""
    lines = [f"{'workload':20} {'threads':>7} {'row':28} {'median ms':>10} {'x exec':>7} "
             f"{'x ORT':>7}  each round's median, ms"]
    for workload in chosen:
        for t in threads:
            medians = {r: statistics.median(results[workload, r, t]) for r in ROWS
                       if results.get((workload, r, t))}
            for row in ROWS:
                if row not in medians:
                    why = skipped.get((workload, row, t), "not run")
                    lines.append(f"{workload:20} {t:>7} {row:28} {'skipped':>10}  {why}")
                    continue
                ratios = " ".join(f"{medians[row] / medians[p]:>7.2f}" if p in medians
                                  else f"{'-':>7}" for p in (EXECUTOR, "onnxruntime"))
                rounds = " ".join(f"{v * 1e3:.3f}" for v in results[workload, row, t])
                lines.append(f"{workload:20} {t:>7} {row:28} {medians[row] * 1e3:>10.3f} "
                             f"{ratios}  {rounds}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help=f"some of: {', '.join(WORKLOADS)} (a prefix is enough; a "
                        "whole name is that workload alone)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=40, help="timed calls per process")
    parser.add_argument("--in-process", action="store_true",
                        help="the C runtime and the executor interleaved in this process")
    parser.add_argument("--baseline", type=Path, help="--in-process: also the export made by "
                        "the mgegraph at this root")
    parser.add_argument("--layers", action="store_true", help="--in-process: each "
                        "instruction's time in the C runtime and the executor, interleaved")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row, workload, folder, runs = args.child
        print(json.dumps({"seconds": measure(row, workload, Path(folder), int(runs))}))
        return 0
    if args.in_process and (len(args.threads) > 1 or
                            os.environ.get("OMP_NUM_THREADS") != str(args.threads[0])):
        for t in args.threads:  # a process per thread count, its libraries started with it;
            # OpenMP's idle threads sleep, or they spin beside the C runtime's pool
            env = {**os.environ, "OMP_NUM_THREADS": str(t), "MGEGRAPH_BENCH_THREADS": str(t),
                   "OMP_WAIT_POLICY": "PASSIVE"}
            subprocess.run([sys.executable, __file__, *(argv if argv is not None else
                                                        sys.argv[1:]), "--threads", str(t)],
                           env=env, check=True)  # (the last --threads given is the one taken)
        return 0
    # a workload named whole is that one alone ("mlp-infer 1" is not "mlp-infer 128")
    chosen = [w for w in WORKLOADS if not args.workloads
              or any(w == p or (p not in WORKLOADS and w.startswith(p)) for p in args.workloads)]
    results: dict = {}  # (workload, row, threads) -> each round's seconds
    skipped: dict = {}  # (workload, row, threads) -> why it could not run
    with tempfile.TemporaryDirectory(prefix="c_runtime_bench_") as tmp:
        folders = {w: Path(tmp) / f"w{k}" for k, w in enumerate(chosen)}
        built = {}
        for workload, folder in folders.items():
            folder.mkdir()
            built[workload] = prepare(workload, folder)
        if args.in_process:
            for workload in chosen:
                print("\n".join(layers(workload, folders[workload], args.threads[0], args.runs))
                      if args.layers else in_process(workload, folders[workload],
                                                     args.threads[0], args.runs, args.baseline),
                      flush=True)
            return 0
        for _ in range(args.rounds):
            for workload in chosen:
                for t in args.threads:
                    for row in ROWS:
                        got = (c_runtime(built[workload], folders[workload], t, args.runs)
                               if row == C_ROW else
                               child(row, workload, folders[workload], t, args.runs))
                        if isinstance(got, str):
                            skipped[workload, row, t] = got
                        else:
                            results.setdefault((workload, row, t), []).append(got)
    print("\n".join(table(results, skipped, chosen, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
