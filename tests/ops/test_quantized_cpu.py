"""The CPU kernels of the int8 compute ops (_kernels/quantized.pyx) against the NumPy reference
of their integers (tests/quant_reference.py), bitwise."""
import numpy as np
import pytest
import quant_reference as ref
from threadpoolctl import threadpool_limits

import mgegraph as mg
from mgegraph.ir.quant import QuantParams, per_tensor
from mgegraph.ops import quantized as Q

RANGES = {"int8": (-128, 128), "uint8": (0, 256)}


def _ints(rng, shape, dtype):
    lo, hi = RANGES[dtype]
    return rng.integers(lo, hi, shape).astype(dtype)


def _weight_params(rng, out, per_channel, dtype):
    lo, hi = RANGES[dtype]
    if not per_channel:
        return per_tensor(0.01, int(rng.integers(lo, hi)) if dtype == "uint8" else 0)
    return QuantParams(tuple(rng.uniform(0.002, 0.02, out)),
                       tuple(int(z) for z in rng.integers(lo // 4, hi // 4, out)), 0)


def _run(build, feeds):
    g = mg.Graph()
    return mg.compile([build(g)]).run(feeds)[0]


CONV_CASES = [
    # x shape, (out, kh, kw), stride, padding, dilation, groups
    ((2, 3, 9, 7), (5, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 4, 8, 8), (6, 1, 1), (1, 1), (0, 0), (1, 1), 2),
    ((1, 6, 11, 10), (6, 3, 3), (2, 2), (1, 1), (1, 1), 6),   # depthwise, strided
    ((2, 5, 10, 13), (7, 5, 3), (2, 1), (2, 0), (1, 2), 1),   # odd kernel, dilation
    ((1, 17, 5, 5), (33, 3, 3), (1, 1), (3, 3), (1, 1), 1),   # padding wider than the kernel
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("x_dtype, out_dtype, relu, per_channel", [
    ("uint8", "int8", False, True), ("int8", "uint8", True, False),
    ("int8", "int32", False, True), ("uint8", "uint8", True, True)])
def test_conv_matches_the_reference(case, x_dtype, out_dtype, relu, per_channel):
    x_shape, (out, kh, kw), stride, padding, dilation, groups = case
    rng = np.random.default_rng(len(str(case)) + len(x_dtype))
    x = _ints(rng, x_shape, x_dtype)
    xp = per_tensor(0.05, int(rng.integers(*RANGES[x_dtype])))
    w = _ints(rng, (out, x_shape[1] // groups, kh, kw), "int8")
    wp = _weight_params(rng, out, per_channel, "int8")
    bias = rng.integers(-3000, 3000, out).astype(np.int32)
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups,
             "out_dtype": out_dtype, "out_scale": None if out_dtype == "int32" else 0.7,
             "out_zero_point": 5 if out_dtype != "int32" else 0, "relu": relu}

    def build(g):
        return Q.quantized_conv2d(g.input("x", x.shape, x_dtype, quant=xp), g.const(w, quant=wp),
                                  g.const(bias), **attrs)
    got = _run(build, {"x": x})
    want = ref.quantized_conv2d(x, xp, w, wp, bias, **attrs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_conv_saturates_at_both_ends_and_threads_agree():
    rng = np.random.default_rng(7)
    x = _ints(rng, (2, 32, 16, 16), "uint8")  # 9 MFLOP: planned on two threads
    xp = per_tensor(0.5, 0)
    w = _ints(rng, (32, 32, 3, 3), "int8")
    wp = per_tensor(0.5)
    attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
             "out_dtype": "int8", "out_scale": 20.0, "out_zero_point": 0, "relu": False}

    def build(g):
        return Q.quantized_conv2d(g.input("x", x.shape, "uint8", quant=xp), g.const(w, quant=wp),
                                  **attrs)
    want = ref.quantized_conv2d(x, xp, w, wp, None, **attrs)
    assert (want == 127).any() and (want == -128).any()
    np.testing.assert_array_equal(_run(build, {"x": x}), want)
    with threadpool_limits(1, user_api="openmp"):
        np.testing.assert_array_equal(_run(build, {"x": x}), want)


@pytest.mark.parametrize("x_shape", [(5, 7), (2, 3, 33), (1, 64)])
def test_linear_matches_the_reference(x_shape):
    rng = np.random.default_rng(x_shape[-1])
    x = _ints(rng, x_shape, "int8")
    xp = per_tensor(0.1, -3)
    w = _ints(rng, (11, x_shape[-1]), "uint8")
    wp = _weight_params(rng, 11, True, "uint8")
    bias = rng.integers(-500, 500, 11).astype(np.int32)
    attrs = {"out_dtype": "int8", "out_scale": 0.9, "out_zero_point": -2, "relu": True}

    def build(g):
        return Q.quantized_linear(g.input("x", x.shape, "int8", quant=xp),
                                  g.const(w, quant=wp), g.const(bias), **attrs)
    np.testing.assert_array_equal(_run(build, {"x": x}),
                                  ref.quantized_linear(x, xp, w, wp, bias, **attrs))


@pytest.mark.parametrize("a_shape, b_shape", [((3, 5, 7), (3, 5, 7)), ((2, 4, 6, 5), (1, 4, 1, 1)),
                                              ((1, 9), (7, 1)), ((37,), ())])
@pytest.mark.parametrize("a_dtype, b_dtype, out_dtype", [("int8", "uint8", "int8"),
                                                         ("uint8", "uint8", "uint8")])
def test_add_matches_the_reference(a_shape, b_shape, a_dtype, b_dtype, out_dtype):
    rng = np.random.default_rng(len(a_shape) * 3 + len(b_shape))
    a, b = _ints(rng, a_shape, a_dtype), _ints(rng, b_shape, b_dtype)
    ap, bp = per_tensor(0.03, 4), per_tensor(0.11, 100)
    attrs = {"out_dtype": out_dtype, "out_scale": 0.07, "out_zero_point": 9, "relu": True}

    def build(g):
        return Q.quantized_add(g.input("a", a.shape, a_dtype, quant=ap),
                               g.input("b", b.shape, b_dtype, quant=bp), **attrs)
    np.testing.assert_array_equal(_run(build, {"a": a, "b": b}),
                                  ref.quantized_add(a, ap, b, bp, **attrs))
