"""Bilinear resizing: mgegraph's plan against ONNX Runtime and PyTorch eager, each in a fresh
process per (implementation, case, threads) and round, rounds interleaved so a burst of load on
a shared machine hits every implementation alike.

    PYTHONPATH=$PWD python benchmarks/resize.py                  # 1 and 2 threads, 3 rounds
    PYTHONPATH=$PWD python benchmarks/resize.py --threads 2 --rounds 5 --runs 50

Cases: 1x64x128x128 -> 256x256 (upsampling) and 8x3x224x224 -> 112x112 (downsampling), float32,
align_corners=False (ONNX Resize's half_pixel, linear). A child times ``runs`` calls after two
warm-up calls and reports their median; the table shows the median of the rounds' medians and
each implementation's time over PyTorch's and ONNX Runtime's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

CASES = {"up 1x64x128x128->256x256": ((1, 64, 128, 128), (256, 256)),
         "down 8x3x224x224->112x112": ((8, 3, 224, 224), (112, 112))}
IMPLS = ("mgegraph", "onnxruntime", "torch")


def _input(case):
    shape, _ = CASES[case]
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _mgegraph(case, threads):
    import mgegraph as mg  # lazy: each child loads only the library it measures
    import mgegraph.functional as F  # lazy: as above
    x = _input(case)
    g = mg.Graph()
    v = g.input("x", x.shape, np.float32)
    plan = mg.compile([F.vision.interpolate(v, size=CASES[case][1], mode="bilinear")])
    return lambda: plan.run({"x": x})


def _onnxruntime(case, threads):
    import onnxruntime as ort  # lazy: each child loads only the library it measures
    from onnx import TensorProto, helper, numpy_helper  # lazy: as above
    x = _input(case)
    sizes = numpy_helper.from_array(np.asarray(x.shape[:2] + CASES[case][1], np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x.shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})


def _torch(case, threads):
    import torch  # lazy: each child loads only the library it measures
    torch.set_num_threads(threads)
    x = torch.from_numpy(_input(case))
    size = CASES[case][1]

    def call():
        with torch.no_grad():
            return torch.nn.functional.interpolate(x, size=size, mode="bilinear",
                                                   align_corners=False)
    return call


def measure(impl: str, case: str, threads: int, runs: int) -> float:
    """The median seconds of ``runs`` calls of one implementation, in this process."""
    call = {"mgegraph": _mgegraph, "onnxruntime": _onnxruntime, "torch": _torch}[impl](
        case, threads)
    call(), call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child(impl: str, case: str, threads: int, runs: int) -> float | str:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", impl, case, str(threads),
                           str(runs)], env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        return (done.stderr.strip().splitlines() or ["failed"])[-1]
    return float(done.stdout.strip().splitlines()[-1])


def table(results: dict, threads_list, rounds: int) -> str:
    lines = [f"{'case':28} {'thr':>3} {'impl':12} {'median ms':>10} {'/torch':>7} {'/ort':>7}"]
    for case in CASES:
        for threads in threads_list:
            medians = {impl: statistics.median(results[case, threads, impl])
                       for impl in IMPLS if results[case, threads, impl]}
            for impl, t in medians.items():
                ratio = {k: f"{t / medians[k]:.2f}" if k in medians else "-"
                         for k in ("torch", "onnxruntime")}
                lines.append(f"{case:28} {threads:>3} {impl:12} {t * 1e3:>10.3f} "
                             f"{ratio['torch']:>7} {ratio['onnxruntime']:>7}")
    return "\n".join(lines) + f"\n(median of {rounds} rounds' medians, each in a fresh process)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    results = {(c, t, i): [] for c in CASES for t in args.threads for i in IMPLS}
    for _ in range(args.rounds):
        for (case, threads, impl), times in results.items():
            got = child(impl, case, threads, args.runs)
            if isinstance(got, str):
                print(f"{impl} {case} {threads}: {got}", file=sys.stderr)
            else:
                times.append(got)
    print(table(results, args.threads, args.rounds))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, impl, case, threads, runs = sys.argv
        print(measure(impl, case, int(threads), int(runs)))
    else:
        main()
