"""Small ONNX models for the tests: a model of nodes, a value info, an int64 initializer, and
what ONNX Runtime computes of a model. Imported after ``pytest.importorskip("onnx.helper")``: it
needs the onnx package."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", list(inputs), list(outputs), list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value_info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def int64_tensor(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def run_reference(onnx_model, feeds) -> list:
    """ONNX's reference evaluator's outputs of ``onnx_model``: the spec in NumPy, exact on
    integers."""
    from onnx.reference import ReferenceEvaluator  # lazy: loads the evaluator's op set
    return ReferenceEvaluator(onnx_model).run(None, feeds)


def onnxruntime_int8_is_exact() -> bool:
    """Whether ONNX Runtime's int8 GEMM gives exact sums on this CPU. Without VNNI, its x86
    u8*s8 kernel multiplies with vpmaddubsw, which saturates a pair of products at int16
    (2 * 255 * 127 > 32767), so its sums are wrong on large values (its docs advise
    ``reduce_range`` there); with VNNI (vpdpbusd) it sums in int32 as the spec does."""
    from mgegraph._kernels import qgemm  # lazy: the CPU backend's compiled module
    return any("vnni" in isa or isa == "amx" for isa in qgemm.available_isas())


def run_onnxruntime(onnx_model, feeds) -> list:
    """ONNX Runtime's outputs of ``onnx_model`` on its CPU (the test skips without it)."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(onnx_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)
