"""Flexible shapes through ONNX import: ``dim_param`` as named dims, shape arithmetic on them
kept symbolic, and graph inputs that decide shapes fed at run time, each against ONNX Runtime."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import int64_tensor as _ints
from onnx_builders import model as _model
from onnx_builders import value_info as _vi

import mgegraph as mg
import mgegraph.onnx as mo
from mgegraph.onnx.shape_feeds import ShapeFedPlan
from mgegraph.symbolic_plan import SymbolicPlan

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _flatten_model():
    """``Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))`` -> MatMul -> Relu, as
    exporters write a flatten over a dynamic batch."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
             helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["y"]),
             helper.make_node("Relu", ["y"], ["out"])]
    weight = np.random.default_rng(0).standard_normal((12, 5)).astype(np.float32)
    inits = [_ints("zero", 0), _ints("ax0", [0]), _ints("minus1", [-1]),
             numpy_helper.from_array(weight, "w")]
    return _model(nodes, [_vi("x", ["batch", 3, 4])], [_vi("out", ["batch", 5])], inits)


def test_dim_param_imports_as_a_named_dim_and_runs_at_any_batch():
    model = _flatten_model()
    plan = mo.import_model(model)
    assert isinstance(plan, SymbolicPlan)
    assert plan.signature() == "x: f32[batch, 3, 4] -> f32[batch, 5]"
    rng = np.random.default_rng(1)
    for batch in (1, 5):
        x = rng.standard_normal((batch, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(plan.run({"x": x})[0], _ort(model, {"x": x})[0],
                                   rtol=1e-6, atol=1e-6)
    assert plan.specialisations == 2


def test_shape_arithmetic_on_a_named_dim_stays_symbolic():
    graph, outputs = mo.import_graph(_flatten_model())
    text = str(graph)
    assert "reshape[shape=(batch,-1)]" in text, text
    assert str(outputs[0].type) == "f32[batch, 5]"
    assert not {n.op.name for n in graph.nodes} & {"fill", "sum", "const"}


def test_size_div_and_mul_of_named_dims_fold_to_expressions():
    # Reshape(x, [Size(x) / (2 * Shape(x)[1]), 2, -1]): batch*3*4 / 6 is 2*batch
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Mul", ["s", "two"], ["s2"]),
             helper.make_node("Div", ["n", "s2"], ["rows"]),
             helper.make_node("Concat", ["rows", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = _model(nodes, [_vi("x", ["batch", 3, 4])], [_vi("y", None)],
                   [_ints("two", [2]), _ints("tail", [2, -1])])
    _, outputs = mo.import_graph(model)
    assert str(outputs[0].type) == "f32[2*batch, 2, 3]"
    plan = mo.import_model(model)
    x = np.arange(3 * 12, dtype=np.float32).reshape(3, 3, 4)
    np.testing.assert_array_equal(plan.run({"x": x})[0], _ort(model, {"x": x})[0])


def test_a_named_size_used_as_data_is_computed_at_run_time():
    # y = x * float(Shape(x)[0]): the batch as a number in the arithmetic
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Cast", ["s"], ["f"], to=F32),
             helper.make_node("Mul", ["x", "f"], ["y"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"],
                              value=helper.make_tensor("v", I64, [1], [7])),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Size", ["x"], ["size"]),
             helper.make_node("Div", ["size", "three"], ["third"])]
    model = _model(nodes, [_vi("x", ["n", 2])], [_vi("y", ["n", 2]), _vi("z", ["n"], I64),
                                                 _vi("shape", [2], I64), _vi("third", [], I64)],
                   [_ints("three", 3)])
    graph, _ = mo.import_graph(model)
    fills = [str(n.outputs[0].type) for n in graph.nodes if n.op.name == "fill"]
    assert fills and set(fills) == {"i64[n]"}, fills  # counts of n, never of 2*n
    plan = mo.import_model(model)
    for n in (1, 3, 4):
        x = np.ones((n, 2), np.float32)
        got, want = plan.run({"x": x}), _ort(model, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype


def test_dim_params_become_identifiers_never_merged_never_run():
    hostile = "__import__('os').system('touch /tmp/pwned')"
    inputs = [_vi("a", ["batch size", "1st", hostile]), _vi("b", ["batch-size", None, None])]
    model = _model([helper.make_node("Identity", ["a"], ["c"]),
                    helper.make_node("Identity", ["b"], ["d"])],
                   inputs, [_vi("c", None), _vi("d", None)])
    graph, _ = mo.import_graph(model)
    a, b = (graph.inputs[n].type for n in "ab")
    assert str(a) == "f32[batch_size, d_1st, import___os_system_touch_tmp_pwned]"
    assert str(b) == "f32[batch_size_2, unk_0, unk_1]"  # distinct ONNX names stay distinct
    long = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n" * 5000, "!!"])],
                  [_vi("y", None)])
    graph, _ = mo.import_graph(long)
    assert str(graph.inputs["x"].type) == f"f32[{'n' * 56}, dim]"


def test_input_shapes_may_name_a_dim_or_fix_it():
    model = _flatten_model()
    fixed = mo.import_model(model, input_shapes={"x": (2, 3, 4)})
    assert isinstance(fixed, mg.Plan)
    named = mo.import_model(model, input_shapes={"x": ("n", 3, 4)})
    assert named.signature() == "x: f32[n, 3, 4] -> f32[n, 5]"


# -- graph inputs that decide shapes, fed at run time ---------------------------------------
def _reshape_model():
    return _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                  [_vi("x", [2, 3, 4]), _vi("shape", [2], I64)], [_vi("y", None)])


def test_a_reshape_target_is_fed_as_data_and_each_value_specialises_once():
    model = _reshape_model()
    plan = mo.import_model(model)
    assert isinstance(plan, ShapeFedPlan) and plan.shape_inputs == ("shape",)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for target in ([4, -1], [-1, 2], [4, -1]):
        feeds = {"x": x, "shape": np.array(target, np.int64)}
        (got,), (want,) = plan.run(feeds), _ort(model, feeds)
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape
    assert plan.specialisations == 2 and len(plan.plans) == 2
    assert "shape inputs shape" in str(plan)


def test_the_values_cache_is_bounded_least_recently_used_out():
    plan = mo.import_model(_reshape_model(), values_cache_size=2)
    x = np.zeros((2, 3, 4), np.float32)
    for target in ([24, 1], [1, 24], [2, 12], [24, 1]):
        plan.run({"x": x, "shape": np.array(target, np.int64)})
    held = [values["shape"].tolist() for values, _ in plan.plans]
    assert held == [[2, 12], [24, 1]] and plan.specialisations == 4
    with pytest.raises(mg.GraphError, match="values_cache_size=0"):
        mo.import_model(_reshape_model(), values_cache_size=0)


def test_slice_reduce_and_unsqueeze_inputs_are_fed_as_data():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]),
             helper.make_node("ReduceSum", ["s", "raxes"], ["r"], keepdims=0),
             helper.make_node("Unsqueeze", ["r", "uaxes"], ["y"])]
    model = _model(nodes, [_vi("x", [4, 6]), _vi("starts", [1], I64), _vi("ends", [1], I64),
                           _vi("axes", [1], I64), _vi("raxes", [1], I64),
                           _vi("uaxes", [1], I64)], [_vi("y", None)])
    plan = mo.import_model(model)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for start, end, axis, raxis, uaxis in ((1, 3, 1, 0, 0), (0, -1, 0, 1, 1)):
        feeds = {"x": x, **{k: np.array([v], np.int64) for k, v in zip(
            ("starts", "ends", "axes", "raxes", "uaxes"), (start, end, axis, raxis, uaxis))}}
        (got,), (want,) = plan.run(feeds), _ort(model, feeds)
        np.testing.assert_array_equal(got, want)
    assert set(plan.shape_inputs) == {"starts", "ends", "axes", "raxes", "uaxes"}


