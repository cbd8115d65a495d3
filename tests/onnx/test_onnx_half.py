"""float16 and bfloat16 models in and out of ONNX.

Export: a half MLP and a convnet are written with half inputs, outputs and initializers; ONNX
Runtime (CPU) runs the float16 ones. Its float16 kernels may compute in half (a Gemm's or a
Conv's sums, the formula ops of the exported GELU each rounding to float16), where mgegraph
computes every op in float32 and rounds once, so the outputs agree within a few float16 steps:
rtol and atol 2^-8 (4 steps at 1). ONNX Runtime 1.32's Python API can neither feed nor fetch a
bfloat16 array, and its CPU kernels have no bfloat16 arithmetic (Cast, Transpose, Concat and
LayerNormalization only), so bfloat16 models are checked against ONNX's reference evaluator and
by importing them back. ONNX's Conv and pooling take no bfloat16: the exporter writes those nodes
between Casts, on float32, which is what they mean in mgegraph.

Import: half initializers in both of ONNX's forms (raw_data, and int32_data holding one 16-bit
pattern each), Constant nodes, Cast and CastLike to and from the half types, and a float16
model as converters write one (float32 inputs and outputs, Casts at the edges, float16 weights).
"""
import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
HALF_CODE = {F16: TensorProto.FLOAT16, BF16: TensorProto.BFLOAT16}
TOL = 2.0 ** -8


def _mlp(dtype, rng):
    g = mg.Graph()
    x = g.input("x", (5, 12), dtype)
    w1 = g.param("w1", (rng.standard_normal((16, 12)) * 0.3).astype(dtype))
    b1 = g.param("b1", (rng.standard_normal(16) * 0.1).astype(dtype))
    w2 = g.param("w2", (rng.standard_normal((4, 16)) * 0.3).astype(dtype))
    h = F.gelu(F.linear(x, w1, b1))
    return g, [F.softmax(F.linear(h, w2), axis=1)], {"x": rng.standard_normal((5, 12)).astype(
        dtype)}


def _convnet(dtype, rng):
    g = mg.Graph()
    x = g.input("x", (2, 3, 9, 9), dtype)
    w = g.param("w", (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(dtype))
    b = g.param("b", (rng.standard_normal(4) * 0.1).astype(dtype))
    h = F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), 2, 2)
    y = F.layer_norm(F.reshape(F.avg_pool2d(h, 2, 2), (2, -1)), (16,))
    return g, [y], {"x": rng.standard_normal((2, 3, 9, 9)).astype(dtype)}


MODELS = {"mlp": _mlp, "convnet": _convnet}


def _exported(name, dtype, opset=17):
    _, outs, feeds = MODELS[name](dtype, np.random.default_rng(0))
    plan = mg.compile(outs)
    return plan, mo.export(plan, opset=opset), feeds


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("dtype", (F16, BF16), ids=str)
@pytest.mark.parametrize("name", MODELS)
def test_half_models_export_with_half_types(name, dtype):
    plan, model, _ = _exported(name, dtype)
    code = HALF_CODE[dtype]
    gp = model.graph
    assert [v.type.tensor_type.elem_type for v in (*gp.input, *gp.output)] == [code, code]
    assert {t.data_type for t in gp.initializer if t.name in plan.source.graph.params} == {code}
    casts = [n for n in gp.node if n.op_type == "Cast"]
    # float16: every op written as it is; bfloat16: Conv and pooling widened (ONNX has no
    # bfloat16 for them), the rest (Gemm, LayerNormalization, Softmax...) in bfloat16
    assert bool(casts) == (dtype == BF16 and name == "convnet")


@pytest.mark.parametrize("name", MODELS)
def test_float16_exports_run_in_onnx_runtime(name):
    plan, model, feeds = _exported(name, F16)
    (want,) = plan.run(feeds)
    (got,) = _ort(model, feeds)
    assert got.dtype == F16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=TOL,
                               atol=TOL)


@pytest.mark.parametrize("name", MODELS)
def test_bfloat16_exports_run_in_the_onnx_reference(name):
    plan, model, feeds = _exported(name, BF16)
    (want,) = plan.run(feeds)
    (got,) = ReferenceEvaluator(model).run(None, feeds)
    assert got.dtype == BF16
    # the reference computes each bfloat16 op in float32 and rounds it, as mgegraph does; its
    # sums go in NumPy's order, so a result may round to the neighbouring bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=2.0 ** -6, atol=2.0 ** -6)


@pytest.mark.parametrize("dtype", (F16, BF16), ids=str)
@pytest.mark.parametrize("name", MODELS)
def test_half_models_come_back_with_the_same_bits(name, dtype):
    """At opset 21 every op is one ONNX op (Gelu), so the imported graph is the exported one."""
    plan, model, feeds = _exported(name, dtype, opset=21)
    (want,) = plan.run(feeds)
    (got,) = mo.import_model(model).run(feeds)
    assert got.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


