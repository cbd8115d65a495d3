"""The transformer language model of examples/transformer_lm.py: its gradients equal PyTorch's
for the same weights and batch, and the example trains, deploys, generates and exports."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.autodiff import GradManager

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
import transformer_lm as lm  # examples/ is not a package: found through sys.path above


def _torch_forward(torch, model, tokens, w):
    """The same network written with PyTorch's functions; ``w(parameter)`` is the torch tensor
    holding an mgegraph parameter's values."""
    tf = torch.nn.functional

    def rms(x, norm):
        return tf.rms_norm(x, (x.shape[-1],), w(norm.weight))

    def rotate(y, cos, sin, heads):
        b, t, d = y.shape
        y = y.reshape(b, t, heads, d // heads)
        y1, y2 = y.chunk(2, dim=-1)
        cos, sin = cos[:, :t, None, :], sin[:, :t, None, :]
        return torch.cat([y1 * cos - y2 * sin, y1 * sin + y2 * cos], -1).reshape(b, t, d)

    x = w(model.embed.weight)[tokens]
    for block in model.blocks:
        b, t, d = x.shape
        q, k, v = tf.linear(rms(x, block.attn_norm), w(block.qkv.weight)).chunk(3, -1)
        cos, sin = torch.from_numpy(block.cos), torch.from_numpy(block.sin)
        q, k = rotate(q, cos, sin, block.heads), rotate(k, cos, sin, block.heads)
        q, k, v = (y.reshape(b, t, block.heads, -1).transpose(1, 2) for y in (q, k, v))
        a = tf.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + tf.linear(a.transpose(1, 2).reshape(b, t, d), w(block.out.weight))
        gate, up = tf.linear(rms(x, block.mlp_norm), w(block.gate_up.weight)).chunk(2, -1)
        x = x + tf.linear(tf.silu(gate) * up, w(block.down.weight))
    return tf.linear(rms(x, model.norm), w(model.head.weight))


def test_gradients_equal_pytorchs_for_the_same_weights():
    torch = pytest.importorskip("torch")
    mg.module.init.manual_seed(3)
    model = lm.TinyLM(vocab=11, dim=16, heads=2, layers=2, hidden=24, length=8)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 11, (3, 8)).astype(np.int32)
    targets = rng.integers(0, 11, (3, 8)).astype(np.int32)
    params = list(model.named_parameters())
    gm = GradManager().attach([p for _, p in params])
    with gm:
        loss = lm.next_token_loss(model(mg.tensor(tokens)), mg.tensor(targets))
        gm.backward(loss)

    weights = {id(p): torch.tensor(p.numpy(), requires_grad=True) for _, p in params}
    logits = _torch_forward(torch, model, torch.from_numpy(tokens).long(),
                            lambda p: weights[id(p)])
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, 11),
                                               torch.from_numpy(targets).long().reshape(-1))
    theirs.backward()
    np.testing.assert_allclose(loss.item(), theirs.item(), rtol=1e-5)
    for name, p in params:
        np.testing.assert_allclose(p.grad.numpy(), weights[id(p)].grad.numpy(), rtol=2e-4,
                                   atol=2e-6, err_msg=name)


def test_the_example_trains_deploys_generates_and_exports():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "transformer_lm.py"), "--steps", "40"],
                          check=False, capture_output=True, text=True, timeout=600,
                          cwd=EXAMPLES.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    first, last = map(float, out.split("loss ")[-1].split(" over")[0].split(" -> "))
    assert last < first - 1.0, out
    assert "generated: 'Beautiful is" in out, out
