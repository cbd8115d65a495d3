"""The int8 transposed convolution and batched matmul exported as QDQ (onnx/export_quant.py:
DequantizeLinear -> ConvTranspose / MatMul (+ the bias per row) -> QuantizeLinear), run by ONNX
Runtime within one output step of mgegraph's int8 kernels."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
import onnx

import mgegraph as mg
import mgegraph.onnx as mo
from mgegraph.ir.quant import per_channel, per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_batch_matmul, quantized_conv_transpose2d

RNG = np.random.default_rng(38)


def _ints(shape, low=-60, high=60):
    # weights within +-63: ONNX Runtime's int8 kernels without VNNI saturate pairs of products
    # at int16 (onnx_builders.onnxruntime_int8_is_exact), which these never reach
    return RNG.integers(low, high, shape).astype(np.int8)


def _transposed_graph(groups, w_quant):
    g = mg.Graph()
    xq = quantize(g.input("x", (2, 4, 5, 6)), 0.05, 3, "uint8")
    w = g.const(_ints((4, 6 // groups, 3, 3)), quant=w_quant)
    scales = 0.05 * np.asarray(w.type.quant.scales)
    b = g.const(RNG.integers(-2000, 2000, 6).astype(np.int32),
                quant=per_channel(scales, None, 0) if len(scales) > 1 else per_tensor(scales[0]))
    y = quantized_conv_transpose2d(xq, w, b, stride=2, padding=1, output_padding=1,
                                   groups=groups, out_scale=0.1, out_zero_point=-2, relu=True)
    return g, [dequantize(y)], 0.1


def _batch_matmul_graph(a_batch):
    g = mg.Graph()
    xq = quantize(g.input("x", (3, 7, 5)), 0.04, -4, "int8")
    a = g.const(_ints((a_batch, 6, 7)), quant=per_channel(RNG.uniform(0.005, 0.02, 6), None, 1))
    b = g.const(RNG.integers(-3000, 3000, 6).astype(np.int32))
    y = quantized_batch_matmul(a, xq, b, out_scale=0.08, out_zero_point=5)
    return g, [dequantize(y)], 0.08


@pytest.mark.parametrize("make, feed", [
    (lambda: _transposed_graph(1, per_tensor(0.01)), (2, 4, 5, 6)),
    (lambda: _transposed_graph(1, per_channel(RNG.uniform(0.005, 0.02, 6), None, 1)),
     (2, 4, 5, 6)),
    (lambda: _transposed_graph(2, per_tensor(0.02, 0)), (2, 4, 5, 6)),
    (lambda: _batch_matmul_graph(3), (3, 7, 5)),
    (lambda: _batch_matmul_graph(1), (3, 7, 5)),
])
def test_exported_qdq_runs_in_onnx_runtime_within_a_step(tmp_path, make, feed):
    ort = pytest.importorskip("onnxruntime")
    g, outputs, step = make()
    path = tmp_path / "int8.onnx"
    mo.export((g, outputs), path, opset=13)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("QuantizeLinear") >= 2 and ("ConvTranspose" in ops or "MatMul" in ops)
    x = RNG.standard_normal(feed).astype(np.float32)
    (ours,) = mg.compile(outputs).run({"x": x})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x})
    steps = np.rint(np.abs(got - ours) / step)
    assert steps.max() <= 1
    assert (steps == 0).mean() > 0.9
