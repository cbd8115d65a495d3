"""What a hostile (or careless) ONNX file gets: an OnnxImportError naming the node, never an
allocation the limits do not allow, a model ONNX Runtime refuses run with a guessed meaning,
or a stray KeyError, DecodeError or NumPy error."""
import os

import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import int64_tensor as _i64
from onnx_builders import value_info as _vi

import mgegraph.onnx as mo
from mgegraph import cli
from mgegraph.onnx import ImportLimits, OnnxImportError, checks, converters

F32 = TensorProto.FLOAT


def _model(nodes, inputs=(), outputs=("y",), initializers=(), opset=17):
    outs = [helper.make_tensor_value_info(o, F32, None) for o in outputs]
    graph = helper.make_graph(nodes, "g", list(inputs), outs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f32(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _refused(model, match, **kwargs):
    with pytest.raises(OnnxImportError, match=match) as info:
        mo.import_graph(model, **kwargs)
    return info.value


# -- resource exhaustion: sizes checked before anything is allocated -----------------------------
HUGE = [2**20, 2**20]  # 4 TiB of float32


@pytest.mark.parametrize("node, inputs, initializers", [
    (helper.make_node("ConstantOfShape", ["s"], ["y"], name="n"), [], [_i64("s", HUGE)]),
    (helper.make_node("Range", ["a", "b", "c"], ["y"], name="n"), [],
     [_i64("a", 0), _i64("b", 2**40), _i64("c", 1)]),
    (helper.make_node("Expand", ["x", "s"], ["y"], name="n"), [_vi("x", [1])], [_i64("s", HUGE)]),
    (helper.make_node("Expand", ["x", "s"], ["y"], name="n"), [],
     [_f32("x", [1]), _i64("s", HUGE)]),
    (helper.make_node("Tile", ["x", "r"], ["y"], name="n"), [_vi("x", [1, 1])], [_i64("r", HUGE)]),
    (helper.make_node("Tile", ["x", "r"], ["y"], name="n"), [],
     [_f32("x", [[1]]), _i64("r", HUGE)]),
    (helper.make_node("Pad", ["x", "p"], ["y"], name="n"), [_vi("x", [1, 1])],
     [_i64("p", [0, 0] + HUGE)]),
    (helper.make_node("Add", ["a", "b"], ["y"], name="n"), [],  # broadcasting two known columns
     [_f32("a", np.zeros((2**12, 1))), _f32("b", np.zeros((1, 2**19)))]),
])
def test_an_output_over_the_size_limit_is_refused_before_it_is_made(node, inputs, initializers):
    model = _model([node], inputs, initializers=initializers)
    error = _refused(model, rf"{node.op_type} node 'n': output 'y' of shape \[")
    assert "over the limit of 4294967296 (ImportLimits.max_tensor_bytes)" in str(error)


def test_a_111_byte_constant_of_shape_asks_for_nothing():
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"])],
                   initializers=[_i64("s", HUGE)])
    assert len(model.SerializeToString()) < 120
    _refused(model.SerializeToString(), "4398046511104 bytes, over the limit")


def test_the_limits_can_be_raised_and_lowered():
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"])],
                   initializers=[_i64("s", [100, 100])])
    _refused(model, "40000 bytes, over the limit of 1000",
             limits=ImportLimits(max_tensor_bytes=1000))
    _, (y,) = mo.import_graph(model, limits=ImportLimits(max_tensor_bytes=40000))
    assert y.shape == (100, 100)
    _refused(model, "over the limit of 30000 .*max_known_bytes",
             limits=ImportLimits(max_known_bytes=30000))
    relu = helper.make_node("Relu", ["x"], ["y"])
    _refused(_model([relu] * 3, [_vi("x", [2])]), "3 nodes, over the limit of 2",
             limits=ImportLimits(max_nodes=2))
    _refused(_model([relu], [_vi("x", [1] * 9)]), "graph input 'x': the input of rank 9",
             limits=ImportLimits(max_ndim=8))
    data = _model([relu], [_vi("x", [2])]).SerializeToString()
    _refused(data, f"{len(data)} bytes, over the limit of 10",
             limits=ImportLimits(max_file_bytes=10))


