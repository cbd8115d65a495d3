"""QDQ folding of ConvTranspose and MatMul (planner/passes/qdq.py): mgegraph's own int8 export
re-imported folds back to quantized_conv_transpose2d and quantized_batch_matmul and gives its
outputs bitwise; a model ONNX Runtime's ``quantize_static`` quantized (QDQ, per-channel) with a
ConvTranspose and MatMuls imports, folds, and matches ONNX Runtime within one output step; and
the chains the int8 ops cannot take stay float and give ONNX Runtime's numbers."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
pytest.importorskip("onnxruntime.quantization")
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from test_onnx_quantize_static import Batches  # its calibration reader

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.conv_api import transposed
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_batch_matmul, quantized_conv_transpose2d
from mgegraph.planner.passes.pipeline import optimize
from mgegraph.planner.passes.qdq import fold_qdq

RNG = np.random.default_rng(54)


def _folded(path) -> dict:
    graph, outputs = mo.import_graph(path)
    return dict(optimize(graph, outputs)[2])["fold_qdq"]["folded"]


def _ints(shape, low=-60, high=60):
    # weights within +-63: ONNX Runtime's int8 kernels without VNNI saturate pairs of products
    # at int16 (onnx_builders.onnxruntime_int8_is_exact), which these never reach
    return RNG.integers(low, high, shape).astype(np.int8)


# ---- the pass on graphs built here ------------------------------------------------------------

def _float_transposed(padding, output_padding, w_quant, dilation=1):
    """quantize(relu(conv_transpose2d(dequantize(xq), dequantize(wq)) + bias)), and the int8
    op it means (its integers: the bias quantized to sx * sw as the pass does)."""
    g = mg.Graph()
    xq = quantize(g.input("x", (1, 5, 4, 6)), 0.05, 3, "uint8")
    wq = g.const(_ints((5, 3, 3, 3)), quant=w_quant)
    bias = g.const(RNG.uniform(-0.5, 0.5, 3).astype(np.float32))
    y = F.conv_transpose2d(dequantize(xq), dequantize(wq), bias, stride=2, padding=padding,
                           output_padding=output_padding, dilation=dilation)
    return g, quantize(F.relu(y), 0.1, -2, "int8")


@pytest.mark.parametrize("padding, output_padding, dilation", [
    (1, 1, 1), (0, 0, 1), ((2, 1), (0, 1), 1), (1, (1, 0), 2)])
def test_a_float_transposed_convolution_between_qdq_folds(padding, output_padding, dilation):
    w_quant = per_channel(RNG.uniform(0.005, 0.02, 3), (1, 0, -2), 1)
    g, y = _float_transposed(padding, output_padding, w_quant, dilation)
    done = fold_qdq(g, [y])
    (node,) = [n for n in done.graph.nodes if n.op.name.startswith("quantized")]
    assert node.op.name == "quantized_conv_transpose2d" and done.stats["folded"] == {
        "quantized_conv_transpose2d": 1}
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    assert (node.attr["padding"], node.attr["output_padding"], node.attr["dilation"]) == (
        pair(padding), pair(output_padding), pair(dilation))
    assert node.attr["relu"] and node.outputs[0].type == y.type
    x = RNG.standard_normal((1, 5, 4, 6)).astype(np.float32)
    folded = mg.compile(done.outputs, optimize=0).run({"x": x})[0]
    fake = mg.compile([y], optimize=[]).run({"x": x})[0]  # dequantize, float op, quantize
    assert np.abs(folded.astype(np.int32) - fake).max() <= 1


def test_a_cropped_transposed_convolution_stays_float():
    # asymmetric padding (the importer's form, transposed): conv2d_backward_data then a crop,
    # which the int8 op cannot say
    g = mg.Graph()
    xq = quantize(g.input("x", (1, 5, 4, 6)), 0.05, 3, "uint8")
    wq = g.const(_ints((5, 3, 3, 3)), quant=per_tensor(0.01))
    y = transposed(dequantize(xq), dequantize(wq), None, (2, 2), ((2, 0), (1, 1)), (8, 12),
                   (1, 1), 1)
    assert not fold_qdq(g, [quantize(y, 0.1, 0, "int8")]).changed


# ---- mgegraph's own export, re-imported -------------------------------------------------------

def _transposed(groups, w_quant, zero_point=3):
    g = mg.Graph()
    xq = quantize(g.input("x", (2, 4, 5, 6)), 0.05, zero_point, "uint8")
    w = g.const(_ints((4, 6 // groups, 3, 3)), quant=w_quant)
    scales = 0.05 * np.asarray(w.type.quant.scales)
    b = g.const(RNG.integers(-2000, 2000, 6).astype(np.int32),
                quant=per_channel(scales, None, 0) if len(scales) > 1 else per_tensor(scales[0]))
    y = quantized_conv_transpose2d(xq, w, b, stride=(2, 3), padding=(1, 0),
                                   output_padding=(1, 2), groups=groups, out_scale=0.1,
                                   out_zero_point=-2, relu=True)
    return g, [dequantize(y)], (2, 4, 5, 6), "quantized_conv_transpose2d"


def _batched(a_batch, a_quant, activations=False):
    g = mg.Graph()
    bq = quantize(g.input("x", (3, 7, 5)), 0.04, -4, "int8")
    if activations:  # a MatMul of two activations: a quantized from a second input
        a = quantize(g.input("a", (a_batch, 6, 7)), 0.03, 5, "int8")
    else:
        a = g.const(_ints((a_batch, 6, 7)), quant=a_quant)
    b = g.const(RNG.integers(-3000, 3000, 6).astype(np.int32))
    y = quantized_batch_matmul(a, bq, None if activations else b, out_scale=0.08,
                               out_zero_point=5)
    return g, [dequantize(y)], (3, 7, 5), "quantized_batch_matmul"


@pytest.mark.parametrize("make", [
    lambda: _transposed(1, per_tensor(0.01, 4)),
    lambda: _transposed(1, per_channel(RNG.uniform(0.005, 0.02, 6), None, 1)),
    lambda: _transposed(2, per_tensor(0.02, 0)),
    lambda: _batched(3, per_tensor(0.01, -2)),
    lambda: _batched(1, per_channel(RNG.uniform(0.005, 0.02, 6), None, 1)),
    lambda: _batched(3, None, activations=True),
])
def test_our_export_folds_back_and_gives_our_outputs_bitwise(tmp_path, make):
    g, outputs, shape, op = make()
    path = tmp_path / "int8.onnx"
    mo.export((g, outputs), path, opset=13)
    assert _folded(path) == {op: 1}
    feeds = {name: RNG.standard_normal(v.shape).astype(np.float32)
             for name, v in g.inputs.items()}
    ours = mg.compile(outputs).run(feeds)
    imported = mo.import_model(path).run(feeds)
    for got, want in zip(imported, ours, strict=True):
        assert got.tobytes() == want.tobytes()


# ---- a model ONNX Runtime's quantize_static quantized -----------------------------------------

X_SHAPE = (2, 8, 6, 6)


def _float_model():
    """ConvTranspose (3x3/2, 8 -> 4) and Relu; a MatMul by a constant (144, 10) weight; a MatMul
    of two activations (the transposed result by the features)."""
    rng = np.random.default_rng(1)

    def init(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["m"]),
             helper.make_node("Transpose", ["m"], ["mt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["mt", "f"], ["y"])]
    graph = helper.make_graph(
        nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10, 144]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 4, 10])],
        [init("w", 8, 4, 3, 3), init("b", 4, scale=0.1), init("wm", 144, 10, scale=0.1),
         numpy_helper.from_array(np.asarray([2, 4, 144], np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _batches(count, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(X_SHAPE).astype(np.float32) for _ in range(count)]


def _quantize_static(tmp_path):
    """ORT's QDQ model of the float model: per-channel int8 weights of 7 bits (reduce_range:
    within +-63, so its non-VNNI u8 x s8 kernel cannot saturate), uint8 activations (its u8 x u8
    kernel is exact)."""
    float_path, qdq_path = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(_float_model(), float_path)
    quantize_static(str(float_path), str(qdq_path), Batches(_batches(4, 2)),
                    quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return qdq_path


def _output_steps(path) -> dict:
    """Each output's scale: that of the QuantizeLinear before its DequantizeLinear."""
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    steps = {}
    for out in model.graph.output:
        dq = made[out.name]
        assert dq.op_type == "DequantizeLinear"
        steps[out.name] = float(inits[dq.input[1]])
    return steps


