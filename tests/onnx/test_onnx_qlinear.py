"""ONNX's quantized operators (convert_quant.py): QLinearConv, QLinearMatMul, ConvInteger,
MatMulInteger and DynamicQuantizeLinear against ONNX Runtime on models built here, bit for bit
(ONNX Runtime requantises with the float32 multiplier and rounds half to even, as
ops/quantized.py defines), and which of them run on the int8 ops; and the int8 ops exported as
QDQ (export_quant.py), run by ONNX Runtime and imported back."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import (
    model,
    onnxruntime_int8_is_exact,
    run_onnxruntime,
    run_reference,
    value_info,
)
from onnx_node_cases import _every, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph.backend import get_backend
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.onnx import OnnxExportError
from mgegraph.onnx.importer import OnnxImportError
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_add, quantized_conv2d, quantized_linear

RNG = np.random.default_rng(3)
U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32

needs_int8_kernels = pytest.mark.skipif(
    get_backend("cpu").impl("quantized_conv2d") is None,
    reason="the CPU backend has no int8 kernels on this branch")


# ONNX's node cases of these operators: every one (the float16 scales of QLinearMatMul's are
# widened to float32 exactly: its results are integers)
NODE_CASES = ("test_qlinearconv", "test_convinteger_with_padding",
              "test_convinteger_without_padding", "test_matmulinteger",
              "test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted",
              "test_dynamicquantizelinear_min_adjusted",
              *(f"test_qlinearmatmul_{rank}_{a}_{s}" for rank in ("2D", "3D")
                for a in ("uint8", "int8") for s in ("float32", "float16")))


@needs_int8_kernels
@pytest.mark.parametrize("name", NODE_CASES)
def test_node_cases(name):
    (case,) = [c for c in _every() if c.name == name]
    run_case(case, strict=False)  # the scales and zero points are inputs there: bound


def _mg(proto, feeds):
    return mo.import_model(proto).run(feeds)


def _expected(proto, feeds) -> list:
    """What the integer operators must give: ONNX's reference evaluator, and ONNX Runtime's
    outputs too where its int8 sums are exact on this CPU (``onnxruntime_int8_is_exact``), checked
    to agree with the reference so that a test can never pass against a saturated sum."""
    want = run_reference(proto, feeds)
    if onnxruntime_int8_is_exact():
        for ort_out, ref_out in zip(run_onnxruntime(proto, feeds), want):
            np.testing.assert_array_equal(ort_out, ref_out)
    return want


def _ops(proto):
    graph, _ = mo.import_graph(proto)
    return [n.op.name for n in graph.nodes]


def _init(name, value, dtype=None):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _ints(shape, dtype):
    lo, hi = (-128, 128) if dtype == np.int8 else (0, 256)
    return RNG.integers(lo, hi, shape).astype(dtype)


def _qlinear_conv(x_dtype, w_per_channel, bias, pads=(1, 1, 1, 1), group=1):
    w = _ints((6, 4 // group, 3, 3), np.int8)
    ws = RNG.uniform(0.002, 0.01, 6) if w_per_channel else 0.004
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"] + (["b"] if bias else [])
    nodes = [helper.make_node("QLinearConv", names, ["y"], pads=list(pads), strides=[2, 1],
                              group=group)]
    zx = 128 if x_dtype == np.uint8 else -3
    inits = [_init("xs", 0.05, np.float32), _init("xz", zx, x_dtype), _init("w", w),
             _init("ws", ws, np.float32), _init("wz", np.zeros(np.shape(ws), np.int8)),
             _init("ys", 0.07, np.float32), _init("yz", 5, x_dtype)]
    if bias:
        inits.append(_init("b", RNG.integers(-3000, 3000, 6), np.int32))
    dtype = U8 if x_dtype == np.uint8 else I8
    return model(nodes, [value_info("x", [2, 4, 9, 8], dtype)], [value_info("y", None, dtype)],
                 inits, opset=13)


@needs_int8_kernels
@pytest.mark.parametrize("x_dtype", (np.uint8, np.int8))
@pytest.mark.parametrize("w_per_channel", (False, True))
@pytest.mark.parametrize("bias", (False, True))
def test_qlinear_conv_is_the_specs_bitwise(x_dtype, w_per_channel, bias):
    proto = _qlinear_conv(x_dtype, w_per_channel, bias)
    feeds = {"x": _ints((2, 4, 9, 8), x_dtype)}
    (want,) = _expected(proto, feeds)
    (got,) = _mg(proto, feeds)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_qlinear_conv_is_one_int8_op_and_refuses_asymmetric_pads():
    assert "quantized_conv2d" in _ops(_qlinear_conv(np.uint8, True, True, group=2))
    with pytest.raises(OnnxImportError, match="symmetric pads"):
        mo.import_graph(_qlinear_conv(np.uint8, False, False, pads=(0, 1, 1, 1)))


def _qlinear_matmul(a_shape, b_constant, b_per_column=True):
    b = _ints((a_shape[-1], 5), np.int8)
    bs = RNG.uniform(0.002, 0.01, 5) if b_per_column else 0.006
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"])
    inits = [_init("as", 0.03, np.float32), _init("az", 100, np.uint8),
             _init("bs", bs, np.float32), _init("bz", np.zeros(np.shape(bs), np.int8)),
             _init("ys", 0.05, np.float32), _init("yz", 120, np.uint8)]
    inputs = [value_info("a", list(a_shape), U8)]
    if b_constant:
        inits.append(_init("b", b))
    else:
        inputs.append(value_info("b", list(b.shape), I8))
    return model([node], inputs, [value_info("y", None, U8)], inits, opset=13), b


@pytest.mark.parametrize("a_shape", ((3, 7), (2, 3, 7)))
@pytest.mark.parametrize("b_constant", (True, False))
def test_qlinear_matmul_is_the_specs(a_shape, b_constant):
    if b_constant and get_backend("cpu").impl("quantized_linear") is None:
        pytest.skip("the CPU backend has no int8 kernels on this branch")
    proto, b = _qlinear_matmul(a_shape, b_constant, b_per_column=b_constant)
    feeds = {"a": _ints(a_shape, np.uint8)}
    if not b_constant:
        feeds["b"] = b
    (want,) = _expected(proto, feeds)
    (got,) = _mg(proto, feeds)
    diff = np.abs(got.astype(np.int64) - want)
    # int8 (constant B): bitwise; the float path may round a value across a boundary
    assert diff.max() <= (0 if b_constant else 1)
    assert ("quantized_linear" in _ops(proto)) == b_constant


def _integer_model(op, a_shape, b, zero_points, b_constant=True):
    names = ["a", "b"] + [name for name, _ in zero_points]
    inits = [_init(name, value) for name, value in zero_points]
    inputs = [value_info("a", list(a_shape), U8)]
    if b_constant:
        inits.append(_init("b", b))
    else:
        inputs.append(value_info("b", list(b.shape), I8))
    return model([helper.make_node(op, names, ["y"], **({"pads": [1, 1, 1, 1]} if op ==
                                                       "ConvInteger" else {}))],
                 inputs, [value_info("y", None, I32)], inits, opset=13)


@pytest.mark.parametrize("b_constant", (True, False))
def test_matmul_integer_is_the_specs(b_constant):
    if b_constant and get_backend("cpu").impl("quantized_linear") is None:
        pytest.skip("the CPU backend has no int8 kernels on this branch")
    b = _ints((9, 4), np.int8)
    proto = _integer_model("MatMulInteger", (2, 3, 9), b,
                           [("az", np.uint8(131)), ("bz", np.int8(-2))], b_constant)
    feeds = {"a": _ints((2, 3, 9), np.uint8)} | ({} if b_constant else {"b": b})
    (want,) = _expected(proto, feeds)
    (got,) = _mg(proto, feeds)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@needs_int8_kernels
def test_conv_integer_is_the_specs():
    w = _ints((3, 2, 3, 3), np.int8)
    proto = _integer_model("ConvInteger", (1, 2, 6, 5), w, [("xz", np.uint8(120))])
    feeds = {"a": _ints((1, 2, 6, 5), np.uint8)}
    (want,) = _expected(proto, feeds)
    (got,) = _mg(proto, feeds)
    np.testing.assert_array_equal(got, want)


def _dynamic_model(b_constant=True):
    b = _ints((6, 4), np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "b", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "xs"], ["y"])]
    return model(nodes, [value_info("x", [3, 6])],
                 [value_info("y", None), value_info("xq", None, U8), value_info("xs", None),
                  value_info("xz", None, U8)], [_init("b", b)], opset=13)


@pytest.mark.parametrize("scale", (1.0, 1e-3, 40.0))
def test_dynamic_quantize_linear_is_the_specs(scale):
    if get_backend("cpu").impl("quantized_linear") is None:
        pytest.skip("the CPU backend has no int8 kernels on this branch")
    proto = _dynamic_model()
    x = (RNG.standard_normal((3, 6)) * scale).astype(np.float32)
    x[0, :3] = [0.0, -scale, scale]
    want = _expected(proto, {"x": x})
    got = _mg(proto, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert "quantized_linear" in _ops(proto)  # the GEMM of the dynamic uint8 values is int8


@pytest.mark.parametrize("x", [[0.5, 1.0, 2.0, 3.0, 0.25], [0.0] * 5, [-1, np.nan, 2, 3, 4],
                               [-1, np.inf, 2, 3, 4], [-5, -4, -3, -2, -1]],
                         ids=["positive", "zeros", "nan", "inf", "negative"])
def test_dynamic_quantize_edge_cases_are_onnx_runtimes(x):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    proto = model([node], [value_info("x", [5])],
                  [value_info("y", None, U8), value_info("s", None), value_info("z", None, U8)])
    x = np.asarray(x, np.float32)
    for g, w in zip(_mg(proto, {"x": x}), run_onnxruntime(proto, {"x": x})):
        np.testing.assert_array_equal(g, w)


def test_integer_ops_refuse_what_they_cannot_read():
    w = _ints((3, 2, 3, 3), np.int8)
    computed = _integer_model("ConvInteger", (1, 2, 6, 5), w, [])
    computed.graph.node.insert(0, helper.make_node("Identity", ["xz0"], ["xz"]))
    computed.graph.node[1].input.append("xz")
    computed.graph.input.append(value_info("xz0", [], U8))
    with pytest.raises(OnnxImportError, match="x zero point"):
        mo.import_graph(computed)
    float_b = _integer_model("MatMulInteger", (2, 9), _ints((9, 4), np.int8).astype(np.float32),
                             [])
    with pytest.raises(OnnxImportError):
        mo.import_graph(float_b)


# -- export: the int8 ops as QDQ (onnx/export_quant.py) -------------------------------------

def _int8_graph():
    g = mg.Graph()
    xq = quantize(g.input("x", (2, 4, 8, 8)), 0.05, 3, "int8")
    w1 = g.const(_ints((6, 4, 3, 3), np.int8), quant=per_channel(RNG.uniform(0.002, 0.01, 6),
                                                                  None, 0))
    scales = 0.05 * np.asarray(w1.type.quant.scales)
    b1 = g.const(RNG.integers(-2000, 2000, 6).astype(np.int32),
                 quant=per_channel(scales, None, 0))
    c = quantized_conv2d(xq, w1, b1, padding=1, stride=2, out_scale=0.1, out_zero_point=-2,
                         relu=True)
    s = quantized_add(c, c, out_scale=0.15, out_zero_point=4)
    w2 = g.const(_ints((10, 96), np.int8), quant=per_tensor(0.004))
    b2 = g.const(RNG.integers(-500, 500, 10).astype(np.int32))
    y = quantized_linear(F.reshape(s, (2, 96)), w2, b2, out_scale=0.2, out_zero_point=1)
    return g, [dequantize(y), dequantize(s)]


def test_int8_ops_export_as_qdq_that_onnx_runtime_runs(tmp_path, capsys):
    g, outputs = _int8_graph()
    path = tmp_path / "int8.onnx"
    mo.export((g, outputs), path, opset=13)
    x = RNG.standard_normal((2, 4, 8, 8)).astype(np.float32)
    want = mg.compile(outputs).run({"x": x})
    session = pytest.importorskip("onnxruntime").InferenceSession(
        str(path), providers=["CPUExecutionProvider"])
    for name, got, ours, step in zip(("linear", "add"), session.run(None, {"x": x}), want,
                                     (0.2, 0.15)):
        steps = np.rint(np.abs(got - ours) / step)
        assert steps.max() <= 1  # within one output step
        with capsys.disabled():
            print(f"\nexported QDQ {name}: {np.mean(steps == 0):.2%} of {steps.size} bitwise "
                  "ONNX Runtime's")
    again = mo.import_model(path)  # folded back into the same int8 ops: bitwise
    assert dict(again.passes)["fold_qdq"]["folded"] == {
        "quantized_conv2d": 1, "quantized_add": 1, "quantized_linear": 1}
    for got, ours in zip(again.run({"x": x}), want):
        np.testing.assert_array_equal(got, ours)


def test_an_int32_result_is_refused_by_name():
    g, _ = _int8_graph()
    xq = quantize(g.input("z", (1, 4)), 0.1, 0, "int8")
    acc = quantized_linear(xq, g.const(_ints((3, 4), np.int8), quant=per_tensor(0.01)),
                           out_dtype="int32")
    with pytest.raises(OnnxExportError, match="quantized_linear with an int32 result"):
        mo.export((g, [dequantize(acc)]), opset=13)
