"""Models built in mgegraph, exported to ONNX: onnx.checker accepts them, ONNX Runtime runs
them within 1e-5 of mgegraph, and imported back they run bitwise like the originals."""
import sys
from pathlib import Path

import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
import onnx

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import resnet18


class MLP(nn.Module):
    def __init__(self):
        self.l1, self.l2, self.l3 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 10)

    def forward(self, x):
        return F.softmax(self.l3(F.gelu(self.l2(F.relu(self.l1(x))))), axis=-1)


class CNN(nn.Module):
    def __init__(self):
        self.c1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        h = F.avg_pool2d(F.relu(self.bn2(self.c2(h))), 2)
        return self.fc(F.flatten(h, 1))


def _randomize(model, seed=0):
    """Random batch-norm weights and statistics, so batch norm is not the identity (the other
    weights keep their initialisation, which keeps ResNet-18's outputs of order 1)."""
    rng = np.random.default_rng(seed)
    state = {name: np.asarray(value) for name, value in model.state_dict().items()}
    norms = {name.rsplit(".", 1)[0] for name in state if name.endswith("running_mean")}
    for name, value in state.items():
        if name.rsplit(".", 1)[0] not in norms:
            continue
        if name.endswith(("running_var", "weight")):
            state[name] = rng.uniform(0.5, 1.5, value.shape).astype(value.dtype)
        else:
            state[name] = (rng.standard_normal(value.shape) * 0.2).astype(value.dtype)
    model.load_state_dict(state)
    return model.eval()


MODELS = {"mlp": (MLP, (4, 32)), "cnn-bn": (CNN, (2, 3, 16, 16)),
          "resnet18": (lambda: resnet18(10), (1, 3, 64, 64))}


@pytest.mark.parametrize("name", MODELS)
def test_round_trip(name, tmp_path):
    make, shape = MODELS[name]
    model = _randomize(make())
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    predictor = mg.compile_module(model, (x,))
    (want,) = predictor.plan.run({"input0": x})

    path = tmp_path / f"{name}.onnx"
    exported = mo.export(predictor.plan, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert [i.name for i in exported.graph.input] == ["input0"]

    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"input0": x})
    np.testing.assert_allclose(theirs, want, rtol=0, atol=1e-5)

    (back,) = mo.import_model(path).run({"input0": x})
    assert back.dtype == want.dtype and np.array_equal(back, want)


def test_export_of_a_traced_function_keeps_its_parameter_names(tmp_path):
    layer = nn.Linear(4, 3)
    layer.eval()

    @mg.jit.trace
    def predict(features, bias):
        return F.softmax(F.relu(layer(features)) + bias, axis=-1)

    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    b = np.ones(3, np.float32)
    y = np.asarray(predict(x, b).numpy())
    model = mo.export(predict, tmp_path / "traced.onnx")
    assert [i.name for i in model.graph.input] == ["features", "bias"]
    (back,) = mo.import_model(model).run({"features": x, "bias": b})
    assert np.array_equal(back, y)


def test_export_of_graph_and_outputs_in_order():
    g = mg.Graph()
    x = g.input("x", (3, 4))
    w = g.param("w", np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    y = F.relu(x @ w)
    outputs = [F.sum(y, axis=1), x[::-1, 1:3], F.transpose(y, (1, 0)), F.argmax(y, axis=1),
               F.layer_norm(y, (3,)), F.where(y > 0.5, y, F.exp(y))]
    plan = mg.compile(outputs)
    data = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = plan.run({"x": data})
    for opset in (13, 17, 21):
        model = mo.export((g, outputs), None, opset=opset, output_names=[f"o{i}" for i in
                                                                          range(6)])
        assert [o.name for o in model.graph.output] == [f"o{i}" for i in range(6)]
        got = mo.import_model(model).run({"x": data})
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        # ONNX Runtime's GEMM rounds x @ w otherwise than the BLAS in use (OpenBLAS or MKL),
        # and layer_norm's middle output, a difference of near-equal values, shows it at 1e-6
        for a, b in zip(session.run(None, {"x": data}), want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-5)


def test_export_refuses_ops_without_an_onnx_form_all_at_once():
    g = mg.Graph()
    labels = g.input("labels", (4,), "int64")
    logits = g.input("logits", (4, 3))
    loss = F.cross_entropy(logits, labels) + F.sum(F.one_hot(labels, 3))
    with pytest.raises(mo.OnnxExportError, match=r"cross_entropy \(x1\).*one_hot \(x1\)"):
        mo.export((g, loss))
    assert isinstance(mo.OnnxExportError("x"), mg.GraphError)


def test_export_asks_for_a_plan_with_a_source():
    with pytest.raises(mo.OnnxExportError, match="cannot export"):
        mo.export(object())
    with pytest.raises(mo.OnnxExportError, match="opsets 13 to 21"):
        g = mg.Graph()
        mo.export((g, [g.input("x", (2,)) * 2.0]), opset=11)


def test_export_of_a_predictor_and_of_a_frozen_plan():
    model = _randomize(CNN())
    x = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    predictor = mg.compile_module(model, (x,))
    (want,) = predictor.plan.run({"input0": x})
    from_predictor = mo.export(predictor)
    (_, outputs) = mo.import_graph(from_predictor)
    frozen = mg.compile(outputs, freeze=True)
    np.testing.assert_allclose(frozen.run({"input0": x})[0], want, rtol=0, atol=1e-5)
    again = mo.export(frozen)  # a plan compiled from an imported graph exports as well
    assert [n.op_type for n in again.graph.node] == [n.op_type for n in from_predictor.graph.node]


@pytest.mark.parametrize("index", [(slice(-2, None, -2),), (slice(-9, None, -1), slice(None)),
                                   (slice(None, None, -1), slice(3, -9, -1))])
def test_a_slice_stepping_back_from_before_the_start_exports_as_nothing(index):
    """Python's x[-2::-2] on a 1-row axis is empty; ONNX reads a start of -1 as the last row."""
    ort = pytest.importorskip("onnxruntime")
    g = mg.Graph()
    x = g.input("x", (1, 5))
    plan = mg.compile([F.subscript(x, index)])
    session = ort.InferenceSession(mo.export(plan).SerializeToString())
    data = np.arange(5, dtype=np.float32).reshape(1, 5)
    (want,) = plan.run({"x": data})
    assert want.shape == data[index].shape
    np.testing.assert_array_equal(session.run(None, {"x": data})[0], want)
