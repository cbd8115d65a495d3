"""A small decoder-only transformer language model, trained on a text that ships with Python.

Characters of the Zen of Python (``import this``) are the tokens. Each block is LLaMA's:
RMSNorm, attention with rotary position embeddings and a causal mask, RMSNorm, a SwiGLU MLP.
The whole training step (forward, backward, AdamW) is one compiled plan; the trained model is
saved as a model file, loaded back, and generates text greedily; it also exports to ONNX,
whose result ONNX Runtime (when installed) checks.

Run with ``python examples/transformer_lm.py [--steps N]``.
"""
import argparse
import contextlib
import io
import os
import tempfile
import time

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.module as M
import mgegraph.optimizer as optim

CONTEXT = 64


def zen_of_python() -> str:
    """The Zen of Python: ``this`` keeps it ROT13-encoded and prints it when imported."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this  # lazy: importing it prints the poem, which is muted here
    return "".join(this.d.get(c, c) for c in this.s)


class Vocabulary:
    """The text's characters as token ids 0..n-1."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.ids = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.ids[c] for c in text], np.int32)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)


def rotary_tables(length: int, head_dim: int, base: float = 10000.0):
    """cos and sin of the rotary angles, (1, length, head_dim / 2): position p, pair i turns by
    p / base^(2i / head_dim)."""
    inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(length)[:, None] * inv[None, :]
    return (np.cos(angles)[None].astype(np.float32), np.sin(angles)[None].astype(np.float32))


class Block(M.Module):
    def __init__(self, dim: int, heads: int, hidden: int, length: int):
        super().__init__()
        self.heads = heads
        self.attn_norm = M.RMSNorm(dim)
        self.qkv = M.Linear(dim, 3 * dim, bias=False)
        self.out = M.Linear(dim, dim, bias=False)
        self.mlp_norm = M.RMSNorm(dim)
        self.gate_up = M.Linear(dim, 2 * hidden, bias=False)
        self.down = M.Linear(hidden, dim, bias=False)
        # constants of the graph, not weights: the state dict leaves them out
        self.cos, self.sin = rotary_tables(length, dim // heads)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = F.split(self.qkv(self.attn_norm(x)), 3, axis=-1)
        cos, sin = self.cos[:, :t], self.sin[:, :t]
        q = F.nn.rotary_embedding(q, cos, sin, num_heads=self.heads)
        k = F.nn.rotary_embedding(k, cos, sin, num_heads=self.heads)
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)
                   for y in (q, k, v))
        a = F.nn.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(0, 2, 1, 3).reshape(b, t, d))
        return x + self.down(F.swiglu(self.gate_up(self.mlp_norm(x))))


class TinyLM(M.Module):
    def __init__(self, vocab: int, dim: int = 64, heads: int = 4, layers: int = 2,
                 hidden: int = 128, length: int = CONTEXT):
        super().__init__()
        self.embed = M.Embedding(vocab, dim)
        self.blocks = M.Sequential(*[Block(dim, heads, hidden, length) for _ in range(layers)])
        self.norm = M.RMSNorm(dim)
        self.head = M.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        return self.head(self.norm(self.blocks(self.embed(tokens))))


def next_token_loss(logits, targets):
    """Mean cross-entropy of every position's prediction of the next character."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))


def batches(ids: np.ndarray, batch: int, length: int, rng):
    """Random windows of ``length + 1`` characters: inputs and the same shifted by one."""
    while True:
        starts = rng.integers(0, len(ids) - length - 1, batch)
        window = np.stack([ids[s:s + length + 1] for s in starts])
        yield window[:, :-1], window[:, 1:]


def generate(predict, vocab: Vocabulary, prompt: str, count: int) -> str:
    """Greedy decoding with a fixed-length model: the prompt sits at the window's start, the
    rest is padding that a causal model's earlier positions never see; the logits at the last
    real position give the next character."""
    ids = list(vocab.encode(prompt))
    for _ in range(count):
        window = ids[-CONTEXT:]
        tokens = np.zeros((1, CONTEXT), np.int32)
        tokens[0, :len(window)] = window
        logits = predict(tokens)
        ids.append(int(np.argmax(logits[0, len(window) - 1])))
    return vocab.decode(ids)


def train(steps: int, batch: int = 16, seed: int = 0, log=print):
    """Train a TinyLM on the Zen of Python; returns (model, vocabulary, losses)."""
    text = zen_of_python()
    vocab = Vocabulary(text)
    ids = vocab.encode(text)
    M.init.manual_seed(seed)
    model = TinyLM(len(vocab.chars))
    opt = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = batches(ids, batch, CONTEXT, np.random.default_rng(seed))
    x, y = next(data)
    step = mg.compile_train_step(model, next_token_loss, opt, example_batch=(x, y))
    losses, start = [], time.perf_counter()
    for i in range(steps):
        losses.append(float(step(x, y)))
        if log and (i % 50 == 0 or i == steps - 1):
            log(f"step {i:4d}  loss {losses[-1]:.3f}  ({time.perf_counter() - start:.1f} s)")
        x, y = next(data)
    return model, vocab, losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    model, vocab, losses = train(args.steps)
    print(f"loss {losses[0]:.3f} -> {np.mean(losses[-10:]):.3f} over {args.steps} steps")
    model.eval()
    example = np.zeros((1, CONTEXT), np.int32)
    predict = mg.compile_module(model, example_inputs=(example,))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tiny_lm.mgm")
        mg.save(predict, path)
        deployed = mg.load(path)
        print("generated:", repr(generate(deployed, vocab, "Beautiful is", 60)))
        try:
            import onnxruntime as ort  # lazy: optional dependency (the onnx extra)
        except ImportError:
            print("onnxruntime is not installed: the ONNX check is skipped")
            return
        onnx_path = os.path.join(folder, "tiny_lm.onnx")
        mg.onnx.export(predict.plan, onnx_path)
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        tokens = vocab.encode(zen_of_python()[:CONTEXT])[None]
        (theirs,) = session.run(None, {session.get_inputs()[0].name: tokens})
        error = float(np.abs(theirs - deployed(tokens)).max())
        print(f"ONNX Runtime vs mgegraph: max |difference| = {error:.2e}")
        if error > 1e-3:
            raise SystemExit("the ONNX export differs from mgegraph's result")


if __name__ == "__main__":
    main()
