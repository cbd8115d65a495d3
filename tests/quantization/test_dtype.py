"""mgegraph.dtype: MegEngine's quantized dtypes (NumPy dtypes with "mgb_dtype" metadata), their
conversions of NumPy arrays, and a Tensor's quantized dtype at its boundary: astype quantizes
and dequantizes, ``dtype`` gives the metadata back, ``numpy()`` the stored integers."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph.dtype import (
    convert_from_qint8,
    convert_from_qint32,
    convert_from_quint8,
    convert_to_qint8,
    convert_to_qint32,
    convert_to_quint8,
    get_dtype_bit,
    get_scale,
    get_zero_point,
    is_lowbit,
    is_quantize,
    qint8,
    qint32,
    quint8,
)
from mgegraph.ir.errors import GraphError
from mgegraph.ir.quant import per_tensor


def _floats(shape=(3, 7), seed=0):
    x = np.random.default_rng(seed).normal(size=shape).astype(np.float32) * 3
    x.reshape(-1)[:3] = [0.125, -0.375, 1e6]  # ties at scale 0.25, saturation
    return x


def test_dtypes_carry_megengine_metadata():
    dt = quint8(0.01, 135)
    assert isinstance(dt, np.dtype) and dt == np.uint8
    assert dt.metadata["mgb_dtype"] == {"name": "Quantized8Asymm", "scale": 0.01,
                                        "zero_point": 135}
    assert is_quantize(dt) and get_scale(dt) == 0.01 and get_zero_point(dt) == 135
    assert qint8(0.5).metadata["mgb_dtype"] == {"name": "QuantizedS8", "scale": 0.5}
    assert get_zero_point(qint8(0.5)) == 0 and get_scale(qint32(2.0)) == 2.0
    assert not is_quantize(np.dtype(np.int8)) and not is_lowbit(qint8(1.0))
    assert get_dtype_bit("qint8") == 8 and get_dtype_bit("bool") == 1


@pytest.mark.parametrize("bad", [lambda: quint8(0.05, 0.233), lambda: quint8(0.02, 777),
                                 lambda: quint8(0.02, -1), lambda: qint8(0.0),
                                 lambda: qint8(float("nan"))])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        bad()


def test_get_scale_of_a_plain_dtype_names_it():
    with pytest.raises(ValueError, match="not a quantized dtype"):
        get_scale(np.dtype(np.int8))


@pytest.mark.parametrize("make, to, back", [
    (lambda: qint8(0.25), convert_to_qint8, convert_from_qint8),
    (lambda: quint8(0.25, 100), convert_to_quint8, convert_from_quint8),
    (lambda: qint32(0.25), convert_to_qint32, convert_from_qint32)])
def test_numpy_conversions_are_the_quantize_ops(make, to, back):
    dt, x = make(), _floats()
    q = to(x, dt)
    assert q.dtype.metadata == dt.metadata
    storage = np.dtype(dt.str)
    lo, hi = np.iinfo(storage).min, np.iinfo(storage).max
    expected = np.clip(np.rint(x / np.float32(0.25)).astype(np.float64) + get_zero_point(dt),
                       lo, hi)
    np.testing.assert_array_equal(q.astype(np.float64), expected)
    op = mg.ops.quantize.quantize(mg.tensor(x), 0.25, get_zero_point(dt), storage)
    np.testing.assert_array_equal(op.numpy(), q)
    np.testing.assert_array_equal(
        back(q), (q.astype(np.float32) - get_zero_point(dt)) * np.float32(0.25))


def test_conversion_refuses_the_wrong_dtype_and_nan():
    with pytest.raises(ValueError, match="qint8 dtype"):
        convert_to_qint8(_floats(), quint8(0.1, 3))
    with pytest.raises(ValueError, match="NaN"):
        convert_to_qint8(np.array([np.nan], np.float32), qint8(0.1))


@pytest.mark.parametrize("dt", [qint8(0.05), quint8(0.02, 100)])
def test_tensor_astype_quantizes_and_dequantizes(dt):
    x = _floats()
    q = mg.tensor(x).astype(dt)
    assert q.type.quant == per_tensor(get_scale(dt), get_zero_point(dt))
    assert q.dtype == dt and q.dtype.metadata == dt.metadata
    stored = q.numpy()
    assert get_scale(stored.dtype) == get_scale(dt)
    to = convert_to_qint8 if dt == np.int8 else convert_to_quint8
    back = convert_from_qint8 if dt == np.int8 else convert_from_quint8
    np.testing.assert_array_equal(stored, to(x, dt))
    f = q.astype("float32")
    assert f.dtype == np.float32 and not is_quantize(f.dtype)
    np.testing.assert_array_equal(f.numpy(), back(to(x, dt)))


def test_requantizing_goes_through_the_real_numbers():
    q = mg.tensor(_floats()).astype(qint8(0.05))
    r = q.astype(quint8(0.1, 128))
    expected = convert_to_quint8(convert_from_qint8(q.numpy()), quint8(0.1, 128))
    np.testing.assert_array_equal(r.numpy(), expected)


def test_a_new_tensor_of_a_quantized_dtype_holds_the_integers():
    dt = quint8(0.01, 135)
    ints = convert_to_quint8(_floats(), dt)
    t = mg.Tensor(ints, dtype=dt)
    assert get_zero_point(t.dtype) == 135
    np.testing.assert_array_equal(t.numpy(), ints)
    np.testing.assert_array_equal(t.astype("float32").numpy(), convert_from_quint8(ints))
    assert mg.Tensor(t).type == t.type  # a copy keeps the quantization


def test_a_quantized_dtype_refuses_floats_and_integers_out_of_range():
    with pytest.raises(GraphError, match="astype"):
        mg.Tensor(np.ones(3, np.float32), dtype=qint8(0.1))
    with pytest.raises(GraphError, match="do not fit"):
        mg.Tensor(np.array([300]), dtype=qint8(0.1))


def test_a_quantized_tensor_refuses_an_integer_cast():
    q = mg.tensor(_floats()).astype(qint8(0.05))
    with pytest.raises(GraphError, match="stand for real numbers"):
        q.astype("int32")


def test_the_facade_names_the_modules():
    import mgegraph.quantization
    assert mg.dtype.qint8(0.5) == np.int8 and mg.quantization is mgegraph.quantization
