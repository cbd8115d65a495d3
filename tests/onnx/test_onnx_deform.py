"""ONNX for the deform family: DeformConv's node cases through the importer; a DeformConv model
of odd sizes (groups, offset groups, strides, dilations, unequal pads, no mask) imported and
checked with ONNX Runtime; deformable_conv2d exported (its columns as a one-hot DeformConv),
checked with ONNX Runtime and imported back; the refusals of what has no ONNX form."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it

from onnx import TensorProto, helper
from onnx_node_cases import float32_cases, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(0)


def _deform_cases():
    return [pytest.param(c, id=c.name) for c in float32_cases().get("DeformConv", [])]


@pytest.mark.parametrize("case", _deform_cases())
def test_deformconv_node_case(case):
    run_case(case)


def test_every_deformconv_case_is_there():
    assert len(_deform_cases()) == 4


def _session(model):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _deform_model(names, shapes, **attrs):
    node = helper.make_node("DeformConv", names, ["y"], **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in names if n]
    graph = helper.make_graph([node], "deform", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("attrs, shapes, with_mask", [
    ({"group": 2, "offset_group": 2, "pads": [1, 1, 1, 1]},
     {"x": (2, 4, 6, 5), "w": (6, 2, 3, 3), "offset": (2, 36, 6, 5), "b": (6,)}, True),
    ({"strides": [2, 1], "dilations": [1, 2], "pads": [0, 2, 1, 0]},
     {"x": (1, 3, 7, 6), "w": (2, 3, 2, 3), "offset": (1, 12, 4, 4)}, False),
])
def test_deformconv_imports_as_onnx_runtime_computes_it(attrs, shapes, with_mask):
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    feeds["offset"] *= 2
    if with_mask:
        off = shapes["offset"]
        feeds["mask"] = RNG.uniform(0, 1, (off[0], off[1] // 2, *off[2:])).astype(np.float32)
    names = ["x", "w", "offset", "b" if "b" in feeds else "", "mask" if with_mask else ""]
    model = _deform_model([n for n in names if n or with_mask],
                          {k: a.shape for k, a in feeds.items()}, **attrs)
    (want,) = _session(model).run(None, feeds)
    (got,) = mo.import_model(model).run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_deformable_conv2d_exports_and_imports_back():
    arrays = [RNG.standard_normal((2, 4, 6, 5)), RNG.standard_normal((6, 2, 3, 3)),
              RNG.uniform(-2, 2, (2, 36, 3, 5)), RNG.uniform(0, 1, (2, 18, 3, 5)),
              RNG.standard_normal(6)]
    feeds = {f"x{i}": a.astype(np.float32) for i, a in enumerate(arrays)}
    g = mg.Graph()
    xs = [g.input(k, a.shape, a.dtype) for k, a in feeds.items()]
    plan = mg.compile([F.vision.deformable_conv2d(*xs, stride=(2, 1), padding=1, groups=2)])
    (want,) = plan.run(feeds)
    model = mo.export(plan, opset=19)
    assert "DeformConv" in [n.op_type for n in model.graph.node]
    (got,) = _session(model).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (back,) = mo.import_model(model).run(feeds)
    np.testing.assert_allclose(back, want, rtol=1e-6, atol=1e-6)


def test_what_has_no_onnx_form_is_refused_by_name():
    g = mg.Graph()
    x = g.input("x", (1, 2, 5, 5), "float32")
    cols = F.vision.deformable_conv2d(x, g.input("w", (2, 2, 3, 3), "float32"),
                                      g.input("o", (1, 18, 3, 3), "float32"),
                                      g.input("m", (1, 9, 3, 3), "float32"))
    with pytest.raises(mo.OnnxExportError, match="DeformConv from opset 19"):
        mo.export((g, [cols]), opset=17)
    with pytest.raises(mo.OnnxExportError, match="correlation"):
        mo.export((g, [F.vision.correlation(x, x)]), opset=19)


def test_a_deformconv_of_the_wrong_offset_channels_is_refused():
    feeds = {"x": np.zeros((1, 2, 5, 5), np.float32), "w": np.zeros((1, 2, 3, 3), np.float32),
             "offset": np.zeros((1, 18, 3, 3), np.float32)}
    model = _deform_model(["x", "w", "offset"], {k: a.shape for k, a in feeds.items()},
                          offset_group=2)
    with pytest.raises(mo.OnnxImportError, match="offset_group 2 must match"):
        mo.import_model(model)


def test_a_named_batch_exports_and_serves_every_size():
    g = mg.Graph()
    shapes = {"x": ("batch", 4, 6, 5), "w": (6, 2, 3, 3), "o": ("batch", 36, 6, 5),
              "m": ("batch", 18, 6, 5)}
    xs = [g.input(k, s, "float32") for k, s in shapes.items()]
    plan = mg.compile([F.vision.deformable_conv2d(*xs, padding=1, groups=2)])
    session = _session(mo.export(plan, opset=19))
    for n in (1, 3):
        feeds = {k: RNG.standard_normal((n, *s[1:]) if s[0] == "batch" else s).astype(np.float32)
                 for k, s in shapes.items()}
        np.testing.assert_allclose(session.run(None, feeds)[0], plan.run(feeds)[0], rtol=1e-5,
                                   atol=1e-5)
