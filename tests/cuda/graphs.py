"""The graphs whose fused groups the NVRTC tests render and compile: the fusion tests' graphs
(tests/planner/passes/test_fuse.py), random DAGs of mgegraph.testing, and the benchmark
models (benchmarks/models.py), fused with the CUDA backend's limits."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.compiler import evaluator
from mgegraph.cuda.backend import FUSION
from mgegraph.planner.passes.pipeline import optimize
from mgegraph.testing import random_graph

ROOT = Path(__file__).resolve().parents[2]


def fusion_chain(n=4_194_304):
    g = mg.Graph()
    x, a, b, c = (g.input(k, (n,), "float32") for k in "xabc")
    return [F.relu(x * a + b) * c - F.tanh(x) / (1.0 + F.exp(-x))]


def broadcast_two_outputs():
    g = mg.Graph()
    x = g.input("x", (3, 5, 7), "float32")
    row, col = g.input("row", (7,), "float32"), g.input("col", (3, 1, 1), "float32")
    h = F.sigmoid(x * row) + col
    return [F.square(h) - row, F.sum(h)]


def attributes_f64():
    g = mg.Graph()
    x = g.input("x", (64,), "float64")
    return [F.clip(F.leaky_relu(x * 3.0, 0.2), -1.0, 2.5) + F.exp(x)]


def many_inputs(n=40):
    g = mg.Graph()
    total = g.input("x0", (64,), "float32")
    for i in range(1, n):
        total = total * 0.5 + F.tanh(g.input(f"x{i}", (64,), "float32"))
    return [total]


def _models():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # models.py imports workloads.py by name
    import models
    return {"mlp-train": models.mlp_train, "convnet-train": models.convnet_train,
            "mlp-infer b128": lambda: models.mlp_infer(128),
            "resnet18-infer b1 64": lambda: models.resnet_infer(1, 64),
            "mobilenet-infer 64": lambda: models.mobilenet_infer(64)}


def graphs() -> dict:
    """name -> zero-argument function giving the outputs of a graph."""
    made = {"fusion-chain": fusion_chain, "broadcast, two outputs": broadcast_two_outputs,
            "attributes f64": attributes_f64, "40 inputs": many_inputs}
    made.update({f"random {s}": (lambda s=s: random_graph(s)[1]) for s in range(12)})
    for name, plan_of in _models().items():
        made[name] = lambda plan_of=plan_of: list(plan_of().source.outputs)
    return made


def fused_nodes(outputs) -> list:
    """The fused_elementwise nodes of ``outputs``' graph after the passes, with CUDA limits."""
    graph = outputs[0].graph
    g, _, _ = optimize(graph, outputs, 1, evaluate=evaluator("cpu"), fusion=FUSION)
    return [n for n in g.nodes if n.op.name == "fused_elementwise"]


__all__ = ["fused_nodes", "graphs", "np"]


# -- graphs whose run fails on bad data: every kind of kernel status a CUDA kernel reports ------
def failing_cases() -> dict:
    """name -> (outputs, good feeds, bad feeds): one graph per data-dependent failure of a CPU
    kernel (mgegraph/_kernels: KERNEL_NEGATIVE_POWER, KERNEL_INDEX_OUT_OF_RANGE), which the
    CUDA kernel of the same op reports through the status word (mg_fail, mg_abi.cuh)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    cases = {}
    for dtype in ("int32", "int64"):
        g = mg.Graph()
        a, b = g.input("a", (6,), dtype), g.input("b", (6,), dtype)
        base = np.arange(-2, 4).astype(dtype)
        cases[f"pow_{dtype}"] = ([F.pow(a, b) + a], {"a": base, "b": np.arange(6).astype(dtype)},
                                 {"a": base, "b": np.array([1, 2, -1, 0, 3, 1], dtype)})
    idx_good, idx_bad = np.array([0, 3, -1], np.int32), np.array([0, 4, 1], np.int32)
    for op in ("take", "index_add", "gather", "scatter_add"):
        wide = op in ("gather", "scatter_add")  # an index per element, not per row
        good = np.tile(idx_good[:, None], 6) if wide else idx_good
        bad = np.tile(idx_bad[:, None], 6) if wide else idx_bad
        source = "t" if op in ("take", "gather") else "s"
        value = x if source == "t" else x[:3].copy()
        cases[op] = ([_indexing(op, value.shape, good.shape)], {source: value, "i": good},
                     {source: value, "i": bad})
    g = mg.Graph()
    labels = g.input("k", (4,), "int32")
    cases["one_hot"] = ([F.one_hot(labels, 6)], {"k": np.array([0, 5, 2, 1], np.int32)},
                        {"k": np.array([0, 6, 2, 1], np.int32)})
    good, bad = np.array([0, 5, 2, 1], np.int32), np.array([0, 5, -1, 1], np.int32)
    for reduction in ("none", "mean", "backward"):
        g = mg.Graph()
        pred = g.input("p", (4, 6), "float32")
        loss = F.cross_entropy(pred, g.input("k", (4,), "int32"),
                               reduction="none" if reduction == "none" else "mean")
        outputs = mg.grad(loss, [pred]) if reduction == "backward" else [loss]
        cases[f"cross_entropy_{reduction}"] = (outputs, {"p": x, "k": good}, {"p": x, "k": bad})
    return cases


def _indexing(op, shape, index_shape):
    from mgegraph.ops.builder import apply
    g = mg.Graph()
    i = g.input("i", index_shape, "int32")
    if op == "take":  # an embedding lookup
        return F.take(g.input("t", shape, "float32"), i, axis=0)
    if op == "gather":
        return F.gather(g.input("t", shape, "float32"), 0, i)
    s = g.input("s", shape, "float32")
    if op == "index_add":
        return apply("index_add", (s, i), axis=0, size=4)
    return apply("scatter_add", (s, i), axis=0, shape=(4, 6))