def test_initializers_and_inputs_are_checked_by_their_declared_shapes():
    huge = onnx.TensorProto(name="W", data_type=F32, dims=HUGE)  # no data: dims alone
    model = _model([helper.make_node("Relu", ["W"], ["y"])], initializers=[huge])
    _refused(model, r"initializer 'W': the tensor of shape \[1048576, 1048576\]")
    short = onnx.TensorProto(name="W", data_type=F32, dims=[3, 3], raw_data=b"abc")
    model = _model([helper.make_node("Relu", ["W"], ["y"])], initializers=[short])
    _refused(model, r"initializer 'W': 3 bytes of data for shape \[3, 3\] of float32")
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", HUGE)])
    _refused(model, "graph input 'x': the input of shape")


def _external(name, dims, location):
    tensor = onnx.TensorProto(name=name, data_type=F32, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def test_external_weights_are_sized_before_they_are_read(tmp_path):
    path = tmp_path / "m.onnx"
    w = _external("W", HUGE, "absent.bin")  # never opened: its declared size is refused first
    onnx.save(_model([helper.make_node("Relu", ["W"], ["y"])], initializers=[w]), path)
    _refused(path, r"initializer 'W': the tensor of shape \[1048576, 1048576\]")
    w = _external("W", [2], "../outside.bin")
    onnx.save(_model([helper.make_node("Relu", ["W"], ["y"])], initializers=[w]), path)
    _refused(path, "points outside the directory")
    _refused(path.read_bytes(), "initializer 'W': its data is in an external file")


def test_a_huge_list_of_ints_is_refused_before_it_becomes_python_ints():
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")], [_vi("x", [2])],
                   initializers=[_i64("s", [2] + [1] * 40)])
    _refused(model, "Reshape node 'r': the target shape has 41 values, over the limit of 16",
             limits=ImportLimits(max_int_list=16, max_ndim=64))


# -- what ONNX Runtime refuses is refused, never wrapped or guessed ------------------------------
def _axis_case(op, x_shape, attrs=None, extra=(), inits=(), outputs=("y",)):
    node = helper.make_node(op, ["x", *extra], list(outputs), name="bad", **(attrs or {}))
    return _model([node], [_vi("x", x_shape)], outputs, inits)


AXIS_CASES = {
    "Concat": _axis_case("Concat", [2, 2], {"axis": 5}),
    "Softmax": _axis_case("Softmax", [2, 2], {"axis": 7}),
    "LogSoftmax": _axis_case("LogSoftmax", [2, 2], {"axis": -3}),
    "ReduceSum": _axis_case("ReduceSum", [2, 2], extra=["a"], inits=[_i64("a", [4])]),
    "ReduceMean": _axis_case("ReduceMean", [2, 2], {"axes": [2]}),
    "ReduceMax-twice": _axis_case("ReduceMax", [2, 2], {"axes": [1, -1]}),
    "Gather": _axis_case("Gather", [2, 2], {"axis": 3}, ["i"], [_i64("i", [0])]),
    "Unsqueeze": _axis_case("Unsqueeze", [2, 2], extra=["a"], inits=[_i64("a", [9])]),
    "Unsqueeze-out-rank": _axis_case("Unsqueeze", [2, 2], extra=["a"], inits=[_i64("a", [3])]),
    "Squeeze": _axis_case("Squeeze", [1, 2], extra=["a"], inits=[_i64("a", [2])]),
    "Flatten": _axis_case("Flatten", [2, 2], {"axis": 9}),
    "ArgMax": _axis_case("ArgMax", [2, 2], {"axis": 4}),
    "ArgMin": _axis_case("ArgMin", [2, 2], {"axis": -3}),
    "LayerNormalization": _axis_case("LayerNormalization", [2, 2], {"axis": 5}, ["s"],
                                     [_f32("s", [1, 1])]),
    "Slice": _axis_case("Slice", [2, 2], extra=["b", "e", "a"],
                        inits=[_i64("b", [0]), _i64("e", [1]), _i64("a", [7])]),
    "GatherElements": _axis_case("GatherElements", [2, 2], {"axis": 4}, ["i"],
                                 [_i64("i", [[0, 0], [0, 0]])]),
    "Split": _axis_case("Split", [2, 2], {"axis": 2}, outputs=["y", "z"]),
    "Pad": _axis_case("Pad", [2, 2], extra=["p", "", "a"], inits=[_i64("p", [1, 1]),
                                                                  _i64("a", [3])]),
    "Transpose": _axis_case("Transpose", [2, 2], {"perm": [0, 2]}),
}


