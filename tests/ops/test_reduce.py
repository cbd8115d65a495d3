"""Reductions against NumPy: sum, mean, prod, var, max, min, argmax, argmin over any axes."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mgegraph as mg
import mgegraph.functional as F

RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def sample(shape, dtype, op="sum"):
    if dtype == np.bool_:
        return RNG.random(shape) > 0.5
    if np.dtype(dtype).kind == "i":
        low, high = (1, 3) if op == "prod" else (-50, 50)
        return RNG.integers(low, high, shape).astype(dtype)
    if op == "prod":
        return RNG.uniform(0.8, 1.25, shape).astype(dtype)
    return (RNG.standard_normal(shape) * 3 + 1).astype(dtype)


def reference(op, x, axis, keepdims):
    """NumPy's result, computed in float64 for float inputs (our float32 sums are exact-ish)."""
    want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
    if x.dtype == np.float32:
        want = getattr(np, op)(x.astype(np.float64), axis=axis, keepdims=keepdims).astype(
            np.float32)
    return np.asarray(want), np.asarray(getattr(np, op)(x, axis=axis, keepdims=keepdims)).dtype


def check(out, want, dtype):
    if np.dtype(dtype) == np.float32 or out.dtype == np.float32:
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=2e-6)
    elif out.dtype == np.float64:
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(out, want)


CASES = [((7,), None), ((7,), 0), ((3, 5), 0), ((3, 5), 1), ((3, 5), -1), ((2, 3, 4), (0, 2)),
         ((2, 3, 4), 1), ((2, 3, 4), (-1, -2)), ((2, 3, 4), None), ((4, 1, 3), 1),
         ((4, 1, 3), (0, 1)), ((2, 0, 3), 2), ((), None), ((1,), 0), ((2, 3), ()),
         ((300, 3), 0), ((3, 600), 0), ((5, 700), 1), ((2, 3, 4, 5), (1, 3)),
         ((3, 300, 2), 1)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "mean", "prod", "var", "max", "min"])
def test_reductions_match_numpy(op, dtype, shape, axis, keepdims):
    x = sample(shape, dtype, op)
    want, want_dtype = reference(op, x, axis, keepdims)
    out = run(lambda v: getattr(F, op)(v, axis=axis, keepdims=keepdims), x)
    assert out.dtype == want_dtype and out.shape == want.shape
    check(out, want, dtype)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", [((7,), None), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4), 1),
                                        ((2, 3, 4), None), ((300, 3), 0), ((3, 600), 1),
                                        ((4, 1), 1), ((), None), ((2, 0), 0)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_match_numpy(op, dtype, shape, axis, keepdims):
    # few distinct values, so ties are everywhere and the first index must win
    x = RNG.integers(0, 3, shape).astype(dtype)
    want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
    out = run(lambda v: getattr(F, op)(v, axis=axis, keepdims=keepdims), x)
    assert out.dtype == np.int64 and out.shape == np.shape(want)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_propagates_like_numpy(dtype, axis):
    x = RNG.standard_normal((300, 4)).astype(dtype)
    x[7, 1] = x[200, 1] = np.nan
    x[3, 2] = np.nan
    for op in ("max", "min", "argmax", "argmin"):
        np.testing.assert_array_equal(run(lambda v: getattr(F, op)(v, axis=axis), x),
                                      getattr(np, op)(x, axis=axis))
    np.testing.assert_allclose(run(lambda v: F.sum(v, axis=axis), x), np.sum(x, axis=axis),
                               rtol=1e-5, atol=1e-6)  # also checks where the NaNs are
    assert run(lambda v: F.argmax(v), x) == np.argmax(x)


def test_float32_sums_are_accurate():
    # a float32 running sum of a million 0.1s is off by ~1e-3 relative; pairwise/double is not
    x = np.full(1_000_003, 0.1, np.float32)
    exact = x.astype(np.float64).sum()
    np.testing.assert_allclose(run(F.sum, x), exact, rtol=1e-7)
    cols = np.full((200_000, 3), 0.1, np.float32)
    np.testing.assert_allclose(run(lambda v: F.sum(v, axis=0), cols),
                               cols.astype(np.float64).sum(0), rtol=1e-7)
    shifted = (RNG.standard_normal(10_000) + 1e3).astype(np.float32)
    np.testing.assert_allclose(run(F.var, shifted), shifted.astype(np.float64).var(), rtol=1e-5)


