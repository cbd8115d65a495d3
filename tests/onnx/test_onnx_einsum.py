"""Einsum, IsNaN and IsInf imported (compositions over F.einsum, F.isnan, F.isinf) and run
against ONNX Runtime (ONNX's node cases of these ops have float64 or bool outputs, so none is
in the float32 set)."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper
from onnx_builders import model, value_info

import mgegraph.onnx as mo

RNG = np.random.default_rng(0)


def ort_run(m, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(m.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("equation, shapes, out", [
    ("ij,jk->ik", [(2, 3), (3, 4)], (2, 4)), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], (2, 3, 5)),
    ("ii->i", [(4, 4)], (4,)), ("...ij->...ji", [(2, 3, 4)], (2, 4, 3)), ("ij->", [(3, 5)], ()),
])
def test_einsum_matches_onnx_runtime(equation, shapes, out):
    names = [f"x{i}" for i in range(len(shapes))]
    m = model([helper.make_node("Einsum", names, ["y"], equation=equation)],
              [value_info(n, s) for n, s in zip(names, shapes)], [value_info("y", out)], opset=13)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    (got,) = mo.import_model(m).run(feeds)
    np.testing.assert_allclose(got, ort_run(m, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attrs", [("IsNaN", {}), ("IsInf", {}),
                                       ("IsInf", {"detect_negative": 0}),
                                       ("IsInf", {"detect_positive": 0}),
                                       ("IsInf", {"detect_positive": 0, "detect_negative": 0})])
def test_isnan_isinf_match_onnx_runtime(op, attrs):
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], [value_info("x", (6,))],
              [value_info("y", (6,), TensorProto.BOOL)], opset=20)
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], np.float32)
    np.testing.assert_array_equal(mo.import_model(m).run({"x": x})[0], ort_run(m, {"x": x})[0])

