"""ONNX NonMaxSuppression imported onto mgegraph's nms (onnx/convert_vision.py): the selected
indices padded to the bound B * C * min(max_output_boxes_per_class, N), the selected rows first
and -1 rows after, against ONNX Runtime on seeded boxes (corner and centre formats, flipped
corners, score thresholds, ties, missing inputs) and against ONNX's own node cases; what cannot
be expressed (a node reading the padded output, unknown sizes, bad thresholds) refused by
name."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
from onnx import TensorProto, helper, numpy_helper, version_converter
from onnx_node_cases import _array, _every

import mgegraph.onnx as mo

RNG = np.random.default_rng(0)


def _model(b, n, c, max_out=None, iou=None, score=None, center=0, consumer=False,
           batch_dim=None):
    inits, names = [], ["boxes", "scores"]
    for name, value, dtype in (("max_out", max_out, np.int64), ("iou", iou, np.float32),
                               ("score", score, np.float32)):
        if value is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.asarray([value], dtype), name))
        names.append(name)
    while names[-1] == "":
        names.pop()
    nodes = [helper.make_node("NonMaxSuppression", names, ["selected"],
                              center_point_box=center)]
    output = "selected"
    if consumer:  # a Gather of the selected boxes' indices reads the padded rows
        inits.append(numpy_helper.from_array(np.asarray(2, np.int64), "col"))
        nodes.append(helper.make_node("Gather", ["selected", "col"], ["ids"], axis=1))
        output = "ids"
    graph = helper.make_graph(
        nodes, "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [batch_dim or b, n, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch_dim or b, c, n])],
        [helper.make_tensor_value_info(output, TensorProto.INT64, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _boxes(b, n, center=False, flipped=False):
    xy, wh = RNG.uniform(0, 30, (b, n, 2)), RNG.uniform(2, 12, (b, n, 2))
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    boxes = np.concatenate([xy, xy + wh], -1)
    if flipped:  # some boxes give their corners the other way round
        swap = RNG.uniform(size=(b, n)) < 0.5
        boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


def _check(m, feeds, bound):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    (got,) = mo.import_model(m).run(feeds)
    assert got.dtype == np.int64 and got.shape == (bound, 3)
    selected = int((got[:, 2] >= 0).sum())
    np.testing.assert_array_equal(got[:selected], want)
    assert (got[selected:] == -1).all()
    return selected


@pytest.mark.parametrize("b,n,c,max_out,iou,score,center,flipped", [
    (1, 40, 1, 10, 0.5, None, 0, False),
    (2, 30, 3, 5, 0.4, 0.3, 0, False),
    (3, 25, 2, 100, 0.3, 0.6, 0, True),     # a bound above N: N per class at most
    (2, 20, 2, 7, 0.45, None, 1, False),    # centre, width, height
    (1, 15, 4, 3, 0.0, 0.2, 0, False),      # IoU 0: any overlap suppresses
    (2, 12, 1, 12, 1.0, None, 0, False),    # IoU 1: nothing suppresses
])
def test_matches_onnx_runtime(b, n, c, max_out, iou, score, center, flipped):
    boxes = _boxes(b, n, center=center, flipped=flipped)
    scores = RNG.uniform(size=(b, c, n)).astype(np.float32)
    bound = b * c * min(max_out, n)
    selected = _check(_model(b, n, c, max_out, iou, score, center), {"boxes": boxes,
                                                                     "scores": scores}, bound)
    assert 0 < selected


def test_fewer_selected_than_the_bound_and_ties():
    # heavily overlapping boxes: most are suppressed, so -1 rows follow the selected ones;
    # equal scores keep the lower box index first, as ONNX Runtime does
    boxes = np.tile(np.asarray([[0, 0, 10, 10]], np.float32), (1, 12, 1))
    boxes[0, 6:] += 30
    scores = RNG.uniform(size=(1, 2, 12)).astype(np.float32)
    scores[0, 1, 3] = scores[0, 1, 1]
    selected = _check(_model(1, 12, 2, 5, 0.5), {"boxes": boxes, "scores": scores}, 10)
    assert selected == 4


def test_missing_max_output_selects_nothing():
    # max_output_boxes_per_class defaults to 0: an empty (0, 3) output
    (got,) = mo.import_model(_model(1, 6, 2)).run({
        "boxes": _boxes(1, 6), "scores": RNG.uniform(size=(1, 2, 6)).astype(np.float32)})
    assert got.shape == (0, 3) and got.dtype == np.int64


def _node_cases():
    return [c for c in _every() if c.model.graph.node[0].op_type == "NonMaxSuppression"]


@pytest.mark.parametrize("case", _node_cases(), ids=lambda c: c.name)
def test_onnx_node_case(case):
    """ONNX's own cases (opset 11, the same op at 13): the padded output holds the expected
    rows first."""
    inputs, (want,) = case.data_sets[0]
    feeds = dict(zip([i.name for i in case.model.graph.input], map(_array, inputs)))
    # the counts and thresholds are graph inputs there: bound, as the import needs them known
    boxes_and_scores = list(case.model.graph.node[0].input[:2])
    model = version_converter.convert_version(case.model, 13)
    m = mo.import_model(model, constants={k: v for k, v in feeds.items()
                                          if k not in boxes_and_scores})
    (got,) = m.run({k: feeds[k] for k in boxes_and_scores})
    want = _array(want)
    np.testing.assert_array_equal(got[:len(want)], want)
    assert (got[len(want):] == -1).all()


@pytest.mark.parametrize("model,match", [
    (_model(1, 6, 1, 3, 0.5, consumer=True),
     "Gather.*reads the output of NonMaxSuppression.*known only at run time"),
    (_model(1, 6, 1, 3, 1.5), r"NonMaxSuppression.*iou_threshold 1.5 must be within \[0, 1\]"),
    (_model(1, 6, 1, 3, 0.5, center=2), "NonMaxSuppression.*center_point_box must be 0 or 1"),
    (_model(1, 6, 1, 3, 0.5, batch_dim="batch"),
     "NonMaxSuppression.*number of batches, classes and boxes must be known"),
])
def test_what_cannot_be_expressed_is_refused(model, match):
    with pytest.raises(mo.OnnxImportError, match=match):
        mo.import_model(model)
