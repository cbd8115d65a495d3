"""The importer's contract: errors before anything runs, names and order of inputs and
outputs, params from initializers, folding of shape arithmetic, opsets."""
import subprocess
import sys

import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import model as _model
from onnx_builders import value_info as _vi

import mgegraph as mg
import mgegraph.onnx as mo


def test_importing_mgegraph_does_not_import_onnx():
    code = ("import sys, mgegraph, mgegraph.onnx; "
            "assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_unsupported_op_is_reported_together_with_counts():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("NonZero", ["a"], ["b"]),
             helper.make_node("Bernoulli", ["b"], ["c"]),
             helper.make_node("Bernoulli", ["c"], ["d"]),
             helper.make_node("Foo", ["d"], ["e"], domain="com.example")]
    model = _model(nodes, [_vi("x", [2, 2])], [_vi("e", [2, 2])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(mo.OnnxImportError) as info:
        mo.import_model(model)
    message = str(info.value)
    assert "Bernoulli (x2)" in message and "NonZero (x1)" in message
    assert "com.example.Foo (x1)" in message
    assert info.value.unsupported == {"Bernoulli": 2, "NonZero": 1, "com.example.Foo": 1}
    assert isinstance(info.value, mg.GraphError)


def test_a_dynamic_dim_is_a_named_dim_and_input_shapes_fixes_it():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3])],
                   [_vi("y", ["N", 3])])
    graph, _ = mo.import_graph(model)
    assert str(graph.inputs["x"].type) == "f32[N, 3]"
    plan = mo.import_model(model, input_shapes={"x": (2, 3)})
    assert isinstance(plan, mg.Plan)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(plan.run({"x": x})[0], np.maximum(x, 0))


def test_opsets_below_13_are_converted_with_a_warning_and_13_to_21_read():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])],
                   opset=12)
    with pytest.warns(mo.OnnxImportWarning, match="opset 12 was converted to opset 13"):
        plan = mo.import_model(model)
    assert plan.run({"x": np.array([-1, 1], np.float32)})[0].tolist() == [0, 1]
    bogus = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_vi("x", [2])],
                   [_vi("y", [2])], opset=12)
    with pytest.raises(mo.OnnxImportError, match="opset 12.*could not convert it.*NoSuchOp"):
        mo.import_graph(bogus)
    for opset in range(13, 22):
        model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])],
                       [_vi("y", [2])], opset=opset)
        assert mo.import_model(model).run({"x": np.array([-1, 1], np.float32)})[0].tolist() \
            == [0, 1]


