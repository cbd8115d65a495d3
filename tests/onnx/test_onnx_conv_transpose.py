"""ONNX ConvTranspose: import (2-D and 1-D; pads, auto_pad, output_shape, output_padding,
dilations, group, bias) against ONNX Runtime and the ONNX node cases, and export of mgegraph's
transposed convolutions (conv2d's data gradient) checked by onnx.checker and ONNX Runtime and
imported back bitwise."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
import onnx
from onnx import helper, numpy_helper
from onnx_builders import model, value_info
from onnx_node_cases import _every, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph import nn

RNG = np.random.default_rng(0)


def _node_cases():
    return [c for c in _every() if c.model.graph.node[0].op_type == "ConvTranspose"
            and len(c.model.graph.node) == 1]


@pytest.mark.parametrize("case", _node_cases(), ids=lambda c: c.name)
def test_node_case(case):
    run_case(case)


def _conv_transpose_model(xs, ws, bias, **attrs):
    w = RNG.standard_normal(ws).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(
            RNG.standard_normal(ws[1] * attrs.get("group", 1)).astype(np.float32), "b"))
        ins.append("b")
    node = helper.make_node("ConvTranspose", ins, ["y"], **attrs)
    return model([node], [value_info("x", list(xs))], [value_info("y", None)], inits)


ATTRS = [
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 0]}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 9]}),   # cropped
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 12]}),  # zeros
    ((1, 3, 4, 5), (3, 2, 4, 4), {"strides": [2, 2], "output_shape": [8, 10],
                                  "auto_pad": "SAME_UPPER"}),
    ((2, 4, 3, 5), (4, 3, 3, 2), {"strides": [3, 2], "output_padding": [2, 1],
                                  "dilations": [1, 2], "group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 4, 7), (4, 2, 3), {"strides": [2], "pads": [1, 2], "output_padding": [1]}),
    ((1, 4, 7), (4, 2, 3), {"strides": [3], "auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,attrs", ATTRS)
def test_import_matches_onnx_runtime(xs, ws, attrs, bias):
    ort = pytest.importorskip("onnxruntime")
    m = _conv_transpose_model(xs, ws, bias, **attrs)
    x = RNG.standard_normal(xs).astype(np.float32)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    (got,) = mo.import_model(m).run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs,match", [
    # ONNX's shape inference or the converter's own checks, whichever sees it first
    ({"output_padding": [1]}, "ConvTranspose.*output_padding"),
    ({"pads": [1, 1]}, "ConvTranspose.*pads"),
    ({"kernel_shape": [2, 2]}, "ConvTranspose.*kernel"),
    ({"output_shape": [7]}, "ConvTranspose.*output_shape"),
])
def test_bad_attributes_are_refused(attrs, match):
    m = _conv_transpose_model((1, 3, 4, 4), (3, 2, 3, 3), False, **attrs)
    with pytest.raises(mo.OnnxImportError, match=match):
        mo.import_model(m)


class Decoder(nn.Module):
    def __init__(self):
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up2 = nn.ConvTranspose2d(4, 3, (2, 3), stride=(1, 2), dilation=(2, 1))
        self.line = nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1)

    def forward(self, x):
        h = self.up2(F.relu(self.up(x)))           # (N, 3, 12, 15)
        return self.line(F.flatten(h, 2))           # (N, 2, 360)


def test_export_round_trip(tmp_path):
    model = Decoder()
    model.eval()
    x = RNG.standard_normal((2, 8, 5, 4)).astype(np.float32)
    predictor = mg.compile_module(model, (x,))
    (want,) = predictor.plan.run({"input0": x})
    path = tmp_path / "decoder.onnx"
    exported = mo.export(predictor.plan, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert sum(n.op_type == "ConvTranspose" for n in exported.graph.node) == 3
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"input0": x})
    np.testing.assert_allclose(theirs, want, rtol=0, atol=1e-5)
    (back,) = mo.import_model(path).run({"input0": x})
    assert back.dtype == want.dtype and np.array_equal(back, want)


def test_export_of_asymmetric_padding_crops_and_pads():
    ort = pytest.importorskip("onnxruntime")
    m = _conv_transpose_model((1, 3, 4, 5), (3, 2, 3, 3), True, strides=[2, 2],
                              pads=[0, 1, 2, 0])
    x = RNG.standard_normal((1, 3, 4, 5)).astype(np.float32)
    imported = mo.import_model(m)
    (want,) = imported.run({"x": x})
    again = mo.export(imported)
    session = ort.InferenceSession(again.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"x": x})
    np.testing.assert_allclose(theirs, want, rtol=0, atol=1e-5)
