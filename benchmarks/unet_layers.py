"""The U-Net's inference (or the conv-transpose layer) layer by layer, mgegraph against ONNX
Runtime, in one process: mgegraph's profiler (``mg.profile``) times each instruction of the
frozen plan, ONNX Runtime's session profiling (``enable_profiling``) each node of the model
mgegraph exports; the two run interleaved, call by call, so load on a shared machine hits both.

    OMP_NUM_THREADS=1 python benchmarks/unet_layers.py            # the U-Net at 1x3x128x128
    OMP_NUM_THREADS=2 python benchmarks/unet_layers.py --calls 60
    OMP_NUM_THREADS=1 python benchmarks/unet_layers.py conv-transpose

    OMP_NUM_THREADS=2 python benchmarks/unet_layers.py conv-transpose --ways

``--ways``: the U-Net's transposed convolutions alone (3x3/2 from 64 to 32 channels at 32x32,
the conv-transpose layer; 2x2/2 at 64x64, the U-Net's own at 1x3x128x128) each run two ways,
the rules' (the BLAS's GEMM, "im2col") and compile(tune="deterministic")'s ("tiles":
gemm_tile.h's, the C runtime's), called by turns, ABAB..., and the median microseconds of each
with their ratio.

Prints each side's layers, slowest first, as median microseconds over the calls (a mean would
take in every call the system preempted): mgegraph's per instruction (with its kernel and
way), ONNX Runtime's per node (its graph optimiser fuses and reorders:
NCHWc convolutions with Reorder nodes around them, group norm as InstanceNormalization, Mul
and Add), then the two totals. Match the layers by their op and shape; compare ratios, not
times, where the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import vision_workloads as vw  # noqa: E402

import mgegraph as mg  # noqa: E402


def _model(workload: str):
    """The frozen plan's predictor, its input and the ONNX file mgegraph exports of it."""
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), f"{workload}.onnx")
    if workload == "unet":
        x = np.random.default_rng(vw.SEED + 1).standard_normal((1, 3, 128, 128), dtype=np.float32)
        ours, _ = vw._unet_pair()
        ours.eval()
        predict = mg.compile_module(ours, example_inputs=(x,), freeze=True, tune="rules")
        mg.onnx.export(predict, path)
        return predict, x, path
    import mgegraph.functional as F
    rng = np.random.default_rng(vw.SEED)
    weights = {"w": vw._weight(rng, 64, 32, 3, 3), "b": vw._weight(rng, 32, 1)[:, 0]}
    x = np.random.default_rng(vw.SEED + 1).standard_normal((1, 64, 32, 32), dtype=np.float32)
    g = mg.Graph()
    y = vw._transpose(F, {k: g.param(k, v) for k, v in weights.items()}, g.input("x", x.shape))
    plan = mg.compile([y], freeze=True, tune="rules")
    mg.onnx.export((g, [y]), path)
    return (lambda v: plan.run({"x": v})), x, path


def _ort_nodes(profile_file: str) -> list[tuple[float, str, str]]:
    """(median us, op, node) of each node in ONNX Runtime's profile, slowest first."""
    with open(profile_file) as f:
        events = json.load(f)
    times: dict[tuple[str, str], list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = (e["args"].get("op_name", "?"), e["name"].removesuffix("_kernel_time"))
            times.setdefault(key, []).append(e["dur"])
    return sorted(((statistics.median(v), op, node) for (op, node), v in times.items()),
                  reverse=True)


def _mgegraph_instructions(prof) -> list[tuple[float, str, str]]:
    """(median us, op, kernel and way) of each instruction of the profiled plan, slowest first,
    from the runs the profile kept whole."""
    runs = prof.runs
    plan = runs[0].plan
    durations = np.stack([r.times[:, 1] for r in runs if r.complete and r.plan is plan])
    rows = []
    for i, ins in enumerate(plan.instructions):
        way = f" ({ins.choice.path})" if ins.choice else ""
        rows.append((float(np.median(durations[:, i])) / 1e3, ins.op, f"{ins.kernel}{way}"))
    return sorted(rows, reverse=True)


# the U-Net's transposed convolutions: x's shape, the weight's, the options
TRANSPOSED = {"3x3/2 64->32 at 32x32": ((1, 64, 32, 32), (64, 32, 3, 3),
                                         dict(stride=2, padding=1, output_padding=1)),
              "2x2/2 64->32 at 64x64": ((1, 64, 64, 64), (64, 32, 2, 2), dict(stride=2))}


def _ways(calls: int, warmup: int) -> None:
    """Each transposed layer's rules' and deterministic ways, by turns: medians and ratio."""
    import time

    import mgegraph.functional as F
    rng = np.random.default_rng(vw.SEED)
    for name, (shape, weight, options) in TRANSPOSED.items():
        g = mg.Graph()
        y = F.conv_transpose2d(g.input("x", shape), g.param("w", vw._weight(rng, *weight)),
                               g.param("b", vw._weight(rng, weight[1], 1)[:, 0]), **options)
        plans = {tune: mg.compile([y], freeze=True, tune=tune)
                 for tune in ("rules", "deterministic")}
        feeds = {"x": rng.standard_normal(shape, dtype=np.float32)}
        times = {tune: [] for tune in plans}
        for k in range(warmup + calls):
            for tune, plan in plans.items():
                start = time.perf_counter()
                plan.run(feeds)
                if k >= warmup:
                    times[tune].append(time.perf_counter() - start)
        medians = {t: statistics.median(v) * 1e6 for t, v in times.items()}
        ways = {t: [i.choice.path for i in p.instructions if i.op == "conv2d_backward_data"]
                for t, p in plans.items()}
        print(f"{name}: " + ", ".join(f"{ways[t][0]} {medians[t]:.0f} us" for t in plans)
              + f"; tiles / BLAS {medians['deterministic'] / medians['rules']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", default="unet", choices=("unet", "conv-transpose"))
    parser.add_argument("--calls", type=int, default=40, help="timed calls of each (default 40)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--ways", action="store_true",
                        help="the transposed layers' two ways against each other, no ONNX")
    args = parser.parse_args()
    if args.ways:
        print(f"{int(os.environ['OMP_NUM_THREADS'])} thread(s), {args.calls} calls each")
        _ways(args.calls, args.warmup)
        return
    import onnxruntime as ort
    threads = int(os.environ["OMP_NUM_THREADS"])
    predict, x, path = _model(args.workload)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(os.path.dirname(path), "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    np.testing.assert_allclose(session.run(None, {name: x})[0], np.asarray(predict(x)).reshape(
        session.run(None, {name: x})[0].shape), rtol=1e-4, atol=1e-4)
    with mg.profile(warmup=args.warmup) as prof:
        for _ in range(args.warmup + args.calls):
            predict(x)
            session.run(None, {name: x})
    nodes, ours = _ort_nodes(session.end_profiling()), _mgegraph_instructions(prof)
    print(f"{args.workload}, {threads} thread(s), {args.calls} calls each, interleaved")
    for title, rows in ((f"mgegraph, median us per instruction ({len(ours)})", ours),
                        (f"ONNX Runtime, median us per node ({len(nodes)})", nodes)):
        print(f"\n{title}")
        for us, op, what in rows:
            print(f"{us:10.0f}  {op:24} {what}")
    print(f"\nsum of the medians: mgegraph {sum(r[0] for r in ours):.0f} us, "
          f"ONNX Runtime {sum(n[0] for n in nodes):.0f} us")


if __name__ == "__main__":
    main()
