"""The activations through ONNX: each ONNX op imported as its mgegraph op and run against ONNX
Runtime, and mgegraph's activations exported and run by ONNX Runtime on random data."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
ort = pytest.importorskip("onnxruntime")
from onnx import helper
from onnx_builders import model, value_info

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph.onnx import OnnxImportError

RNG = np.random.default_rng(0)
SHAPE = (2, 3, 4, 5)

# ONNX op, its attributes, opset -> the mgegraph op it must import as
IMPORTS = [
    ("Elu", {}, 17, "elu"), ("Elu", {"alpha": 0.4}, 17, "elu"),
    ("Celu", {"alpha": 1.6}, 17, "celu"), ("Selu", {}, 17, "selu"),
    ("Selu", {"alpha": 1.5, "gamma": 0.9}, 17, "selu"),
    ("HardSigmoid", {}, 17, "hardsigmoid"),
    ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, 17, "hardsigmoid"),
    ("ThresholdedRelu", {"alpha": 0.3}, 17, "thresholded_relu"),
    ("Softsign", {}, 17, "softsign"), ("Mish", {}, 18, "mish"),
    ("Shrink", {}, 17, "shrink"), ("Shrink", {"lambd": 1.2, "bias": 0.4}, 17, "shrink"),
    ("LeakyRelu", {"alpha": 0.2}, 17, "leaky_relu"),
    ("Swish", {}, 24, "silu"), ("Swish", {"alpha": 0.7}, 24, "sigmoid"),
]


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString()).run(None, feeds)


@pytest.mark.parametrize("op,attrs,opset,mg_op", IMPORTS,
                         ids=[f"{op}{sorted(a.items())}" for op, a, _, _ in IMPORTS])
def test_imports_as_the_op_and_matches_onnx_runtime(op, attrs, opset, mg_op):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    m = model([node], [value_info("x", SHAPE)], [value_info("y", SHAPE)], opset=opset)
    x = (RNG.standard_normal(SHAPE) * 3).astype(np.float32)
    plan = mo.import_model(m)
    assert mg_op in {ins.op for ins in plan.instructions} | {
        n.op.name for n in plan.source.graph.nodes}
    (got,) = plan.run({"x": x})
    if opset <= 22:  # ONNX Runtime has no Swish yet: the expanded formula instead
        (want,) = ort_run(m, {"x": x})
    else:
        alpha = attrs.get("alpha", 1.0)
        want = x / (1 + np.exp(-alpha * x.astype(np.float64)))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("slope_shape", [(1,), (5,), (3, 1, 1), (1, 3, 4, 5)])
def test_prelu_imports_with_onnx_broadcasting(slope_shape):
    slope = RNG.uniform(-1, 1, slope_shape).astype(np.float32)
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])],
              [value_info("x", SHAPE), value_info("s", slope_shape)], [value_info("y", SHAPE)])
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    (got,) = mo.import_model(m).run({"x": x, "s": slope})
    (want,) = ort_run(m, {"x": x, "s": slope})
    np.testing.assert_array_equal(got, want)


def test_prelu_whose_slope_widens_the_input_is_refused():
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])],
              [value_info("x", (3, 1)), value_info("s", (3, 4))], [value_info("y", (3, 4))])
    with pytest.raises(OnnxImportError, match=r"PRelu.*slope \(3, 4\) does not broadcast to the "
                                              r"input \(3, 1\)"):
        mo.import_model(m)


def _exported_graph():
    g = mg.Graph()
    x = g.input("x", SHAPE, "float32")
    w = g.param("w", RNG.uniform(-1, 1, (3, 1, 1)).astype(np.float32))
    outs = [F.elu(x, 0.6), F.selu(x), F.celu(x, 1.4), F.softsign(x), F.hardsigmoid(x),
            F.hardsigmoid(x, 0.2, 0.5), F.mish(x), F.logsigmoid(x), F.thresholded_relu(x, 0.3),
            F.softshrink(x, 0.4), F.hardshrink(x, 0.4), F.shrink(x, 0.9, 0.1), F.prelu(x, w),
            F.prelu(g.input("narrow", (2, 1, 4, 5), "float32"), w)]
    return g, outs


@pytest.mark.parametrize("opset", [13, 17, 18, 21])
def test_exports_run_in_onnx_runtime(opset):
    g, outs = _exported_graph()
    m = mo.export((g, outs), opset=opset)
    ops = {n.op_type for n in m.graph.node}
    assert {"Elu", "Selu", "Celu", "Softsign", "HardSigmoid", "ThresholdedRelu", "Shrink",
            "PRelu"} <= ops
    assert ("Mish" in ops) == (opset >= 18)
    feeds = {"x": (RNG.standard_normal(SHAPE) * 3).astype(np.float32),
             "narrow": RNG.standard_normal((2, 1, 4, 5)).astype(np.float32)}
    want = mg.compile(outs).run(feeds)
    for k, (a, b) in enumerate(zip(ort_run(m, feeds), want)):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=3e-7, err_msg=str(k))


def test_export_then_import_gives_the_same_ops_and_bits():
    g, outs = _exported_graph()
    m = mo.export((g, outs), opset=18)
    feeds = {"x": (RNG.standard_normal(SHAPE) * 3).astype(np.float32),
             "narrow": RNG.standard_normal((2, 1, 4, 5)).astype(np.float32)}
    for a, b in zip(mo.import_model(m).run(feeds), mg.compile(outs).run(feeds)):
        np.testing.assert_array_equal(a, b)
