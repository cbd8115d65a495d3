"""The transformer language model of examples/transformer_lm.py as fresh_process.py workloads.

"transformer-train": one training step (forward, backward, AdamW) of a 4-layer model (width
256, 4 heads, SwiGLU 512, context 128, batch 16); "transformer-generate": 32 greedy tokens from
a 64-character prompt, batch 1, the whole window recomputed for each token on every side (no
key/value cache anywhere). Implementations: "mgegraph" (the compiled step / predictor),
"torch" (eager) and "torch.compile" (the same module compiled; its optimizer step eager).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import transformer_lm as lm  # examples/ is not a package: found through sys.path above
import transformer_lm_torch as lm_torch  # the same network in PyTorch

VOCAB, DIM, HEADS, LAYERS, HIDDEN, CONTEXT, BATCH = 64, 256, 4, 4, 512, 128, 16
NEW_TOKENS, PROMPT = 32, 64


def _batch(seed: int = 1):
    rng = np.random.default_rng(seed)
    window = rng.integers(0, VOCAB, (BATCH, CONTEXT + 1)).astype(np.int32)
    return window[:, :-1], window[:, 1:]


def _torch_model(torch):
    torch.manual_seed(0)
    return lm_torch.torch_tiny_lm(torch, VOCAB, DIM, HEADS, LAYERS, HIDDEN, CONTEXT)


def transformer_train_call(impl: str, workload: str):
    x, y = _batch()
    if impl == "mgegraph":
        import mgegraph as mg
        import mgegraph.optimizer as optim
        model = lm.TinyLM(VOCAB, DIM, HEADS, LAYERS, HIDDEN, CONTEXT)
        opt = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        step = mg.compile_train_step(model, lm.next_token_loss, opt, example_batch=(x, y))
        return lambda: step(x, y)
    import torch
    model = _torch_model(torch)
    forward = torch.compile(model) if impl == "torch.compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    tx, ty = torch.from_numpy(x).long(), torch.from_numpy(y).long().reshape(-1)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(forward(tx).reshape(-1, VOCAB), ty)
        loss.backward()
        opt.step()
        return loss

    return step


def transformer_generate_call(impl: str, workload: str):
    prompt = np.random.default_rng(2).integers(0, VOCAB, PROMPT).tolist()

    def generate(logits_of):
        ids = list(prompt)
        tokens = np.zeros((1, CONTEXT), np.int32)
        for _ in range(NEW_TOKENS):
            window = ids[-CONTEXT:]
            tokens[0, :len(window)] = window
            ids.append(int(np.argmax(logits_of(tokens)[0, len(window) - 1])))
        return ids

    if impl == "mgegraph":
        import mgegraph as mg
        model = lm.TinyLM(VOCAB, DIM, HEADS, LAYERS, HIDDEN, CONTEXT)
        model.eval()
        predict = mg.compile_module(model, example_inputs=(np.zeros((1, CONTEXT), np.int32),))
        return lambda: generate(predict)
    import torch
    model = _torch_model(torch).eval()
    forward = torch.compile(model) if impl == "torch.compile" else model

    @torch.no_grad()
    def logits_of(tokens):
        return forward(torch.from_numpy(tokens).long()).numpy()

    return lambda: generate(logits_of)
