"""The workloads of shared/BENCHMARKS.md, each as callables per implementation (mgegraph, peers).

Every builder returns {implementation name: zero-argument callable}; a callable runs one
iteration of the workload. Peers that are not installed are left out.
"""
from __future__ import annotations

import os

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import blas_select
from mgegraph._kernels.linalg import blas_gemm

# The limit of the GEMM-bound workloads: their GEMMs back to back through the BLAS in use
# (OpenBLAS, or MKL where blas_select measured it faster), named in the table's note.
GEMMS_ONLY = "gemms only (the BLAS in use)"


def blas_in_use() -> str:
    return blas_select.choice().name


SEED = 0


def _torch():
    if os.environ.get("MGEGRAPH_BENCH_NO_TORCH"):
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch


# -- op-overhead: 1,000 elementwise ops (add, mul, relu cycled) on 16 elements -----------------
OP_CHAIN = 1000


def op_chain_input() -> np.ndarray:
    return np.random.default_rng(SEED).standard_normal(16).astype(np.float32)


def op_chain_graph(ops: int = OP_CHAIN) -> mg.Var:
    """The chain of ``ops`` ops on a (16,) float32 input named "x": its last value."""
    g = mg.Graph()
    y = g.input("x", (16,), "float32")
    ca, cm = g.const(np.float32(0.5)), g.const(np.float32(0.999))
    for i in range(ops):
        y = (y + ca, y * cm, F.relu(y))[i % 3]
    return y


def op_chain_numpy(x0: np.ndarray) -> np.ndarray:
    a, m = np.float32(0.5), np.float32(0.999)
    v = x0
    for i in range(OP_CHAIN):
        k = i % 3
        v = v + a if k == 0 else (v * m if k == 1 else np.maximum(v, 0))
    return v


def op_chain_torch(torch, v):
    for i in range(OP_CHAIN):
        k = i % 3
        v = v + 0.5 if k == 0 else (v * 0.999 if k == 1 else torch.relu(v))
    return v


def op_overhead() -> dict:
    x0 = op_chain_input()
    plan = mg.compile([op_chain_graph()])
    feeds = {"x": x0}
    plan.run(feeds)
    impls = {"mgegraph plan.run": lambda: plan.run(feeds),
             "mgegraph executor only": plan.executable().executor.run,
             "numpy eager": lambda: op_chain_numpy(x0)}
    torch = _torch()
    if torch is not None:
        t0 = torch.from_numpy(x0.copy())
        impls["torch eager"] = lambda: op_chain_torch(torch, t0)
    return impls


# -- mlp-infer: 784-1024-1024-10 with ReLU, batch 1 and 128 -------------------------------------
MLP_LAYERS = (784, 1024, 1024, 10)