@pytest.mark.parametrize("case", sorted(AXIS_CASES))
def test_an_axis_out_of_range_is_refused_naming_the_node(case):
    _refused(AXIS_CASES[case], f"{case.split('-')[0]} node 'bad': ")


def test_an_axis_out_of_range_of_a_folded_node_is_refused_too():
    model = _model([helper.make_node("Concat", ["a", "b"], ["y"], name="c", axis=5)],
                   initializers=[_f32("a", [[1.0]]), _f32("b", [[2.0]])])
    _refused(model, "Concat node 'c': ONNX's shape inference refuses it: axis must be in")


def test_the_axis_helper_allows_what_onnx_allows():
    assert [checks.axis("n", a, 2) for a in (-2, -1, 0, 1)] == [0, 1, 0, 1]
    for bad in (-3, 2, 5):
        with pytest.raises(OnnxImportError, match=f"n: axis {bad} is out of range for a rank-2"):
            checks.axis("n", bad, 2)
    assert checks.axis("n", 2, 2, inclusive=True) == 2  # Flatten's axis may be the rank
    with pytest.raises(OnnxImportError, match="name an axis twice"):
        checks.axes("n", [0, -2], 2)
    # Unsqueeze's axes are axes of the output: rank 3 for one axis added to a 2-D input
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    model = _axis_case("Unsqueeze", [2, 2], extra=["a"], inits=[_i64("a", [-3])])
    assert mo.import_model(model).run({"x": x})[0].shape == (1, 2, 2)


def test_a_value_defined_twice_names_both_nodes():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"),
             helper.make_node("Neg", ["x"], ["y"], name="second")]
    _refused(_model(nodes, [_vi("x", [2])]),
             "Neg node 'second' defines 'y', which Relu node 'first' already defines")
    nodes = [helper.make_node("Relu", ["x"], ["W"], name="r")]
    _refused(_model(nodes, [_vi("x", [2])], ["W"], [_f32("W", [1, 2])]),
             "Relu node 'r' defines 'W', which initializer 'W' already defines")


def test_split_sizes_must_sum_to_the_axis():
    node = helper.make_node("Split", ["x", "s"], ["a", "b"], name="sp")
    model = _model([node], [_vi("x", [4, 2])], ["a", "b"], [_i64("s", [1, 5])])
    _refused(model, "Split node 'sp': .*sum of 'split' \\(6\\)")


@pytest.mark.parametrize("op, attrs, match", [
    ("Conv", {"auto_pad": "SAME_UPPER", "pads": [1, 1, 1, 1]},
     r"auto_pad=SAME_UPPER and pads \[1, 1, 1, 1\] together"),
    ("Conv", {"kernel_shape": [2, 2]},
     r"kernel_shape \[2, 2\] contradicts the weight's .*\[3, 3\]"),
    ("Conv", {"strides": [1, 1, 1]}, "strides"),  # ONNX's inference finds these two first
    ("Conv", {"dilations": [0, 1]}, "dilation"),
    ("MaxPool", {"kernel_shape": [3, 3], "auto_pad": "VALID", "pads": [0, 0, 1, 1]},
     "auto_pad=VALID and pads"),
    ("AveragePool", {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}, "not smaller than kernel"),
])
def test_window_attributes_onnx_runtime_refuses(op, attrs, match):
    extra = ["w"] if op == "Conv" else []
    node = helper.make_node(op, ["x", *extra], ["y"], name="win", **attrs)
    model = _model([node], [_vi("x", [1, 1, 5, 5])],
                   initializers=[_f32("w", np.ones((1, 1, 3, 3)))] if extra else [])
    _refused(model, f"{op} node 'win': .*{match}")


