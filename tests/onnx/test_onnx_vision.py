"""ONNX for the vision ops: GridSample's and RoiAlign's node cases through the importer;
grid_sample, remap, warp_perspective, roi_align (ONNX's convention) and roi_pooling (max)
exported, checked with ONNX Runtime (and ONNX's reference for RoiAlign) and imported back; the
refusals of what has no ONNX form."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it

from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_node_cases import _every, float32_cases, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(0)


def _grid_cases():
    return [pytest.param(c, id=c.name) for c in float32_cases().get("GridSample", [])]


@pytest.mark.parametrize("case", _grid_cases())
def test_gridsample_node_case(case):
    run_case(case)


def test_every_gridsample_case_is_there():
    names = [c.name for c in float32_cases()["GridSample"]]
    assert len(names) == 18 and sum("volumetric" in n for n in names) == 4


def _plan(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)])


def _through_ort(plan, feeds, opset):
    ort = pytest.importorskip("onnxruntime")
    model = mo.export(plan, opset=opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, session.run(None, feeds)[0]


@pytest.mark.parametrize("opset", [16, 20])
@pytest.mark.parametrize("mode, padding, aligned", [
    ("bilinear", "zeros", False), ("nearest", "border", True), ("bicubic", "reflection", False),
    ("bicubic", "border", True)])
def test_grid_sample_exports_and_imports_back(opset, mode, padding, aligned):
    x = RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)
    grid = RNG.uniform(-1.2, 1.2, (2, 4, 3, 2)).astype(np.float32)
    plan = _plan(lambda a, b: F.vision.grid_sample(a, b, mode, padding, aligned), x, grid)
    (want,) = plan.run({"x0": x, "x1": grid})
    model, got = _through_ort(plan, {"x0": x, "x1": grid}, opset)
    assert [n.op_type for n in model.graph.node] == ["GridSample"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (back,) = mo.import_model(model).run({"x0": x, "x1": grid})
    np.testing.assert_array_equal(back, want)


@pytest.mark.parametrize("border", ["replicate", "reflect_101", "constant"])
@pytest.mark.parametrize("interp", ["linear", "nearest"])
def test_remap_exports_as_gridsample_at_pixels(border, interp):
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    xy = RNG.uniform(-4, 10, (1, 3, 4, 2)).astype(np.float32)
    plan = _plan(lambda a, b: F.vision.remap(a, b, border, interp_mode=interp), x, xy)
    (want,) = plan.run({"x0": x, "x1": xy})
    _, got = _through_ort(plan, {"x0": x, "x1": xy}, 17)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_warp_perspective_exports():
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    mat = (np.eye(3) + RNG.uniform(-0.05, 0.05, (2, 3, 3))).astype(np.float32)
    plan = _plan(lambda a, m: F.vision.warp_perspective(a, m, (6, 5)), x, mat)
    (want,) = plan.run({"x0": x, "x1": mat})
    _, got = _through_ort(plan, {"x0": x, "x1": mat}, 17)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn, opset, message", [
    (lambda a, b: F.vision.grid_sample(a, b), 13, "GridSample from opset 16"),
    (lambda a, b: F.vision.remap(a, b, "wrap"), 17, "border_mode='wrap'.*no GridSample padding"),
    (lambda a, b: F.vision.remap(a, b, "constant", scalar=1.0), 17, "scalar 1.0"),
])
def test_what_has_no_onnx_form_is_refused_by_name(fn, opset, message):
    x, grid = np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 2, 2, 2), np.float32)
    with pytest.raises(mo.OnnxExportError, match=message):
        mo.export(_plan(fn, x, grid), opset=opset)


def test_nms_and_roi_align_have_no_onnx_form():
    boxes, scores = np.zeros((4, 4), np.float32), np.zeros((4,), np.float32)
    with pytest.raises(mo.OnnxExportError, match=r"nms \(x1\)"):
        mo.export(_plan(lambda b, s: F.vision.nms(b, s, 0.5), boxes, scores))


# -- RoiAlign ---------------------------------------------------------------------------------
def _roi_case_names():
    return {c.name: c for c in _every() if c.name.startswith("test_roialign")}


@pytest.mark.parametrize("name", sorted(_roi_case_names()))
def test_roialign_node_case(name):
    run_case(_roi_case_names()[name])


def _roi_model(opset, **attrs):
    node = helper.make_node("RoiAlign", ["X", "rois", "index"], ["Y"], **attrs)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, (2, 3, 9, 11)),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, (6, 4)),
        helper.make_tensor_value_info("index", TensorProto.INT64, (6,))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _roi_feeds():
    corners = np.sort(RNG.uniform(-3, 14, (6, 2, 2)), axis=1)
    rois = np.stack([corners[:, 0, 0], corners[:, 0, 1], corners[:, 1, 0], corners[:, 1, 1]], 1)
    return {"X": RNG.standard_normal((2, 3, 9, 11)).astype(np.float32),
            "rois": rois.astype(np.float32), "index": RNG.integers(0, 2, 6).astype(np.int64)}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coords", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roialign_imports_as_onnx_runtime_and_the_reference_compute_it(mode, coords, ratio):
    ort = pytest.importorskip("onnxruntime")
    model = _roi_model(16, mode=mode, output_height=3, output_width=4, sampling_ratio=ratio,
                       spatial_scale=0.8, coordinate_transformation_mode=coords)
    feeds = _roi_feeds()
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its warning about max mode, whose results we match
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    (got,) = mo.import_model(model).run(feeds)
    np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-5,
                               atol=2e-6)
    back = mo.import_model(mo.export(mo.import_model(model), opset=16)).run(feeds)[0]
    np.testing.assert_array_equal(back, got)


def test_roialign_opset_10_is_output_half_pixel():
    model = _roi_model(13, output_height=2, output_width=2, sampling_ratio=2)
    feeds = _roi_feeds()
    (got,) = mo.import_model(model).run(feeds)
    again = _roi_model(16, output_height=2, output_width=2, sampling_ratio=2,
                       coordinate_transformation_mode="output_half_pixel")
    np.testing.assert_array_equal(got, mo.import_model(again).run(feeds)[0])


def test_megengine_roi_align_is_not_onnx_roialign():
    x, rois = np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 5), np.float32)
    with pytest.raises(mo.OnnxExportError, match="MegEngine's convention"):
        mo.export(_plan(lambda a, r: F.vision.roi_align(a, r, 2), x, rois))
    with pytest.raises(mo.OnnxExportError, match="one sampling ratio"):
        mo.export(_plan(lambda a, r: F.vision.roi_align(a, r, 2, sample_points=(1, 2),
                                                        convention="onnx"), x, rois))


def test_roi_pooling_exports_as_maxroipool_and_imports_back():
    x = RNG.standard_normal((2, 3, 8, 10)).astype(np.float32)
    corners = np.sort(RNG.uniform(-2, 22, (7, 2, 2)), axis=1)
    rois = np.column_stack([RNG.integers(0, 2, 7), corners[:, 0, 0], corners[:, 1, 0],
                            corners[:, 0, 1], corners[:, 1, 1]]).astype(np.float32)
    plan = _plan(lambda a, r: F.vision.roi_pooling(a, r, (3, 4), scale=0.5), x, rois)
    (want,) = plan.run({"x0": x, "x1": rois})
    model, got = _through_ort(plan, {"x0": x, "x1": rois}, 17)
    assert [n.op_type for n in model.graph.node] == ["MaxRoiPool"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(mo.import_model(model).run({"x0": x, "x1": rois})[0], want)
    with pytest.raises(mo.OnnxExportError, match="average mode has no ONNX form"):
        mo.export(_plan(lambda a, r: F.vision.roi_pooling(a, r, 2, "average"), x, rois))
