"""Issue 5's figures (shared/BENCHMARKS.md): what the graph passes buy on fusion-chain, op-overhead,
mlp-train, convnet-train (epilogue fusion) and resnet-infer (batch-norm folding).

    python -m pytest benchmarks/test_fusion.py --benchmark-only -s

Each implementation is one parametrised case; peers that are not installed are skipped with the
reason. Every case checks its result once, untimed, before it is timed, so a wrong kernel cannot
post a figure. ``terminal_summary`` (called by the conftest) prints the ratios the issue asks for.
mgegraph cases time the executor alone (``plan.executable().executor.run`` after a first ``plan.run``), as
test_core does: the feeds are already in place, so the figure is the kernels' and the loop's.
"""
from __future__ import annotations

import functools
import os

import models
import numpy as np
import pytest
import workloads
from conftest import THREADS

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.planner.passes.pipeline import PASSES

N = 4_194_304
MIB = 1 << 20
CHAIN_BYTES = 5 * N * 4        # x, a, b, c read once, y written once: 80 MiB
COPY_BYTES = 64 * MIB          # larger than every cache here; np.copyto moves it twice
# NOTE: the limit is BENCHMARKS.md's (counted bytes over np.copyto's rate), not a hard floor:
# np.copyto runs on one thread and pays a read-for-ownership on each written line, which the
# chain pays on 1 stream of 5 and the copy on 1 of 2, so a kernel can land near or under it.
RTOL = 1e-5                    # vector exp/tanh and ORT's differ from libm in the last bits
MEDIANS: dict[tuple[str, str], float] = {}
EXTRA: dict[tuple[str, str], dict] = {}

CHAIN_GROUP = f"fusion-chain ({N:,} float32 per input)"
OPS_GROUP = f"op-overhead with fusion ({workloads.OP_CHAIN} ops, 16 elements)"
# the cases of the benchmark table (see conftest.tag)
CHAIN_CASE = f"{N:,} elements"
OPS_CASE = f"{workloads.OP_CHAIN} ops, 16 elements"


def without(name: str) -> list[str]:
    """Every pass of the pipeline but ``name``, so a case isolates what that one pass buys."""
    return [p for p, _, _ in PASSES if p != name]


def record(benchmark, group: str, impl: str, fn, **extra):
    benchmark.group = group
    benchmark.extra_info.update(extra)
    benchmark(fn)
    if benchmark.stats is not None:  # None under --benchmark-disable
        MEDIANS[group, impl] = benchmark.stats.stats.median
        EXTRA[group, impl] = extra


def check(got, want, what: str, rtol=RTOL, atol=RTOL):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol, err_msg=what)


def need(module: str):
    if module == "torch" and os.environ.get("MGEGRAPH_BENCH_NO_TORCH"):  # as workloads._torch
        pytest.skip("torch is left out (MGEGRAPH_BENCH_NO_TORCH)")
    # ImportError, not only ModuleNotFoundError: a peer whose native library fails to load is
    # skipped as well, with its reason
    return pytest.importorskip(module, reason=f"{module} is not installed or does not import",
                               exc_type=ImportError)


def mg_executor(plan, feeds, want, what):
    check(plan.run(feeds)[0], want, what)
    return plan.executable().executor.run


def label(impl: str) -> str:
    """The table's name of a case: mgegraph's cases here time the executor alone."""
    return f"{impl}, executor" if impl.startswith("mgegraph") else impl


# -- fusion-chain ---------------------------------------------------------------------------------
@functools.cache
def chain_inputs():
    rng = np.random.default_rng(workloads.SEED)
    return {k: rng.standard_normal(N, dtype=np.float32) for k in "xabc"}


def numpy_chain(x, a, b, c):
    return np.maximum(x * a + b, 0) * c - np.tanh(x) / (1 + np.exp(-x))


@functools.cache
def chain_reference():
    return numpy_chain(*chain_inputs().values())


