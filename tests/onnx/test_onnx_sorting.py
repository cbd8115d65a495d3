"""ONNX TopK and CumSum imported onto topk and cumsum (onnx/convert_sorting.py) and sort, topk
and cumsum exported (onnx/exporter.py), against ONNX Runtime (any axis, largest or smallest,
ties, exclusive and reverse scans, every numeric dtype) and ONNX's own node cases; what cannot
be expressed (k fed at run time, k larger than the axis) refused by name."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
from onnx import TensorProto, helper, numpy_helper
from onnx_node_cases import _every, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(5)
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
        np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _model(op, shape, dtype, second, outputs, opset=13, **attrs):
    init = numpy_helper.from_array(np.asarray(second, np.int64), "second")
    node = helper.make_node(op, ["x", "second"], outputs, **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info("x", ELEM[dtype], list(shape))],
        [helper.make_tensor_value_info(o, ELEM[np.int64] if o == "indices" else ELEM[dtype],
                                       None) for o in outputs], [init])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("dtype", list(ELEM))
@pytest.mark.parametrize("axis, k", ((-1, 3), (0, 1), (1, 5), (2, 7), (1, 2)))
@pytest.mark.parametrize("largest", (0, 1))
def test_topk_imports_as_onnx_runtime_computes_it(dtype, axis, k, largest):
    x = RNG.integers(-3, 4, (4, 5, 7)).astype(dtype)  # ties: the lower index first
    m = _model("TopK", x.shape, dtype, [k], ["values", "indices"], axis=axis, largest=largest)
    got = mo.import_model(m).run({"x": x})
    for a, b in zip(got, _ort(m, {"x": x})):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", list(ELEM))
@pytest.mark.parametrize("axis", (0, 1, -1))
@pytest.mark.parametrize("exclusive, reverse", ((0, 0), (1, 0), (0, 1), (1, 1)))
def test_cumsum_imports_as_onnx_runtime_computes_it(dtype, axis, exclusive, reverse):
    x = (RNG.standard_normal((3, 6, 5)) * 4).astype(dtype)
    m = _model("CumSum", x.shape, dtype, axis, ["y"], exclusive=exclusive, reverse=reverse)
    (got,) = mo.import_model(m).run({"x": x})
    (want,) = _ort(m, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("op", ("TopK", "CumSum"))
def test_onnx_node_cases(op):
    # every case but TopK's uint64 one, a dtype mgegraph has not
    cases = [c for c in _every() if [n.op_type for n in c.model.graph.node] == [op]
             and not c.name.endswith("uint64")]
    assert len(cases) == {"TopK": 6, "CumSum": 9}[op]
    for case in cases:
        run_case(case, strict=False)  # raises naming what differed


def test_k_fed_at_run_time_or_too_large_is_refused_by_name():
    m = _model("TopK", (2, 4), np.float32, [5], ["values", "indices"])
    with pytest.raises(mo.OnnxImportError, match=r"TopK node .*requested k"):
        mo.import_model(m)
    fed = helper.make_model(helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"])], "fed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(mo.OnnxImportError, match="k comes from graph input 'k'"):
        mo.import_graph(fed)


@pytest.mark.parametrize("dtype", (np.float32, np.int64))
def test_export_runs_in_onnx_runtime_as_in_mgegraph(dtype):
    g = mg.Graph()
    x = g.input("x", (3, 9), dtype)
    outs = [*F.sort(x, descending=True), *F.topk(x, 4), F.argsort(x), F.cumsum(x, 0),
            apply("cumsum", (x,), axis=1, exclusive=True, reverse=True)]
    plan = mg.compile(outs)
    data = RNG.integers(-3, 4, (3, 9)).astype(dtype)
    model = mo.export(plan, opset=13)
    got = _ort(model, {"x": data})
    for a, b in zip(got, plan.run({"x": data})):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_cumprod_has_no_onnx_form():
    g = mg.Graph()
    x = g.input("x", (3,))
    with pytest.raises(mo.OnnxExportError, match="cumprod"):
        mo.export((g, [F.cumprod(x, 0)]))