def test_constants_still_bind_shape_inputs_for_good():
    plan = mo.import_model(_reshape_model(), constants={"shape": np.array([6, 4])})
    assert isinstance(plan, mg.Plan)
    assert plan.run({"x": np.zeros((2, 3, 4), np.float32)})[0].shape == (6, 4)


@pytest.mark.parametrize("target, match", [
    ([2**40, 2**40], "overflow"),
    ([2**20, 2**20], "over the limit"),
    ([-5, 4], r"shape \[2, 3, 4\]|-5"),
    ([7, -1], "Reshape"),
])
def test_hostile_shape_values_are_feed_errors(target, match):
    plan = mo.import_model(_reshape_model())
    with pytest.raises(mg.FeedError, match=match) as info:
        plan.run({"x": np.zeros((2, 3, 4), np.float32), "shape": np.array(target, np.int64)})
    assert "shape=" in str(info.value)


def test_a_shape_feed_of_the_wrong_kind_is_a_feed_error():
    plan = mo.import_model(_reshape_model())
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(mg.FeedError, match="no feed for 'shape'"):
        plan.run({"x": x})
    with pytest.raises(mg.FeedError, match="numpy array"):
        plan.run({"x": x, "shape": [4, 6]})
    with pytest.raises(mg.FeedError, match="over the limit"):
        plan.run({"x": x, "shape": np.ones(1 << 17, np.int64)})
    with pytest.raises(mg.FeedError, match="does not hold"):
        plan.run({"x": x, "shape": np.array([4.5, 6.0])})


