"""A QDQ model as ONNX Runtime's ``quantize_static`` writes it (per-channel int8 weights, int8
activations calibrated on random data), imported: the QDQ folding pass makes its convolutions,
residual add and classifier int8 ops, and its outputs are those of ONNX's reference evaluator
(the spec) and of ONNX Runtime within one output step (the share of equal ones printed with
``pytest -s``). ONNX Runtime is a witness only where its int8 sums are exact on this CPU
(``onnxruntime_int8_is_exact``)."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
pytest.importorskip("onnxruntime.quantization")
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, version_converter
from onnx_builders import onnxruntime_int8_is_exact, run_reference
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

import mgegraph.onnx as mo
from mgegraph.backend import get_backend
from mgegraph.planner.passes.pipeline import optimize

SHAPE = (2, 3, 16, 16)


def small_cnn(seed=0):
    """Conv-Relu, MaxPool, Conv-Relu, a residual Add, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(seed)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Add", ["r2", "p1"], ["a"]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SHAPE[0], 10])],
        [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 8, 8, 3, 3, scale=0.15),
         init("b2", 8, scale=0.1), init("wf", 10, 8), init("bf", 10, scale=0.1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


class Batches(CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter([{"x": b} for b in batches])

    def get_next(self):
        return next(self.batches, None)


def quantized_model(tmp_path, batches):
    """The float model and ORT's QDQ model of it (per-channel int8 weights), as paths."""
    float_path, qdq_path = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(small_cnn(), float_path)
    quantize_static(str(float_path), str(qdq_path), Batches(batches),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return float_path, qdq_path


def _batches(count, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(count)]


def _output_step(qdq_path) -> float:
    model = onnx.load(qdq_path)
    (last,) = [n for n in model.graph.node if n.output[0] == "y"]
    scale_name = last.input[1]
    (scale,) = [i for i in model.graph.initializer if i.name == scale_name]
    return float(numpy_helper.to_array(scale))


def test_quantize_static_model_folds_into_int8_ops(tmp_path):
    _, qdq_path = quantized_model(tmp_path, _batches(4))
    graph, outputs = mo.import_graph(qdq_path)
    _, _, report = optimize(graph, outputs)  # the passes mg.compile runs
    folded = dict(report)["fold_qdq"]["folded"]
    assert folded["quantized_conv2d"] == 2
    assert folded["quantized_add"] == 1 and folded["quantized_linear"] == 1


@pytest.mark.skipif(get_backend("cpu").impl("quantized_conv2d") is None,
                    reason="the CPU backend has no int8 kernels on this branch")
def test_quantize_static_model_gives_the_specs_outputs(tmp_path, capsys):
    batches = _batches(8)
    _, qdq_path = quantized_model(tmp_path, batches)
    step = _output_step(qdq_path)
    plan = mo.import_model(qdq_path, freeze=True)
    # the reference evaluator has DequantizeLinear from opset 19 on: the same model converted
    spec = version_converter.convert_version(onnx.load(qdq_path), 21)
    witnesses = [lambda feeds: run_reference(spec, feeds)]
    if onnxruntime_int8_is_exact():
        session = ort.InferenceSession(str(qdq_path), providers=["CPUExecutionProvider"])
        witnesses.append(lambda feeds: session.run(None, feeds))
    steps = []
    for x in batches + _batches(4, seed=2):  # calibration data and unseen data
        (got,) = plan.run({"x": x})
        for witness in witnesses:
            (want,) = witness({"x": x})
            steps.append(np.rint(np.abs(got - want) / step).astype(np.int64).reshape(-1))
    steps = np.concatenate(steps)
    assert steps.max() <= 1
    with capsys.disabled():
        print(f"\nquantize_static CNN: {np.mean(steps == 0):.2%} of {steps.size} outputs "
              f"bitwise the witnesses', the rest one step ({step:.4g}) away")
