"""Group norm of 8x64x56x56 in 32 groups: mgegraph against ONNX Runtime and PyTorch eager.

    python benchmarks/group_norm.py                  # 1 and 2 threads, 3 rounds
    python benchmarks/group_norm.py --threads 2 --rounds 5 --runs 50

Each (implementation, mode, thread count) runs alone in a fresh process, rounds interleaved so a
burst of load on a shared machine hits every implementation; the table gives the median of the
rounds' medians and each one's ratio to PyTorch eager. Modes: "infer" is the forward pass
(mgegraph: a compiled plan; ONNX Runtime: one GroupNormalization node, opset 21), "train" the
forward and backward pass with respect to x, weight and bias for a given dy (mgegraph: one plan
of y and the three gradients; eagerly, a GradManager step of sum(y * dy); PyTorch: forward and
``backward(dy)``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

SHAPE, GROUPS, EPS = (8, 64, 56, 56), 32, 1e-5
IMPLS = {"infer": ("mgegraph", "onnxruntime", "torch"),
         "train": ("mgegraph", "mgegraph eager", "torch")}


def _data():
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    w, b = rng.standard_normal((2, SHAPE[1]), dtype=np.float32)
    return x, w, b, rng.standard_normal(SHAPE, dtype=np.float32)


def _mgegraph(mode: str):
    import mgegraph as mg
    import mgegraph.functional as F
    x, w, b, dy = _data()
    g = mg.Graph()
    xv, wv, bv = g.input("x", SHAPE), g.param("w", w), g.param("b", b)
    y = F.nn.group_norm(xv, GROUPS, True, wv, bv, EPS)
    if mode == "infer":
        plan = mg.compile([y])
        return lambda: plan.run({"x": x})
    dyv = g.input("dy", SHAPE)
    plan = mg.compile([y, *mg.grad(y, [xv, wv, bv], seed=dyv)])
    return lambda: plan.run({"x": x, "dy": dy})


def _mgegraph_eager():
    import mgegraph as mg
    import mgegraph.functional as F
    x, w, b, dy = _data()
    xt, wt, bt, dyt = (mg.tensor(a) for a in (x, w, b, dy))

    def step():
        with mg.GradManager().attach([xt, wt, bt]) as gm:
            y = F.nn.group_norm(xt, GROUPS, True, wt, bt, EPS)
            gm.backward(F.sum(y * dyt))
    return step


def _torch(mode: str):
    import torch
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    x, w, b, dy = (torch.from_numpy(a) for a in _data())
    if mode == "infer":
        def infer():
            with torch.no_grad():
                torch.nn.functional.group_norm(x, GROUPS, w, b, EPS)
        return infer
    x, w, b = (t.requires_grad_() for t in (x, w, b))

    def train():
        x.grad = w.grad = b.grad = None
        torch.nn.functional.group_norm(x, GROUPS, w, b, EPS).backward(dy)
    return train


def _onnxruntime():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    x, w, b, _ = _data()
    node = helper.make_node("GroupNormalization", ["x", "w", "b"], ["y"], num_groups=GROUPS,
                            epsilon=EPS)
    graph = helper.make_graph(
        [node], "group_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    onnx.checker.check_model(model)
    return lambda: session.run(None, {"x": x})


def call(impl: str, mode: str):
    if impl == "mgegraph":
        return _mgegraph(mode)
    if impl == "mgegraph eager":
        return _mgegraph_eager()
    if impl == "torch":
        return _torch(mode)
    return _onnxruntime()


def measure(impl: str, mode: str, runs: int) -> float:
    fn = call(impl, mode)
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child(impl: str, mode: str, threads: int, runs: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", impl, mode, str(runs)], env=env,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        impl, mode, runs = args.child
        print(measure(impl, mode, int(runs)))
        return 0
    results: dict = {}
    for _ in range(args.rounds):
        for mode, impls in IMPLS.items():
            for threads in args.threads:
                for impl in impls:
                    key = (mode, threads, impl)
                    results.setdefault(key, []).append(child(impl, mode, threads, args.runs))
    print(f"{'mode':6} {'threads':>7} {'implementation':16} {'median ms':>10} {'/ torch':>8}")
    for (mode, threads, impl), times in results.items():
        ms = statistics.median(times) * 1e3
        torch_ms = statistics.median(results[(mode, threads, "torch")]) * 1e3
        print(f"{mode:6} {threads:>7} {impl:16} {ms:>10.3f} {ms / torch_ms:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