def mlp_weights():
    rng = np.random.default_rng(SEED)
    return [((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
             (rng.standard_normal(o) * 0.1).astype(np.float32))
            for i, o in zip(MLP_LAYERS[:-1], MLP_LAYERS[1:])]


def _linear_mlp(weights, x0, want):
    """The same MLP as nn.Linear layers (weights stored (out, in), as a model's are) through
    compile_module: at batch 1 its products are rows times a stored B^T (gemv_row.h's dots)."""
    model = _mlp_module()
    for linear, (w, b) in zip(model.layers[::2], weights):  # (Linear, ReLU, Linear, ...)
        linear.weight.value, linear.bias.value = w.T, b
    fn = mg.compile_module(model, (x0,))
    np.testing.assert_allclose(np.asarray(fn(x0)), want, rtol=1e-4, atol=1e-4)
    return lambda: fn(x0)


def mlp_infer(batch: int) -> dict:
    weights = mlp_weights()
    x0 = np.random.default_rng(SEED + 1).standard_normal((batch, MLP_LAYERS[0]), dtype=np.float32)
    g = mg.Graph()
    h = x = g.input("x", x0.shape, "float32")
    for k, (w, b) in enumerate(weights):
        h = h @ g.param(f"w{k}", w) + g.param(f"b{k}", b)
        if k < len(weights) - 1:
            h = F.relu(h)
    plan = mg.compile([h], tune="rules")
    tuned = mg.compile([h], tune="cached")  # the kernels' ways measured on this machine
    feeds = {"x": x0}
    np.testing.assert_allclose(tuned.run(feeds)[0], plan.run(feeds)[0], rtol=1e-4, atol=1e-4)

    # The physical limit: the same GEMMs back to back on preallocated buffers through the BLAS
    # mgegraph's kernels call, as they call it (blas_gemm: a gemv for one row, else a gemm).
    outs = [np.empty((batch, w.shape[1]), np.float32) for w, _ in weights]

    def gemms_only():
        a = x0
        for (w, _), c in zip(weights, outs):
            blas_gemm(a, w, c)
            a = c
        return a

    def numpy_eager():
        a = x0
        for k, (w, b) in enumerate(weights):
            a = a @ w + b
            if k < len(weights) - 1:
                a = np.maximum(a, 0)
        return a

    impls = {GEMMS_ONLY: gemms_only, "mgegraph plan.run": lambda: plan.run(feeds),
             "mgegraph tuned": lambda: tuned.run(feeds),
             "mgegraph nn.Linear": _linear_mlp(weights, x0, plan.run(feeds)[0]),
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


# -- mlp-train: one SGD step of the same MLP with softmax cross-entropy, batch 128 ----------------
def _mlp_module():
    from mgegraph import nn

    layers = []
    for k, (i, o) in enumerate(zip(MLP_LAYERS[:-1], MLP_LAYERS[1:])):
        layers.append(nn.Linear(i, o))
        if k < len(MLP_LAYERS) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _batch(shape, classes=10):
    rng = np.random.default_rng(SEED + 2)
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.integers(0, classes, shape[0]).astype(np.int64))


def mlp_train() -> dict:
    from mgegraph import nn

    nn.init.manual_seed(SEED)
    model = _mlp_module()
    x, y = _batch((128, MLP_LAYERS[0]))
    steps = _sgd_steps(model, x, y)
    weights = [(lyr.weight.value.copy(), lyr.bias.value.copy()) for lyr in model.layers[::2]]

    # The GEMMs of the step back to back: 3 forward, 3 weight gradients, 2 input gradients,
    # through the BLAS the kernels call (weights are (out, in): forward a @ w.T, dw = g.T @ a,
    # dx = g @ w).
    acts = [x] + [np.empty((128, w.shape[0]), np.float32) for w, _ in weights]
    dws = [np.empty_like(w) for w, _ in weights]
    dxs = [np.empty((128, w.shape[1]), np.float32) for w, _ in weights[1:]]

    def gemms_only():
        for (w, _), a, out in zip(weights, acts[:-1], acts[1:]):
            blas_gemm(a, w, out, transpose_b=True)
        for a, g, dw in zip(acts[:-1], acts[1:], dws):
            blas_gemm(g, a, dw, transpose_a=True)
        for (w, _), g, dx in zip(weights[1:], acts[2:], dxs):
            blas_gemm(g, w, dx)

    def numpy_step():
        hs, a = [x], x
        for k, (w, b) in enumerate(weights):
            a = a @ w.T + b
            if k < len(weights) - 1:
                a = np.maximum(a, 0)
            hs.append(a)
        p = np.exp(a - a.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(y)), y] -= 1
        g = p / len(y)
        for k in range(len(weights) - 1, -1, -1):
            w, b = weights[k]
            dw, db = g.T @ hs[k], g.sum(0)
            if k:
                g = (g @ w) * (hs[k] > 0)
            w -= 0.01 * dw
            b -= 0.01 * db

    impls = {GEMMS_ONLY: gemms_only, **steps, "numpy hand-written": numpy_step}
    torch = _torch()
    if torch is not None:
        impls["torch eager"] = _torch_train_step(torch, model, x, y, "mlp")
    return impls


STEP_O2 = "mgegraph step optimize=2"


def _sgd_steps(model, x, y) -> dict:
    """The SGD (lr 0.01) step of ``model`` compiled at the default level and at optimize=2
    (accumulate: the update inside the weight-gradient GEMM), each run once; both update the
    same model's weights, so the figures are of the same values."""
    from mgegraph import optim

    def compiled(level):
        step = mg.compile_train_step(model, F.cross_entropy,
                                     optim.SGD(model.parameters(), lr=0.01),
                                     example_batch=(x, y), optimize=level)
        step(x, y)
        return lambda: step(x, y)

    return {"mgegraph step": compiled(1), STEP_O2: compiled(2)}


