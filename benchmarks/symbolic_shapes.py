"""Named dimensions: a plan of ``g.input("x", ("batch", ...))`` against the fixed-shape plans
and ONNX Runtime, the first call at a new shape, and a stream of requests of random batch sizes.

    python benchmarks/symbolic_shapes.py                          # every part, 2 threads, 2 rounds
    python benchmarks/symbolic_shapes.py --rounds 3 --threads 1 2 run stream

Each row runs alone in a fresh process with each library's own thread defaults, rounds
interleaved so that a burst of load on a shared machine hits every row (as
``benchmarks/fresh_process.py``); the table gives the median of the rounds.

- ``run``: resnet-infer (the ResNet-18 of ``test_deploy.model``, eval form) at 1x3x224x224 and
  8x3x64x64 and mlp-infer at batch 1, each as a fixed-shape plan, as a SymbolicPlan with a named
  batch (specialised once, then timed: ``plan.run``), as ONNX Runtime on a file of that fixed
  shape and on a file whose batch is ``dim_param: "batch"`` (ResNet-18: ``torch.onnx.export``
  with ``dynamic_axes``; the MLP: built with ``onnx.helper``); median seconds of ``--runs``
  calls after 3 warm-up calls. "x fixed": the row against its library's fixed-shape row.
- ``specialise``: the first call of a SymbolicPlan at a shape it has not seen (after a run at
  another, so that nothing else is cold), for ResNet-18 at 1x3x224x224 and 8x3x64x64,
  mlp-infer at batch 7 and convnet-train (one SGD step with cross-entropy, built by hand over a
  named batch) at batch 17; split into the replay of the graph with the numbers
  (``ir.specialize``), the compile of the replayed graph, and the first run (the executable:
  arena, generated kernels, the prologue), against ``mg.compile`` of the same graph built with
  numbers and a cached run. Medians of ``--repeats`` first calls (the cache cleared between).
- ``stream``: mlp-infer over 100 requests with batch sizes drawn from 1..64 (seed 0): the total
  of the first pass (a fresh plan or session: specialisations included) and of the same stream
  again, for SymbolicPlans caching 16 (the default) and 64 plans and for ONNX Runtime.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = {"resnet-infer 1x224": (1, 224), "resnet-infer 8x64": (8, 64), "mlp-infer 1": (1, None)}
RUN_IMPLS = ("mgegraph fixed", "mgegraph symbolic", "onnxruntime fixed", "onnxruntime batch")
SPECIALISE = {"resnet18 1x224": (1, 224), "resnet18 8x64": (8, 64), "mlp-infer 7": (7, None),
              "convnet-train 17": (17, None)}
PARTS = ("first call", "replay", "compile", "first run", "fixed compile", "cached run")
STREAM_IMPLS = ("mgegraph cache 16", "mgegraph cache 64", "onnxruntime")
STREAM = {"requests": 100, "sizes": (1, 64), "seed": 0}


@functools.cache
def _modules():
    """benchmarks/'s helpers, imported once, without the OMP_WAIT_POLICY their conftest sets
    for the pytest runs (the libraries' own defaults are what this script measures)."""
    saved = os.environ.get("OMP_WAIT_POLICY")
    sys.path.insert(0, str(HERE))
    import test_deploy
    import workloads
    if saved is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    return test_deploy, workloads


def _threads() -> int:
    return int(os.environ.get("MGEGRAPH_BENCH_THREADS", "2"))


# -- the models, with a named or a fixed batch --------------------------------------------------
def resnet_output(batch, size):
    import mgegraph as mg
    test_deploy, _ = _modules()
    g = mg.Graph()
    return test_deploy.model()(g.input("x", (batch, 3, size, size)))


def mlp_output(batch):
    test_deploy, _ = _modules()
    return test_deploy.mlp_graph(batch)


def convnet_step(batch):
    """One SGD (lr 0.01) step of workloads' convnet with cross-entropy: the loss, the model's
    gradients and the update, built over ``batch`` (a number or a name)."""
    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph import nn, optim
    _, workloads = _modules()
    nn.init.manual_seed(workloads.SEED)
    model = workloads._convnet()
    model.train()
    g = mg.Graph()
    x, y = g.input("x", (batch, 3, 32, 32)), g.input("y", (batch,), "int64")
    loss = F.cross_entropy(model(x), y)
    opt = optim.SGD(model.parameters(), lr=0.01)
    grads = mg.grad(loss, [g.bind(p) for p in opt.params])
    opt.build(g, {id(p): dg for p, dg in zip(opt.params, grads)})
    return F.reshape(loss, ())


def inputs(workload: str, batch: int, seed: int = 1) -> dict:
    import numpy as np
    _, workloads = _modules()
    rng = np.random.default_rng(workloads.SEED + seed)
    if workload.startswith("convnet"):
        return {"x": rng.standard_normal((batch, 3, 32, 32), np.float32),
                "y": rng.integers(0, 10, batch).astype(np.int64)}
    if workload.startswith("mlp"):
        return {"x": rng.standard_normal((batch, workloads.MLP_LAYERS[0]), np.float32)}
    size = (RUN.get(workload) or SPECIALISE[workload])[1]
    return {"x": rng.standard_normal((batch, 3, size, size), np.float32)}


def output(workload: str, batch, size=None):
    if workload.startswith("convnet"):
        return convnet_step(batch)
    return mlp_output(batch) if workload.startswith("mlp") else resnet_output(batch, size)


# -- ONNX Runtime --------------------------------------------------------------------------------
def ort_session(workload: str, batch):
    """A session on the workload's ONNX file, its batch ``batch`` (a number, or "batch" for a
    file whose batch is a dim_param)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = _threads(), 1
    return ort.InferenceSession(onnx_bytes(workload, batch), options,
                                providers=["CPUExecutionProvider"])


def onnx_bytes(workload: str, batch) -> bytes:
    import io

    import torch
    test_deploy, _ = _modules()
    if workload.startswith("mlp"):
        return test_deploy.mlp_onnx(batch)
    size = RUN[workload][1]
    buffer = io.BytesIO()
    dynamic = {"input0": {0: "batch"}, "logits": {0: "batch"}} if batch == "batch" else None
    example = torch.zeros(1 if batch == "batch" else batch, 3, size, size)
    torch.onnx.export(test_deploy.torch_resnet18(torch), (example,),
                      buffer, input_names=["input0"], output_names=["logits"], opset_version=17,
                      dynamic_axes=dynamic, dynamo=False)
    return buffer.getvalue()


# -- what a child process measures ---------------------------------------------------------------
def run_call(impl: str, workload: str):
    """The timed call of a ``run`` row, its result checked against the fixed-shape plan's."""
    import numpy as np

    import mgegraph as mg
    batch, size = RUN[workload]
    feeds = inputs(workload, batch)
    want = mg.compile([output(workload, batch, size)]).run(feeds)[0]
    if impl.startswith("mgegraph"):
        plan = mg.compile([output(workload, "batch" if impl.endswith("symbolic") else batch,
                                  size)])
        call = functools.partial(plan.run, feeds)
    else:
        session = ort_session(workload, "batch" if impl.endswith("batch") else batch)
        call = functools.partial(session.run, None, {session.get_inputs()[0].name: feeds["x"]})
    np.testing.assert_allclose(call()[0], want, rtol=1e-3, atol=1e-3)
    return call


def measure_run(impl: str, workload: str, runs: int) -> dict:
    call = run_call(impl, workload)
    for _ in range(3):
        call()
    return {"seconds": statistics.median(_timed(call) for _ in range(runs))}


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure_specialise(workload: str, repeats: int) -> dict:
    """Seconds of each part of a first call at a new shape (medians of ``repeats``)."""
    import mgegraph as mg
    from mgegraph.ir.specialize import specialize
    batch, size = SPECIALISE[workload]
    plan = mg.compile([output(workload, "batch", size)])
    plan.run(inputs(workload, batch + 1))  # another shape first: only this one is new
    feeds = inputs(workload, batch)
    parts = {p: [] for p in PARTS}
    for _ in range(repeats):
        plan.clear_cache()
        parts["first call"].append(_timed(lambda: plan.run(feeds)))
        parts["cached run"].append(_timed(lambda: plan.run(feeds)))
        start = time.perf_counter()
        _, outs = specialize(plan.graph, plan.outputs, {"batch": batch})
        parts["replay"].append(time.perf_counter() - start)
        fresh = plan._compile_fixed(outs)
        parts["compile"].append(time.perf_counter() - start - parts["replay"][-1])
        parts["first run"].append(_timed(functools.partial(fresh.run, feeds)))
        fixed = output(workload, batch, size)
        parts["fixed compile"].append(_timed(functools.partial(mg.compile, [fixed])))
    return {p: statistics.median(v) for p, v in parts.items()}


def request_stream() -> list[int]:
    import numpy as np
    low, high = STREAM["sizes"]
    return [int(b) for b in np.random.default_rng(STREAM["seed"]).integers(
        low, high + 1, STREAM["requests"])]


def measure_stream(impl: str) -> dict:
    """Seconds of the first pass over the stream (fresh plan or session) and of a second."""
    import mgegraph as mg
    sizes = request_stream()
    requests = [inputs("mlp-infer", b, seed=k) for k, b in enumerate(sizes)]
    if impl.startswith("mgegraph"):
        plan = mg.compile([mlp_output("batch")], cache_size=int(impl.split()[-1]))
        call = plan.run
    else:
        session = ort_session("mlp-infer", "batch")
        call = functools.partial(session.run, None)
    passes = [_timed(lambda: [call(feeds) for feeds in requests]) for _ in range(2)]
    made = plan.specialisations if impl.startswith("mgegraph") else None
    return {"first pass": passes[0], "second pass": passes[1], "specialisations": made,
            "distinct sizes": len(set(sizes))}


# -- the parent: children, rounds, tables --------------------------------------------------------
def child(part: str, impl: str, workload: str, threads: int, args) -> dict | str:
    """The child's figures, or why the row could not run (a peer not installed, say)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MGEGRAPH_BENCH_THREADS": str(threads)}
    if "OMP_WAIT_POLICY" not in os.environ:
        env.pop("OMP_WAIT_POLICY", None)
    done = subprocess.run([sys.executable, __file__, "--child", part, impl, workload,
                           str(args.runs), str(args.repeats)], env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:100]
    return json.loads(done.stdout.strip().splitlines()[-1])


def in_child(part: str, impl: str, workload: str, runs: int, repeats: int) -> dict:
    import mgegraph._kernels  # noqa: F401  (mgegraph's OpenMP runtime loads first, its policy)
    if part == "run":
        return measure_run(impl, workload, runs)
    if part == "specialise":
        return measure_specialise(workload, repeats)
    return measure_stream(impl)


def rows(parts: list[str]) -> list[tuple[str, str, str]]:
    """(part, implementation, workload) of every row of the parts chosen."""
    out = []
    if "run" in parts:
        out += [("run", impl, w) for w in RUN for impl in RUN_IMPLS]
    if "specialise" in parts:
        out += [("specialise", "mgegraph", w) for w in SPECIALISE]
    if "stream" in parts:
        out += [("stream", impl, "mlp-infer stream") for impl in STREAM_IMPLS]
    return out


def _median_of(results: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in results) if results[0][k] is not None else None
            for k in results[0]}


def table(results: dict, skipped: dict, chosen: list, threads: list[int]) -> list[str]:
    lines = []
    for part in ("run", "specialise", "stream"):
        keys = [(p, i, w) for p, i, w in chosen if p == part]
        if keys:
            lines += ["", HEADERS[part]]
        for t in threads:
            medians = {k: _median_of(results[k, t]) for k in keys if results.get((k, t))}
            for key in keys:
                got = medians.get(key)
                if got is None:
                    lines.append(f"{key[2]:20} {t:>3} {key[1]:20} skipped: "
                                 f"{skipped.get((key, t), 'not run')}")
                else:
                    lines.append(FORMAT[part](key, t, got, medians, results[key, t]))
    return lines


def _run_line(key, t, got, medians, rounds) -> str:
    _, impl, workload = key
    base = ("run", "mgegraph fixed" if impl.startswith("mgegraph") else "onnxruntime fixed",
            workload)
    ort = ("run", "onnxruntime batch" if impl.endswith(("symbolic", "batch")) else
           "onnxruntime fixed", workload)
    ratio = (f"{got['seconds'] / medians[base]['seconds']:>8.3f}" if base in medians
             else f"{'-':>8}")
    to_ort = (f"{got['seconds'] / medians[ort]['seconds']:>7.2f}" if ort in medians
              else f"{'-':>7}")
    each = " ".join(f"{r['seconds'] * 1e3:.3f}" for r in rounds)
    return (f"{workload:20} {t:>3} {impl:20} {got['seconds'] * 1e3:>10.3f} {ratio} {to_ort}  "
            f"{each}")


def _specialise_line(key, t, got, medians, rounds) -> str:
    cells = " ".join(f"{got[p] * 1e3:>10.1f}" for p in PARTS)
    return f"{key[2]:20} {t:>3} {cells}"


def _stream_line(key, t, got, medians, rounds) -> str:
    made = "-" if got["specialisations"] is None else f"{got['specialisations']:.0f}"
    return (f"{key[2]:20} {t:>3} {key[1]:20} {got['first pass'] * 1e3:>10.1f} "
            f"{got['second pass'] * 1e3:>10.1f} {made:>8}")


HEADERS = {
    "run": f"{'run':20} {'thr':>3} {'implementation':20} {'median ms':>10} {'x fixed':>8} "
           f"{'x ORT':>7}  each round's median, ms (x ORT: against ORT's file of the same kind)",
    "specialise": f"{'first call, ms':20} {'thr':>3} " + " ".join(f"{p:>10}" for p in PARTS),
    "stream": f"{'stream, ms':20} {'thr':>3} {'implementation':20} {'first pass':>10} "
              f"{'second':>10} {'made':>8}  ({STREAM['requests']} requests, batch "
              f"{STREAM['sizes'][0]}..{STREAM['sizes'][1]}, seed {STREAM['seed']})",
}
FORMAT = {"run": _run_line, "specialise": _specialise_line, "stream": _stream_line}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="PART",
                        help="some of: run, specialise, stream (default: all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=40, help="timed calls per process (run)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="first calls per process (specialise)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        part, impl, workload, runs, repeats = args.child
        print(json.dumps(in_child(part, impl, workload, int(runs), int(repeats))))
        return 0
    unknown = set(args.parts) - set(HEADERS)
    if unknown:
        parser.error(f"unknown part {', '.join(sorted(unknown))}: choose from {', '.join(HEADERS)}")
    chosen = rows(args.parts or list(HEADERS))
    results: dict = {}  # ((part, impl, workload), threads) -> each round's figures
    skipped: dict = {}
    for _ in range(args.rounds):
        for key in chosen:
            for t in args.threads:
                got = child(*key, t, args)
                if isinstance(got, str):
                    skipped[key, t] = got
                else:
                    results.setdefault((key, t), []).append(got)
    print("\n".join(table(results, skipped, chosen, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
