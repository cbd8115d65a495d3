"""Whole models exported by PyTorch's ONNX exporter (the TorchScript one, ``dynamo=False``:
the dynamo exporter needs onnxscript) import into mgegraph and match PyTorch within 1e-5."""
import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
import onnx

import mgegraph.onnx as mo

tnn = torch.nn


def _export(model, args, opset=17, **kw):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, f, opset_version=opset, dynamo=False, **kw)
    return onnx.load_from_string(f.getvalue())


def _ops(model):
    return {n.op_type for n in model.graph.node}


def _check(model, torch_model, *args, atol=1e-5, input_shapes=None):
    plan = mo.import_model(model, input_shapes=input_shapes)
    names = [i.name for i in model.graph.input]
    got = plan.run({n: a.numpy() for n, a in zip(names, args)})
    with torch.no_grad():
        want = torch_model(*args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=0, atol=atol)


def _randomize_bn(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, tnn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=gen) * 0.1)
    return model


class BasicBlock(tnn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = tnn.BatchNorm2d(cout)
        self.c2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = tnn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                       tnn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.skip is None else self.skip(x)))


def resnet18(classes=10):
    """torchvision's ResNet-18 layout (torchvision is not needed)."""
    layers = [tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64), tnn.ReLU(),
              tnn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, width in enumerate((64, 128, 256, 512)):
        for b in range(2):
            layers.append(BasicBlock(cin, width, 2 if i and not b else 1))
            cin = width
    layers += [tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(512, classes)]
    return tnn.Sequential(*layers)


def test_mlp():
    torch.manual_seed(0)
    model = tnn.Sequential(tnn.Linear(32, 64), tnn.ReLU(), tnn.Linear(64, 64), tnn.Tanh(),
                           tnn.Linear(64, 10), tnn.Softmax(-1)).eval()
    x = torch.randn(8, 32)
    exported = _export(model, (x,))
    assert "Gemm" in _ops(exported)
    _check(exported, model, x)


def test_cnn():
    torch.manual_seed(0)
    model = _randomize_bn(tnn.Sequential(
        tnn.Conv2d(3, 8, 3, padding=1), tnn.BatchNorm2d(8), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), tnn.ReLU(),
        tnn.AvgPool2d(2), tnn.Flatten(), tnn.Linear(16 * 4 * 4, 10))).eval()
    x = torch.randn(2, 3, 32, 32)
    _check(_export(model, (x,)), model, x)


@pytest.mark.parametrize("fold_bn", [True, False], ids=["bn-folded", "bn-kept"])
def test_resnet18(fold_bn):
    torch.manual_seed(0)
    model = _randomize_bn(resnet18()).eval()
    x = torch.randn(1, 3, 64, 64)
    exported = _export(model, (x,), do_constant_folding=fold_bn)
    assert ("BatchNormalization" in _ops(exported)) != fold_bn
    _check(exported, model, x)


class Block(tnn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = tnn.LayerNorm(d), tnn.LayerNorm(d)
        self.qkv, self.proj = tnn.Linear(d, 3 * d), tnn.Linear(d, d)
        self.fc1, self.fc2 = tnn.Linear(d, 4 * d), tnn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.reshape(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // h) ** 0.5)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyGPT(tnn.Module):
    """Two causal transformer blocks over token and position embeddings."""

    def __init__(self, vocab=50, d=32, heads=4, T=16):
        super().__init__()
        self.tok = tnn.Embedding(vocab, d)
        self.pos = tnn.Parameter(torch.randn(1, T, d) * 0.1)
        self.blocks = tnn.Sequential(Block(d, heads), Block(d, heads))
        self.ln, self.head = tnn.LayerNorm(d), tnn.Linear(d, vocab)

    def forward(self, idx):
        T = idx.shape[1]
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos[:, :T])))


@pytest.mark.parametrize("opset", [17, 20])
def test_causal_transformer(opset):
    torch.manual_seed(0)
    model = TinyGPT().eval()
    idx = torch.randint(0, 50, (2, 16))
    exported = _export(model, (idx,), opset=opset)
    assert {"LayerNormalization", "Softmax", "Where", "MatMul"} <= _ops(exported)
    assert ("Gelu" in _ops(exported)) == (opset >= 20)
    _check(exported, model, idx)


def test_causal_transformer_dynamic_axes_folds_the_shape_arithmetic():
    """Exported with dynamic batch and length, the model carries Shape/Gather/Concat/Range/...
    around every reshape; given static shapes the importer folds all of it."""
    torch.manual_seed(0)
    model = TinyGPT().eval()
    idx = torch.randint(0, 50, (3, 12))
    exported = _export(model, (idx,), opset=17, input_names=["idx"],
                       dynamic_axes={"idx": {0: "batch", 1: "time"}})
    assert "Shape" in _ops(exported)
    _check(exported, model, idx, input_shapes={"idx": (3, 12)})
    graph, _ = mo.import_graph(exported, input_shapes={"idx": (3, 12)})
    ops = {n.op.name for n in graph.nodes}
    assert not ops & {"arange", "fill"}, ops


def test_causal_transformer_named_batch_keeps_the_shape_arithmetic_symbolic():
    """With the batch named and the length fixed, the same Shape/Gather/Concat chains fold to
    reshapes on ``batch``: one plan serves every batch size."""
    torch.manual_seed(0)
    model = TinyGPT().eval()
    exported = _export(model, (torch.randint(0, 50, (3, 12)),), opset=17, input_names=["idx"],
                       dynamic_axes={"idx": {0: "batch", 1: "time"}})
    graph, outputs = mo.import_graph(exported, input_shapes={"idx": ("batch", 12)})
    assert str(outputs[0].type) == "f32[batch, 12, 50]"
    assert not {n.op.name for n in graph.nodes} & {"arange", "fill", "sum"}
    plan = mo.import_model(exported, input_shapes={"idx": ("batch", 12)})
    for batch in (1, 4):
        idx = torch.randint(0, 50, (batch, 12))
        with torch.no_grad():
            want = model(idx).numpy()
        np.testing.assert_allclose(plan.run({"idx": idx.numpy()})[0], want, rtol=0, atol=1e-5)
    assert plan.specialisations == 2
