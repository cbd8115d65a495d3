"""The CUDA backend on a GPU, in one run of under 5 minutes: its tests, then one table.

    python benchmarks/cuda_check.py            # tests (pytest -m cuda tests/cuda), then the table
    python benchmarks/cuda_check.py --no-tests # the table only

Rows (medians of timed repeats after warm-up, each ratio measured in this run):
- fusion-chain, 4M float32: the fused kernel's bytes per second as a share of a device-to-device
  copy's (target >= 80%);
- float32 GEMM 4096^3: mgegraph's time against cuBLAS through PyTorch, TF32 off on both
  (target >= 50%; the row is skipped when torch has no CUDA);
- mlp-train and convnet-train: a whole training step (batch in, loss out) against PyTorch CUDA
  eager (target <= 1.0x), with the plan replayed as a CUDA graph and launched one by one;
- int8 conv, linear, transposed conv and batched matmul (dp4a): the quantized ops' integer rate
  against the CPU kernels of the same plan, whose integers they must equal bit for bit;
- NCCL (the nccl extra): a one-rank communicator's all-reduce of 64 MiB out of place against a
  device copy: that the wheel's library runs on this GPU (two ranks need two GPUs).

Exit status: 0 when the tests passed (or were not run), 1 when they failed, 2 when no GPU can
run here (the reason is printed: the cuda extra, the driver or a GPU is missing).
"""
from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import mgegraph as mg
import mgegraph.functional as F

N_CHAIN = 4 * 1024 * 1024
N_GEMM = 4096


def median_seconds(fn, repeat: int = 20, warmup: int = 3, budget: float = 10.0) -> float:
    """The median wall time of ``fn()`` (which waits for the GPU itself), at most ``budget``
    seconds of repeats."""
    for _ in range(warmup):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < repeat and (time.perf_counter() - start < budget or len(times) < 3):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch, None


# -- rows ---------------------------------------------------------------------------------------
def fusion_chain_row() -> list:
    from models import fusion_chain_graph
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(N_CHAIN).astype(np.float32) for k in "xabc"}
    plan = mg.compile([fusion_chain_graph(N_CHAIN)], device="cuda")
    ex = plan.executable()
    ex.run(feeds)
    t = median_seconds(ex.launch)
    fused = 5 * N_CHAIN * 4 / t  # four inputs read, one output written
    device = ex.device
    nbytes = 64 << 20
    src, dst = device.alloc(nbytes), device.alloc(nbytes)

    def copy():
        device.copy(dst, src, nbytes)
        device.synchronize()

    copy_rate = 2 * nbytes / median_seconds(copy)
    device.free(src)
    device.free(dst)
    return ["fusion-chain 4M f32", f"{fused / 1e9:.0f} GB/s",
            f"D2D copy {copy_rate / 1e9:.0f} GB/s", f"{100 * fused / copy_rate:.0f}% of copy",
            ">= 80%"]


def gemm_row() -> list:
    torch, why = _torch_cuda()
    name = f"GEMM f32 {N_GEMM}^3"
    if torch is None:
        return [name, "skipped", why, "", ">= 50%"]
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((N_GEMM, N_GEMM)).astype(np.float32) for _ in range(2))
    g = mg.Graph()
    y = g.input("a", a.shape, "float32") @ g.input("b", b.shape, "float32")
    ex = mg.compile([y], device="cuda").executable()
    (out,) = ex.run({"a": a, "b": b})
    t_mg = median_seconds(ex.launch, repeat=10)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()

    def cublas():
        torch.matmul(ta, tb)
        torch.cuda.synchronize()

    t_cublas = median_seconds(cublas, repeat=10)
    error = float(np.abs(out - torch.matmul(ta, tb).cpu().numpy()).max())
    flops = 2 * N_GEMM ** 3
    return [name, f"{flops / t_mg / 1e12:.1f} TFLOP/s", f"cuBLAS {flops / t_cublas / 1e12:.1f}",
            f"{100 * t_cublas / t_mg:.0f}% of cuBLAS (max |diff| {error:.1e})", ">= 50%"]