def _torch_train_step(torch, model, x, y, kind):
    if kind == "mlp":
        tmodel = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                     torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                     torch.nn.Linear(1024, 10))
    else:
        tmodel = _torch_convnet(torch)
    opt = torch.optim.SGD(tmodel.parameters(), lr=0.01)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def torch_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
        opt.step()

    return torch_step


# -- convnet-train ---------------------------------------------------------------------------------
def _convnet():
    from mgegraph import nn

    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(128, 10))


def _torch_convnet(torch):
    t = torch.nn
    return t.Sequential(t.Conv2d(3, 32, 3, padding=1), t.ReLU(), t.Conv2d(32, 64, 3, padding=1),
                        t.ReLU(), t.MaxPool2d(2), t.Conv2d(64, 128, 3, padding=1), t.ReLU(),
                        t.AdaptiveAvgPool2d(1), t.Flatten(), t.Linear(128, 10))


def convnet_train() -> dict:
    from mgegraph import nn

    nn.init.manual_seed(SEED)
    model = _convnet()
    x, y = _batch((32, 3, 32, 32))
    impls = _sgd_steps(model, x, y)
    torch = _torch()
    if torch is not None:
        impls = {"torch eager": _torch_train_step(torch, model, x, y, "convnet"), **impls}
    return impls


# -- eager mode (mg.tensor, GradManager, mg.jit.trace) against the plan and PyTorch eager ---------
def op_chain_eager(v, a, m):
    """The op chain of op_chain_graph run op by op on tensors (a, m: the two constants)."""
    for i in range(OP_CHAIN):
        k = i % 3
        v = v + a if k == 0 else (v * m if k == 1 else F.relu(v))
    return v


def op_overhead_eager() -> dict:
    x0 = op_chain_input()
    x, a, m = mg.tensor(x0), mg.tensor(np.float32(0.5)), mg.tensor(np.float32(0.999))
    np.testing.assert_array_equal(op_chain_eager(x, a, m).numpy(), op_chain_numpy(x0))
    impls = {"mgegraph eager": lambda: op_chain_eager(x, a, m),
             "mgegraph eager, python scalars": lambda: op_chain_eager(x, 0.5, 0.999),
             "numpy eager": lambda: op_chain_numpy(x0)}
    torch = _torch()
    if torch is not None:
        t0 = torch.from_numpy(x0.copy())
        impls["torch eager"] = lambda: op_chain_torch(torch, t0)
    return impls


def _eager_step(model, lr=0.01):
    """A MegEngine-style step: GradManager records, backward fills .grad, SGD updates."""
    from mgegraph import optim

    gm = mg.GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=lr)

    def step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    return step


def _train_modes(make, shape) -> dict:
    """One SGD step of ``make()`` on a seeded batch of ``shape``: eager, traced, compiled, torch."""
    from mgegraph import nn, optim

    x, y = _batch(shape)
    tx, ty = mg.tensor(x), mg.tensor(y)
    impls = {}
    nn.init.manual_seed(SEED)
    eager = _eager_step(make())
    impls["mgegraph eager"] = lambda: eager(tx, ty)
    nn.init.manual_seed(SEED)
    traced = mg.jit.trace(_eager_step(make()))
    impls["mgegraph trace"] = lambda: traced(tx, ty)
    nn.init.manual_seed(SEED)
    model = make()
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.01),
                                 example_batch=(x, y))
    impls["mgegraph compile_train_step"] = lambda: step(x, y)
    # the first step of each mode from the same weights gives the same loss (and records the trace)
    losses = [float(eager(tx, ty)), float(traced(tx, ty)), float(step(x, y))]
    assert losses[0] == losses[1] == losses[2], losses
    traced(tx, ty)  # the second call runs the plan
    torch = _torch()
    if torch is not None:
        kind = "mlp" if len(shape) == 2 else "convnet"
        impls["torch eager"] = _torch_train_step(torch, model, x, y, kind)
    return impls


def mlp_train_eager() -> dict:
    return _train_modes(_mlp_module, (128, MLP_LAYERS[0]))


def convnet_train_eager() -> dict:
    return _train_modes(_convnet, (32, 3, 32, 32))