def test_gather_on_a_0d_input_and_known_indices_out_of_range():
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="g")
    _refused(_model([node], [_vi("x", [])], initializers=[_i64("i", 0)]),
             "Gather node 'g': .*rank >= 1")
    _refused(_model([node], initializers=[_f32("x", 5.0), _i64("i", 0)]),
             "Gather node 'g': .*rank >= 1")
    # more indices than ONNX's inference reads values of: the converter's own check
    indices = np.zeros(300, np.int64)
    indices[7] = 3
    _refused(_model([node], [_vi("x", [3])], initializers=[_i64("i", indices)]),
             r"Gather node 'g': indices from 0 to 3 on an axis of 3 \(ONNX allows -3 to 2\)")


def test_a_bound_constant_must_fit_the_declared_input():
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    model = _model([node], [_vi("x", [2, 3]), _vi("s", [2], TensorProto.INT64)])
    _refused(model, r"constants\['s'\]: a value of shape \[3\] for an input declared \[2\]",
             constants={"s": np.array([3, 2, 1])})
    _refused(model, r"constants\['s'\]: a float64 value that int64, the input's dtype, does not",
             constants={"s": np.array([3.5, 2])})
    _refused(model, r"constants\['t'\]: the model has no graph input of that name",
             constants={"t": [3, 2]})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    plan = mo.import_model(model, constants={"s": [3, 2]})  # Python ints: int64 holds them
    np.testing.assert_array_equal(plan.run({"x": x})[0], x.reshape(3, 2))


