"""The elementwise math through ONNX: Tan, the inverse and hyperbolic functions, Round, Clip with
bounds computed at run time and Hardmax imported and run against ONNX Runtime and ONNX's node
cases; mgegraph's ops exported and run by ONNX Runtime."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
ort = pytest.importorskip("onnxruntime")
from onnx import helper
from onnx_builders import model, value_info
from onnx_node_cases import float32_cases, run_case

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo

RNG = np.random.default_rng(0)
SHAPE = (2, 3, 5)

# ONNX op -> the mgegraph op it imports as, and the interval of its inputs (inside the domain)
IMPORTS = {
    "Tan": ("tan", (-1.4, 1.4)), "Asin": ("asin", (-1, 1)), "Acos": ("acos", (-1, 1)),
    "Atan": ("atan", (-9, 9)), "Sinh": ("sinh", (-5, 5)), "Cosh": ("cosh", (-5, 5)),
    "Asinh": ("asinh", (-9, 9)), "Acosh": ("acosh", (1, 9)), "Atanh": ("atanh", (-0.99, 0.99)),
    "Round": ("round_half_even", (-5, 5)),
}
NODE_CASES = {"Tan": 2, "Asin": 2, "Acos": 2, "Atan": 2, "Sinh": 2, "Cosh": 2, "Asinh": 2,
              "Acosh": 2, "Atanh": 2, "Round": 1, "Hardmax": 7, "Clip": 9}


def ort_run(m, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(m.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def _ops(plan):
    return {n.op.name for n in plan.source.graph.nodes}


@pytest.mark.parametrize("op", sorted(IMPORTS))
def test_imports_as_the_op_and_matches_onnx_runtime(op):
    mg_op, (low, high) = IMPORTS[op]
    m = model([helper.make_node(op, ["x"], ["y"])], [value_info("x", SHAPE)],
              [value_info("y", SHAPE)])
    x = RNG.uniform(low, high, SHAPE).astype(np.float32)
    if op == "Round":
        x[0, 0] = [-2.5, -0.5, 0.5, 1.5, 2.5]  # halves go to even
    plan = mo.import_model(m)
    assert mg_op in _ops(plan)
    (got,) = plan.run({"x": x})
    (want,) = ort_run(m, {"x": x})
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def _node_cases(ops):
    cases = float32_cases()
    return [pytest.param(c, id=c.name) for op in ops for c in cases.get(op, [])]


@pytest.mark.parametrize("case", _node_cases(sorted(NODE_CASES)))
def test_onnx_node_case(case):
    assert run_case(case) == ()  # strict: every input fed at run time, nothing bound


def test_every_node_case_is_there():
    cases = float32_cases()
    assert {op: len(cases.get(op, [])) for op in NODE_CASES} == NODE_CASES


@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo", ""), ("", "hi")])
def test_clip_with_bounds_fed_at_run_time(bounds):
    inputs = [value_info("x", SHAPE)] + [value_info(b, ()) for b in bounds if b]
    m = model([helper.make_node("Clip", ["x", *bounds], ["y"])], inputs,
              [value_info("y", SHAPE)])
    plan = mo.import_model(m)
    assert "clip" not in _ops(plan)  # bounds known only at run time: maximum and minimum
    feeds = {"x": RNG.standard_normal(SHAPE).astype(np.float32),
             "lo": np.array(-0.3, np.float32), "hi": np.array(0.4, np.float32)}
    feeds = {k: v for k, v in feeds.items() if k == "x" or k in bounds}
    for lo, hi in ((-0.3, 0.4), (0.5, -0.5)):  # crossed bounds give max, as ONNX says
        feeds.update({k: np.array(v, np.float32) for k, v in (("lo", lo), ("hi", hi))
                      if k in bounds})
        np.testing.assert_array_equal(plan.run(feeds)[0], ort_run(m, feeds)[0])


def test_hardmax_imports_with_its_axis():
    for axis in (-1, 0, 1, 2):
        m = model([helper.make_node("Hardmax", ["x"], ["y"], axis=axis)],
                  [value_info("x", SHAPE)], [value_info("y", SHAPE)], opset=13)
        x = RNG.integers(0, 3, SHAPE).astype(np.float32)  # ties
        np.testing.assert_array_equal(mo.import_model(m).run({"x": x})[0],
                                      ort_run(m, {"x": x})[0])


def _exported_graph():
    g = mg.Graph()
    x = g.input("x", SHAPE, "float32")
    lo = g.input("lo", (5,), "float32")
    u = F.tanh(x) * 0.9
    outs = [F.tan(u), F.asin(u), F.acos(u), F.atan(x), F.sinh(x), F.cosh(x), F.asinh(x),
            F.acosh(F.abs(x) + 1.0), F.atanh(u), F.round(x * 2.0), F.round_half_even(x * 2.0),
            F.clip(x, lo, 0.5), F.masked_fill(x, x > 0.5, -1.0), F.hardmax(x, 1)]
    return g, outs


def _feeds():
    x = (RNG.standard_normal(SHAPE) * 2).astype(np.float32)
    x[0, 0] = [-1.25, -0.75, -0.25, 0.25, 1.25]  # x * 2 at halves
    return {"x": x, "lo": RNG.uniform(-1, 0, 5).astype(np.float32)}


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_exports_run_in_onnx_runtime(opset):
    g, outs = _exported_graph()
    m = mo.export((g, outs), opset=opset)
    assert {"Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
            "Round"} <= {n.op_type for n in m.graph.node}
    feeds = _feeds()
    want = mg.compile(outs).run(feeds)
    for k, (a, b) in enumerate(zip(ort_run(m, feeds), want)):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-7, err_msg=str(k))
    np.testing.assert_array_equal(want[9][0, 0], [-3, -2, -1, 1, 3])  # away from zero
    np.testing.assert_array_equal(want[10][0, 0], [-2, -2, -0.0, 0, 2])  # to even


def test_export_then_import_gives_the_same_bits():
    g, outs = _exported_graph()
    feeds = _feeds()
    got = mo.import_model(mo.export((g, outs), opset=17)).run(feeds)
    for a, b in zip(got, mg.compile(outs).run(feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("opset", [13, 21])
def test_atan2_exports_with_every_quadrant_zero_and_infinity(opset):
    # ONNX has no Atan2: the exported composition gives C's atan2 on every pair of special
    # values (signed zeros, infinities, NaN), as ONNX Runtime runs it
    g = mg.Graph()
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -0.5, np.inf, -np.inf, np.nan], np.float32)
    y, x = g.input("y", (9, 1), "float32"), g.input("x", (9,), "float32")
    m = mo.export((g, [F.atan2(y, x)]), opset=opset)
    feeds = {"y": special[:, None].copy(), "x": special}
    (got,) = ort_run(m, feeds)
    want = np.arctan2(feeds["y"], feeds["x"])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]),
                                  np.signbit(want[~np.isnan(want)]))
    feeds = {"y": (RNG.standard_normal((9, 1)) * 3).astype(np.float32),
             "x": RNG.standard_normal(9).astype(np.float32)}
    np.testing.assert_allclose(ort_run(m, feeds)[0], np.arctan2(feeds["y"], feeds["x"]),
                               rtol=2e-6, atol=1e-7)