# -- import ---------------------------------------------------------------------------------------
def _converted_model(weights_form):
    """A float16 model as converters write one: float32 input and output, a Cast to float16
    after the input and one back before the output, float16 weights (raw_data or int32_data),
    a Constant, a CastLike, and a bfloat16 weight cast to float16."""
    rng = np.random.default_rng(3)
    w = (rng.integers(-8, 9, (6, 4)) / 16).astype(F16)  # sums of products exact in float32
    scale = (rng.standard_normal(4) + 2).astype(BF16)
    raw = weights_form == "raw_data"
    inits = [numpy_helper.from_array(w, "w") if raw else
             helper.make_tensor("w", TensorProto.FLOAT16, w.shape, _bits(w).ravel().tolist()),
             numpy_helper.from_array(scale, "scale") if raw else
             helper.make_tensor("scale", TensorProto.BFLOAT16, scale.shape,
                                _bits(scale).ravel().tolist())]
    if not raw:  # make_tensor reads a list of ints as values: set the bits themselves
        inits[0].ClearField("int32_data")
        inits[0].int32_data.extend(_bits(w).ravel().tolist())
        inits[1].ClearField("int32_data")
        inits[1].int32_data.extend(_bits(scale).ravel().tolist())
    bias = numpy_helper.from_array(np.array([0.25, -0.5, 1.0, 0.125], F16), "bias_value")
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
             helper.make_node("MatMul", ["x16", "w"], ["h"]),
             helper.make_node("Constant", [], ["bias"], value=bias),
             helper.make_node("Add", ["h", "bias"], ["hb"]),
             helper.make_node("CastLike", ["scale", "hb"], ["scale16"]),
             helper.make_node("Mul", ["hb", "scale16"], ["hs"]),
             helper.make_node("Relu", ["hs"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "converted", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3, 6])], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                        [3, 6][:1] + [4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model, (w, scale, np.array([0.25, -0.5, 1.0, 0.125], F16))


def _meaning(x, w, scale, bias):
    """mgegraph's meaning of the converted model: each float16 op in float32, rounded once."""
    f32 = np.float32
    x16 = x.astype(F16)
    h = (x16.astype(f32) @ w.astype(f32)).astype(F16)
    hb = (h.astype(f32) + bias.astype(f32)).astype(F16)
    hs = (hb.astype(f32) * scale.astype(f32).astype(F16).astype(f32)).astype(F16)
    return np.maximum(hs, 0).astype(np.float32)


@pytest.mark.parametrize("form", ("raw_data", "int32_data"))
def test_a_converted_float16_model_imports(form):
    model, (w, scale, bias) = _converted_model(form)
    x = (np.random.default_rng(4).integers(-8, 9, (3, 6)) / 8).astype(np.float32)
    graph, _ = mo.import_graph(model)
    assert graph.params["w"].dtype == F16 and graph.params["scale"].dtype == BF16
    (got,) = mo.import_model(model).run({"x": x})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _meaning(x, w, scale, bias))
    (by_ort,) = _ort(model, {"x": x})
    np.testing.assert_allclose(got, by_ort, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("dtype", (F16, BF16), ids=str)
def test_half_graph_inputs_and_casts_import(dtype):
    code = HALF_CODE[dtype]
    nodes = [helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x32", "x32"], ["sq"]),
             helper.make_node("Cast", ["sq"], ["y"], to=code)]
    graph = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", code, [5])],
                              [helper.make_tensor_value_info("y", code, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([1.5, -3.0, 0.1, 300.0, 1e-3], dtype)
    (got,) = mo.import_model(model).run({"x": x})
    with np.errstate(over="ignore"):  # 300 ** 2 is float16's infinity
        want = (x.astype(np.float32) ** 2).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_half_int32_data_out_of_range_is_refused():
    t = helper.make_tensor("w", TensorProto.FLOAT16, [2], [0, 0])
    t.ClearField("int32_data")
    t.int32_data.extend([15360, 70000])  # 70000 is no 16-bit pattern
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "bad",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])],
                              [t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(mo.OnnxImportError, match="initializer 'w'.*70000.*float16"):
        mo.import_graph(model)
    stored = model.graph.initializer[0]  # (make_graph copied t)
    stored.ClearField("int32_data")
    stored.int32_data.extend([15360])
    with pytest.raises(mo.OnnxImportError, match="1 values in int32_data.*holds 2"):
        mo.import_graph(model)


def test_a_half_constant_with_bad_bits_is_refused():
    value = helper.make_tensor("v", TensorProto.BFLOAT16, [1], [0])
    value.ClearField("int32_data")
    value.int32_data.extend([-1])
    graph = helper.make_graph([helper.make_node("Constant", [], ["c"], value=value),
                               helper.make_node("Add", ["x", "c"], ["y"])], "bad",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(mo.OnnxImportError, match="Constant.*-1.*bfloat16"):
        mo.import_graph(model)


def test_bfloat16_division_is_float_division():
    """A converter that read ``dtype.kind == "f"`` took bfloat16 (kind "V") for an integer."""
    graph = helper.make_graph([helper.make_node("Div", ["a", "b"], ["y"])], "div",
                              [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [3])
                               for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    a, b = np.array([7, -7, 1], BF16), np.array([2, 2, 3], BF16)
    (got,) = mo.import_model(model).run({"a": a, "b": b})
    np.testing.assert_array_equal(_bits(got), _bits((a.astype(np.float32) / b.astype(
        np.float32)).astype(BF16)))
    g = mg.Graph()
    x = g.input("x", (3,), BF16)
    exported = mo.export((g, [x / x]))  # was refused as "div of integers"
    assert [n.op_type for n in exported.graph.node] == ["Div"]


@pytest.mark.parametrize("dtype", (F16, BF16), ids=str)
def test_a_half_range_fed_at_run_time_has_its_size(dtype):
    """ONNX's inference gives a float16 or bfloat16 Range no size; the importer counts it."""
    code = HALF_CODE[dtype]
    graph = helper.make_graph([helper.make_node("Range", ["start", "limit", "delta"], ["y"])],
                              "range", [helper.make_tensor_value_info(n, code, [])
                                        for n in ("start", "limit", "delta")],
                              [helper.make_tensor_value_info("y", code, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {k: np.array(v, dtype) for k, v in (("start", 1.0), ("limit", 5.5), ("delta", 2.0))}
    (got,) = mo.import_model(model).run(feeds)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float32), [1.0, 3.0, 5.0])