def chain_mgegraph(optimize):
    plan = mg.compile([models.fusion_chain_graph(N)], optimize=optimize)
    run = mg_executor(plan, chain_inputs(), chain_reference(), f"mgegraph optimize={optimize}")
    return run, {"arena_bytes": plan.arena_bytes}


def chain_numpy():
    fn = functools.partial(numpy_chain, *chain_inputs().values())
    check(fn(), chain_reference(), "numpy")
    return fn


def chain_numexpr():
    ne = need("numexpr")
    ne.set_num_threads(THREADS)
    out = np.empty(N, np.float32)
    expr = "where(x * a + b > 0, x * a + b, 0) * c - tanh(x) / (1 + exp(-x))"

    def run():
        return ne.evaluate(expr, local_dict=chain_inputs(), out=out)

    check(run(), chain_reference(), "numexpr")
    return run


def chain_onnx_model():
    onnx = need("onnx")
    h, T = onnx.helper, onnx.TensorProto
    nodes = [h.make_node("Mul", ["x", "a"], ["xa"]), h.make_node("Add", ["xa", "b"], ["xab"]),
             h.make_node("Relu", ["xab"], ["r"]), h.make_node("Mul", ["r", "c"], ["left"]),
             h.make_node("Tanh", ["x"], ["t"]), h.make_node("Neg", ["x"], ["nx"]),
             h.make_node("Exp", ["nx"], ["e"]), h.make_node("Add", ["one", "e"], ["den"]),
             h.make_node("Div", ["t", "den"], ["right"]), h.make_node("Sub", ["left", "right"],
                                                                       ["y"])]
    io = [h.make_tensor_value_info(k, T.FLOAT, [N]) for k in "xabcy"]
    one = h.make_tensor("one", T.FLOAT, [1], [1.0])
    graph = h.make_graph(nodes, "fusion_chain", io[:4], io[4:], initializer=[one])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8  # the IR version every onnxruntime release of the last years reads
    onnx.checker.check_model(model)
    return model.SerializeToString()


def chain_onnxruntime():
    ort = need("onnxruntime")
    model = chain_onnx_model()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = THREADS, 1
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    run = functools.partial(session.run, ["y"], chain_inputs())
    check(run()[0], chain_reference(), "onnxruntime")
    return run


def torch_chain(torch, x, a, b, c):
    return torch.relu(x * a + b) * c - torch.tanh(x) / (1 + torch.exp(-x))


def chain_torch(compiled):
    torch = need("torch")
    torch.set_num_threads(THREADS)
    ts = [torch.from_numpy(v) for v in chain_inputs().values()]
    fn = functools.partial(torch_chain, torch)
    if compiled:
        fn = compile_or_skip(torch, fn, ts)
    run = torch.no_grad()(functools.partial(fn, *ts))
    check(run().numpy(), chain_reference(), f"torch compiled={compiled}")
    return run


def compile_or_skip(torch, fn, args):
    compiled = torch.compile(fn)
    try:
        compiled(*args)  # inductor needs a C++ compiler; its absence shows on the first call
    except Exception as exc:  # noqa: BLE001 - any failure to compile is a reason to skip
        pytest.skip(f"torch.compile does not work here: {type(exc).__name__}: {exc}"[:200])
    return compiled


def copy_bandwidth():
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    return functools.partial(np.copyto, dst, src)


CHAIN_IMPLS = {  # impl -> () -> (callable, figures)
    "mgegraph fused (optimize=1)": lambda: chain_mgegraph(1),
    "mgegraph unfused (optimize=0)": lambda: chain_mgegraph(0),
    "numpy eager": lambda: (chain_numpy(), {}),
    "numexpr": lambda: (chain_numexpr(), {}),
    "onnxruntime": lambda: (chain_onnxruntime(), {}),
    "torch eager": lambda: (chain_torch(False), {}),
    "torch.compile": lambda: (chain_torch(True), {}),
    "np.copyto 64 MiB (bandwidth)": lambda: (copy_bandwidth(), {}),
}
# The copy is the table's limit: the chain's 80 MiB at the rate np.copyto moves its 128 MiB.
CHAIN_LIMIT = {"role": "limit", "limit_scale": CHAIN_BYTES / (2 * COPY_BYTES),
               "limit_what": "80 MiB (4 inputs read, 1 output written) at the bandwidth of "
                             "np.copyto on 64 MiB"}


