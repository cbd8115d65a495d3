"""The convolution kernels (issue 19, part 2): each conv shape and pass of convnet-train and
resnet-infer on its own, and the two workloads, with the default path rule
(mgegraph/_kernels/lowering/conv.py: tiled, batched and Winograd paths) against the same rule
without Winograd and against the GEMM paths per image alone (the kernels before them), and the
peers, in one run at one thread count.

    MGEGRAPH_BENCH_THREADS=1 python -m pytest benchmarks/test_conv.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds

mgegraph's conv cases time the executor alone (the plan's one instruction, after a first
``plan.run`` whose feeds are kept alive); torch's time ``F.conv2d`` or
``aten.convolution_backward`` for the same pass. The workloads time what their benchmarks do:
a training step, ``plan.run`` of a frozen ResNet-18, a session run, a module call.
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np
import pytest
import workloads
from conftest import THREADS
from test_deploy import model, onnx_session, resnet_input, torch_resnet18
from test_fusion import need

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ops import conv as C

# name: (x shape, weight shape, stride, padding)
SHAPES = {
    "convnet 3->32 32x32": ((32, 3, 32, 32), (32, 3, 3, 3), 1, 1),
    "convnet 32->64 32x32": ((32, 32, 32, 32), (64, 32, 3, 3), 1, 1),
    "convnet 64->128 16x16": ((32, 64, 16, 16), (128, 64, 3, 3), 1, 1),
    "resnet224 stem 7x7/2": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    "resnet224 64->64 56x56": ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "resnet224 256->256 14x14": ((1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    "resnet64 128->128 8x8": ((8, 128, 8, 8), (128, 128, 3, 3), 1, 1),
    "resnet64 512->512 2x2": ((8, 512, 2, 2), (512, 512, 3, 3), 1, 1),
    "resnet224 128->128 28x28": ((1, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    "resnet224 64->128 56x56/2": ((1, 64, 56, 56), (128, 64, 3, 3), 2, 1),
}
PASSES = ("forward", "backward data", "backward filter")
IMPLS = ("mgegraph", "mgegraph no Winograd", "mgegraph GEMM paths", "torch eager")


@contextlib.contextmanager
def paths_of(impl: str):
    """Compile with the path rule ``impl`` names: the default; "no Winograd" (the rule before
    the Winograd path); "GEMM paths" (the GEMM paths per image alone: the kernels before the
    tiled, batched and Winograd paths)."""
    saved = lowering._tiled_path, lowering._batched_pays, lowering._winograd_pays
    if impl.endswith(("GEMM paths", "no Winograd")):
        lowering._winograd_pays = lambda *args: False
    if impl.endswith("GEMM paths"):
        lowering._tiled_path = lambda *args: None
        lowering._batched_pays = lambda *args: False
    try:
        yield
    finally:
        lowering._tiled_path, lowering._batched_pays, lowering._winograd_pays = saved


def _conv_graph(name, conv_pass):
    xs, ws, stride, pad = SHAPES[name]
    conv = {"stride": (stride,) * 2, "padding": (pad,) * 2, "dilation": (1, 1), "groups": 1}
    g = mg.Graph()
    x, w = g.input("x", xs), g.input("w", ws)
    y = F.conv2d(x, w, stride=stride, padding=pad)
    dy = g.input("dy", y.shape)
    if conv_pass == "forward":
        return [y], y.shape
    if conv_pass == "backward data":
        return [C.conv2d_backward_data(w, dy, xs[2:], **conv)], y.shape
    return [C.conv2d_backward_filter(x, dy, ws[2:], **conv)], y.shape


@functools.cache
def _arrays(name):
    xs, ws, _, _ = SHAPES[name]
    rng = np.random.default_rng(workloads.SEED)
    return rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32)


def _mg_conv(name, conv_pass, impl):
    outputs, yshape = _conv_graph(name, conv_pass)
    with paths_of(impl):
        plan = mg.compile(outputs)
    x, w = _arrays(name)
    dy = np.random.default_rng(1).standard_normal(yshape, dtype=np.float32)
    feeds = {k: v for k, v in {"x": x, "w": w, "dy": dy}.items() if k in plan.feeds}
    plan.run(feeds)
    run = plan.executable().executor.run
    return lambda: (run(), feeds)  # the closure keeps the feeds a run may read in place alive


def _torch_conv(name, conv_pass):
    torch = need("torch")
    _, _, stride, pad = SHAPES[name]
    x, w = (torch.from_numpy(a) for a in _arrays(name))
    if conv_pass == "forward":
        return lambda: torch.nn.functional.conv2d(x, w, None, stride, pad)
    dy = torch.nn.functional.conv2d(x, w, None, stride, pad).normal_()
    mask = [conv_pass == "backward data", conv_pass == "backward filter", False]
    return lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("conv_pass", PASSES)
@pytest.mark.parametrize("name", list(SHAPES))
def test_conv_pass(benchmark, name, conv_pass, impl):
    if name.startswith("resnet") and conv_pass != "forward":
        pytest.skip("inference needs the forward pass only")
    benchmark.group = f"conv {name} {conv_pass} ({THREADS} threads)"
    fn = (_torch_conv(name, conv_pass) if impl == "torch eager"
          else _mg_conv(name, conv_pass, impl))
    benchmark(fn)


@pytest.mark.parametrize("impl", ["mgegraph step", "mgegraph step, no Winograd",
                                  "mgegraph step, GEMM paths", "torch eager"])
def test_convnet_train_tiles(benchmark, impl):
    benchmark.group = f"convnet-train 32x3x32x32 ({THREADS} threads)"
    with paths_of(impl):
        impls = workloads.convnet_train()
    if impl == "torch eager" and impl not in impls:
        pytest.skip("torch is not installed")
    benchmark(impls["torch eager" if impl == "torch eager" else "mgegraph step"])


RESNET_IMPLS = ["mgegraph freeze=True", "mgegraph freeze=True, no Winograd",
                "mgegraph freeze=True, GEMM paths",
                "mgegraph optimize=0", "onnxruntime", "torch eager"]


@pytest.mark.parametrize("impl", RESNET_IMPLS)
@pytest.mark.parametrize("shape", ["1x3x224x224", "8x3x64x64"])
def test_resnet_infer_tiles(benchmark, shape, impl):
    benchmark.group = f"resnet-infer {shape} ({THREADS} threads)"
    x = resnet_input(shape)
    if impl.startswith("mgegraph"):
        options = {"optimize": 0} if impl.endswith("optimize=0") else {"freeze": True}
        with paths_of(impl):
            plan = mg.compile_module(model(), (x,), **options).plan
        benchmark(functools.partial(plan.run, {"input0": x}))
    elif impl == "onnxruntime":
        benchmark(functools.partial(onnx_session(x).run, None, {"input0": x}))
    else:
        torch = need("torch")
        net, tx = torch_resnet18(torch), torch.from_numpy(x)

        def run():
            with torch.no_grad():
                return net(tx)

        benchmark(run)