def _torch_step(torch, kind, x, y):
    from workloads import _torch_convnet
    t = torch.nn
    model = (t.Sequential(t.Linear(784, 1024), t.ReLU(), t.Linear(1024, 1024), t.ReLU(),
                          t.Linear(1024, 10)) if kind == "mlp" else _torch_convnet(torch)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        opt.step()
        return float(loss)  # the loss back on the host, as mgegraph's step returns it

    return step


def train_rows(kind: str) -> list[list]:
    from workloads import SEED, _batch, _convnet, _mlp_module

    from mgegraph import optim
    mg.nn.init.manual_seed(SEED)
    model = _mlp_module() if kind == "mlp" else _convnet()
    x, y = _batch((128, 784) if kind == "mlp" else (32, 3, 32, 32))
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.01),
                                 example_batch=(x, y), device="cuda")
    ex = step.plan.executable()
    t_graph = median_seconds(lambda: step(x, y))
    ex.use_graph, ex._graph = False, None
    t_launches = median_seconds(lambda: step(x, y))
    name = f"{kind if kind == 'mlp' else 'convnet'}-train"
    torch, why = _torch_cuda()
    if torch is None:
        return [[name, f"{t_graph * 1e3:.2f} ms (graph)", f"{t_launches * 1e3:.2f} ms (launches)",
                 f"torch skipped: {why}", "<= 1.0x"]]
    t_torch = median_seconds(_torch_step(torch, kind, x, y))
    return [[name, f"{t_graph * 1e3:.2f} ms (graph)", f"torch eager {t_torch * 1e3:.2f} ms",
             f"{t_graph / t_torch:.2f}x torch; {t_launches * 1e3:.2f} ms without graph",
             "<= 1.0x"]]


# -- int8 (ops/quantized.py: csrc_cuda/quantized.cuh's dp4a kernels) ------------------------------
INT8_CASES = [  # op, activation, weight, geometry
    ("quantized_conv2d", (32, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}),  # a ResNet stage
    ("quantized_linear", (512, 4096), (4096, 4096), {}),
    # a U-Net's up-sampling, 32x32 -> 64x64: the transposed convolution's gather per output
    ("quantized_conv_transpose2d", (16, 128, 32, 32), (128, 64, 3, 3),
     {"stride": 2, "padding": 1, "output_padding": 1}),
    # BatchMatMulActivation's weight @ x over a batch of 64: a (1, 512, 512) broadcast
    ("quantized_batch_matmul", (64, 512, 256), (1, 512, 512), {}),
]
# the weight's axis of output channels (its per-channel axis): 0 but for these
OUT_AXIS = {"quantized_conv_transpose2d": 1, "quantized_batch_matmul": 1}


def _int8_graph(op: str, x_shape, w_shape, **geometry):
    """An int8 op of uint8 activations, per-channel int8 weights and an int32 bias, requantised
    to int8 with relu (the batched matmul's weight is its a, the activation its b): (graph
    outputs, feeds, the op's operations)."""
    from mgegraph.ir.quant import per_channel, per_tensor
    from mgegraph.ops import quantized as Q
    from mgegraph.ops.registry import get_op
    rng = np.random.default_rng(2)
    axis = OUT_AXIS.get(op, 0)
    out = w_shape[axis]
    g = mg.Graph()
    x = g.input("x", x_shape, "uint8", per_tensor(0.02, 128))
    w = g.input("w", w_shape, "int8", per_channel(rng.uniform(0.001, 0.01, out),
                                                   rng.integers(-2, 3, out), axis))
    b = g.input("b", (out,), "int32")
    operands = (w, x) if op == "quantized_batch_matmul" else (x, w)
    y = getattr(Q, op)(*operands, b, **geometry, out_scale=0.1, out_zero_point=-3, relu=True)
    feeds = {"x": rng.integers(0, 256, x_shape).astype(np.uint8),
             "w": rng.integers(-128, 128, w_shape).astype(np.int8),
             "b": rng.integers(-1000, 1000, out).astype(np.int32)}
    return [y], feeds, get_op(op).cost(y.node)


