"""Named dimensions exported: ``dim_param`` on inputs and outputs, and sizes computed from the
inputs' shapes, so the file runs in ONNX Runtime at any size; and imported back."""
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
ort = pytest.importorskip("onnxruntime")

import mgegraph as mg
import mgegraph.onnx as mo
from mgegraph.ir.dims import Dim

F = mg.functional
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import resnet18


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _against_ort(plan, shapes, rtol=1e-5, atol=1e-5):
    session = _session(mo.export(plan))
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        got, want = plan.run({"x": x}), session.run(None, {"x": x})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_a_symbolic_mlp_exports_with_dim_param_and_runs_in_ort_at_any_batch():
    mg.nn.init.manual_seed(0)
    net = mg.nn.Sequential(mg.nn.Linear(12, 32), mg.nn.ReLU(), mg.nn.Linear(32, 5))
    g = mg.Graph()
    x = g.input("x", ("batch", 3, 4))
    plan = mg.compile([net(F.reshape(x, (x.shape[0], -1)))])
    model = mo.export(plan)
    assert _dims(model.graph.input[0]) == ["batch", 3, 4]
    assert _dims(model.graph.output[0]) == ["batch", 5]
    assert "Shape" in {n.op_type for n in model.graph.node}
    _against_ort(plan, [(1, 3, 4), (5, 3, 4)])


def test_resnet18_with_a_named_batch_runs_in_ort_at_batch_1_and_5():
    mg.nn.init.manual_seed(0)
    net = resnet18(10).eval()
    g = mg.Graph()
    plan = mg.compile([net(g.input("x", ("batch", 3, 32, 32)))])
    assert plan.signature() == "x: f32[batch, 3, 32, 32] -> f32[batch, 10]"
    _against_ort(plan, [(1, 3, 32, 32), (5, 3, 32, 32)], rtol=1e-4, atol=1e-5)
    back = mo.import_model(mo.export(plan))  # and imported back: the same graph, bitwise
    assert back.signature() == plan.signature()
    x = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(back.run({"x": x})[0], plan.run({"x": x})[0])


def test_expressions_of_names_export_as_shape_arithmetic():
    g = mg.Graph()
    x = g.input("x", ("batch", 4))
    b = x.shape[0]
    outputs = [F.reshape(x, (2 * b, 2)), F.full(((b + 1) // 2, 3 * b - 1), 7.0, graph=g),
               F.pad(x, ((1, 1), (0, 0)))]
    plan = mg.compile(outputs)
    model = mo.export(plan)
    assert [_dims(o) for o in model.graph.output] == [
        ["2*batch", 2], ["(batch + 1)//2", "3*batch - 1"], ["batch + 2", 4]]
    assert {"Div", "Mul", "Sub", "Add"} <= {n.op_type for n in model.graph.node}
    _against_ort(plan, [(1, 4), (4, 4), (5, 4)])


def test_a_fixed_shape_graph_exports_as_before():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4))
    model = mo.export(mg.compile([F.reshape(x, (2, -1))]))
    assert [n.op_type for n in model.graph.node] == ["Reshape"]
    assert _dims(model.graph.input[0]) == [2, 3, 4]


def test_export_round_trip_keeps_the_name_and_runs_at_two_batches():
    g = mg.Graph()
    x = g.input("x", ("batch", 3, 4))
    w = g.param("w", np.random.default_rng(2).standard_normal((12, 5)).astype(np.float32))
    plan = mg.compile([F.relu(F.reshape(x, (x.shape[0], -1)) @ w)])
    back = mo.import_model(mo.export(plan))
    assert back.signature() == plan.signature()
    graph, _ = mo.import_graph(mo.export(plan))
    assert "reshape[shape=(batch,12)]" in str(graph)
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(np.float32)
        np.testing.assert_array_equal(back.run({"x": x})[0], plan.run({"x": x})[0])


def test_a_name_no_input_binds_is_an_export_error():
    g = mg.Graph()
    x = g.input("x", ("batch", 4))
    y = F.full((Dim("other"), 2), 1.0, graph=g)
    with pytest.raises(mo.OnnxExportError, match="other is the dimension of no graph input"):
        mo.export((g, [F.add(F.sum(x), F.sum(y))]))


@pytest.mark.parametrize("index", [
    (slice(1, None),), (slice(None, -1),), (slice(None, None, -1),), (slice(-1, None, -2),),
    (slice(None, 2), slice(1, None, 2)), (slice(-9, 2),), (slice(5, -9, -1),),
])
def test_a_slice_on_a_named_axis_exports_with_python_bounds(index):
    """The slice writer on an axis of named size (the subscript rule's part is elsewhere):
    Python's bounds as ONNX Slice reads them, against NumPy at several sizes."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper

    from mgegraph.onnx import exporter

    g = mg.Graph()
    x = g.input("x", ("batch", 5))
    padded = index + (slice(None),) * (2 - len(index))
    node = SimpleNamespace(inputs=[x], attr={"starts": tuple(s.start for s in padded),
                                             "stops": tuple(s.stop for s in padded),
                                             "steps": tuple(s.step for s in padded)})
    w = exporter._Writer(g, 17)
    (out,) = exporter._slice(w, node, ["x"])
    graph = helper.make_graph(
        w.nodes, "slice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], w.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = _session(model)
    for batch in (1, 4, 7):
        data = np.arange(batch * 5, dtype=np.float32).reshape(batch, 5)
        np.testing.assert_array_equal(session.run(None, {"x": data})[0], data[index])


def test_a_slice_whose_onnx_meaning_the_named_size_leaves_open_is_refused():
    from types import SimpleNamespace

    from mgegraph.onnx import exporter

    g = mg.Graph()
    x = g.input("x", ("batch", 5))
    node = SimpleNamespace(inputs=[x], attr={"starts": (-2, None), "stops": (None, None),
                                             "steps": (-2, None)})
    with pytest.raises(mo.OnnxExportError, match="below -batch"):
        exporter._slice(exporter._Writer(g, 17), node, ["x"])