# -- every failure is one OnnxImportError --------------------------------------------------------
def _small_model():
    """A model of a dozen nodes: a convolution, shape arithmetic folded at import, a Gemm."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc", "fb"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1)]
    inits = [_f32("w", rng.standard_normal((2, 1, 3, 3))), _f32("b", [0.1, -0.1]),
             _i64("zero", 0), _i64("axes", [0]), _i64("minus1", [-1]),
             _f32("fc", rng.standard_normal((3, 8))), _f32("fb", [0, 1, 2])]
    return _model(nodes, [_vi("x", [1, 1, 2, 2])], initializers=inits)


def test_a_small_model_imports():
    x = np.ones((1, 1, 2, 2), np.float32)
    (y,) = mo.import_model(_small_model()).run({"x": x})
    assert y.shape == (1, 3) and abs(float(y.sum()) - 1) < 1e-6


def test_truncated_and_flipped_bytes_give_only_onnx_import_errors():
    data = _small_model().SerializeToString()
    rng = np.random.default_rng(20261206)
    limits = ImportLimits(max_tensor_bytes=1 << 20, max_known_bytes=1 << 22)
    cases = [data[:int(n)] for n in rng.integers(0, len(data), 150)]
    for _ in range(150):
        flipped = bytearray(data)
        for at in rng.integers(0, len(data), rng.integers(1, 5)):
            flipped[at] = int(rng.integers(0, 256))
        cases.append(bytes(flipped))
    outcomes = {"imported": 0, "refused": 0}
    for case in cases:
        try:
            mo.import_graph(case, limits=limits)
            outcomes["imported"] += 1
        except OnnxImportError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and sum(outcomes.values()) == 300


HOSTILE_INTS = [-2**62, -2**31, -7, -1, 0, 1, 2, 3, 5, 2**31, 2**62]


def _mutate_a_number(model, rng):
    """Set one int of the model (an attribute, an int64 initializer's value, an input dim)
    to a hostile value."""
    value = HOSTILE_INTS[rng.integers(len(HOSTILE_INTS))]
    kind = rng.integers(3)
    if kind == 0:
        node = model.graph.node[rng.integers(len(model.graph.node))]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.INT:
                attr.i = value
            elif attr.type == onnx.AttributeProto.INTS and attr.ints:
                attr.ints[rng.integers(len(attr.ints))] = value
    elif kind == 1:
        inits = [t for t in model.graph.initializer if t.data_type == TensorProto.INT64]
        init = inits[rng.integers(len(inits))]
        array = numpy_helper.to_array(init).copy()
        array.reshape(-1)[rng.integers(array.size)] = value
        init.CopyFrom(numpy_helper.from_array(array, init.name))
    else:
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[rng.integers(len(dims))].dim_value = value


def test_hostile_numbers_give_only_onnx_import_errors():
    rng = np.random.default_rng(1206)
    limits = ImportLimits(max_tensor_bytes=1 << 20, max_known_bytes=1 << 22)
    refused = 0
    for _ in range(300):
        model = _small_model()
        for _ in range(rng.integers(1, 3)):
            _mutate_a_number(model, rng)
        try:
            mo.import_graph(model, limits=limits)
        except OnnxImportError:
            refused += 1
    assert refused > 150


@pytest.mark.parametrize("data, match", [
    (b"", "the bytes: not an ONNX model"),
    (b"\x08\x07\x12\xff\xffhello", "the bytes: not an ONNX model \\(protobuf: "),
    (b"\x00" * 40, "not an ONNX model"),
])
def test_bytes_that_are_not_a_model_say_so(data, match, tmp_path):
    error = _refused(data, match)
    assert "opset" not in str(error)
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    _refused(path, f"'{path}': not an ONNX model")


def test_opsets_beyond_what_onnx_knows_are_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], opset=2**62)
    _refused(model, f"opset {2**62}, newer than the installed onnx")


def test_a_missing_initializer_and_a_bad_attribute_name_the_node():
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [_vi("x", [2, 2])])
    _refused(model, "MatMul node 'mm' reads 'W', which no initializer, graph input or earlier")
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1.0)],
                   [_vi("x", [2])])
    error = _refused(model, "Relu node 'r': ONNX's checker refuses it: Unrecognized attribute")
    assert isinstance(error.__cause__, onnx.checker.ValidationError)


def test_other_errors_are_wrapped_with_the_node_and_the_cause(monkeypatch):
    def broken(cx, ins, attrs):
        raise ValueError("a converter's own bug")

    monkeypatch.setitem(converters.CONVERTERS, "Relu", broken)
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [2])])
    error = _refused(model, "Relu node 'r': ValueError: a converter's own bug")
    assert isinstance(error.__cause__, ValueError)


def test_a_range_whose_delta_is_0_is_refused_in_words():
    node = helper.make_node("Range", ["a", "b", "c"], ["y"], name="r")
    model = _model([node], initializers=[_i64("a", 0), _i64("b", 4), _i64("c", 0)])
    _refused(model, "Range node 'r': Range's delta is 0, so the range never reaches its limit")


def test_convert_of_a_file_missing_an_initializer_prints_one_line(tmp_path, capsys):
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [_vi("x", [2, 2])])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert cli.main(["convert", str(path), "-o", str(tmp_path / "m.mgm")]) == 1
    err = capsys.readouterr().err
    assert err == ("mgegraph: error: MatMul node 'mm' reads 'W', which no initializer, graph "
                   "input or earlier node defines\n")


@pytest.mark.parametrize("path, kind", [("/dev/zero", "a character device"),
                                        ("/dev/urandom", "a character device")])
def test_a_file_that_is_not_regular_is_refused_before_it_is_read(path, kind, tmp_path, capsys):
    # read whole, /dev/zero never ends: refused by what it is, not by a size it never reports
    _refused(path, f"'{path}' is {kind}, not a regular file")
    _refused(tmp_path, "is a directory, not a regular file")
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    _refused(fifo, "is a FIFO \\(named pipe\\), not a regular file")
    assert cli.main(["convert", path, "-o", str(tmp_path / "m.mgm")]) == 1
    assert capsys.readouterr().err.endswith(f"'{path}' is {kind}, not a regular file\n")
    assert not (tmp_path / "m.mgm").exists()
