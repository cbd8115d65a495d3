"""QuantizeLinear and DequantizeLinear (convert_quant.py) and their export: the int8 and uint8
node cases pass, a QDQ model (quantized activations, per-channel int8 weights kept as
quantized constants) gives ONNX Runtime's outputs bit for bit, mgegraph's quantize and
dequantize export to what ONNX Runtime computes the same, and what is refused says why."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import model, run_onnxruntime, value_info
from onnx_node_cases import _every, run_case

import mgegraph as mg
import mgegraph.onnx as mo
from mgegraph.ir.quant import per_channel
from mgegraph.ops.quantize import as_quantized, dequantize, quantize

RNG = np.random.default_rng(0)
PASSING = ("test_quantizelinear", "test_quantizelinear_axis", "test_dequantizelinear",
           "test_dequantizelinear_axis")


@pytest.mark.parametrize("name", PASSING)
def test_node_cases(name):
    (case,) = [c for c in _every() if c.name == name]
    run_case(case, strict=False)  # the scales and zero points are inputs there: bound


def _qdq_conv(opset=13):
    w = RNG.integers(-127, 128, (3, 4, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(np.array(0.04, np.float32), "xs"),
             numpy_helper.from_array(np.array(120, np.uint8), "xz"),
             numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([0.02, 0.03, 0.005], np.float32), "ws"),
             numpy_helper.from_array(np.zeros(3, np.int8), "wz")]
    return model(nodes, [value_info("x", [1, 4, 7, 6])], [value_info("y", [1, 3, 7, 6])],
                 inits, opset=opset)


@pytest.mark.parametrize("opset", (13, 19, 21))
def test_a_qdq_model_is_onnx_runtimes(opset):
    proto = _qdq_conv(opset)
    x = RNG.normal(size=(1, 4, 7, 6)).astype(np.float32) * 3
    (want,) = run_onnxruntime(proto, {"x": x})
    (got,) = mo.import_model(proto).run({"x": x})
    np.testing.assert_array_equal(got, want)
    g, _ = mo.import_graph(proto)
    assert "qs8(axis 0, 3)[3,4,3,3] = const" in str(g)  # the weights stay int8


def test_the_export_is_what_onnx_runtime_computes(tmp_path):
    onnx = pytest.importorskip("onnx")
    g = mg.Graph()
    x = g.input("x", (2, 3, 4))
    w = g.const(np.arange(-6, 6, dtype=np.int8).reshape(3, 4),
                quant=per_channel([0.1, 0.2, 0.3], [0, 1, -1], 0))
    q = quantize(x, 0.05, 10, "uint8")
    plan = mg.compile([dequantize(q) * dequantize(w), dequantize(as_quantized(q, 0.1, 5)), q])
    path = tmp_path / "q.onnx"
    mo.export(plan, path, opset=13)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    a = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    for got, want in zip(plan.run({"x": a}), run_onnxruntime(onnx.load(path), {"x": a})):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def _one_node(node, x_type, inits):
    return model([node], [value_info("x", [2, 3], x_type)], [value_info("y", None)], inits,
                 opset=21)


@pytest.mark.parametrize("node, x_type, inits, match", [
    (helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], block_size=1), TensorProto.FLOAT,
     [numpy_helper.from_array(np.full((2, 3), 0.1, np.float32), "s"),
      numpy_helper.from_array(np.zeros((2, 3), np.int8), "z")], "blocked quantization"),
    (helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), TensorProto.FLOAT,
     [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
      numpy_helper.from_array(np.array(0, np.int16), "z")], "int8 and uint8 are supported"),
    (helper.make_node("QuantizeLinear", ["x", "s"], ["y"]), TensorProto.FLOAT16,
     [numpy_helper.from_array(np.array(0.1, np.float16), "s")], "float32 inputs are quantized"),
    (helper.make_node("DequantizeLinear", ["x", "s"], ["y"]), TensorProto.INT16,
     [numpy_helper.from_array(np.array(0.1, np.float32), "s")], "int8, uint8 or int32 inputs"),
    (helper.make_node("DequantizeLinear", ["x", "s"], ["y"]), TensorProto.INT8,
     [numpy_helper.from_array(np.array(0.1, np.float16), "s")], "float32 scales"),
])
def test_what_is_refused_names_the_node(node, x_type, inits, match):
    with pytest.raises(mo.OnnxImportError, match=f"{node.op_type} node.*{match}"):
        mo.import_graph(_one_node(node, x_type, inits))
