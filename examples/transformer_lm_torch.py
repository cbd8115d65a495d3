"""The language model of transformer_lm.py written with PyTorch, parameter for parameter.

Its parameters have the same names and layouts as ``transformer_lm.TinyLM``'s, so one model's
state dict loads into the other: the tests check gradients against it with the same weights,
and the benchmarks time it beside mgegraph's.
"""
import transformer_lm as lm  # a sibling module: examples/ is on sys.path wherever this runs


def torch_tiny_lm(torch, vocab: int, dim: int, heads: int, layers: int, hidden: int,
                  length: int):
    """``transformer_lm.TinyLM(vocab, dim, heads, layers, hidden, length)`` as a torch module
    (``torch`` is passed in: PyTorch is optional, and only its callers import it)."""
    tnn, tf = torch.nn, torch.nn.functional
    cos, sin = (torch.from_numpy(t) for t in lm.rotary_tables(length, dim // heads))

    def rotate(y):
        b, t, d = y.shape
        y1, y2 = y.reshape(b, t, heads, d // heads).chunk(2, dim=-1)
        c, s = cos[:, :t, None, :], sin[:, :t, None, :]
        return torch.cat([y1 * c - y2 * s, y1 * s + y2 * c], -1).reshape(b, t, d)

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.mlp_norm = tnn.RMSNorm(dim), tnn.RMSNorm(dim)
            self.qkv = tnn.Linear(dim, 3 * dim, bias=False)
            self.out = tnn.Linear(dim, dim, bias=False)
            self.gate_up = tnn.Linear(dim, 2 * hidden, bias=False)
            self.down = tnn.Linear(hidden, dim, bias=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).chunk(3, -1)
            q, k = rotate(q), rotate(k)
            q, k, v = (y.reshape(b, t, heads, -1).transpose(1, 2) for y in (q, k, v))
            a = tf.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, -1)
            return x + self.down(tf.silu(gate) * up)

    class TinyLM(tnn.Module):
        def __init__(self):
            super().__init__()
            self.embed = tnn.Embedding(vocab, dim)
            self.blocks = tnn.Sequential(*[Block() for _ in range(layers)])
            self.norm, self.head = tnn.RMSNorm(dim), tnn.Linear(dim, vocab, bias=False)

        def forward(self, tokens):
            return self.head(self.norm(self.blocks(self.embed(tokens))))

    return TinyLM()
