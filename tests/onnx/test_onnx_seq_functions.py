"""ONNX's ops of sequence models (RMSNormalization and RotaryEmbedding of opset 23, SwiGLU of
opset 28) imported: every float32 node case of theirs passes (none did before), models checked
against ONNX Runtime where it has the op; and graphs using mgegraph's sequence functions
exported (as the ONNX ops they are made of), run by ONNX Runtime and imported back."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import model, run_onnxruntime, value_info
from onnx_node_cases import float32_cases, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(0)
OPS = {"RMSNormalization": 19, "RotaryEmbedding": 3, "SwiGLU": 2}


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_float32_node_case_passes(op):
    cases = float32_cases()[op]
    assert len(cases) == OPS[op]
    for case in cases:
        run_case(case)


@pytest.mark.parametrize("axis, scale_shape", [(-1, (6,)), (1, (5, 6)), (-2, (1, 6))])
def test_rms_normalization_against_onnx_runtime(axis, scale_shape):
    x, scale = rand(2, 5, 6), rand(*scale_shape)
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-4)
    m = model([node], [value_info("x", list(x.shape))], [value_info("y", None)],
              [numpy_helper.from_array(scale, "s")], opset=23)
    (got,) = mo.import_model(m).run({"x": x})
    (want,) = run_onnxruntime(m, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_against_onnx_runtime(interleaved):
    x, cos, sin = rand(2, 3, 4, 8), rand(10, 4), rand(10, 4)
    ids = RNG.integers(0, 10, (2, 4))
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "ids"], ["y"],
                            interleaved=interleaved)
    inputs = [value_info("x", list(x.shape)), value_info("cos", [10, 4]),
              value_info("sin", [10, 4]), value_info("ids", [2, 4], TensorProto.INT64)]
    m = model([node], inputs, [value_info("y", None)], opset=23)
    feeds = {"x": x, "cos": cos, "sin": sin, "ids": ids}
    (got,) = mo.import_model(m).run(feeds)
    (want,) = run_onnxruntime(m, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_swiglu_refuses_a_broadcast():
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"])
    m = model([node], [value_info("a", [2, 3]), value_info("b", [1, 3])],
              [value_info("y", None)], opset=28)
    with pytest.raises(mo.OnnxImportError, match="SwiGLU node.*differ"):
        mo.import_model(m)


def test_rms_normalization_refuses_another_stash_type():
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], stash_type=11)
    m = model([node], [value_info("x", [2, 3])], [value_info("y", None)],
              [numpy_helper.from_array(rand(3), "s")], opset=23)
    with pytest.raises(mo.OnnxImportError, match="stash_type 11"):
        mo.import_model(m)


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_export_runs_in_onnx_runtime_and_imports_back(opset):
    g = mg.Graph()
    ids = g.input("ids", (2, 5), "int64")
    h = F.embedding(ids, g.param("table", rand(11, 8)), padding_idx=0)
    h = F.rms_norm(h, 8, weight=g.param("gamma", rand(8)))
    h = F.transpose(F.reshape(h, (2, 5, 2, 4)), (0, 2, 1, 3))
    h = F.rotary_embedding(h, rand(7, 2), rand(7, 2), RNG.integers(0, 7, (2, 5)),
                           interleaved=True)
    out = F.swiglu(h, axis=-1)
    plan = mg.compile([out])
    feeds = {"ids": RNG.integers(0, 11, (2, 5))}
    (want,) = plan.run(feeds)
    exported = mo.export(plan, None, opset=opset)
    (got,) = run_onnxruntime(exported, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (back,) = mo.import_model(exported).run(feeds)
    np.testing.assert_allclose(back, want, rtol=1e-5, atol=1e-6)
