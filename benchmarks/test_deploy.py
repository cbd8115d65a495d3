"""Issue 16's deployment figures: resnet-infer (ResNet-18 at 1x3x224x224 and 8x3x64x64) through
``freeze=True`` and through the live predictor with its prologue, against ``optimize=0``, every
pass but bnfold, ONNX Runtime and PyTorch eager, in one run and at one thread count; mlp-infer
(batch 1 and 128) against ONNX Runtime running the same MLP built as an ONNX graph.

    python -m pytest benchmarks/test_deploy.py --benchmark-only -s

The peers run the same model: a PyTorch ResNet-18 built to the same structure as
``models.resnet18`` holds the same weights (copied by name), and ONNX Runtime runs that model as
exported by ``torch.onnx.export`` (TorchScript exporter, opset 17). Every case checks its logits
against ``optimize=0`` once, untimed, before it is timed. Every case times the call a deployment
makes: ``plan.run(feeds)`` (feeds copied in, outputs copied out; the live predictor's prologue
check included), ``session.run``, the torch module under ``no_grad``.
"""
from __future__ import annotations

import functools

import models
import numpy as np
import pytest
import workloads
from conftest import THREADS
from test_fusion import check, need, without

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

MIB = 1 << 20
RESNET = {"1x3x224x224": (1, 224), "8x3x64x64": (8, 64)}
# Folded weights change the GEMM's rounding; 1e-4 relative to the largest logit bounds what 20
# layers of float32 accumulation can move (as test_fusion's resnet-infer).
ATOL = 1e-4
LEVELS = {"mgegraph optimize=0": {"optimize": 0},
          "mgegraph all passes but bnfold": {"optimize": without("bnfold")},
          "mgegraph optimize=1 (live weights, prologue)": {"optimize": 1},
          "mgegraph freeze=True": {"optimize": 1, "freeze": True}}
PEERS = ["onnxruntime", "torch eager"]
MEDIANS: dict[tuple[str, str], float] = {}
ARENA: dict[tuple[str, str], int] = {}


def group(shape: str) -> str:
    return f"resnet-infer {shape}: deploy"


@functools.cache
def model():
    """The ResNet-18 of models.py, eval form, with batch-norm statistics away from 0 and 1 (so
    that folding them is not a no-op)."""
    nn.init.manual_seed(workloads.SEED)
    net = models.resnet18()
    rng = np.random.default_rng(workloads.SEED + 2)
    state = net.state_dict()
    for name, value in state.items():
        if name.endswith("running_var"):
            state[name] = rng.uniform(0.5, 1.5, value.shape).astype(np.float32)
        elif name.endswith(("running_mean", "bias")):
            state[name] = (rng.standard_normal(value.shape) * 0.1).astype(np.float32)
    net.load_state_dict(state)
    return net.eval()


@functools.cache
def resnet_input(shape):
    batch, size = RESNET[shape]
    return np.random.default_rng(workloads.SEED + 1).standard_normal((batch, 3, size, size),
                                                                     dtype=np.float32)


@functools.cache
def reference(shape):
    return mg.compile_module(model(), (resnet_input(shape),), optimize=0)(resnet_input(shape))


def record(benchmark, shape, impl, fn, arena=None):
    benchmark.group = group(shape)
    if arena is not None:
        benchmark.extra_info["arena_bytes"] = arena
    benchmark(fn)
    if benchmark.stats is not None:  # None under --benchmark-disable
        MEDIANS[shape, impl] = benchmark.stats.stats.median
        if arena is not None:
            ARENA[shape, impl] = arena


def checked(got, shape, impl):
    want = reference(shape)
    scale = np.abs(want).max()
    check(np.asarray(got) / scale, want / scale, f"resnet {shape} {impl}", rtol=0, atol=ATOL)


@pytest.mark.workload("resnet-infer")
@pytest.mark.parametrize("impl", list(LEVELS) + PEERS)
@pytest.mark.parametrize("shape", list(RESNET))
def test_resnet_infer_deploy(benchmark, tag, shape, impl):
    tag(shape, impl)  # arena_bytes: record() adds the plan's
    x = resnet_input(shape)
    if impl in LEVELS:
        plan = mg.compile_module(model(), (x,), **LEVELS[impl]).plan
        feeds = {"input0": x}
        checked(plan.run(feeds)[0], shape, impl)
        record(benchmark, shape, impl, functools.partial(plan.run, feeds), plan.arena_bytes)
    elif impl == "torch eager":
        torch = need("torch")
        net, tx = torch_resnet18(torch), torch.from_numpy(x)
        with torch.no_grad():
            checked(net(tx).numpy(), shape, impl)

        def run():
            with torch.no_grad():
                return net(tx)

        record(benchmark, shape, impl, run)
    else:
        session = onnx_session(x)
        feeds = {"input0": x}
        checked(session.run(None, feeds)[0], shape, impl)
        record(benchmark, shape, impl, functools.partial(session.run, None, feeds))


# -- mlp-infer: 784-1024-1024-10 with ReLU (workloads.mlp_weights), batch 1 and 128 ------------
MLP_BATCHES = (1, 128)
MLP_IMPLS = ["mgegraph optimize=1", "mgegraph freeze=True", "onnxruntime"]


def mlp_graph(batch):
    g = mg.Graph()
    h = g.input("x", (batch, workloads.MLP_LAYERS[0]), "float32")
    for k, (w, b) in enumerate(workloads.mlp_weights()):
        h = h @ g.param(f"w{k}", w, share=True) + g.param(f"b{k}", b, share=True)
        if k < len(workloads.MLP_LAYERS) - 2:
            h = F.relu(h)
    return h


