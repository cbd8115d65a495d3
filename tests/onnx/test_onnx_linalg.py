"""ONNX's DFT, Det and OneHot imported as compositions (convert_linalg.py): their float32 node
cases pass (but one, below), DFT agrees with NumPy's FFT on every mode, Det with NumPy up to
4 x 4, OneHot with ONNX Runtime, and what is refused says why, naming the node."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import int64_tensor, model, value_info
from onnx_node_cases import float32_cases, run_case

import mgegraph.onnx as mo

RNG = np.random.default_rng(0)
# test_dft_inverse_opset19 expects NumPy's single-precision FFT's rounding (2e-7 where the
# exact value is 0) within atol 1e-7; mgegraph's exact transform, like ONNX Runtime, misses it
SKIP = {"test_dft_inverse_opset19"}


def _cases():
    cases = float32_cases()
    return [pytest.param(c, id=c.name) for op in ("DFT", "Det", "OneHot")
            for c in cases.get(op, []) if c.name not in SKIP]


@pytest.mark.parametrize("case", _cases())
def test_float32_node_cases(case):
    run_case(case, strict=case.name.startswith("test_onehot") is False)  # OneHot's depth: bound


def _dft_model(shape, opset=20, length=None, axis=None, **attrs):
    inputs, inits = ["x", "" if length is None else "n"], []
    if length is not None:
        inits.append(int64_tensor("n", length))
    if axis is not None and opset >= 20:
        inputs.append("axis")
        inits.append(int64_tensor("axis", axis))
    elif axis is not None:
        attrs["axis"] = axis
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node("DFT", inputs, ["y"], name="dft", **attrs)
    return model([node], [value_info("x", list(shape))], [value_info("y", None)], inits,
                 opset=opset)


def _complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


@pytest.mark.parametrize(("shape", "axis", "length", "attrs", "numpy"), [
    ((2, 7, 3, 2), 1, None, {}, lambda z, n: np.fft.fft(z, n, axis=1)),
    ((2, 7, 3, 2), 2, 5, {}, lambda z, n: np.fft.fft(z, n, axis=2)),  # truncated
    ((2, 7, 3, 1), 1, 12, {}, lambda z, n: np.fft.fft(z, n, axis=1)),  # zero padded
    ((2, 9, 3, 1), -2, None, {"onesided": 1}, lambda z, n: np.fft.rfft(z, n, axis=2)),
    ((2, 7, 3, 2), 1, None, {"inverse": 1}, lambda z, n: np.fft.ifft(z, n, axis=1)),
    ((2, 5, 3, 2), 1, 8, {"inverse": 1, "onesided": 1},
     lambda z, n: np.fft.irfft(z, n, axis=1)),
    ((2, 5, 3, 2), 1, 9, {"inverse": 1, "onesided": 1},
     lambda z, n: np.fft.irfft(z, n, axis=1)),
])
@pytest.mark.parametrize("opset", [19, 20])
def test_dft_against_numpy(shape, axis, length, attrs, numpy, opset):
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = mo.import_model(_dft_model(shape, opset, length, axis, **attrs)).run({"x": x})
    want = numpy(_complex(x.astype(np.float64)), length)
    want = want[..., None] if not np.iscomplexobj(want) else np.stack([want.real, want.imag], -1)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dft_over_the_parts_axis_is_refused_naming_the_node():
    with pytest.raises(mo.OnnxImportError, match="DFT node 'dft': .*axis attribute value -1 "
                                                 "is invalid"):
        mo.import_graph(_dft_model((1, 4, 2), axis=-1))


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1), (5, 2, 2)])
def test_det_against_numpy(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    node = helper.make_node("Det", ["x"], ["y"])
    m = model([node], [value_info("x", list(shape))], [value_info("y", None)], opset=22)
    (got,) = mo.import_model(m).run({"x": x})
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_det_above_four_is_refused_naming_the_node():
    node = helper.make_node("Det", ["x"], ["y"], name="det5")
    m = model([node], [value_info("x", [5, 5])], [value_info("y", None)], opset=22)
    with pytest.raises(mo.OnnxImportError, match="Det node 'det5': a 5 x 5 determinant"):
        mo.import_graph(m)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.FLOAT])
def test_one_hot_against_onnx_reference(axis, dtype):
    from onnx.reference import ReferenceEvaluator  # lazy: loads onnx's whole evaluator

    indices = np.array([[0, 3, -1], [7, -9, 2]])  # -1 wraps to the last class; 7, -9 miss
    indices = indices.astype(np.int64 if dtype == TensorProto.INT64 else np.float32)
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=axis)
    inits = [int64_tensor("depth", 5),
             numpy_helper.from_array(np.array([-2.0, 3.0], np.float32), "values")]
    m = model([node], [value_info("i", [2, 3], dtype)], [value_info("y", None)], inits)
    (got,) = mo.import_model(m).run({"i": indices})
    (want,) = ReferenceEvaluator(m).run(None, {"i": indices})  # ORT lacks some of these types
    np.testing.assert_array_equal(got, want)


def test_named_sizes_are_refused_by_name():
    node = helper.make_node("DFT", ["x"], ["y"], axis=1, name="dft")
    m = model([node], [value_info("x", [2, "n", 1])], [value_info("y", None)], opset=19)
    with pytest.raises(mo.OnnxImportError, match="DFT node 'dft': signal length n"):
        mo.import_graph(m)
    node = helper.make_node("Det", ["x"], ["y"], name="det")
    m = model([node], [value_info("x", ["n", "n"])], [value_info("y", None)], opset=22)
    with pytest.raises(mo.OnnxImportError, match="Det node 'det': matrix size n"):
        mo.import_graph(m)