@pytest.mark.workload("fusion-chain")
@pytest.mark.parametrize("impl", list(CHAIN_IMPLS))
def test_fusion_chain(benchmark, tag, impl):
    tag(CHAIN_CASE, label(impl), **(CHAIN_LIMIT if impl.startswith("np.copyto") else {}))
    run, extra = CHAIN_IMPLS[impl]()
    record(benchmark, CHAIN_GROUP, impl, run, **extra)


# -- op-overhead ----------------------------------------------------------------------------------
op_chain_numpy = workloads.op_chain_numpy


@functools.cache
def op_chain_feeds():
    return {"x": workloads.op_chain_input()}


def ops_mgegraph(optimize):
    plan = mg.compile([workloads.op_chain_graph()], optimize=optimize)
    feeds = op_chain_feeds()
    run = mg_executor(plan, feeds, op_chain_numpy(feeds["x"]), f"op chain optimize={optimize}")
    return run, {"instructions": len(plan.instructions), "arena_bytes": plan.arena_bytes}


def ops_numpy():
    x0 = op_chain_feeds()["x"]
    return functools.partial(op_chain_numpy, x0), {}


def ops_torch(compiled):
    torch = need("torch")
    x0 = op_chain_feeds()["x"]
    t0 = torch.from_numpy(x0.copy())
    fn = functools.partial(workloads.op_chain_torch, torch)
    if compiled:  # about 10 s of compiling for the 1,000 ops
        fn = compile_or_skip(torch, fn, [t0])
    run = torch.no_grad()(functools.partial(fn, t0))
    check(run().numpy(), op_chain_numpy(x0), f"op chain torch compiled={compiled}")
    return run, {}


OPS_IMPLS = {
    "mgegraph fused (optimize=1)": lambda: ops_mgegraph(1),
    "mgegraph unfused (optimize=0)": lambda: ops_mgegraph(0),
    "numpy eager": ops_numpy,
    "torch eager": lambda: ops_torch(False),
    "torch.compile": lambda: ops_torch(True),
}


@pytest.mark.workload("op-overhead")
@pytest.mark.parametrize("impl", list(OPS_IMPLS))
def test_op_overhead_fused(benchmark, tag, impl):
    tag(OPS_CASE, label(impl), ops=workloads.OP_CHAIN)  # the table prints us/op from ops
    run, extra = OPS_IMPLS[impl]()
    record(benchmark, OPS_GROUP, impl, run, **extra)


# -- mlp-train and convnet-train: epilogue fusion -------------------------------------------------
TRAIN = {"mlp-train batch 128": (workloads._mlp_module, (128, workloads.MLP_LAYERS[0])),
         "convnet-train batch 32": (workloads._convnet, (32, 3, 32, 32))}
TRAIN_LEVELS = {"optimize=0": 0, "all passes but epilogue": without("epilogue"), "optimize=1": 1}
TRAIN_ROWS = {"mlp-train batch 128": ("mlp-train", "batch 128"),  # workload, case in the table
              "convnet-train batch 32": ("convnet-train", "batch 32")}


@functools.cache
def first_loss(workload):
    """The loss of the first step, before any update, by NumPy in float64 from the same weights.
    """
    nn.init.manual_seed(workloads.SEED)
    model = TRAIN[workload][0]()
    x, y = workloads._batch(TRAIN[workload][1])
    a = x.astype(np.float64)
    for layer in model.layers:
        a = NUMPY_LAYERS[type(layer).__name__](layer, a)
    logp = a - a.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean()