def test_inputs_by_onnx_name_outputs_in_onnx_order_initializers_as_params(tmp_path):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("MatMul", ["b", "w"], ["m"]),
             helper.make_node("Add", ["m", "a"], ["sum"]),
             helper.make_node("Neg", ["sum"], ["neg"])]
    model = _model(nodes, [_vi("a", [1, 3]), _vi("b", [4, 2])],
                   [_vi("neg", [4, 3]), _vi("sum", [4, 3]), _vi("a", [1, 3])],
                   [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    graph, _ = mo.import_graph(path)
    assert list(graph.inputs) == ["a", "b"] and list(graph.params) == ["w"]
    plan = mo.import_model(path)
    a = np.ones((1, 3), np.float32)
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    neg, total, same = plan.run({"b": b, "a": a})
    np.testing.assert_array_equal(total, b @ w + a)
    np.testing.assert_array_equal(neg, -(b @ w + a))
    np.testing.assert_array_equal(same, a)


def test_shape_arithmetic_is_folded_at_import():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape, Range, Expand:
    all known at import, so the graph holds only the reshape, the add and the constants."""
    i64 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.int64), name)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Shape", ["flat"], ["fs"]),
             helper.make_node("ConstantOfShape", ["fs"], ["ones"],
                              value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("Range", ["r0", "r1", "r2"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("Expand", ["rf", "fs"], ["re"]),
             helper.make_node("Add", ["flat", "ones"], ["y0"]),
             helper.make_node("Add", ["y0", "re"], ["y"])]
    inits = [i64("zero", 0), i64("zero1", [0]), i64("minus1", [-1]), i64("r0", 0),
             i64("r1", 12), i64("r2", 1)]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 12])], inits)
    graph, _ = mo.import_graph(model)
    assert sorted(n.op.name for n in graph.nodes) == ["add", "add", "const", "const", "input",
                                                      "reshape"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = mo.import_model(model).run({"x": x})
    np.testing.assert_allclose(y, x.reshape(2, 12) + 1 + np.arange(12), rtol=1e-6)


def test_a_shape_from_a_graph_input_asks_for_a_constant():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3]), _vi("shape", [2], TensorProto.INT64)],
                   [_vi("y", [3, 2])])
    with pytest.raises(mo.OnnxImportError, match="graph input 'shape'") as info:
        mo.import_graph(model)
    assert info.value.needs_constant == ("shape",)
    plan = mo.import_model(model, constants={"shape": np.array([3, 2])})
    assert list(plan.feeds) == ["x"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(plan.run({"x": x})[0], x.reshape(3, 2))


def test_unsupported_dtypes_and_features_name_the_node():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2], TensorProto.UINT16)],
                   [_vi("y", [2], TensorProto.UINT16)])
    with pytest.raises(mo.OnnxImportError, match="UINT16 is not supported"):
        mo.import_graph(model)
    node = helper.make_node("MaxPool", ["x"], ["y", "where"], kernel_shape=[2, 2], name="pool1")
    model = _model([node], [_vi("x", [1, 1, "n", 4])],
                   [_vi("y", None), _vi("where", None, TensorProto.INT64)])
    with pytest.raises(mo.OnnxImportError, match="MaxPool node 'pool1': the Indices output .*"
                                                 "fixed shape"):
        mo.import_graph(model)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("shape, window", [
    ([2, 3, 5, 7], {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ([1, 2, 9, 8], {"kernel_shape": [2, 2], "dilations": [2, 3], "ceil_mode": 1}),
    ([2, 2, 4, 5, 6], {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2],
                       "pads": [1, 0, 0, 0, 1, 1]}),
])
def test_max_pool_indices_match_onnxruntime(order, shape, window):
    ort = pytest.importorskip("onnxruntime")
    if order and len(shape) != 4:
        pytest.skip("storage_order is defined for 2-D pooling")
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=order, **window)
    model = _model([node], [_vi("x", shape)], [_vi("y", None), _vi("i", None, TensorProto.INT64)])
    x = np.random.default_rng(0).integers(-5, 5, shape).astype(np.float32)  # ties too
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    for got, expected in zip(mo.import_model(model).run({"x": x}), want):
        np.testing.assert_array_equal(got, expected)


def test_3d_pooling_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    shape = [1, 2, 5, 6, 7]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for op, extra in (("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
                      ("AveragePool", {"count_include_pad": 1})):
        node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2, 3, 2], strides=[2, 2, 1],
                                pads=[1, 1, 0, 0, 1, 1], ceil_mode=1, **extra)
        model = _model([node], [_vi("x", shape)], [_vi("y", None)])
        (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
        np.testing.assert_allclose(mo.import_model(model).run({"x": x})[0], want, rtol=1e-6,
                                   atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 2, 1], [1, 1, 1, 1]])
def test_pooling_with_dilations_ceil_mode_and_uneven_pads_matches_onnx_runtime(op, ceil_mode,
                                                                              pads):
    ort = pytest.importorskip("onnxruntime")
    extra = {"count_include_pad": 1} if op == "AveragePool" and pads[0] else {}
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1],
                            dilations=[2, 2] if op == "MaxPool" else [1, 1], pads=pads,
                            ceil_mode=ceil_mode, **extra)
    model = _model([node], [_vi("x", [2, 3, 9, 8])], [_vi("y", None)], opset=19)
    model = onnx.shape_inference.infer_shapes(model)
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = mo.import_model(model).run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_newer_opsets_read_where_the_ops_only_gained_types():
    from mgegraph.onnx.converters import same_semantics
    assert same_semantics("Relu", 25) and same_semantics("Conv", 22)
    assert same_semantics("Reshape", 25) and same_semantics("Cast", 28)
    assert not same_semantics("NoSuchOp", 17)


@pytest.mark.parametrize("start, end, step", [(-2, -2**63, -1), (-9, -7, -2), (-6, 0, -1),
                                              (-1, -9, -1), (7, -9, -3)])
def test_slice_stepping_back_from_before_the_first_element_matches_onnxruntime(start, end, step):
    """ONNX clamps a start below -dim to the first element when stepping back (Python's slice
    takes nothing there)."""
    ort = pytest.importorskip("onnxruntime")
    consts = [numpy_helper.from_array(np.array([v]), n)
              for n, v in (("s", start), ("e", end), ("a", 1), ("st", step))]
    model = _model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                   [_vi("x", [2, 5])], [_vi("y", None)], consts)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(mo.import_model(model).run({"x": x})[0], want)
