"""Small ONNX models for the tests: a model of nodes, a value info, an int64 initializer.
Imported after ``pytest.importorskip("onnx.helper")``: it needs the onnx package."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", list(inputs), list(outputs), list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value_info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def int64_tensor(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)
