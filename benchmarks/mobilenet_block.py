"""MobileNet-v2 inverted residual blocks and a transposed-convolution layer, inference at batch 1:
mgegraph (a ``freeze=True`` plan), ONNX Runtime on the model mgegraph exports, and PyTorch
eager on the same weights, each alone in a fresh process at 1 and 2 threads.

    python benchmarks/mobilenet_block.py                       # every case, 1 and 2 threads
    python benchmarks/mobilenet_block.py --threads 1 --rounds 3 "block s2 56->28"
    python benchmarks/mobilenet_block.py --paths               # the conv path of each layer

A block is 1x1 expand (32 -> 192) + ReLU6, 3x3 depthwise (stride 1 or 2) + ReLU6, 1x1 project
(192 -> 32), and the residual add at stride 1; batch norm is left out (a frozen plan folds it
into the convolutions, and so does ONNX Runtime). The transposed layer is 64 -> 32 channels,
3x3 stride 2, padding 1, output_padding 1: 32x32 -> 64x64. Rounds are interleaved so a burst
of load on a shared machine hits every implementation; the table has the median of the
rounds' medians and the ratios to PyTorch and ONNX Runtime.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SEED = 0
# name: (kind, input shape, depthwise stride)
CASES = {"block s1 56x56": ("block", (1, 32, 56, 56), 1),
         "block s2 56->28": ("block", (1, 32, 56, 56), 2),
         "block s1 28x28": ("block", (1, 32, 28, 28), 1),
         "convT 64->32 32->64": ("transpose", (1, 64, 32, 32), 2)}
# "mgegraph im2col": the depthwise layers on the path they took before the depthwise one
IMPLS = ("mgegraph", "mgegraph im2col", "onnxruntime", "torch")


def _weights(kind, stride):
    """The case's weights, the same arrays for every implementation."""
    import numpy as np
    rng = np.random.default_rng(SEED)

    def w(*shape):
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    if kind == "transpose":
        return {"w": w(64, 32, 3, 3), "b": w(32, 1)[:, 0]}
    return {"w1": w(192, 32, 1, 1), "b1": w(192, 1)[:, 0], "w2": w(192, 1, 3, 3),
            "b2": w(192, 1)[:, 0], "w3": w(32, 192, 1, 1), "b3": w(32, 1)[:, 0]}


def forward(F, p, x, kind, stride):
    """The case's forward pass, written once for mgegraph.functional and torch.nn.functional."""
    if kind == "transpose":
        return F.conv_transpose2d(x, p["w"], p["b"], stride=2, padding=1, output_padding=1)
    h = F.relu6(F.conv2d(x, p["w1"], p["b1"]))
    h = F.relu6(F.conv2d(h, p["w2"], p["b2"], stride=stride, padding=1, groups=192))
    y = F.conv2d(h, p["w3"], p["b3"])
    return x + y if stride == 1 else y


def mgegraph_plan(case, im2col=False):
    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph._kernels.lowering import conv as lowering
    if im2col:
        lowering._depthwise_applies = lambda op, groups_dims: False
    kind, shape, stride = CASES[case]
    g = mg.Graph()
    params = {k: g.param(k, v) for k, v in _weights(kind, stride).items()}
    y = forward(F, params, g.input("x", shape), kind, stride)
    return mg.compile([y], freeze=True, tune="rules"), g, y


def call_of(impl, case):
    import numpy as np
    kind, shape, stride = CASES[case]
    x = np.random.default_rng(SEED + 1).standard_normal(shape, dtype=np.float32)
    if impl.startswith("mgegraph"):
        plan = mgegraph_plan(case, im2col=impl.endswith("im2col"))[0]
        return lambda: plan.run({"x": x})
    if impl == "torch":
        import torch
        params = {k: torch.from_numpy(v) for k, v in _weights(kind, stride).items()}
        tx = torch.from_numpy(x)

        def run():
            with torch.inference_mode():
                return forward(torch.nn.functional, params, tx, kind, stride)
        return run
    import onnxruntime as ort

    import mgegraph.onnx as mo
    _, g, y = mgegraph_plan(case)
    path = os.path.join(tempfile.mkdtemp(), "case.onnx")
    mo.export((g, [y]), path)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = \
        int(os.environ["OMP_NUM_THREADS"]), 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: x})


def measure(impl, case, runs) -> float:
    """Median seconds of ``runs`` calls after 5 warm-up calls (in the child process)."""
    if impl == "torch":  # its OpenMP runtime loads first, with its defaults
        import torch
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    call = call_of(impl, case)
    for _ in range(5):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child(impl, case, threads, runs) -> float | str:
    """Seconds, or why the row could not run."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MGEGRAPH_BENCH_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", impl, case, str(runs)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def paths() -> list[str]:
    """Each convolution instruction of each case's frozen plan and the way it takes."""
    lines = []
    for case in CASES:
        plan = mgegraph_plan(case)[0]
        for ins in plan.instructions:
            if ins.op.startswith("conv2d"):
                lines.append(f"{case:22} {ins.op:22} {ins.choice.path if ins.choice else '-'}")
    return lines


def table(results, threads) -> list[str]:
    lines = [(f"{'case':22} {'threads':>7} {'implementation':14} {'median ms':>10} "
             f"{'x torch':>8} {'x ORT':>8}  each round's median, ms")]
    for case in {c for c, _, _ in results}:
        for t in threads:
            medians = {impl: statistics.median(results[case, impl, t]) for impl in IMPLS
                       if all(isinstance(s, float) for s in results[case, impl, t])}
            for impl in IMPLS:
                rounds = results[case, impl, t]
                if impl not in medians:
                    lines.append(f"{case:22} {t:>7} {impl:14} {'-':>10}  {rounds[-1]}")
                    continue
                ratios = " ".join(f"{medians[impl] / medians[peer]:8.2f}" if peer in medians
                                  else f"{'-':>8}" for peer in ("torch", "onnxruntime"))
                each = " ".join(f"{s * 1e3:.3f}" for s in rounds)
                lines.append(f"{case:22} {t:>7} {impl:14} {medians[impl] * 1e3:10.3f} "
                             f"{ratios}  {each}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--paths", action="store_true", help="print each conv's path and stop")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        impl, case, runs = args.child
        print(json.dumps({"seconds": measure(impl, case, int(runs))}))
        return 0
    if args.paths:
        print("\n".join(paths()))
        return 0
    results = {}
    for _ in range(args.rounds):
        for case in args.cases:
            for t in args.threads:
                for impl in IMPLS:
                    results.setdefault((case, impl, t), []).append(
                        child(impl, case, t, args.runs))
    print("\n".join(table(results, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
