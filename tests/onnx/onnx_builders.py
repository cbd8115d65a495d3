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


def run_onnxruntime(onnx_model, feeds) -> list:
    """ONNX Runtime's outputs of ``onnx_model`` on its CPU (the test skips without it)."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(onnx_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)