def test_constant_of_shape_fed_a_negative_or_huge_count_is_refused():
    model = _model([helper.make_node("ConstantOfShape", ["n"], ["y"])], [_vi("n", [1], I64)],
                   [_vi("y", None)])
    plan = mo.import_model(model)
    assert plan.run({"n": np.array([3])})[0].tolist() == [0, 0, 0]
    for bad in (-1, 2**62):
        with pytest.raises(mg.FeedError):
            plan.run({"n": np.array([bad])})


@pytest.mark.parametrize("op, inputs, attrs, values", [
    ("Pad", [("x", [2, 3], F32), ("pads", [4], I64)], {"mode": "edge"},
     [{"pads": np.array([0, 1, 1, 0])}, {"pads": np.array([2, 0, 0, 3])}]),
    ("Tile", [("x", [2, 3], F32), ("repeats", [2], I64)], {},
     [{"repeats": np.array([1, 2])}, {"repeats": np.array([3, 1])}]),
    ("Split", [("x", [2, 6], F32), ("split", [2], I64)], {"axis": 1},
     [{"split": np.array([2, 4])}, {"split": np.array([5, 1])}]),
    ("Expand", [("x", [2, 1], F32), ("shape", [None], I64)], {},
     [{"shape": np.array([3, 2, 4])}, {"shape": np.array([2, 2])}]),
    ("Range", [("start", [], I64), ("limit", [], I64), ("delta", [], I64)], {},
     [{"start": np.array(1, np.int64), "limit": np.array(9, np.int64), "delta": np.array(3, np.int64)},
      {"start": np.array(5, np.int64), "limit": np.array(-2, np.int64), "delta": np.array(-2, np.int64)}]),
])
def test_each_kind_of_shape_input_is_fed_as_data(op, inputs, attrs, values):
    outputs = ["y", "z"] if op == "Split" else ["y"]
    node = helper.make_node(op, [name for name, _, _ in inputs], outputs, **attrs)
    model = _model([node], [_vi(*spec) for spec in inputs],
                   [_vi(o, None, inputs[0][2]) for o in outputs])
    plan = mo.import_model(model)
    assert isinstance(plan, ShapeFedPlan)
    x = np.arange(12, dtype=np.float32)
    for given in values:
        feeds = dict(given)
        if inputs[0][0] == "x":
            feeds["x"] = x[:int(np.prod(inputs[0][1]))].reshape(inputs[0][1])
        for got, want in zip(plan.run(feeds), _ort(model, feeds)):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    assert plan.specialisations == len(values)


