"""MegEngine's multi-head attention (F.nn.multi_head_attention, nn.MultiHeadAttention, also
M.MultiHeadAttn) against PyTorch's nn.MultiheadAttention (batch_first) with copied weights:
masks, weights returned, bias_kv and zero attention, unbatched inputs, kdim/vdim, a training
step by SGD, a compiled training step, dropout and the errors of bad arguments."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.module as M
from mgegraph import nn, optim
from mgegraph.ir.errors import GraphError, OpError
from mgegraph.nn.attention import pack_torch_weights

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(39)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def pair(embed, heads, **kwargs):
    """Ours and PyTorch's layer holding the same weights."""
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(embed, heads, batch_first=True, **kwargs)
    ours = nn.MultiHeadAttention(embed, heads, bias=kwargs.get("bias", True),
                                 add_bias_kv=kwargs.get("add_bias_kv", False),
                                 add_zero_attn=kwargs.get("add_zero_attn", False),
                                 kdim=kwargs.get("kdim"), vdim=kwargs.get("vdim"))
    sd = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    ours.io_weight_bias.value = pack_torch_weights(
        sd.get("in_proj_weight"), sd["out_proj.weight"], sd.get("in_proj_bias"),
        sd.get("out_proj.bias"), sd.get("q_proj_weight"), sd.get("k_proj_weight"),
        sd.get("v_proj_weight"))
    if ours.bias_k is not None:
        ours.bias_k.value, ours.bias_v.value = sd["bias_k"], sd["bias_v"]
    return ours, theirs


def both(ours, theirs, q, k, v, **kwargs):
    ours.eval()
    got = ours(*(mg.tensor(t) for t in (q, k, v)),
               **{key: mg.tensor(val) if isinstance(val, np.ndarray) else val
                  for key, val in kwargs.items()})
    want = theirs(*(torch.tensor(t) for t in (q, k, v)),
                  **{key: torch.tensor(val) if isinstance(val, np.ndarray) else val
                     for key, val in kwargs.items()})
    return got, want


def close(got, want, tol=2e-6):
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=tol)


def padding(n, s):
    mask = RNG.random((n, s)) > 0.7    # True: a padded key, not attended
    mask[:, 0] = False
    return mask


@pytest.mark.parametrize("masks", ["none", "key padding", "attn bool", "attn float 3-d",
                                   "both", "both bool"])
def test_against_torch_multihead_attention(masks):
    ours, theirs = pair(16, 4)
    q, kv = rand(2, 5, 16), rand(2, 7, 16)
    kwargs = {}
    if masks in ("key padding", "both"):
        kwargs["key_padding_mask"] = padding(2, 7)
    if masks in ("attn bool", "both bool"):
        kwargs["attn_mask"] = np.triu(np.ones((5, 7), bool), 1)
    if masks == "both bool":
        kwargs["key_padding_mask"] = padding(2, 7)
    if masks in ("attn float 3-d", "both"):
        kwargs["attn_mask"] = rand(2 * 4, 5, 7) if masks != "both" else rand(5, 7)
    if masks == "both":
        kwargs["key_padding_mask"] = np.where(kwargs["key_padding_mask"], -np.inf,
                                              0).astype(np.float32)
    (out, none), (want, _) = both(ours, theirs, q, kv, kv, **kwargs)
    assert none is None
    close(out, want)


@pytest.mark.parametrize("average", [True, False])
def test_need_weights(average):
    ours, theirs = pair(12, 3)
    q = rand(2, 6, 12)
    (out, w), (want, want_w) = both(ours, theirs, q, q, q, need_weights=True,
                                    average_attn_weights=average,
                                    key_padding_mask=padding(2, 6))
    close(out, want)
    assert w.shape == ((2, 6, 6) if average else (2 * 3, 6, 6))
    close(w, want_w.reshape(w.shape))


def test_bias_kv_zero_attention_kdim_vdim_and_unbatched():
    ours, theirs = pair(8, 2, add_bias_kv=True, add_zero_attn=True, kdim=5, vdim=3)
    q, k, v = rand(2, 4, 8), rand(2, 6, 5), rand(2, 6, 3)
    (out, _), (want, _) = both(ours, theirs, q, k, v, key_padding_mask=padding(2, 6))
    close(out, want)
    (out, _), (want, _) = both(ours, theirs, q[0], k[0], v[0])
    assert out.shape == (4, 8)
    close(out, want)


