"""ONNX models with uint8, int8 and int16 tensors: import (UINT8, INT8, INT16 inputs,
initializers and Cast targets) agrees with ONNX Runtime bitwise, and a mgegraph graph taking a
uint8 frame exports to a model ONNX Runtime runs to the same outputs."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
mo = pytest.importorskip("mgegraph.onnx")
from onnx import TensorProto, helper, numpy_helper

ONNX_TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8,
              np.int16: TensorProto.INT16}
SMALL = tuple(ONNX_TYPES)


def ort_run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        assert a.tobytes() == b.tobytes(), (a, b)


def frame_model(dt):
    """x: dt[2, 3, 4] -> transposed, concatenated with an initializer, compared, selected,
    cast to float32 and scaled, and a float cast back to dt."""
    code = ONNX_TYPES[dt]
    info = np.iinfo(dt)
    table = np.array([info.min, info.max, 0, 1], dt).reshape(1, 1, 4)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Concat", ["x", "rows"], ["cat"], axis=1),
        helper.make_node("Equal", ["x", "table"], ["eq"]),
        # ONNX Runtime has Where for uint8 but not int8 or int16: those select int32 values
        *([helper.make_node("Where", ["eq", "x", "table"], ["sel"])] if dt is np.uint8 else
          [helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.INT32),
           helper.make_node("Cast", ["table"], ["t32"], to=TensorProto.INT32),
           helper.make_node("Where", ["eq", "x32", "t32"], ["sel"])]),
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xf", "scale"], ["scaled"]),
        helper.make_node("Cast", ["scaled"], ["back"], to=code),
    ]
    selected = code if dt is np.uint8 else TensorProto.INT32
    outs = [("t", code, [2, 4, 3]), ("cat", code, [2, 4, 4]), ("eq", TensorProto.BOOL, [2, 3, 4]),
            ("sel", selected, [2, 3, 4]), ("scaled", TensorProto.FLOAT, [2, 3, 4]),
            ("back", code, [2, 3, 4])]
    graph = helper.make_graph(
        nodes, "frame", [helper.make_tensor_value_info("x", code, [2, 3, 4])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outs],
        initializer=[numpy_helper.from_array(table, "table"),
                     numpy_helper.from_array(np.concatenate([table, table]), "rows"),
                     numpy_helper.from_array(np.array(0.5, np.float32), "scale")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dt", SMALL)
def test_import_agrees_with_onnx_runtime_bitwise(dt):
    model = frame_model(dt)
    onnx.checker.check_model(model)
    info = np.iinfo(dt)
    x = np.random.default_rng(0).integers(info.min, info.max, (2, 3, 4), endpoint=True)
    x = x.astype(dt)
    x[0, 0] = np.array([info.min, info.max, 0, 1], dt)  # equal to the table: selects it
    same(mo.import_model(model).run({"x": x}), ort_run(model, {"x": x}))


@pytest.mark.parametrize("dt", SMALL)
def test_integer_arithmetic_agrees_with_onnx_runtime(dt):
    code = ONNX_TYPES[dt]
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in ("Add", "Sub", "Mul")]
    graph = helper.make_graph(
        nodes, "arith", [helper.make_tensor_value_info(n, code, [9]) for n in "ab"],
        [helper.make_tensor_value_info(op.lower(), code, [9]) for op in ("Add", "Sub", "Mul")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    info = np.iinfo(dt)
    a = np.array([info.max, info.min, info.max, 0, 1, 7, info.min + 1, 100, 3], dt)
    b = np.array([1, 1, info.max, 0, info.max, 9, info.min, 100, 3], dt)
    try:
        want = ort_run(model, {"a": a, "b": b})
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime lacks some integer kernels
        pytest.skip(f"ONNX Runtime does not run it: {str(exc)[:100]}")
    same(mo.import_model(model).run({"a": a, "b": b}), want)


def test_export_of_a_uint8_frame_graph_runs_in_onnx_runtime():
    g = mg.Graph()
    frame = g.input("frame", (1, 5, 6, 3), dtype=np.uint8)
    mean = g.const(np.array([120.0, 110.0, 100.0], np.float32).reshape(1, 3, 1, 1))
    x = (frame.transpose((0, 3, 1, 2)).astype(np.float32) - mean) / 64.0
    flipped = frame[:, ::-1]
    outputs = [x, flipped, frame > 128]
    plan = mg.compile(outputs)
    data = np.random.default_rng(1).integers(0, 256, (1, 5, 6, 3), dtype=np.uint8)
    want = plan.run({"frame": data})
    model = mo.export((g, outputs), None, opset=17)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    same(ort_run(model, {"frame": data}), want)
    same(mo.import_model(model).run({"frame": data}), want)


def test_an_unsupported_integer_dtype_is_refused_by_name_listing_the_small_ints():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "u16",
        [helper.make_tensor_value_info("x", TensorProto.UINT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.UINT16, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(mo.OnnxImportError, match="UINT16 is not supported.*uint8, int8, int16"):
        mo.import_model(model)