def mlp_onnx(batch) -> bytes:
    """The same MLP as an ONNX graph (MatMul, Add, Relu), built with onnx.helper."""
    need("onnx")
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, h = [], [], "x"
    for k, (w, b) in enumerate(workloads.mlp_weights()):
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes += [helper.make_node("MatMul", [h, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"])]
        h = f"a{k}"
        if k < len(workloads.MLP_LAYERS) - 2:
            nodes.append(helper.make_node("Relu", [h], [f"r{k}"]))
            h = f"r{k}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     [batch, workloads.MLP_LAYERS[0]])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [batch, workloads.MLP_LAYERS[-1]])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.workload("mlp-infer")
@pytest.mark.parametrize("impl", MLP_IMPLS)
@pytest.mark.parametrize("batch", MLP_BATCHES)
def test_mlp_infer_deploy(benchmark, tag, batch, impl):
    tag(f"batch {batch}", impl)
    x = np.random.default_rng(workloads.SEED + 1).standard_normal(
        (batch, workloads.MLP_LAYERS[0]), dtype=np.float32)
    feeds = {"x": x}
    want = mg.compile([mlp_graph(batch)], optimize=0).run(feeds)[0]
    if impl == "onnxruntime":
        ort = need("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
        session = ort.InferenceSession(mlp_onnx(batch), options,
                                       providers=["CPUExecutionProvider"])
        fn = functools.partial(session.run, None, feeds)
        got = fn()[0]
    else:
        plan = mg.compile([mlp_graph(batch)], freeze=impl.endswith("freeze=True"))
        fn = functools.partial(plan.run, feeds)
        got = fn()[0]
        benchmark.extra_info["arena_bytes"] = plan.arena_bytes
    check(got, want, f"mlp b{batch} {impl}")
    benchmark.group = f"mlp-infer batch {batch}: deploy"
    benchmark(fn)
    if benchmark.stats is not None:
        MEDIANS[f"mlp b{batch}", impl] = benchmark.stats.stats.median


# -- the peers' model -----------------------------------------------------------------------------
def torch_resnet18(torch):
    """``models.resnet18`` in PyTorch, module for module (so parameter names match), with its
    weights."""
    tnn = torch.nn

    def conv_bn(cin, cout, kernel, stride=1):
        return tnn.Sequential(tnn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False),
                              tnn.BatchNorm2d(cout))

    class BasicBlock(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = tnn.Sequential(conv_bn(cin, cout, 3, stride), tnn.ReLU(),
                                       conv_bn(cout, cout, 3))
            self.skip = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.skip is None else self.skip(x)))

    layers, cin = [conv_bn(3, 64, 7, 2), tnn.ReLU(), tnn.MaxPool2d(3, 2, padding=1)], 64
    for i, width in enumerate((64, 128, 256, 512)):
        for b in range(2):
            layers.append(BasicBlock(cin, width, 2 if i and not b else 1))
            cin = width
    layers += [tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(512, 1000)]
    net = tnn.Sequential(*layers).eval()
    # mgegraph's Sequential names its children 0, 1, ... as PyTorch's does
    state = {k: torch.from_numpy(np.array(v))
             for k, v in model().state_dict().items()}
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), \
        (missing, unexpected)
    return net


@functools.cache
def onnx_file(shape_key) -> bytes:
    torch = need("torch")
    need("onnx")
    import io

    buffer = io.BytesIO()
    x = torch.zeros(shape_key)
    torch.onnx.export(torch_resnet18(torch), (x,), buffer, input_names=["input0"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    return buffer.getvalue()


def onnx_session(x):
    ort = need("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    return ort.InferenceSession(onnx_file(x.shape), options, providers=["CPUExecutionProvider"])


# -- the ratios ---------------------------------------------------------------------------
def terminal_summary() -> list[str]:
    """Each shape's medians, the ratios the issue asks for and the arenas; called by
    benchmarks/conftest.py."""
    lines = []
    for shape in RESNET:
        t = {impl: MEDIANS[shape, impl] for impl in list(LEVELS) + PEERS
             if (shape, impl) in MEDIANS}
        if not t:
            continue
        lines.append(f"{group(shape)} ({THREADS} threads):")
        for impl, median in t.items():
            arena = ARENA.get((shape, impl))
            mem = f"  arena {arena / MIB:6.2f} MiB" if arena is not None else ""
            lines.append(f"  {impl:46s} {median * 1e3:8.2f} ms{mem}")
        for ours in ("mgegraph freeze=True", "mgegraph optimize=1 (live weights, prologue)"):
            for peer in ("onnxruntime", "torch eager", "mgegraph optimize=0",
                         "mgegraph all passes but bnfold"):
                if ours in t and peer in t and ours != peer:
                    lines.append(f"  {ours} / {peer}: {t[ours] / t[peer]:.3f}x the time")
        if "onnxruntime" in t and "torch eager" in t:
            lines.append(f"  onnxruntime / torch eager: {t['onnxruntime'] / t['torch eager']:.3f}x"
                         " (the issue measured 0.49x / 0.73x)")
    for batch in MLP_BATCHES:
        t = {impl: MEDIANS[f"mlp b{batch}", impl] for impl in MLP_IMPLS
             if (f"mlp b{batch}", impl) in MEDIANS}
        if "onnxruntime" in t:
            lines.append(f"mlp-infer batch {batch}: " + ", ".join(
                f"{impl} {m * 1e3:.3f} ms ({m / t['onnxruntime']:.2f}x ORT)" for impl, m in t.items()))
    return lines
