"""The memory-bound kernels of convnet-train (issue 19, part 1): pooling, its gradients, the bias
gradients' sums and relu_backward, each instruction on its own at the shapes of the step, run
on the threads the policy plans (mgegraph/_kernels/parallel.pyx) against the same plan compiled
for one thread, and PyTorch eager where it is installed, in one run at one thread count.

    MGEGRAPH_BENCH_THREADS=2 python -m pytest benchmarks/test_small_kernels.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds

mgegraph's cases time the executor alone (the plan's one instruction, after a first
``plan.run`` whose feeds are kept alive); torch's time the eager call for the same op.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import workloads
from conftest import THREADS
from test_fusion import need
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph.ops.builder import apply

# name: (op, input shapes, attributes) at convnet-train's shapes (batch 32)
CASES = {
    "max_pool2d 32x64x32x32": ("max_pool2d", [(32, 64, 32, 32)],
                               {"kernel_size": (2, 2), "stride": (2, 2)}),
    "max_pool2d_backward 32x64x32x32": ("max_pool2d_backward",
                                        [(32, 64, 32, 32), (32, 64, 16, 16)],
                                        {"kernel_size": (2, 2), "stride": (2, 2)}),
    "adaptive_avg_pool2d 32x128x16x16": ("adaptive_avg_pool2d", [(32, 128, 16, 16)],
                                         {"oshp": (1, 1)}),
    "adaptive_avg_pool2d_backward 32x128x16x16": ("adaptive_avg_pool2d_backward",
                                                  [(32, 128, 1, 1)],
                                                  {"oshp": (1, 1), "input_hw": (16, 16)}),
    "sum bias 32x32x32x32": ("sum", [(32, 32, 32, 32)], {"axis": (0, 2, 3)}),
    "sum bias 32x128x16x16": ("sum", [(32, 128, 16, 16)], {"axis": (0, 2, 3)}),
    "relu_backward 32x64x32x32": ("relu_backward", [(32, 64, 32, 32)] * 2, {}),
    "relu_backward 32x128x16x16": ("relu_backward", [(32, 128, 16, 16)] * 2, {}),
}
IMPLS = ("mgegraph", "mgegraph 1 thread planned", "torch eager")


@functools.cache
def _arrays(name):
    rng = np.random.default_rng(workloads.SEED)
    return [rng.standard_normal(s, dtype=np.float32) for s in CASES[name][1]]


def _mg_case(name, one_thread: bool):
    op, shapes, attrs = CASES[name]
    g = mg.Graph()
    inputs = [g.input(f"x{i}", s) for i, s in enumerate(shapes)]
    y = F.sum(inputs[0], axis=attrs["axis"]) if op == "sum" else apply(op, inputs, **attrs)
    limit = 1 if one_thread else THREADS
    with threadpool_limits(limits=limit):  # the policy plans for at most OpenMP's threads now
        plan = mg.compile([y], optimize=0)
    feeds = dict(zip((f"x{i}" for i in range(len(shapes))), _arrays(name)))
    plan.run(feeds)
    run = plan.executable().executor.run
    return lambda: (run(), feeds)  # the closure keeps the feeds a run may read in place alive


def _torch_case(name):
    torch = need("torch")
    fn = torch.nn.functional
    op, _, attrs = CASES[name]
    xs = [torch.from_numpy(a) for a in _arrays(name)]
    if op == "max_pool2d":
        return lambda: fn.max_pool2d(xs[0], 2, 2)
    if op == "max_pool2d_backward":
        _, idx = fn.max_pool2d(xs[0], 2, 2, return_indices=True)
        return lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            xs[1], xs[0], [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
    if op == "adaptive_avg_pool2d":
        return lambda: fn.adaptive_avg_pool2d(xs[0], 1)
    if op == "adaptive_avg_pool2d_backward":
        x = torch.empty(32, 128, 16, 16)
        return lambda: torch.ops.aten._adaptive_avg_pool2d_backward(xs[0], x)
    if op == "sum":
        return lambda: xs[0].sum(dim=attrs["axis"])
    return lambda: torch.ops.aten.threshold_backward(xs[1], xs[0], 0.0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", list(CASES))
def test_small_kernel(benchmark, name, impl):
    benchmark.group = f"{name} ({THREADS} threads)"
    fn = _torch_case(name) if impl == "torch eager" else _mg_case(name, impl != "mgegraph")
    benchmark(fn)


@pytest.mark.parametrize("threads", [1, 2])
def test_fork_join(benchmark, threads):
    """What entering and leaving one parallel region of empty parts costs, in µs (one thread
    enters none): the floor under every parallel kernel's time."""
    benchmark(parallel.fork_join_us, threads, 50)