def test_integer_sums_wrap_like_numpy():
    x = np.full((4, 3), np.iinfo(np.int64).max - 1, np.int64)
    np.testing.assert_array_equal(run(lambda v: F.sum(v, axis=0), x), x.sum(axis=0))
    y = np.full(70, 3, np.int32)
    np.testing.assert_array_equal(run(F.prod, y), np.prod(y))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_empty_axes_give_the_identity_or_nan(dtype):
    x = np.zeros((3, 0, 2), dtype)
    np.testing.assert_array_equal(run(lambda v: F.sum(v, axis=1), x), np.zeros((3, 2)))
    np.testing.assert_array_equal(run(lambda v: F.prod(v, axis=(0, 1)), x), np.ones(2))
    assert np.isnan(run(lambda v: F.mean(v, axis=1), x)).all()
    assert np.isnan(run(F.var, x))
    assert run(lambda v: F.max(v, axis=0), x).shape == (0, 2)


@pytest.mark.parametrize("op,word", [("max", "maximum"), ("min", "minimum"),
                                     ("argmax", "argmax"), ("argmin", "argmin")])
def test_no_identity_on_empty_axis_is_a_build_error(op, word):
    g = mg.Graph()
    x = g.input("x", (0, 3), "float32")
    with pytest.raises(mg.OpError, match=rf"{op}\(f32\[0,3\]\).*{word}.*test_reduce.py"):
        getattr(F, op)(x, axis=0)
    assert getattr(F, op)(x, axis=1).shape == (0,)


def test_bad_axes_are_build_errors():
    g = mg.Graph()
    x = g.input("x", (2, 3), "float32")
    s = g.input("s", (), "float32")
    with pytest.raises(mg.OpError, match=r"sum\(f32\[2,3\]\).*out of range"):
        F.sum(x, axis=2)
    with pytest.raises(mg.OpError, match=r"mean.*repeated axis"):
        F.mean(x, axis=(1, -1))
    with pytest.raises(mg.OpError, match=r"max\(f32\[\]\).*0-d"):
        F.max(s, axis=0)
    with pytest.raises(mg.OpError, match=r"argmax.*None, an int or a non-empty sequence"):
        F.argmax(x, axis="0")  # several axes are MegEngine's: test_megengine_arguments.py
    with pytest.raises(mg.OpError, match=r"var.*axis must be"):
        F.var(x, axis="rows")
    with pytest.raises(mg.OpError, match=r"prod.*unknown attribute"):
        g.add_node("prod", (x,), {"axes": (0,)})


def test_ir_text_and_var_methods():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4), "float32")
    y = x.sum(axis=-1, keepdims=True)
    assert str(g).splitlines()[-1] == "%1:f32[2,3,1] = sum[axis=(2), keepdims=True] %0"
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    outs = mg.compile([y, x.mean(), x.max(0), x.min(axis=(0, 2))]).run({"x": a})
    wants = [a.sum(-1, keepdims=True), a.mean(), a.max(0), a.min((0, 2))]
    for o, w in zip(outs, wants):
        np.testing.assert_allclose(o, w, rtol=2e-6, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=5),
                    elements=st.floats(-100, 100)),
       data=st.data(), keepdims=st.booleans())
def test_any_axes_property(x, data, keepdims):
    axes = tuple(data.draw(st.sets(st.integers(0, x.ndim - 1))))
    for op in ("sum", "max", "var"):
        out = run(lambda v: getattr(F, op)(v, axis=axes, keepdims=keepdims), x)
        np.testing.assert_allclose(out, getattr(np, op)(x, axis=axes, keepdims=keepdims),
                                   rtol=1e-12, atol=1e-9)
