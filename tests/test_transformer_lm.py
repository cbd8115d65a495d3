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
import transformer_lm_torch as lm_torch  # the same network in PyTorch, same parameter names


def test_gradients_equal_pytorchs_for_the_same_weights():
    torch = pytest.importorskip("torch")
    mg.module.init.manual_seed(3)
    model = lm.TinyLM(vocab=11, dim=16, heads=2, layers=2, hidden=24, length=8)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 11, (3, 8)).astype(np.int32)
    targets = rng.integers(0, 11, (3, 8)).astype(np.int32)
    params = dict(model.named_parameters())
    gm = GradManager().attach(list(params.values()))
    with gm:
        loss = lm.next_token_loss(model(mg.tensor(tokens)), mg.tensor(targets))
        gm.backward(loss)

    reference = lm_torch.torch_tiny_lm(torch, vocab=11, dim=16, heads=2, layers=2, hidden=24,
                                       length=8)
    reference.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in params.items()})
    logits = reference(torch.from_numpy(tokens).long())
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, 11),
                                               torch.from_numpy(targets).long().reshape(-1))
    theirs.backward()
    np.testing.assert_allclose(loss.item(), theirs.item(), rtol=1e-5)
    for name, theirs_param in reference.named_parameters():
        np.testing.assert_allclose(params[name].grad.numpy(), theirs_param.grad.numpy(),
                                   rtol=2e-4, atol=2e-6, err_msg=name)


def test_the_example_trains_deploys_generates_and_exports():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "transformer_lm.py"), "--steps", "40"],
                          check=False, capture_output=True, text=True, timeout=600,
                          cwd=EXAMPLES.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    first, last = map(float, out.split("loss ")[-1].split(" over")[0].split(" -> "))
    assert last < first - 1.0, out
    assert "generated: 'Beautiful is" in out, out
