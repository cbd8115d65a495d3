"""Whole CUDA plans with the hand-written kernels, without a GPU: an MLP, a small convnet and an
attention head (forward, loss and every gradient), planned by the CUDA backend (device=None: planning only),
run on the host by the fiber emulation at the planned arena offsets (rendered and csrc_cuda/
kernels together), against the CPU backend's plan of the same graph. This checks what the
per-op tests cannot: the families' lowerings and steps inside real plans (workspaces at their
offsets, in-place buffers, the epilogue and fusion passes' nodes); (marker cuda) the same plans
on a device."""
import numpy as np
import pytest
from kernel_checks import assert_close, run_plan_emulated

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.backend import unregister_backend
from mgegraph.cuda.backend import CudaBackend


@pytest.fixture(scope="module")
def planner():
    mg.register_backend("cuda-kernels-plan", lambda: CudaBackend(device=None))
    yield "cuda-kernels-plan"
    unregister_backend("cuda-kernels-plan")


def _params(g, rng, shapes):
    return [g.param(f"p{i}", (rng.standard_normal(s) * 0.3).astype(np.float32))
            for i, s in enumerate(shapes)]


def _mlp():
    """Linear, ReLU, Linear, LayerNorm, cross entropy: loss and the gradient of every weight."""
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x, label = g.input("x", (32, 20), "float32"), g.input("label", (32,), "int32")
    w1, b1, w2, b2 = _params(g, rng, [(64, 20), (64,), (10, 64), (10,)])
    h = F.relu(F.linear(x, w1, b1))
    logits = F.layer_norm(F.linear(h, w2, b2), (10,))
    loss = F.cross_entropy(logits, label)
    grads = mg.grad(loss, [w1, b1, w2, b2])
    feeds = {"x": rng.standard_normal((32, 20)).astype(np.float32),
             "label": rng.integers(0, 10, 32).astype(np.int32)}
    return [loss, F.softmax(logits, axis=1), *grads], feeds


def _convnet():
    """conv (bias, relu), batch norm (training), max pool, mean over space, linear, cross
    entropy: loss and the gradients of the conv and linear weights."""
    rng = np.random.default_rng(1)
    g = mg.Graph()
    x, label = g.input("x", (4, 3, 10, 10), "float32"), g.input("label", (4,), "int64")
    wc, bc, gamma, beta, wl = _params(g, rng, [(8, 3, 3, 3), (8,), (8,), (8,), (5, 8)])
    h = F.relu(F.conv2d(x, wc, bc, padding=1))
    h = F.batch_norm(h, weight=gamma, bias=beta, training=True)
    h = F.max_pool2d(h, 2, 2)
    logits = F.linear(F.mean(h, axis=(2, 3)), wl)
    loss = F.cross_entropy(logits, label, label_smooth=0.1)
    grads = mg.grad(loss, [wc, bc, gamma, wl])
    feeds = {"x": rng.standard_normal((4, 3, 10, 10)).astype(np.float32),
             "label": rng.integers(0, 5, 4).astype(np.int64)}
    return [loss, F.argmax(logits, axis=1), *grads], feeds


def _attention():
    """Embedding (take), layer norm, one attention head (batched matmuls with a transpose,
    softmax), split/concat, dropout, and the gradients of every weight (the embedding's through
    index_add)."""
    rng = np.random.default_rng(2)
    g = mg.Graph()
    tokens, label = g.input("tokens", (2, 6), "int32"), g.input("label", (2,), "int32")
    emb, wqkv, wo = _params(g, rng, [(11, 8), (24, 8), (5, 8)])
    h = F.layer_norm(F.take(emb, tokens, axis=0), (8,))              # (2, 6, 8)
    q, k, v = F.split(F.linear(h, wqkv), 3, axis=2)                  # (2, 6, 8) each
    att = F.softmax(F.matmul(q, k, transpose_b=True) * 0.35, axis=2)  # (2, 6, 6)
    ctx = F.concat([F.matmul(att, v), h], axis=2)                    # (2, 6, 16)
    ctx = F.dropout(F.transpose(ctx, (0, 2, 1)), 0.2, seed=5)        # (2, 16, 6)
    pooled = F.mean(F.pad(ctx, ((0, 0), (0, 0), (1, 1))), axis=1)    # (2, 8)
    loss = F.cross_entropy(F.linear(pooled, wo), label)
    grads = mg.grad(loss, [emb, wqkv, wo])
    feeds = {"tokens": rng.integers(0, 11, (2, 6)).astype(np.int32),
             "label": rng.integers(0, 5, 2).astype(np.int32)}
    return [loss, *grads], feeds


GRAPHS = {"mlp": _mlp, "convnet": _convnet, "attention": _attention}


@pytest.mark.nvrtc
@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("optimize", (0, 1))
def test_plan_emulated_like_cpu(planner, name, optimize):
    outputs, feeds = GRAPHS[name]()
    cpu = mg.compile(outputs, optimize=optimize).run(feeds)
    plan = mg.compile(outputs, device=planner, optimize=optimize)
    assert {ins.kernel.rsplit("_", 1)[0] for ins in plan.instructions} - {"fused", "unary",
                                                                          "binary"}
    got = run_plan_emulated(plan, mg.backend.get_backend(planner), feeds)
    for g, w in zip(got, cpu):
        assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("name", GRAPHS)
def test_plan_on_device_like_cpu(name):
    from mgegraph import cuda
    reason = cuda.unavailable_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    outputs, feeds = GRAPHS[name]()
    cpu = mg.compile(outputs).run(feeds)
    for g, w in zip(mg.compile(outputs, device="cuda").run(feeds), cpu):
        assert_close(g, w, rtol=1e-4, atol=1e-6)
