"""Each implementation alone in a fresh process, with its library's own thread defaults.

    python benchmarks/fresh_process.py                      # every row at 2 threads, 2 rounds
    python benchmarks/fresh_process.py --threads 1 2 --rounds 3 resnet-infer

``mgegraph bench`` runs every implementation of a workload in one pytest process, where each
library's idle threads must sleep (``OMP_WAIT_POLICY=PASSIVE``): a peer's spinning pool would
starve the next one's. Users run one library at a time, with its defaults: mgegraph's idle
threads spin about a millisecond (its one OpenMP pool; see mgegraph/_kernels/__init__.py), as
PyTorch's do, and ONNX Runtime has its own spinning pool. This script measures that: one
process per (implementation, workload, thread count) and round, rounds interleaved so a burst
of load on a shared machine hits every implementation, and prints the median of the rounds'
medians with each one's ratio to PyTorch eager, to ONNX Runtime and to the workload's limit:
the GEMMs back to back through the BLAS the kernels call (mlp-train, mlp-infer), or 80 MiB at
the bandwidth of np.copyto (fusion-chain, where "mgegraph" is ``plan.run`` and "mgegraph
executor" the executor alone). op-overhead's 1,000 ops per call make its milliseconds the
microseconds per op, against NumPy's too: mgegraph eager (``mg.tensor`` op by op, its constants
0-d tensors; "mgegraph scalars": Python numbers, as PyTorch's row has), the same function under
``mg.jit.trace`` and the chain's plan (``plan.run``).
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
# "mgegraph": compile's defaults, but the kernels' ways by the rules (tune="rules": whatever this
# machine has stored aside); "mgegraph tuned": the ways measured here (tune="cached": the first
# process measures and stores them, the others read them; the timed calls come after compile);
# "mgegraph -O0": the plan compiled with optimize=0 (issue 19: optimize=1 never slower);
# "mgegraph -O2": the training step at optimize=2 (SGD's update inside the GEMM, accumulate);
# "mgegraph nn.Linear": mlp-infer's MLP as nn.Linear layers through compile_module (weights stored
# (out, in), as a model's are); "limit": the workload's physical limit (GEMMs back to back
# through the BLAS the kernels call, or fusion-chain's 80 MiB at the bandwidth of np.copyto)
RESNET_IMPLS = ("mgegraph", "mgegraph tuned", "mgegraph -O0", "torch", "onnxruntime")
WORKLOADS = {"resnet-infer 1x224": RESNET_IMPLS, "resnet-infer 8x64": RESNET_IMPLS,
             "convnet-train": ("mgegraph", "mgegraph -O2", "torch"),
             "mlp-train": ("mgegraph", "mgegraph -O2", "torch", "limit"),
             "mlp-infer 1": ("mgegraph", "mgegraph tuned", "mgegraph nn.Linear", "torch",
                             "onnxruntime", "limit"),
             "mlp-infer 128": ("mgegraph", "mgegraph tuned", "mgegraph nn.Linear", "torch",
                               "onnxruntime", "limit"),
             "fusion-chain": ("mgegraph", "mgegraph executor", "torch", "torch.compile",
                              "onnxruntime", "limit"),
             "op-overhead": ("mgegraph eager", "mgegraph scalars", "mgegraph trace",
                             "mgegraph plan", "torch", "numpy")}
# the vision workloads (vision_workloads.py); "mgegraph im2col": the depthwise layers on the
# im2col path they took before the depthwise one; "mgegraph direct 1x1": the 1x1 layers on the
# direct GEMM they took before the pointwise tiles; "mgegraph eager": a GradManager step
_PEERS = ("mgegraph", "torch", "onnxruntime")
WORKLOADS |= {**{f"mobilenet {case}": ("mgegraph", "mgegraph im2col", "mgegraph direct 1x1",
                                       "torch", "onnxruntime")
                 for case in ("s1 56", "s2 56", "s1 28")},
              "conv-transpose 64->32": _PEERS, "resize up": _PEERS, "resize down": _PEERS,
              "group-norm infer": _PEERS,
              "group-norm train": ("mgegraph", "mgegraph eager", "torch"),
              "unet infer": _PEERS, "unet train": ("mgegraph", "torch")}
# int8 inference against the float32 plan and ONNX Runtime's quantize_static (int8_workloads.py)
INT8_IMPLS = ("mgegraph float", "mgegraph int8", "onnxruntime float", "onnxruntime int8")
WORKLOADS |= {"mlp-int8 1": INT8_IMPLS, "mlp-int8 128": INT8_IMPLS}
# the int8 transposed convolution against the float32 one (int8_conv_transpose.py)
WORKLOADS |= {"conv-transpose-int8 64->32": ("mgegraph float", "mgegraph int8",
                                              "mgegraph int8 per call")}
# the transformer language model of examples/transformer_lm.py (sequence_workloads.py)
WORKLOADS |= {w: ("mgegraph", "torch", "torch.compile")
              for w in ("transformer-train", "transformer-generate")}


@functools.cache
def _benchmark_modules():
    """benchmarks/'s helpers, imported once, without the OMP_WAIT_POLICY their conftest sets for the
    pytest runs (the libraries' own defaults are what this script measures)."""
    saved = os.environ.get("OMP_WAIT_POLICY")
    sys.path.insert(0, str(HERE))
    import test_deploy
    import test_fusion
    import workloads
    if saved is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    return test_deploy, test_fusion, workloads


def resnet_call(impl: str, workload: str):
    import numpy as np
    test_deploy, _, workloads = _benchmark_modules()
    batch, size = (1, 224) if workload.endswith("1x224") else (8, 64)
    x = np.random.default_rng(workloads.SEED + 1).standard_normal((batch, 3, size, size),
                                                                  dtype=np.float32)
    if impl.startswith("mgegraph"):
        import mgegraph as mg
        fn = mg.compile_module(test_deploy.model(), (x,), optimize=0 if impl.endswith("-O0") else 1,
                               tune="cached" if impl.endswith("tuned") else "rules")
        return lambda: fn(x)
    if impl == "torch":
        import torch
        net, tx = test_deploy.torch_resnet18(torch), torch.from_numpy(x)
        return torch.no_grad()(lambda: net(tx))
    session = test_deploy.onnx_session(x)
    return functools.partial(session.run, None, {session.get_inputs()[0].name: x})


def train_call(impl: str, workload: str):
    _, _, workloads = _benchmark_modules()
    impls = workloads.convnet_train() if workload == "convnet-train" else workloads.mlp_train()
    return impls[{"mgegraph": "mgegraph step", "mgegraph -O2": workloads.STEP_O2,
                  "torch": "torch eager", "limit": workloads.GEMMS_ONLY}[impl]]


def mlp_infer_call(impl: str, workload: str):
    test_deploy, test_fusion, workloads = _benchmark_modules()
    batch = int(workload.split()[-1])
    if impl == "onnxruntime":
        import numpy as np
        ort = test_fusion.need("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = test_fusion.THREADS, 1
        session = ort.InferenceSession(test_deploy.mlp_onnx(batch), options,
                                       providers=["CPUExecutionProvider"])
        x = np.random.default_rng(workloads.SEED + 1).standard_normal(
            (batch, workloads.MLP_LAYERS[0]), dtype=np.float32)
        return functools.partial(session.run, None, {"x": x})
    return workloads.mlp_infer(batch)[{"mgegraph": "mgegraph plan.run",
                                      "mgegraph tuned": "mgegraph tuned",
                                      "mgegraph nn.Linear": "mgegraph nn.Linear",
                                      "torch": "torch eager", "limit": workloads.GEMMS_ONLY}[impl]]


def fusion_chain_call(impl: str, workload: str):
    _, test_fusion, _ = _benchmark_modules()
    if impl.startswith("mgegraph"):
        import models

        import mgegraph as mg
        plan = mg.compile([models.fusion_chain_graph(test_fusion.N)])
        feeds = test_fusion.chain_inputs()
        test_fusion.check(plan.run(feeds)[0], test_fusion.chain_reference(), impl)
        return plan.executable().executor.run if impl.endswith("executor") else \
            functools.partial(plan.run, feeds)
    if impl.startswith("torch"):
        return test_fusion.chain_torch(compiled=impl == "torch.compile")
    return test_fusion.chain_onnxruntime() if impl == "onnxruntime" else \
        test_fusion.copy_bandwidth()


def op_overhead_call(impl: str, workload: str):
    if impl != "torch":  # PyTorch's OpenMP runtime stays out of the other rows' processes
        os.environ["MGEGRAPH_BENCH_NO_TORCH"] = "1"
    _, _, workloads = _benchmark_modules()
    if impl == "mgegraph plan":
        return workloads.op_overhead()["mgegraph plan.run"]
    impls = workloads.op_overhead_eager()  # checks eager's result against NumPy's, bitwise
    if impl == "mgegraph trace":
        import numpy as np  # lazy: the parent process imports no library

        import mgegraph as mg
        x, a, m = (mg.tensor(v) for v in (workloads.op_chain_input(), np.float32(0.5),
                                          np.float32(0.999)))
        traced = mg.jit.trace(lambda v: workloads.op_chain_eager(v, a, m))
        np.testing.assert_array_equal(traced(x).numpy(), impls["numpy eager"]())
        return lambda: traced(x)
    return impls[{"mgegraph eager": "mgegraph eager",
                  "mgegraph scalars": "mgegraph eager, python scalars", "torch": "torch eager",
                  "numpy": "numpy eager"}[impl]]


def vision_call(impl: str, workload: str):
    _benchmark_modules()  # benchmarks/ on the path
    import vision_workloads
    name = workload.split(" ")[0].replace("-", "_")
    return getattr(vision_workloads, f"{name}_call")(impl, workload)


def int8_call(impl: str, workload: str):
    _benchmark_modules()  # benchmarks/ on the path
    import int8_workloads
    return getattr(int8_workloads, f"{workload.split()[0].replace('-', '_')}_call")(impl, workload)


def sequence_call(impl: str, workload: str):
    _benchmark_modules()  # benchmarks/ on the path
    import sequence_workloads
    return getattr(sequence_workloads, f"{workload.replace('-', '_')}_call")(impl, workload)


CALLS = {"resnet-infer": resnet_call, "convnet-train": train_call, "mlp-train": train_call,
         "mlp-infer": mlp_infer_call, "fusion-chain": fusion_chain_call,
         "op-overhead": op_overhead_call,
         **{w: vision_call for w in ("mobilenet", "conv-transpose", "resize", "group-norm",
                                     "unet")},
         "transformer-train": sequence_call, "transformer-generate": sequence_call,
         "mlp-int8": int8_call}


# ResNet-18 in int8 from ONNX Runtime's quantize_static: its own script (resnet18_int8.py) picks
# the shapes and runs its rows through child() here
def resnet18_int8_call(impl: str, workload: str):
    _benchmark_modules()  # benchmarks/ on the path
    import resnet18_int8
    return resnet18_int8.resnet18_int8_call(impl, workload)


CALLS["resnet18-int8"] = resnet18_int8_call


def conv_transpose_int8_call(impl: str, workload: str):
    _benchmark_modules()  # benchmarks/ on the path
    import int8_conv_transpose
    return int8_conv_transpose.conv_transpose_int8_call(impl, workload)


CALLS["conv-transpose-int8"] = conv_transpose_int8_call


def median_seconds(call, runs: int, warmup: int = 3) -> float:
    """Median seconds of ``runs`` calls of ``call``, after ``warmup`` untimed ones (the timing
    loop of every fresh-process benchmark: this one, c_runtime.py's, lstm.py's)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(impl: str, workload: str, runs: int) -> float:
    """Median seconds of ``runs`` calls, after 3 warm-up calls (run in the child)."""
    if impl.startswith("torch"):  # its OpenMP runtime loads first, with its defaults
        import torch
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    else:  # mgegraph's loads first, with the policy it chooses
        import mgegraph._kernels  # noqa: F401
    seconds = median_seconds(CALLS[workload.split(" ")[0]](impl, workload), runs)
    if workload == "fusion-chain" and impl == "limit":  # np.copyto's 128 MiB -> the chain's 80
        _, test_fusion, _ = _benchmark_modules()
        return seconds * test_fusion.CHAIN_BYTES / (2 * test_fusion.COPY_BYTES)
    return seconds


def child(impl: str, workload: str, threads: int, runs: int) -> float | str:
    """Seconds, or why the row could not run (a peer not installed, say)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MGEGRAPH_BENCH_THREADS": str(threads)}
    if "OMP_WAIT_POLICY" not in os.environ:  # the libraries' own defaults, not the bench's
        env.pop("OMP_WAIT_POLICY", None)
    done = subprocess.run([sys.executable, __file__, "--child", impl, workload, str(runs)],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def table(results: dict, skipped: dict, chosen: list[str], threads: list[int]) -> list[str]:
    """Each row's median of round medians, with its ratio to PyTorch eager, to ONNX Runtime, to
    the workload's limit and to NumPy where those ran."""
    against = {"torch": "x torch", "onnxruntime": "x ORT", "limit": "x limit",
               "numpy": "x numpy"}
    lines = [f"{'workload':20} {'threads':>7} {'implementation':18} {'median ms':>10} "
             + " ".join(f"{h:>8}" for h in against.values()) + "  each round's median, ms"]
    for workload in chosen:
        impls = WORKLOADS[workload]
        for t in threads:
            medians = {i: statistics.median(results[workload, i, t]) for i in impls
                       if results.get((workload, i, t))}
            for impl in impls:
                got = medians.get(impl)
                if got is None:
                    why = skipped.get((workload, impl, t), "not run")
                    lines.append(f"{workload:20} {t:>7} {impl:18} {'skipped':>10}  {why}")
                    continue
                ratios = " ".join(f"{got / medians[i]:>8.2f}" if i in medians else f"{'-':>8}"
                                  for i in against)
                rounds = " ".join(f"{v * 1e3:.3f}" for v in results[workload, impl, t])
                lines.append(f"{workload:20} {t:>7} {impl:18} {got * 1e3:>10.3f} {ratios}  "
                             f"{rounds}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help=f"some of: {', '.join(WORKLOADS)} (a prefix is enough)")
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=40, help="timed calls per process")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        impl, workload, runs = args.child
        print(json.dumps({"seconds": measure(impl, workload, int(runs))}))
        return 0
    chosen = [w for w in WORKLOADS if not args.workloads
              or any(w.startswith(p) for p in args.workloads)]
    results: dict = {}  # (workload, implementation, threads) -> each round's seconds
    skipped: dict = {}  # (workload, implementation, threads) -> why it could not run
    for _ in range(args.rounds):
        for workload in chosen:
            for t in args.threads:
                for impl in WORKLOADS[workload]:
                    got = child(impl, workload, t, args.runs)
                    if isinstance(got, str):
                        skipped[workload, impl, t] = got
                    else:
                        results.setdefault((workload, impl, t), []).append(got)
    print("\n".join(table(results, skipped, chosen, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
