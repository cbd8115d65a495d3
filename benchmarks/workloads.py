"""The workloads of shared/BENCHMARKS.md, each as callables per implementation (mgegraph, peers).

Every builder returns {implementation name: zero-argument callable}; a callable runs one
iteration of the workload. Peers that are not installed are left out.
"""
from __future__ import annotations

import numpy as np

import mgegraph as mg
import mgegraph.functional as F

SEED = 0


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# -- op-overhead: 1,000 elementwise ops (add, mul, relu cycled) on 16 elements -----------------
OP_CHAIN = 1000


def op_overhead() -> dict:
    x0 = np.random.default_rng(SEED).standard_normal(16).astype(np.float32)
    a, m = np.float32(0.5), np.float32(0.999)
    g = mg.Graph()
    x = g.input("x", (16,), "float32")
    ca, cm = g.const(a), g.const(m)
    y = x
    for i in range(OP_CHAIN):
        y = (y + ca, y * cm, F.relu(y))[i % 3]
    plan = mg.compile([y])
    feeds = {"x": x0}
    plan.run(feeds)

    def numpy_eager():
        v = x0
        for i in range(OP_CHAIN):
            k = i % 3
            v = v + a if k == 0 else (v * m if k == 1 else np.maximum(v, 0))
        return v

    impls = {"mgegraph plan.run": lambda: plan.run(feeds),
             "mgegraph executor only": plan._executor.run,
             "numpy eager": numpy_eager}
    torch = _torch()
    if torch is not None:
        t0 = torch.from_numpy(x0.copy())

        def torch_eager():
            v = t0
            for i in range(OP_CHAIN):
                k = i % 3
                v = v + 0.5 if k == 0 else (v * 0.999 if k == 1 else torch.relu(v))
            return v

        impls["torch eager"] = torch_eager
    return impls


# -- mlp-infer: 784-1024-1024-10 with ReLU, batch 1 and 128 -------------------------------------
MLP_LAYERS = (784, 1024, 1024, 10)


def mlp_weights():
    rng = np.random.default_rng(SEED)
    return [((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
             (rng.standard_normal(o) * 0.1).astype(np.float32))
            for i, o in zip(MLP_LAYERS[:-1], MLP_LAYERS[1:])]


def mlp_infer(batch: int) -> dict:
    from scipy.linalg import blas

    weights = mlp_weights()
    x0 = np.random.default_rng(SEED + 1).standard_normal((batch, MLP_LAYERS[0]), dtype=np.float32)
    g = mg.Graph()
    h = x = g.input("x", x0.shape, "float32")
    for k, (w, b) in enumerate(weights):
        h = h @ g.param(f"w{k}", w) + g.param(f"b{k}", b)
        if k < len(weights) - 1:
            h = F.relu(h)
    plan = mg.compile([h])
    feeds = {"x": x0}
    plan.run(feeds)

    # The physical limit: the same GEMMs back to back on preallocated buffers through SciPy's
    # BLAS, the one mgegraph's kernels call (row-major C = A @ B as column-major C^T = B^T A^T).
    outs = [np.empty((batch, w.shape[1]), np.float32) for w, _ in weights]

    def gemms_only():
        a = x0
        for (w, _), c in zip(weights, outs):
            blas.sgemm(1.0, w.T, a.T, beta=0.0, c=c.T, overwrite_c=True)
            a = c
        return a

    def numpy_eager():
        a = x0
        for k, (w, b) in enumerate(weights):
            a = a @ w + b
            if k < len(weights) - 1:
                a = np.maximum(a, 0)
        return a

    impls = {"gemms only (scipy blas)": gemms_only, "mgegraph plan.run": lambda: plan.run(feeds),
             "numpy eager": numpy_eager}
    torch = _torch()
    if torch is not None:
        tx = torch.from_numpy(x0)
        tw = [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in weights]

        def torch_eager():
            with torch.no_grad():
                a = tx
                for k, (w, b) in enumerate(tw):
                    a = torch.addmm(b, a, w)
                    if k < len(tw) - 1:
                        a = torch.relu(a)
                return a

        impls["torch eager"] = torch_eager
    return impls
