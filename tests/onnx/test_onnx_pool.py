"""ONNX pooling: MaxPool, AveragePool and LpPool imported onto the pooling ops with every
attribute (dilations, ceil_mode, count_include_pad, auto_pad, uneven pads) against ONNX
Runtime, GlobalLpPool, and the export of the new attributes."""
import itertools

import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
import onnx
from onnx import helper
from onnx_builders import model as _model
from onnx_builders import value_info as _vi

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(0)


def _ort_run(model, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _pool_model(op, shape, opset=19, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return onnx.shape_inference.infer_shapes(
        _model([node], [_vi("x", shape)], [_vi("y", None)], opset=opset))


WINDOWS = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1]},
    {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 1, 0, 1], "dilations": [2, 3],
     "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 1], "auto_pad": "SAME_UPPER"},
    # (not dilated: ONNX Runtime and ONNX's reference pad SAME windows as if undilated, which
    # contradicts the spec's ceil(size / stride) outputs that the importer keeps)
    {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID", "ceil_mode": 1},
]


@pytest.mark.parametrize("op,extra", [("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
                                      ("AveragePool", {"count_include_pad": 1})])
@pytest.mark.parametrize("window", WINDOWS)
def test_2d_pooling_matches_onnx_runtime_on_the_native_op(op, extra, window):
    shape = [2, 3, 9, 10]
    model = _pool_model(op, shape, **window, **extra)
    x = RNG.integers(-4, 4, shape).astype(np.float32)  # ties in the max
    (want,) = _ort_run(model, x)
    g, _ = mo.import_graph(model)
    assert [n.op.name for n in g.nodes] == ["input", "max_pool2d" if op == "MaxPool"
                                            else "avg_pool2d"]
    np.testing.assert_allclose(mo.import_model(model).run({"x": x})[0], want, rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("ceil_mode,pads,dilation", itertools.product(
    (0, 1), ([0, 0], [1, 2], [2, 0]), (1, 2)))
def test_1d_pooling_matches_onnx_runtime(op, ceil_mode, pads, dilation):
    shape = [2, 3, 11]
    extra = {"count_include_pad": 1} if op == "AveragePool" else {}
    model = _pool_model(op, shape, kernel_shape=[3], strides=[2], pads=pads,
                        dilations=[dilation], ceil_mode=ceil_mode, **extra)
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = _ort_run(model, x)
    np.testing.assert_allclose(mo.import_model(model).run({"x": x})[0], want, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("window", WINDOWS[:4])
def test_lp_pool_matches_onnx_runtime(p, window):
    shape = [2, 3, 9, 10]
    model = _pool_model("LpPool", shape, p=p, **window)
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = _ort_run(model, x)
    np.testing.assert_allclose(mo.import_model(model).run({"x": x})[0], want, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("shape", [[2, 3, 5, 4], [2, 3, 7]])
def test_global_lp_pool_matches_onnx_runtime(p, shape):
    model = _pool_model("GlobalLpPool", shape, p=p)
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = _ort_run(model, x)
    np.testing.assert_allclose(mo.import_model(model).run({"x": x})[0], want, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("node,reason", [
    (helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=0), "norm_type"),
    (helper.make_node("GlobalLpPool", ["x"], ["y"], p=-1), "p=-1"),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[2, 0, 0, 0]),
     "not smaller than kernel"),
])
def test_bad_pooling_nodes_are_refused_clearly(node, reason):
    model = _model([node], [_vi("x", [1, 1, 5, 5])], [_vi("y", None)], opset=19)
    with pytest.raises(mo.OnnxImportError, match=reason):
        mo.import_model(model)


# -- export ---------------------------------------------------------------------------------------
def _pools(x):
    return [F.max_pool2d(x, 3, 2, ((1, 0), (0, 2)), dilation=(1, 2), ceil_mode=True),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True),
            F.avg_pool2d(x, (2, 3), 1, ((0, 1), (1, 0)), count_include_pad=False),
            F.avg_pool2d(x, 2, 1, 0, dilation=2)]


def test_export_of_the_new_attributes_runs_in_onnx_runtime_and_back():
    g = mg.Graph()
    x = g.input("x", (2, 3, 9, 10))
    outputs = _pools(x)
    data = RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)
    want = mg.compile(outputs).run({"x": data})
    model = mo.export((g, outputs), None, opset=19)
    onnx.checker.check_model(model)
    for got, expected in zip(_ort_run(model, data), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    for got, expected in zip(mo.import_model(model).run({"x": data}), want):
        assert got.tobytes() == expected.tobytes()


def test_export_refuses_dilated_average_pooling_before_opset_19():
    g = mg.Graph()
    y = F.avg_pool2d(g.input("x", (1, 1, 6, 6)), 2, 1, dilation=2)
    with pytest.raises(mo.OnnxExportError, match="dilation .* opset 19"):
        mo.export((g, [y]), None, opset=17)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("shape,window", [
    ([2, 3, 9, 10], WINDOWS[2]), ([2, 3, 9, 10], WINDOWS[0]), ([2, 3, 9, 10], WINDOWS[4]),
    ([2, 3, 11], {"kernel_shape": [3], "strides": [2], "pads": [1, 2], "ceil_mode": 1}),
])
def test_max_pool_indices_come_from_the_native_op(order, shape, window):
    if order and len(shape) != 4:
        pytest.skip("storage_order is defined for 2-D pooling")
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=order, **window)
    model = _model([node], [_vi("x", shape)],
                   [_vi("y", None), _vi("i", None, onnx.TensorProto.INT64)], opset=19)
    x = RNG.integers(-5, 5, shape).astype(np.float32)  # ties: the first maximum wins
    want = _ort_run(model, x)
    g, _ = mo.import_graph(model)
    assert sum(n.op.name == "max_pool2d_select" for n in g.nodes) == 1
    assert not any(n.op.name == "slice" for n in g.nodes)
    for got, expected in zip(mo.import_model(model).run({"x": x}), want):
        np.testing.assert_array_equal(got, expected)


def _unpool_model(shape, output_shape):
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2],
                            ceil_mode=1)
    inputs = ["p", "i"] + (["s"] if output_shape else [])
    unpool = helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=[2, 2], strides=[2, 2])
    nodes = [pool, unpool]
    if output_shape:
        nodes.insert(0, helper.make_node("Constant", [], ["s"], value=onnx.numpy_helper.from_array(
            np.array(output_shape, np.int64))))
    return _model(nodes, [_vi("x", shape)], [_vi("y", None)], opset=19)


def test_max_unpool_matches_onnx_runtime():
    # indices into the whole tensor: a ceil-mode pooling's planes (9x8) are not the unpooled
    # ones (10x8), so the values land across planes, as ONNX Runtime puts them
    shape = [2, 3, 9, 8]
    model = _unpool_model(shape, None)
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = _ort_run(model, x)
    (got,) = mo.import_model(model).run({"x": x})
    np.testing.assert_array_equal(got, want)


def test_max_unpool_output_shape_pads_as_onnx_reference():
    reference = pytest.importorskip("onnx.reference")
    shape = [1, 2, 8, 6]
    model = _unpool_model(shape, [1, 2, 9, 7])
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = reference.ReferenceEvaluator(model).run(None, {"x": x})
    g, _ = mo.import_graph(model)
    assert [n.op.name for n in g.nodes].count("scatter_add") == 1
    (got,) = mo.import_model(model).run({"x": x})
    np.testing.assert_array_equal(got, want)
