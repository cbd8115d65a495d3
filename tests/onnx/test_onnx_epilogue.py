"""The epilogue's relu6 (linear and conv2d with activation="relu6") exported as Clip(0, 6) after
the Conv or Gemm, run by ONNX Runtime and imported back, where the epilogue pass fuses it again."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.onnx as mo
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(0)


def relu6_graph():
    g = mg.Graph()
    x = g.input("x", (1, 6, 9, 9))
    conv = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)  # noqa: C408
    h = apply("conv2d", (x, g.param("w1", RNG.standard_normal((12, 6, 1, 1), np.float32)),
                         g.param("b1", RNG.standard_normal(12, np.float32))),
              activation="relu6", **conv)
    h = apply("conv2d", (h, g.param("w2", RNG.standard_normal((12, 1, 3, 3), np.float32))),
              activation="relu6", **{**conv, "stride": (2, 2), "padding": (1, 1),
                                     "groups": 12})
    flat = apply("reshape", (h,), shape=(12, 25))
    y2 = apply("linear", (flat, g.param("w3", RNG.standard_normal((7, 25), np.float32)),
                          g.param("b3", RNG.standard_normal(7, np.float32))),
               activation="relu6")
    y3 = apply("linear", (apply("reshape", (h,), shape=(3, 4, 25)),
                          g.param("w4", RNG.standard_normal((5, 25), np.float32))),
               activation="relu6")
    return g, [y2, y3]


def test_relu6_exports_as_clip_and_runs_in_onnx_runtime():
    ort = pytest.importorskip("onnxruntime")
    g, outputs = relu6_graph()
    model = mo.export((g, outputs), None)
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("Clip") == 4
    for producer in ("Conv", "Gemm"):
        at = ops.index(producer)
        assert "Clip" in ops[at + 1:at + 3]
    x = 3 * RNG.standard_normal((1, 6, 9, 9)).astype(np.float32)
    want = mg.compile(outputs, optimize=0).run({"x": x})
    assert all((w == 6).any() and (w == 0).any() for w in want)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, w in zip(session.run(None, {"x": x}), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
    back = mo.import_model(model)
    for got, w in zip(back.run({"x": x}), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
    # the imported Clip(0, 6)s after Conv and Gemm are epilogues again (the 3-D linear comes
    # back as MatMul, whose clip stays an op)
    fused = [i.op for i in back.instructions if dict(i.attrs).get("activation") == "relu6"]
    assert sorted(fused) == ["conv2d", "conv2d", "linear"]
