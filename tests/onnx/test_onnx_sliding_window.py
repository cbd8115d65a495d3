"""MegEngine's sliding windows and matinv in ONNX: sliding_window exported as a Pad and Slices,
sliding_window_transpose as Col2Im (opset 18), both run by ONNX Runtime as by mgegraph; Col2Im
imported onto sliding_window_transpose (ONNX's node cases, asymmetric pads against ONNX
Runtime); what has no ONNX form (matinv, Col2Im before opset 18, over volumes) refused by
name."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
from onnx import TensorProto, helper, numpy_helper
from onnx_node_cases import _every, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(9)
WINDOWS = [  # (N, C, H, W), kernel, padding, stride, dilation
    ((2, 3, 7, 8), (3, 2), (1, 2), (2, 1), (1, 3)),
    ((1, 2, 5, 5), (1, 1), (0, 0), (1, 1), (1, 1)),
    ((1, 1, 6, 4), (2, 2), (0, 1), (3, 2), (2, 1)),
]


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize(("shape", "kernel", "padding", "stride", "dilation"), WINDOWS)
def test_exported_windows_run_in_onnx_runtime_as_in_mgegraph(shape, kernel, padding, stride,
                                                             dilation):
    g = mg.Graph()
    x = g.input("x", shape)
    cols = F.sliding_window(x, kernel, padding, stride, dilation)
    back = F.sliding_window_transpose(cols * 2.0, shape[2:], kernel, padding, stride, dilation)
    plan = mg.compile([cols, back])
    data = RNG.standard_normal(shape).astype(np.float32)
    got = _ort(mo.export(plan, opset=18), {"x": data})
    want = plan.run({"x": data})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)


def test_window_exports_at_opset_13_and_its_transpose_is_refused_before_18():
    g = mg.Graph()
    x = g.input("x", (1, 2, 5, 5))
    cols = F.sliding_window(x, 3, padding=1)
    data = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    (got,) = _ort(mo.export((g, [cols]), opset=13), {"x": data})
    np.testing.assert_array_equal(got, mg.compile([cols]).run({"x": data})[0])
    with pytest.raises(mo.OnnxExportError, match="Col2Im, from opset 18, not 17"):
        mo.export((g, [F.sliding_window_transpose(cols, (5, 5), 3, padding=1)]), opset=17)


def test_matinv_export_is_refused_by_name():
    g = mg.Graph()
    a = g.input("a", (3, 3))
    with pytest.raises(mo.OnnxExportError, match="without an ONNX form: matinv"):
        mo.export((g, [F.matinv(a)]))


def test_onnx_col2im_node_cases():
    """The 2-D cases pass (their shape inputs bound); the volume case is refused by name."""
    cases = {case.name: case for case in _every() if case.name.startswith("test_col2im")}
    for name in ("test_col2im", "test_col2im_strides", "test_col2im_pads",
                 "test_col2im_dilations"):
        run_case(cases[name], strict=False)
    with pytest.raises(Exception, match="Col2Im over 3 spatial dims"):
        run_case(cases["test_col2im_5d"], strict=False)


def _col2im_model(cols_shape, image, block, **attrs):
    inits = [numpy_helper.from_array(np.asarray(image, np.int64), "image"),
             numpy_helper.from_array(np.asarray(block, np.int64), "block")]
    node = helper.make_node("Col2Im", ["cols", "image", "block"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "col2im", [helper.make_tensor_value_info("cols", TensorProto.FLOAT, cols_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("pads", [[0, 2, 1, 0], [1, 1, 1, 1], [2, 0, 0, 1]])
def test_col2im_with_any_pads_imports_as_onnx_runtime_computes_it(pads):
    image, block, strides, dilations = (6, 5), (2, 3), (2, 1), (1, 2)
    cells = [(image[a] + pads[a] + pads[a + 2] - dilations[a] * (block[a] - 1) - 1)
             // strides[a] + 1 for a in range(2)]
    cols = RNG.standard_normal((2, 3 * 6, cells[0] * cells[1])).astype(np.float32)
    m = _col2im_model(list(cols.shape), image, block, pads=pads, strides=list(strides),
                      dilations=list(dilations))
    (got,) = mo.import_model(m).run({"cols": cols})
    (want,) = _ort(m, {"cols": cols})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_col2im_whose_positions_do_not_fit_is_refused():
    m = _col2im_model([1, 4, 7], (3, 3), (2, 2))  # a 3x3 image has 2x2 = 4 positions, not 7
    with pytest.raises(mo.OnnxImportError, match="does not hold"):
        mo.import_model(m)
