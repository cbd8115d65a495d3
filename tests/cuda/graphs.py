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
