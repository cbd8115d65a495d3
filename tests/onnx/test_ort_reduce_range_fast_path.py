"""ONNX Runtime's ``quantize_static(..., reduce_range=True)`` (its advice for x86 without VNNI)
writes per-channel int8 weights within [-64, 64]: imported, every packed int8 weight of the plan
carries the proof that AVX2's vpmaddubsw tile is exact on it (the k pairs' parts sum within
+-128), found from the bytes, and the plan's outputs are the portable variant's bitwise and the
ONNX reference evaluator's within one output step."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
pytest.importorskip("onnxruntime.quantization")
import onnx
from onnx import numpy_helper, version_converter
from onnx_builders import run_reference
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from test_onnx_quantize_static import Batches, _batches, _output_step, small_cnn

import mgegraph.onnx as mo
from mgegraph._kernels import qgemm

PACKED = ("quantized_conv2d_packed", "quantized_linear_packed")


def _reduce_range_model(tmp_path, batches):
    float_path, qdq_path = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(small_cnn(), float_path)
    quantize_static(str(float_path), str(qdq_path), Batches(batches),
                    quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return qdq_path


def test_reduce_range_weights_run_on_the_proven_tile(tmp_path):
    batches = _batches(6)
    qdq_path = _reduce_range_model(tmp_path, batches)
    weights = [numpy_helper.to_array(i) for i in onnx.load(qdq_path).graph.initializer
               if i.data_type == onnx.TensorProto.INT8 and len(i.dims) > 1]
    assert len(weights) == 3 and max(int(np.abs(w).max()) for w in weights) == 64
    plan = mo.import_model(qdq_path, freeze=True)
    packed = [plan.values[i.inputs[1]] for i in plan.instructions if i.op in PACKED]
    assert len(packed) == 3
    assert all(qgemm.packed_pairs_fit(np.asarray(p).view(np.uint8)) for p in packed)

    step = _output_step(qdq_path)
    spec = version_converter.convert_version(onnx.load(qdq_path), 21)
    before = qgemm.set_int8_isa("portable")
    try:
        portable = [plan.run({"x": x})[0] for x in batches]
    finally:
        qgemm.set_int8_isa(before)
    for x, want_bits in zip(batches, portable, strict=True):
        (got,) = plan.run({"x": x})
        assert got.tobytes() == want_bits.tobytes()
        (want,) = run_reference(spec, {"x": x})
        assert np.rint(np.abs(got - want) / step).max() <= 1
