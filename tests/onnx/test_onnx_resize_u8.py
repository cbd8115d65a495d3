"""ONNX Resize on uint8 images: exported uint8 interpolate graphs run by ONNX Runtime, imported
uint8 Resize models, and how ONNX Runtime's uint8 arithmetic differs from mgegraph's rule
(ONNX leaves integer rounding unsaid): its linear Resize truncates toward zero where mgegraph
rounds to nearest (so it is 0 or 1 below), its nearest is the same copy, and it has no uint8
cubic kernel (a run fails there; mgegraph imports and runs such a model). A uint8 remap exports
as GridSample on float32 between a Cast and Round, Clip and Cast back (ONNX Runtime's
GridSample reads floats only); mgegraph's importer has no Round yet and refuses it by name."""
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from onnx_builders import model, value_info

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(8)


def ort_run(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def exported(mode, align, kw, shape=(2, 3, 6, 5)):
    g = mg.Graph()
    y = F.vision.interpolate(g.input("x", shape, np.uint8), mode=mode, align_corners=align, **kw)
    x = RNG.integers(0, 256, shape, dtype=np.uint8)
    (want,) = mg.compile([y]).run({"x": x})
    m = mo.export((g, [y]), None, opset=19)
    assert [n.op_type for n in m.graph.node] == ["Resize"]
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    (back,) = mo.import_model(m).run({"x": x})
    np.testing.assert_array_equal(back, want)  # the file means what the graph meant
    return m, x, want


@pytest.mark.parametrize("kw", [{"scale_factor": (2, 3)}, {"size": (4, 11)}])
def test_exported_nearest_is_onnxruntimes_copy(kw):
    m, x, want = exported("nearest", None, kw)
    (got,) = ort_run(m, {"x": x})
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("align", "kw"), [(False, {"size": (31, 23)}), (True, {"scale_factor": 2}),
                                           (False, {"scale_factor": 0.5})])
def test_exported_bilinear_onnxruntime_truncates_where_mgegraph_rounds(align, kw):
    m, x, want = exported("bilinear", align, kw)
    (got,) = ort_run(m, {"x": x})
    below = want.astype(int) - got.astype(int)
    assert got.dtype == np.uint8 and below.min() >= 0 and below.max() <= 1


def test_exported_bicubic_imports_back_though_onnxruntime_has_no_uint8_cubic():
    exported("bicubic", False, {"size": (9, 4)})


def test_an_imported_uint8_resize_model_is_interpolate():
    x = RNG.integers(0, 256, (1, 3, 7, 9), dtype=np.uint8)
    sizes = numpy_helper.from_array(np.asarray((1, 3, 12, 5), np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")
    m = model([node], [value_info("x", x.shape, TensorProto.UINT8)],
              [value_info("y", None, TensorProto.UINT8)], [sizes], opset=19)
    (got,) = mo.import_model(m).run({"x": x})
    g = mg.Graph()
    (want,) = mg.compile([F.vision.interpolate(g.input("x", x.shape, np.uint8),
                                               size=(12, 5))]).run({"x": x})
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("border", "interp"), [("replicate", "linear"), ("reflect_101", "nearest"),
                                                ("constant", "linear")])
def test_exported_uint8_remap_runs_in_onnxruntime_within_1(border, interp):
    g = mg.Graph()
    x, xy = g.input("x", (2, 3, 6, 7), np.uint8), g.input("m", (2, 4, 5, 2), np.float32)
    y = F.vision.remap(x, xy, border_mode=border, interp_mode=interp)
    feeds = {"x": RNG.integers(0, 256, (2, 3, 6, 7), dtype=np.uint8),
             "m": RNG.uniform(-2, 8, (2, 4, 5, 2)).astype(np.float32)}
    (want,) = mg.compile([y]).run(feeds)
    m = mo.export((g, [y]), None, opset=20)
    (got,) = ort_run(m, feeds)
    assert got.dtype == np.uint8
    diff = np.abs(got.astype(int) - want)
    assert diff.max() <= (0 if interp == "nearest" else 1) and diff.mean() < 0.05
    # imported back (Round as round_half_even), the float32 sampling lands within 1 of ORT's
    (back,) = mo.import_model(m).run(feeds)
    assert back.dtype == np.uint8 and np.abs(back.astype(int) - got).max() <= 1
