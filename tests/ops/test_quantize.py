"""quantize, dequantize and as_quantized (ops/quantize.py) and the quantized types they make
(ir/quant.py): the kernels against NumPy and PyTorch, the rules that keep a quantization or
refuse it, and the IR text of the types."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph.ir.errors import KernelError, OpError
from mgegraph.ir.quant import per_tensor
from mgegraph.ops.quantize import as_quantized, dequantize, quantize

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2 ** 31), 2 ** 31 - 1)}


def _values(shape, dtype=np.float32, seed=0):
    x = (np.random.default_rng(seed).normal(size=shape) * 6).astype(dtype)
    flat = x.reshape(-1)
    flat[:5] = [1e12, -1e12, 0.125, -0.375, -0.0]  # saturation both ways, ties, minus zero
    return x


def _numpy_quantize(x, scales, zps, dtype, axis):
    shape = [1] * x.ndim
    if axis is not None:
        shape[axis] = -1
    s = np.asarray(scales, x.dtype).reshape(shape)
    z = np.asarray(zps, np.float64).reshape(shape)
    lo, hi = RANGES[dtype]
    return np.clip(np.rint(x / s) + z, lo, hi).astype(dtype)


def _run(outputs, feeds):
    return mg.compile(outputs).run(feeds)


@pytest.mark.parametrize("dtype", ("int8", "uint8", "int32"))
@pytest.mark.parametrize("xdtype", (np.float32, np.float64))
@pytest.mark.parametrize("shape, axis", [((7,), None), ((3, 5, 9), None), ((3, 5, 9), 0),
                                         ((3, 5, 9), 1), ((3, 5, 9), 2), ((1, 4, 1, 3), 1)])
def test_quantize_and_dequantize_are_numpys(dtype, xdtype, shape, axis):
    x = _values(shape, xdtype)
    channels = 1 if axis is None else shape[axis]
    scales = np.linspace(0.05, 0.4, channels)
    zps = np.arange(channels) % 5 + (100 if dtype == "uint8" else -2)
    g = mg.Graph()
    xv = g.input("x", shape, xdtype)
    q = quantize(xv, scales, zps, dtype, axis)
    q_got, y_got = _run([q, dequantize(q, np.dtype(xdtype).name)], {"x": x})
    want = _numpy_quantize(x, scales, zps, dtype, axis)
    np.testing.assert_array_equal(q_got, want)
    bshape = [1] * x.ndim
    if axis is not None:
        bshape[axis] = -1
    s = np.asarray(scales, xdtype).reshape(bshape)
    centred = (want.astype(np.float64) - zps.reshape(bshape)).astype(xdtype)
    np.testing.assert_array_equal(y_got, centred * s)


def test_dequantize_of_quantize_is_pytorchs_fake_quantization():
    torch = pytest.importorskip("torch")
    x = _values((4, 6, 11))
    g = mg.Graph()
    xv = g.input("x", x.shape)
    per_t = dequantize(quantize(xv, 0.0173, 3, "int8"))
    per_c = dequantize(quantize(xv, [0.02, 0.1, 0.05, 0.3, 0.07, 0.011], [0, 1, -1, 2, 0, 5],
                                "int8", axis=1))
    got_t, got_c = _run([per_t, per_c], {"x": x})
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(got_t, torch.fake_quantize_per_tensor_affine(
        t, 0.0173, 3, -128, 127).numpy())
    want_c = torch.fake_quantize_per_channel_affine(
        t, torch.tensor([0.02, 0.1, 0.05, 0.3, 0.07, 0.011]),
        torch.tensor([0, 1, -1, 2, 0, 5], dtype=torch.int32), 1, -128, 127)
    np.testing.assert_array_equal(got_c, want_c.numpy())


def test_a_nan_is_refused_when_the_kernel_meets_it():
    g = mg.Graph()
    plan = mg.compile([quantize(g.input("x", (3,)), 0.5)])
    with pytest.raises(KernelError, match="quantize.*a NaN has no integer"):
        plan.run({"x": np.array([1.0, np.nan, 2.0], np.float32)})


def test_the_ir_names_quantized_types():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    assert str(quantize(x, 0.05, 3).type) == "qs8(0.05,3)[2,3]"
    assert str(quantize(x, 0.5, 0, "uint8").type) == "qu8(0.5)[2,3]"
    assert str(quantize(x, [1, 2, 3], 0, "int8", axis=-1).type) == "qs8(axis 1, 3)[2,3]"
    assert "qs32(0.25)" in str(g.input("acc", (4,), "int32", per_tensor(0.25)).type)


def test_types_of_other_quantizations_differ():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    a, b, c = quantize(x, 0.05), quantize(x, 0.05, 1), quantize(x, 0.05)
    assert a.type != b.type and a.type == c.type and hash(a.type) == hash(c.type)
    assert a.type != g.input("i", (2, 3), "int8").type


@pytest.mark.parametrize("op", ["reshape", "transpose", "slice", "concat"])
def test_moving_integers_keeps_their_quantization(op):
    g = mg.Graph()
    q = quantize(g.input("x", (2, 6)), 0.1, 4, "uint8")
    moved = {"reshape": lambda: mg.functional.reshape(q, (3, 4)),
             "transpose": lambda: mg.functional.transpose(q, (1, 0)),
             "slice": lambda: q[:, 1:4],
             "concat": lambda: mg.functional.concat([q, q], axis=0)}[op]()
    assert moved.type.quant == q.type.quant and moved.dtype == np.uint8
    x = _values((2, 6))
    got, base = _run([dequantize(moved), dequantize(q)], {"x": x})
    ref = {"reshape": lambda b: b.reshape(3, 4), "transpose": lambda b: b.T,
           "slice": lambda b: b[:, 1:4], "concat": lambda b: np.concatenate([b, b])}[op](base)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("make, message", [
    (lambda g, q: q + q, "add has no kernels for quantized values"),
    (lambda g, q: mg.functional.astype(q, "float32"), "dequantize them first"),
    (lambda g, q: mg.functional.concat([q, quantize(g.input("y", (2, 6)), 0.2, 4, "uint8")]),
     "share one quantization"),
    (lambda g, q: mg.functional.concat([q, g.input("y", (2, 6), "uint8")]),
     "share one quantization"),
    (lambda g, q: mg.functional.reshape(
        quantize(g.input("y", (2, 6)), [0.1, 0.2], 0, "int8", axis=0), (12,)),
     "per-tensor quantized values only"),
    (lambda g, q: dequantize(g.input("y", (2, 6), "int8")), "dequantize takes a quantized"),
    (lambda g, q: quantize(q, 0.1), "quantize takes float32 or float64 values"),
    (lambda g, q: quantize(g.input("y", (2, 6)), 0.1, 300, "uint8"), "zero point 300"),
    (lambda g, q: quantize(g.input("y", (2, 6)), 0.0), "scale must be positive"),
    (lambda g, q: quantize(g.input("y", (2, 6)), float("nan")), "scale must be positive"),
    (lambda g, q: quantize(g.input("y", (2, 6)), [0.1, 0.2, 0.3], 0, "int8", axis=0),
     "3 per-channel scales for axis 0 of size 2"),
    (lambda g, q: quantize(g.input("y", (2, 6)), [0.1, 0.2], 0, "int8", axis=5),
     "axis 5 is not an axis"),
    (lambda g, q: quantize(g.input("y", (2, 6)), 0.1, 0, "int16"), "stores int8, uint8"),
    (lambda g, q: as_quantized(g.input("y", (2, 6)), 0.1), "int8, uint8 or int32 integers"),
])
def test_what_a_quantized_type_refuses(make, message):
    g = mg.Graph()
    q = quantize(g.input("x", (2, 6)), 0.1, 4, "uint8")
    with pytest.raises(OpError, match=message):
        make(g, q)


def test_as_quantized_reads_the_same_bytes_with_other_parameters():
    g = mg.Graph()
    raw = g.input("q", (3, 4), "uint8")
    q = as_quantized(raw, 0.5, 128)
    again = as_quantized(q, [0.1, 0.2, 0.4], [0, 1, 2], axis=0)
    x = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    a, b = _run([dequantize(q), dequantize(again)], {"q": x})
    np.testing.assert_array_equal(a, (x.astype(np.float32) - 128) * np.float32(0.5))
    s = np.array([0.1, 0.2, 0.4], np.float32)[:, None]
    zps = np.arange(3, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(b, (x.astype(np.float32) - zps) * s)
    assert q.node.op.view_offset(q.node) == 0  # a view: no kernel runs for it


def test_folding_a_constant_keeps_its_quantization():
    g = mg.Graph()
    w = g.const(_values((3, 4), seed=1))
    qw = quantize(w, [0.1, 0.05, 0.2], 0, "int8", axis=0)
    x = g.input("x", (3, 4))
    y = dequantize(qw) * x
    for optimize in (0, 2):
        (got,) = mg.compile([y], optimize=optimize).run({"x": np.ones((3, 4), np.float32)})
        want = _numpy_quantize(_values((3, 4), seed=1), [0.1, 0.05, 0.2], [0, 0, 0], "int8", 0)
        s = np.array([0.1, 0.05, 0.2], np.float32)[:, None]
        np.testing.assert_array_equal(got, want.astype(np.float32) * s)


def test_eager_and_traced_quantization_are_the_graphs():
    x = _values((3, 8))
    q = quantize(mg.tensor(x), 0.05, 3)
    assert str(q.type) == "qs8(0.05,3)[3,8]"
    np.testing.assert_array_equal(q.numpy(), _numpy_quantize(x, [0.05], [3], "int8", None))
    assert q.reshape(24).type.quant == q.type.quant and q[1:].type.quant == q.type.quant
    viewed = as_quantized(q, 0.1)
    np.testing.assert_array_equal(dequantize(viewed).numpy(),
                                  q.numpy().astype(np.float32) * np.float32(0.1))

    @mg.jit.trace
    def fake_quantized(t):
        return dequantize(quantize(t, 0.05, 3))

    want = dequantize(q).numpy()
    for _ in range(2):  # the first call records, the second runs the plan
        np.testing.assert_array_equal(fake_quantized(mg.tensor(x)).numpy(), want)
    with pytest.raises(OpError, match="add has no kernels for quantized values"):
        q + q  # noqa: B018