def _within_a_step(plan, path, batches, extra=None):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    steps = _output_steps(path)
    names = [o.name for o in session.get_outputs()]
    equal, total = 0, 0
    for x in batches:
        feeds = {"x": x, **(extra or {})}
        for name, got, want in zip(names, plan.run(feeds), session.run(None, feeds)):
            off = np.rint(np.abs(got - want) / steps[name])
            assert off.max() <= 1, name
            equal, total = equal + int((off == 0).sum()), total + off.size
    return equal / total


def test_quantize_static_model_folds_and_matches_onnx_runtime(tmp_path):
    qdq_path = _quantize_static(tmp_path)
    folded = _folded(qdq_path)
    assert folded["quantized_conv_transpose2d"] == 1
    assert folded["quantized_linear"] == 1 and folded["quantized_batch_matmul"] == 1
    plan = mo.import_model(qdq_path, freeze=True)
    ops = {i.op for i in plan.instructions}
    assert {"quantized_conv_transpose2d_packed", "quantized_batch_matmul"} <= ops
    assert "conv2d_backward_data" not in ops and "matmul" not in ops
    share = _within_a_step(plan, qdq_path, _batches(3, 2) + _batches(3, 3))
    assert share > 0.9


# ---- chains the int8 ops cannot take: float, ONNX Runtime's numbers ---------------------------

