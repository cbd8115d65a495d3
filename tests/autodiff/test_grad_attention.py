"""Gradients of scaled dot-product attention (the attention_backward op and kernel, FlashAttention-2's
recomputation from lse) against finite differences in float64 and against PyTorch; fully masked
rows get none; the lse residual refuses a gradient."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import GraphError
from mgegraph.ops.builder import apply_multi
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(38)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def sdpa(*args, **kwargs):
    return F.nn.scaled_dot_product_attention(*args, **kwargs)


# q, k, v shapes, causal: rows and keys cross the 64-row / 64-key tiles
FD_CASES = {
    "plain": ((1, 2, 5, 3), (1, 2, 7, 3), (1, 2, 7, 2), False),
    "causal, tiles": ((1, 1, 67, 2), (1, 1, 66, 2), (1, 1, 66, 3), True),
    "gqa causal Lq < Lk": ((1, 4, 6, 3), (1, 2, 9, 3), (1, 2, 9, 2), True),
    "gqa keys cross tiles": ((1, 2, 3, 2), (1, 1, 70, 2), (1, 1, 70, 2), False),
}


@pytest.mark.parametrize("name", FD_CASES)
def test_against_finite_differences(name):
    qs, ks, vs, causal = FD_CASES[name]
    gradcheck(lambda q, k, v: sdpa(q, k, v, is_causal=causal, enable_gqa=qs[1] != ks[1]),
              rand(*qs), rand(*ks), rand(*vs))


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_with_a_mask_against_finite_differences(kind):
    q, k, v = rand(2, 2, 6, 3), rand(2, 2, 8, 3), rand(2, 2, 8, 3)
    mask = RNG.random((2, 1, 6, 8)) > 0.4
    mask[..., 0] = True
    if kind == "additive":
        mask = rand(2, 1, 6, 8)
    gradcheck(lambda a, b, c, m: sdpa(a, b, c, attn_mask=m), q, k, v, mask, wrt=[0, 1, 2])


def torch_grads(q, k, v, g, **kwargs):
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(t, requires_grad=True) for t in (q, k, v)]
    kwargs = {key: torch.tensor(val) if isinstance(val, np.ndarray) else val
              for key, val in kwargs.items()}
    out = torch.nn.functional.scaled_dot_product_attention(*ts, **kwargs)
    out.backward(torch.tensor(g))
    return [t.grad.numpy() for t in ts]


def mg_grads(q, k, v, g, **kwargs):
    graph = mg.Graph()
    xs = [graph.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate((q, k, v))]
    kwargs = {key: graph.const(val) if isinstance(val, np.ndarray) else val
              for key, val in kwargs.items()}
    out = sdpa(*xs, **kwargs)
    grads = mg.grad(F.sum(out * graph.const(g)), xs)
    return mg.compile(grads).run({"x0": q, "x1": k, "x2": v})


TORCH_CASES = {
    "causal gqa": ((2, 6, 130, 16), (2, 2, 100, 16), (2, 2, 100, 8),
                   {"is_causal": True, "enable_gqa": True}),
    "bool padding": ((2, 2, 70, 8), (2, 2, 90, 8), (2, 2, 90, 8), {"attn_mask": "padding"}),
    "additive, scale": ((1, 3, 65, 8), (1, 3, 65, 8), (1, 3, 65, 8),
                        {"attn_mask": "additive", "scale": 0.7}),
}


@pytest.mark.parametrize("name", TORCH_CASES)
def test_against_torch(name):
    qs, ks, vs, kwargs = TORCH_CASES[name]
    q, k, v = (rand(*s, dtype=np.float32) for s in (qs, ks, vs))
    g = rand(*qs[:-1], vs[-1], dtype=np.float32)
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "padding":
        mask = RNG.random((qs[0], 1, 1, ks[2])) > 0.3
        mask[..., 0] = True
        kwargs["attn_mask"] = mask
    elif kwargs.get("attn_mask") == "additive":
        kwargs["attn_mask"] = rand(qs[2], ks[2], dtype=np.float32)
    for got, want in zip(mg_grads(q, k, v, g, **kwargs), torch_grads(q, k, v, g, **kwargs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_fully_masked_row_gets_no_gradient():
    q, k, v = rand(1, 1, 5, 3), rand(1, 1, 6, 3), rand(1, 1, 6, 3)
    mask = RNG.random((5, 6)) > 0.3
    mask[:, 0], mask[2] = True, False
    dq, dk, dv = mg_grads(q, k, v, np.ones((1, 1, 5, 3)), attn_mask=mask)
    assert (dq[0, 0, 2] == 0).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
    # and the other rows' gradients are those of the graph without row 2
    keep = [0, 1, 3, 4]
    want = mg_grads(q[:, :, keep], k, v, np.ones((1, 1, 4, 3)), attn_mask=mask[keep])
    np.testing.assert_allclose(dq[:, :, keep], want[0], rtol=1e-12)
    np.testing.assert_allclose(dk, want[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dv, want[2], rtol=1e-12, atol=1e-15)


def test_the_backward_is_one_op_that_builds_no_score_matrix():
    g = mg.Graph()
    xs = [g.input(f"x{i}", (1, 2, 300, 8), "float32") for i in range(3)]
    grads = mg.grad(F.sum(sdpa(*xs, is_causal=True)), xs)
    ops = [n.op.name for n in g.nodes]
    assert ops.count("attention_backward") == 1 and "matmul" not in ops
    assert all(d.shape == (1, 2, 300, 8) for d in grads)


def test_the_lse_residual_refuses_a_gradient():
    g = mg.Graph()
    xs = [g.input(f"x{i}", (1, 1, 4, 2), "float64") for i in range(3)]
    _, lse = apply_multi("attention", xs, scale=1.0)
    with pytest.raises(GraphError, match="lse"):
        mg.grad(F.sum(lse), xs)


@pytest.mark.parametrize("causal", [False, True])
def test_an_additive_mask_gets_its_gradient(causal):
    # a learnt bias over (heads, Lq, Lk), as relative-position biases are; grouped heads
    q, k, v, bias = rand(2, 4, 5, 3), rand(2, 2, 7, 3), rand(2, 2, 7, 2), rand(1, 4, 5, 7)
    gradcheck(lambda a, b, c, m: sdpa(a, b, c, attn_mask=m, is_causal=causal, enable_gqa=True),
              q, k, v, bias)


def test_a_constant_or_bool_mask_adds_no_nodes_for_its_gradient():
    for mask in (rand(4, 6), RNG.random((4, 6)) > 0.3):
        g = mg.Graph()
        xs = [g.input(f"x{i}", (1, 2, s, 3), "float64") for i, s in enumerate((4, 6, 6))]
        out = sdpa(*xs, attn_mask=g.const(mask))
        before = len(g.nodes)
        mg.grad(F.sum(out), xs)
        assert [n.op.name for n in g.nodes[before:]].count("matmul") == 0