def numpy_conv(layer, a):
    """Stride 1 (all the convnet has): a GEMM over the 3x3 windows of the padded input."""
    assert layer.stride in (1, (1, 1)), "the NumPy reference does stride 1 only"
    p = layer.padding if isinstance(layer.padding, int) else layer.padding[0]
    w = layer.weight.value.astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(a, ((0, 0), (0, 0), (p, p), (p, p))), w.shape[2:], axis=(2, 3))
    out = np.tensordot(windows, w, axes=((1, 4, 5), (1, 2, 3)))  # N, H, W, O
    return out.transpose(0, 3, 1, 2) + layer.bias.value[None, :, None, None]


def numpy_max_pool2(layer, a):
    assert layer.kernel_size == 2 and layer.stride in (None, 2) and not layer.padding
    n, c, h, w = a.shape
    return a.reshape(n, c, h // 2, 2, w // 2, 2).max((3, 5))


NUMPY_LAYERS = {
    "Linear": lambda layer, a: a @ layer.weight.value.T + layer.bias.value,
    "ReLU": lambda layer, a: np.maximum(a, 0),
    "Conv2d": numpy_conv,
    "MaxPool2d": numpy_max_pool2,
    "AdaptiveAvgPool2d": lambda layer, a: a.mean((2, 3), keepdims=True),
    "Flatten": lambda layer, a: a.reshape(len(a), -1),
}


def train_step(workload, optimize):
    make, shape = TRAIN[workload]
    nn.init.manual_seed(workloads.SEED)
    model = make()
    opt = optim.SGD(model.parameters(), lr=0.01)
    return mg.compile_train_step(model, F.cross_entropy, opt,
                                 example_batch=workloads._batch(shape), optimize=optimize)


@pytest.mark.parametrize("level", list(TRAIN_LEVELS))
@pytest.mark.parametrize("workload", [pytest.param(w, marks=pytest.mark.workload(TRAIN_ROWS[w][0]))
                                      for w in TRAIN])
def test_train_epilogue(benchmark, tag, workload, level):
    tag(TRAIN_ROWS[workload][1], f"mgegraph {level}")
    want = first_loss(workload)
    step = train_step(workload, TRAIN_LEVELS[level])
    batch = workloads._batch(TRAIN[workload][1])
    check(step(*batch), want, f"{workload} {level}: first loss")
    record(benchmark, f"{workload}: epilogue fusion", level, functools.partial(step, *batch),
           arena_bytes=step.plan.arena_bytes)


# -- resnet-infer: batch-norm folding -------------------------------------------------------------
RESNET = {"1x3x224x224": (1, 224), "8x3x64x64": (8, 64)}
RESNET_LEVELS = {"optimize=0": 0, "all passes but bnfold": without("bnfold"), "optimize=1": 1}
# Folded weights change the GEMM's rounding (see mgegraph/planner/bnfold.py); 1e-4 relative to
# the largest logit bounds what 20 layers of float32 accumulation can move.
RESNET_ATOL = 1e-4


@functools.cache
def resnet_input(batch, size):
    return np.random.default_rng(workloads.SEED + 1).standard_normal((batch, 3, size, size),
                                                                     dtype=np.float32)


@functools.cache
def resnet_reference(shape):
    return resnet_predictor(shape, 0).plan.run({"input0": resnet_input(*RESNET[shape])})[0]


def resnet_predictor(shape, optimize):
    nn.init.manual_seed(workloads.SEED)
    model = models.resnet18().eval()
    return mg.compile_module(model, (resnet_input(*RESNET[shape]),), optimize=optimize)


@pytest.mark.workload("resnet-infer")
@pytest.mark.parametrize("level", list(RESNET_LEVELS))
@pytest.mark.parametrize("shape", list(RESNET))
def test_resnet_infer_bnfold(benchmark, tag, shape, level):
    tag(shape, label(f"mgegraph {level}"))
    want = resnet_reference(shape)
    plan = resnet_predictor(shape, RESNET_LEVELS[level]).plan
    scale = np.abs(want).max()
    got = plan.run({"input0": resnet_input(*RESNET[shape])})[0]
    check(got / scale, want / scale, f"resnet {shape} {level}", rtol=0, atol=RESNET_ATOL)
    record(benchmark, f"resnet-infer {shape}: batch-norm folding", level, plan.executable().executor.run,
           arena_bytes=plan.arena_bytes, lower_bound_bytes=plan.lower_bound_bytes)


# -- the ratios of issue 5 ------------------------------------------------------------------------
def terminal_summary() -> list[str]:
    """The issue's ratios from the medians of this run; parts whose cases did not run are left
    out. Called by benchmarks/conftest.py after the medians."""
    lines = chain_lines() + ops_lines()
    for workload in TRAIN:
        lines += level_lines(f"{workload}: epilogue fusion", list(TRAIN_LEVELS))
    for shape in RESNET:
        lines += level_lines(f"resnet-infer {shape}: batch-norm folding", list(RESNET_LEVELS))
    return lines


def chain_lines() -> list[str]:
    t = {impl: MEDIANS[CHAIN_GROUP, impl] for impl in CHAIN_IMPLS if (CHAIN_GROUP, impl) in MEDIANS}
    fused = t.get("mgegraph fused (optimize=1)")
    if fused is None:
        return []
    lines = [f"{CHAIN_GROUP}: mgegraph fused {fused * 1e3:.2f} ms"]
    copy = t.get("np.copyto 64 MiB (bandwidth)")
    if copy is not None:
        limit = copy / (2 * COPY_BYTES) * CHAIN_BYTES
        lines.append(f"  bandwidth limit {limit * 1e3:.2f} ms ({2 * COPY_BYTES / copy / 1e9:.1f} "
                     f"GB/s copied, 80 MiB to move): fused is x{fused / limit:.2f} of it "
                     "(target <= 1.5)")
    for impl, target in (("mgegraph unfused (optimize=0)", ">= 5"), ("numpy eager", ">= 5"),
                         ("numexpr", ""), ("onnxruntime", "> 1"), ("torch eager", ""),
                         ("torch.compile", "")):
        if impl in t:
            aim = f" (target {target})" if target else ""
            lines.append(f"  {impl:30s} {t[impl] * 1e3:8.2f} ms: fused is "
                         f"{t[impl] / fused:.2f}x faster{aim}")
    return lines


def ops_lines() -> list[str]:
    lines = []
    for impl in OPS_IMPLS:
        if (OPS_GROUP, impl) in MEDIANS:
            us = MEDIANS[OPS_GROUP, impl] / workloads.OP_CHAIN * 1e6
            instr = EXTRA[OPS_GROUP, impl].get("instructions")
            kernels = f" ({instr} instructions)" if instr is not None else ""
            lines.append(f"  {impl:30s} {us:.4f} us/op{kernels}")
    if not lines:
        return []
    return [f"{OPS_GROUP}: (the issue measured torch.compile at 0.021 us/op)"] + lines


def level_lines(group: str, levels: list[str]) -> list[str]:
    t = {lvl: MEDIANS[group, lvl] for lvl in levels if (group, lvl) in MEDIANS}
    if not t:
        return []
    base = t.get(levels[0])
    lines = [f"{group}:"]
    for lvl, median in t.items():
        ratio = f"  {base / median:.2f}x the speed of {levels[0]}" if base else ""
        arena = EXTRA[group, lvl]["arena_bytes"] / MIB
        lines.append(f"  {lvl:26s} {median * 1e3:8.2f} ms  arena {arena:7.2f} MiB{ratio}")
    return lines