def test_is_causal_without_a_mask_is_the_causal_mask():
    # MegEngine's rule (PyTorch's layer refuses is_causal without attn_mask)
    ours, theirs = pair(8, 2)
    q = rand(2, 9, 8)
    causal = np.triu(np.ones((9, 9), bool), 1)
    got, _ = ours(*(mg.tensor(q),) * 3, is_causal=True)
    (out, _), (want, _) = both(ours, theirs, q, q, q, attn_mask=causal)
    close(got, want)
    close(out, want)


def test_megengine_names_and_one_class():
    assert M.MultiHeadAttn is nn.MultiHeadAttention is M.MultiHeadAttention
    layer = M.MultiHeadAttn(8, 2)
    # MegEngine's one parameter: four (8, 8) weights, then four biases
    assert layer.io_weight_bias.numpy().shape == (1, 4 * 64 + 4 * 8)
    assert not layer.io_weight_bias.numpy()[0, 4 * 64:].any()


def test_sgd_steps_match_torch():
    ours, theirs = pair(8, 2)
    ours.train()
    x, target = rand(3, 5, 8), rand(3, 5, 8)
    opt, topt = optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(), lr=0.1)
    gm = mg.GradManager().attach(ours.parameters())
    for _ in range(3):
        with gm:
            out, _ = ours(mg.tensor(x), mg.tensor(x), mg.tensor(x), is_causal=True)
            loss = F.mean(F.square(out - mg.tensor(target)))
            gm.backward(loss)
        opt.step().clear_grad()
        topt.zero_grad()
        causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
        tout, _ = theirs(*(torch.tensor(x),) * 3, attn_mask=causal, need_weights=False)
        tloss = ((tout - torch.tensor(target)) ** 2).mean()
        tloss.backward()
        topt.step()
        assert float(loss) == pytest.approx(float(tloss.detach()), rel=1e-5)


def test_a_compiled_training_step_with_dropout_draws_new_masks():
    layer = nn.MultiHeadAttention(8, 2, attn_dropout=0.5, out_dropout=0.1)
    model = nn.Sequential(layer)
    x = rand(2, 6, 8)
    g = mg.Graph()
    xi = g.input("x", x.shape, "float32")
    layer.train()
    out, _ = layer(xi, xi, xi)
    loss = F.sum(out * out)
    ops = {n.op.name for n in g.nodes}
    assert "dropout" in ops and "attention" not in ops
    step = mg.compile(mg.grad(loss, [xi]))
    first, second = step.run({"x": x})[0], step.run({"x": x})[0]
    assert not np.array_equal(first, second)   # the step counter advanced: a new mask
    layer.eval()
    assert model is not None and {n.op.name for n in _graph_ops(layer, x)} >= {"attention"}


def _graph_ops(layer, x):
    g = mg.Graph()
    xi = g.input("x", x.shape, "float32")
    layer(xi, xi, xi)
    return g.nodes


@pytest.mark.parametrize("make,match", [
    (lambda: nn.MultiHeadAttention(10, 3), "divisible"),
    (lambda: nn.MultiHeadAttention(8, 0), "num_heads"),
    (lambda: nn.MultiHeadAttention(8, 2, attn_dropout=2), "attn_dropout"),
])
def test_bad_arguments(make, match):
    with pytest.raises(GraphError, match=match):
        make()


def test_bad_inputs_name_the_function_and_shapes():
    layer = nn.MultiHeadAttention(8, 2)
    x = mg.tensor(rand(2, 5, 8))
    with pytest.raises(OpError, match=r"multi_head_attention.*key_padding_mask.*\(2, 5\)"):
        layer(x, x, x, key_padding_mask=mg.tensor(np.zeros((2, 4), bool)))
    with pytest.raises(OpError, match=r"multi_head_attention.*attn_mask"):
        layer(x, x, x, attn_mask=mg.tensor(np.zeros((3, 5), bool)))
    with pytest.raises(OpError, match="cuDNN"):
        layer(x, x, x, maybe_cudnn_style_mask=True)
    with pytest.raises(OpError, match=r"io_weight_bias has 10 values"):
        F.nn.multi_head_attention(x, x, x, 8, 2, 0.0, 0.0, mg.tensor(rand(1, 10)))
