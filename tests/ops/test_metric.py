"""F.topk_accuracy (MegEngine's F.metric, also at F.utils): checked against NumPy and PyTorch."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import OpError

RNG = np.random.default_rng(3)


def _case(batch=13, classes=7):
    logits = RNG.standard_normal((batch, classes)).astype(np.float32)
    labels = RNG.integers(0, classes, batch).astype(np.int32)
    labels[:4] = np.argmax(logits[:4], axis=1)  # some top-1 hits, whatever the seed
    return logits, labels


def _reference(logits, labels, k):
    best = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return np.float32((best == labels[:, None]).any(axis=1).mean())


@pytest.mark.parametrize("k", [1, 2, 7])
def test_one_k_gives_a_0d_float32(k):
    logits, labels = _case()
    got = F.topk_accuracy(mg.tensor(logits), mg.tensor(labels), k)
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), _reference(logits, labels, k), rtol=1e-6)


def test_several_ks_give_a_list_and_agree_with_torch():
    torch = pytest.importorskip("torch")
    logits, labels = _case(9, 5)
    got = F.topk_accuracy(mg.tensor(logits), mg.tensor(labels), topk=(1, 3))
    best = torch.topk(torch.from_numpy(logits), 3, dim=1).indices.numpy()
    for acc, k in zip(got, (1, 3)):
        ref = (best[:, :k] == labels[:, None]).any(axis=1).mean()
        np.testing.assert_allclose(acc.numpy(), ref, rtol=1e-6)


def test_the_megengine_paths():
    assert F.utils.topk_accuracy is F.metric.topk_accuracy is F.topk_accuracy
    assert F.utils.copy is F.copy


@pytest.mark.parametrize("logits, labels, k, words", [
    ((4, 3), (5,), 1, "logits must be .batch, classes. and target .batch,."),
    ((4, 3), (4,), 4, "topk must be ints from 1 to the 3 classes"),
    ((4, 3), (4,), 0, "topk must be ints"),
    ((4, 3), (4,), (), "topk must be ints")])
def test_bad_arguments_are_refused(logits, labels, k, words):
    with pytest.raises(OpError, match=rf"topk_accuracy\(f32\[.*{words}.*test_metric.py"):
        F.topk_accuracy(mg.tensor(np.zeros(logits, np.float32)),
                        mg.tensor(np.zeros(labels, np.int32)), k)


def test_float_labels_are_refused():
    with pytest.raises(OpError, match="target must hold integer labels, got float32"):
        F.topk_accuracy(mg.tensor(np.zeros((2, 3), np.float32)), mg.tensor([0.0, 1.0]))