def test_a_shape_computed_from_graph_inputs_feeds_them_as_data():
    # Reshape(x, Cast(Add(s, [1, 0]))): the target is computed from the int32 input s
    nodes = [helper.make_node("Add", ["s", "offset"], ["t"]),
             helper.make_node("Cast", ["t"], ["target"], to=I64),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3, 4]), _vi("s", [2], TensorProto.INT32)],
                   [_vi("y", None)],
                   [numpy_helper.from_array(np.array([1, 0], np.int32), "offset")])
    with pytest.raises(mo.OnnxImportError) as info:
        mo.import_graph(model)
    assert info.value.needs_constant == ("s",)
    plan = mo.import_model(model)
    assert plan.shape_inputs == ("s",)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for s in ([3, -1], [5, 4]):
        feeds = {"x": x, "s": np.array(s, np.int32)}
        (got,), (want,) = plan.run(feeds), _ort(model, feeds)
        np.testing.assert_array_equal(got, want)


def test_indices_computed_from_a_named_dim_gather_at_run_time():
    # Gather(x, Shape(x)[0] - 1): the last row, whatever the batch; Trilu's k from it too
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Sub", ["s", "one"], ["last"]),
             helper.make_node("Gather", ["x", "last"], ["y"], axis=0),
             helper.make_node("Squeeze", ["last"], ["k"]),
             helper.make_node("Trilu", ["t", "k"], ["z"])]
    model = _model(nodes, [_vi("x", ["n", 3]), _vi("t", [4, 4])],
                   [_vi("y", None), _vi("z", None)], [_ints("one", [1])])
    plan = mo.import_model(model)
    t = np.arange(16, dtype=np.float32).reshape(4, 4) + 1
    for n in (1, 3):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        for got, want in zip(plan.run({"x": x, "t": t}), _ort(model, {"x": x, "t": t})):
            np.testing.assert_array_equal(got, want)
    bad = _model([helper.make_node("Trilu", ["x"], ["z"])], [_vi("x", ["n", 3])], [_vi("z", None)])
    with pytest.raises(mo.OnnxImportError, match="Trilu over the named dims"):
        mo.import_graph(bad)


def test_many_dim_params_that_sanitise_alike_stay_distinct():
    params = [f"n{'!' * (i % 7)}{i}" if i % 2 else "!" * (i + 1) for i in range(3000)]
    inputs = [_vi(f"x{i}", [p]) for i, p in enumerate(params)]
    model = _model([helper.make_node("Identity", ["x0"], ["y"])], inputs, [_vi("y", None)])
    graph, _ = mo.import_graph(model)
    names = {str(graph.inputs[f"x{i}"].type.shape[0]) for i in range(len(params))}
    assert len(names) == len(params)


def test_a_shape_sliced_backwards_from_before_its_start_matches_onnxruntime():
    # Shape(x)[-5::-1] of a rank-2 shape with a named dim: ONNX takes the first element
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "start", "end", "axis", "step"], ["first"]),
             helper.make_node("Concat", ["first", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [_ints("start", [-5]), _ints("end", [-(2**63)]), _ints("axis", [0]),
             _ints("step", [-1]), _ints("minus1", [-1])]
    model = _model(nodes, [_vi("x", ["n", 6])], [_vi("y", None)], inits)
    _, outputs = mo.import_graph(model)
    assert str(outputs[0].type) == "f32[n, 6]"
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    np.testing.assert_array_equal(mo.import_model(model).run({"x": x})[0],
                                  _ort(model, {"x": x})[0])