def _qdq_conv_transpose(w_axis=1, group=1, runtime_scale=False, runtime_w_zero=False,
                        w_zero=0):
    """x -> Q -> DQ -> ConvTranspose (weight DQ per channel along ``w_axis``, zero points
    ``w_zero``) -> Q -> DQ; the input's scale a graph input where ``runtime_scale``, the weight's
    zero points where ``runtime_w_zero``."""
    rng = np.random.default_rng(7)
    w = rng.integers(-60, 60, (8, 4 // group, 3, 3)).astype(np.int8)
    channels = w.shape[w_axis]
    inits = [numpy_helper.from_array(w, "wq"),
             numpy_helper.from_array(rng.uniform(0.005, 0.02, channels).astype(np.float32), "ws"),
             numpy_helper.from_array(np.float32(0.05), "ys"),
             numpy_helper.from_array(np.uint8(128), "xz"), numpy_helper.from_array(np.uint8(120),
                                                                                   "yz")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE))]
    if runtime_scale:
        inputs.append(helper.make_tensor_value_info("xs", TensorProto.FLOAT, []))
    else:
        inits.append(numpy_helper.from_array(np.float32(0.03), "xs"))
    if runtime_w_zero:
        inputs.append(helper.make_tensor_value_info("wz", TensorProto.INT8, [channels]))
    else:
        inits.append(numpy_helper.from_array(np.full(channels, w_zero, np.int8), "wz"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=w_axis),
             helper.make_node("ConvTranspose", ["xf", "wf"], ["c"], strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 1], group=group),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("case, model", [
    ("a scale computed at run time", lambda: _qdq_conv_transpose(runtime_scale=True)),
    ("a weight zero point computed at run time",
     lambda: _qdq_conv_transpose(runtime_w_zero=True)),
    ("per channel along axis 0", lambda: _qdq_conv_transpose(w_axis=0)),
    ("per channel with groups 2", lambda: _qdq_conv_transpose(group=2)),
])
def test_what_the_int8_ops_cannot_take_stays_float(tmp_path, case, model):
    path = tmp_path / "m.onnx"
    onnx.save(model(), path)
    assert _folded(path) == {}, case
    plan = mo.import_model(path)
    assert "conv2d_backward_data" in {i.op for i in plan.instructions}
    extra = {"a scale computed at run time": {"xs": np.asarray(0.03, np.float32)},
             "a weight zero point computed at run time": {"wz": np.asarray([3, -2, 0, 1],
                                                                           np.int8)}}
    _within_a_step(plan, path, _batches(2, 5), extra.get(case, {}))


@pytest.mark.parametrize("w_zero", [0, 5])
def test_the_folded_transposed_convolution_matches_onnx_runtime(tmp_path, w_zero):
    # a constant weight zero point folds: the int8 ops take one per output channel
    path = tmp_path / "m.onnx"
    onnx.save(_qdq_conv_transpose(w_zero=w_zero), path)
    assert _folded(path) == {"quantized_conv_transpose2d": 1}
    _within_a_step(mo.import_model(path), path, _batches(2, 6))