def int8_row(op: str, x_shape, w_shape, geometry) -> list:
    outputs, feeds, ops = _int8_graph(op, x_shape, w_shape, **geometry)
    ex = mg.compile(outputs, device="cuda").executable()
    (got,) = ex.run(feeds)
    t_gpu = median_seconds(ex.launch)
    cpu = mg.compile(outputs)  # the CPU's kernels: the integers the GPU's must equal
    (want,) = cpu.run(feeds)
    t_cpu = median_seconds(lambda: cpu.run(feeds), repeat=3, warmup=1)
    same = "bitwise equal" if np.array_equal(got, want) else (
        f"DIFFERS at {int((got != want).sum())} of {got.size}")
    return [f"int8 {op.removeprefix('quantized_')} {'x'.join(map(str, x_shape))}",
            f"{ops / t_gpu / 1e12:.2f} TOP/s ({t_gpu * 1e3:.2f} ms)",
            f"CPU {ops / t_cpu / 1e9:.1f} GOP/s", f"{t_cpu / t_gpu:.0f}x CPU, {same}",
            "bitwise"]


def nccl_row() -> list:
    from mgegraph.cuda.driver import Device
    from mgegraph.distributed import nccl
    name = "NCCL all-reduce 64 MiB, 1 rank"
    try:
        nccl.library()
    except nccl.NcclError as exc:
        return [name, "skipped", str(exc)[:80], "", "runs"]
    device, nbytes = Device(0), 64 << 20
    comm = nccl.NcclCommunicator(nccl.init_rank(nccl.unique_id(), 1, 0, "cuda_check"), 0, 1,
                                 "0", 0, 60.0)
    src, dst = device.alloc(nbytes), device.alloc(nbytes)

    def reduce():
        comm.all_reduce(src, dst, nbytes // 4, np.float32, device.stream)
        device.synchronize()

    def copy():
        device.copy(dst, src, nbytes)
        device.synchronize()

    t_nccl, t_copy = median_seconds(reduce), median_seconds(copy)
    comm.destroy()
    device.free(src)
    device.free(dst)
    return [name, f"{2 * nbytes / t_nccl / 1e9:.0f} GB/s (NCCL "
            f"{'.'.join(map(str, nccl.version()))})", f"D2D copy {2 * nbytes / t_copy / 1e9:.0f} "
            "GB/s", f"{100 * t_copy / t_nccl:.0f}% of copy", "runs"]


# -- the run ------------------------------------------------------------------------------------
def run_tests(timeout: float) -> int:
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/cuda", "-q", "-x",
               "-p", "no:cacheprovider"]
    print("$", " ".join(command), flush=True)
    try:
        return subprocess.run(command, cwd=ROOT, timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
        print(f"cuda_check: the tests ran past {timeout:.0f} s", flush=True)
        return 1


def print_table(rows) -> None:
    header = ["workload", "mgegraph", "peer", "result", "target"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths]] + rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-tests", action="store_true", help="the table only")
    parser.add_argument("--test-timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    from mgegraph.cuda import unavailable_reason
    reason = unavailable_reason()
    if reason:
        print(f"cuda_check: no GPU run here: {reason}")
        return 2
    status = 0 if args.no_tests else run_tests(args.test_timeout)
    rows = []
    for make in (fusion_chain_row, gemm_row, lambda: train_rows("mlp"),
                 lambda: train_rows("convnet"),
                 *(functools.partial(int8_row, *case) for case in INT8_CASES), nccl_row):
        try:
            made = make()
        except Exception as exc:  # noqa: BLE001  one failing row still prints the others
            made = [["(row failed)", type(exc).__name__, str(exc)[:120], "", ""]]
        rows += made if isinstance(made[0], list) else [made]
    print(f"\nCUDA check on {_device_name()} ({'tests passed' if status == 0 else 'TESTS FAILED'})")
    print_table(rows)
    return 0 if status == 0 else 1


def _device_name() -> str:
    from cuda.bindings import driver
    _, dev = driver.cuDeviceGet(0)
    _, name = driver.cuDeviceGetName(100, dev)
    return name.split(b"\0")[0].decode()


if __name__ == "__main__":
    sys.exit(main())
