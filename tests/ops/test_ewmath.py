"""The elementwise math of the sequence models: tan, the inverse and hyperbolic functions, atan2,
the two roundings, clip with tensor bounds, masked_fill and hardmax, against NumPy and PyTorch
(values, domain edges, gradients), in eager mode and through the model file."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph.ir.errors import OpError
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.float64]

# name -> (NumPy, the open interval random inputs are drawn from, inside the domain)
UNARY = {
    "tan": (np.tan, (-1.4, 1.4)), "asin": (np.arcsin, (-0.99, 0.99)),
    "acos": (np.arccos, (-0.99, 0.99)), "atan": (np.arctan, (-6, 6)),
    "sinh": (np.sinh, (-5, 5)), "cosh": (np.cosh, (-5, 5)), "asinh": (np.arcsinh, (-6, 6)),
    "acosh": (np.arccosh, (1.01, 8)), "atanh": (np.arctanh, (-0.99, 0.99)),
}
TORCH = {"tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
         "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh"}


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    outs = fn(*xs)
    outs = [outs] if isinstance(outs, mg.Var) else list(outs)
    got = mg.compile(outs).run({f"x{i}": a for i, a in enumerate(arrays)})
    return got[0] if len(got) == 1 else got


def tol(dtype):
    return {"rtol": 4e-6, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-13, "atol": 0}


def uniform(shape, low, high, dtype=np.float64):
    return RNG.uniform(low, high, shape).astype(dtype)


# -- values ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(7,), (3, 5, 9), (1,), (), (2, 0)])
def test_unary_matches_numpy(name, dtype, shape):
    ref, (low, high) = UNARY[name]
    x = uniform(shape, low, high, dtype)
    out = run(getattr(F, name), x)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(out, ref(x.astype(np.float64)).astype(dtype), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch_on_odd_sizes(name, dtype):
    torch = pytest.importorskip("torch")
    _, (low, high) = UNARY[name]
    x = uniform((5, 37), low, high, dtype)
    want = getattr(torch, TORCH[name])(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run(getattr(F, name), x), want, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_domain_edges_are_numpys(dtype):
    # the ends of each domain, just outside it, the infinities, NaN and the signed zeros
    x = np.array([1.0, -1.0, 1.5, -1.5, 0.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 2.0], dtype)
    for name, (ref, _) in UNARY.items():
        with np.errstate(all="ignore"):
            want = ref(x)
        got = run(getattr(F, name), x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        finite = np.isfinite(want)
        np.testing.assert_array_equal(got[~finite & ~np.isnan(want)],
                                      want[~finite & ~np.isnan(want)], err_msg=name)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, err_msg=name)
        zero = finite & (want == 0)
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=name)
    assert run(F.asin, np.array([1.0], dtype))[0] == np.asarray(np.pi / 2, dtype)
    assert run(F.acosh, np.array([1.0], dtype))[0] == 0
    np.testing.assert_array_equal(run(F.atanh, np.array([1.0, -1.0], dtype)), [np.inf, -np.inf])


@pytest.mark.parametrize("dtype", DTYPES)
def test_atan2_matches_numpy_and_torch_with_broadcasting(dtype):
    torch = pytest.importorskip("torch")
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.5], dtype)
    y, x = special[:, None], special[None, :]  # every pair, by broadcasting
    got = run(F.atan2, y, x)
    assert got.shape == (8, 8) and got.dtype == dtype
    want = np.arctan2(y, x)
    # quadrants, zeros and infinities exact (NumPy's float32 arctan2 is its own, within 1 ulp)
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=0)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    a, b = uniform((3, 1, 7), -4, 4, dtype), uniform((5, 1), -4, 4, dtype)
    want = torch.atan2(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(run(F.atan2, a, b), want, **tol(dtype))


def test_atan2_promotes_numbers_and_integers():
    y = np.array([1, -2, 3], np.int32)
    out = run(lambda v: F.atan2(F.astype(v, "float32"), 2.0), y)
    np.testing.assert_allclose(out, np.arctan2(y, 2.0).astype(np.float32), rtol=1e-6)


HALVES = [-2.5, -1.5, -0.5, -0.49999997, -0.3, -0.0, 0.0, 0.3, 0.49999997, 0.5, 1.5, 2.5,
          3.5000002, 8388607.5, 1e30, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_takes_halves_away_from_zero_as_megengine(dtype):
    # MegEngine's ROUND is C's roundf (dnn/src/common/elemwise/kern_defs.cuh)
    x = np.array(HALVES, dtype)
    got = run(F.round, x)
    want = np.array([-3, -2, -1, -0.0, -0.0, -0.0, 0, 0, 0, 1, 2, 3, 4, 8388608, 1e30, np.inf,
                     -np.inf, np.nan], dtype)
    if dtype == np.float64:  # 0.49999997 and 3.5000002 are float32 spellings
        want[[3, 8, 12]] = [-0.0, 0.0, 4.0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_half_even_is_numpys_and_torchs(dtype):
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.array(HALVES, dtype), uniform(31, -9, 9, dtype)])
    got = run(F.round_half_even, x)
    np.testing.assert_array_equal(got, np.rint(x))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.rint(x)))
    np.testing.assert_array_equal(got, torch.round(torch.from_numpy(x)).numpy())
    assert not np.array_equal(run(F.round, x), got)  # the halves tell them apart


# -- gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients_against_finite_differences(name):
    _, (low, high) = UNARY[name]
    gradcheck(getattr(F, name), uniform((3, 5), low, high))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients_against_torch(name):
    torch = pytest.importorskip("torch")
    _, (low, high) = UNARY[name]
    x, g = uniform((4, 7), low, high), RNG.standard_normal((4, 7))
    t = torch.from_numpy(x).requires_grad_()
    getattr(torch, TORCH[name])(t).backward(torch.from_numpy(g))
    graph = mg.Graph()
    v = graph.input("x", x.shape, x.dtype)
    (dx,) = mg.compile(mg.grad(F.sum(getattr(F, name)(v) * graph.const(g)), [v])).run({"x": x})
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_atan2_gradients_against_finite_differences_and_torch():
    torch = pytest.importorskip("torch")
    y, x = uniform((3, 4), -2, 2), uniform((4,), 0.3, 2) * np.array([1, -1, 1, -1])
    gradcheck(F.atan2, y, x)
    ty, tx = torch.from_numpy(y).requires_grad_(), torch.from_numpy(x).requires_grad_()
    g = RNG.standard_normal((3, 4))
    torch.atan2(ty, tx).backward(torch.from_numpy(g))
    graph = mg.Graph()
    a, b = graph.input("y", y.shape, y.dtype), graph.input("x", x.shape, x.dtype)
    got = mg.compile(mg.grad(F.sum(F.atan2(a, b) * graph.const(g)), [a, b])).run({"y": y, "x": x})
    np.testing.assert_allclose(got[0], ty.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(got[1], tx.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("fn", [F.round, F.round_half_even])
def test_roundings_have_zero_gradient(fn):
    (dx,) = gradcheck(fn, uniform((3, 4), -3, 3))  # seeded: no value within eps of a half
    assert np.all(dx == 0)


# -- clip with tensor bounds ---------------------------------------------------------------------
def _plan_ops(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return {ins.op for ins in mg.compile([fn(*xs)], optimize=0).instructions}


def test_clip_with_tensor_bounds_is_np_clip_and_torch_clamp():
    torch = pytest.importorskip("torch")
    x = uniform((4, 5), -3, 3, np.float32)
    lo, hi = uniform((5,), -2, 0, np.float32), uniform((4, 1), 0, 2, np.float32)
    got = run(F.clip, x, lo, hi)
    np.testing.assert_array_equal(got, np.clip(x, lo, hi))
    want = torch.clamp(torch.from_numpy(x), torch.from_numpy(lo), torch.from_numpy(hi))
    np.testing.assert_array_equal(got, want.numpy())
    # one bound a tensor, the other a number or None; lower > upper gives upper; NaN stays
    np.testing.assert_array_equal(run(lambda a, b: F.clip(a, b, 0.5), x, lo), np.clip(x, lo, 0.5))
    np.testing.assert_array_equal(run(lambda a, b: F.clip(a, None, b), x, hi),
                                  np.minimum(x, hi))
    crossed = run(F.clip, x, hi + 3, lo)
    np.testing.assert_array_equal(crossed, np.broadcast_to(lo, x.shape))
    nan = np.array([np.nan, 1.0, 1.0], np.float32)
    np.testing.assert_array_equal(run(F.clip, nan, np.array([0, np.nan, 0], np.float32),
                                      np.array([2, 2, 2], np.float32)), [np.nan, np.nan, 1.0])


def test_clip_keeps_number_bounds_on_the_clip_op():
    x = uniform((6,), -2, 2, np.float32)
    assert "clip" in _plan_ops(lambda a: F.clip(a, -1, 1), x)
    assert _plan_ops(lambda a, b: F.clip(a, b, 1.0), x, x) == {"maximum", "minimum"}


def test_clip_tensor_bound_gradients_are_torchs():
    torch = pytest.importorskip("torch")
    # ties at each bound (the gradient goes to the input, as PyTorch's) and crossed bounds
    x = np.array([0.5, 2.0, -3.0, 0.0, 3.0, 1.0, -0.5])
    lo = np.array([0.5, 2.5, -1.0, 0.0, 1.0, -1.0, -1.0])
    hi = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.7])
    g = RNG.standard_normal(7)
    ts = [torch.from_numpy(a).requires_grad_() for a in (x, lo, hi)]
    torch.clamp(*ts).backward(torch.from_numpy(g))
    graph = mg.Graph()
    vs = [graph.input(k, a.shape, a.dtype) for k, a in zip("xlh", (x, lo, hi))]
    got = mg.compile(mg.grad(F.sum(F.clip(*vs) * graph.const(g)), vs)).run(
        {"x": x, "l": lo, "h": hi})
    for mine, theirs in zip(got, ts):
        np.testing.assert_array_equal(mine, theirs.grad.numpy())
    # finite differences too, with bounds that bind (seeded: no value within eps of a kink)
    dx, dlo, dhi = gradcheck(F.clip, uniform((3, 4), -2, 2), uniform((4,), -1.5, -0.5),
                             uniform((3, 1), 0.5, 1.5))
    assert (dx == 0).any() and dlo.any() and dhi.any()


# -- masked_fill ----------------------------------------------------------------------------------
def test_masked_fill_matches_torch():
    torch = pytest.importorskip("torch")
    x = uniform((2, 3, 5), -1, 1, np.float32)
    mask = RNG.random((3, 1)) > 0.5
    got = run(lambda a, m: F.masked_fill(a, m, -1e9), x, mask)
    want = torch.from_numpy(x).masked_fill(torch.from_numpy(mask), -1e9).numpy()
    np.testing.assert_array_equal(got, want)
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = run(lambda a, m: F.masked_fill(a, m, 7), ints, np.array([True, False, True]))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[7, 1, 7], [7, 4, 7]])


def test_masked_fill_with_a_tensor_value_and_its_gradients():
    torch = pytest.importorskip("torch")
    x, value = uniform((3, 4), -1, 1), np.array(0.25)
    mask = RNG.random((3, 4)) > 0.5
    g = RNG.standard_normal((3, 4))
    tx, tv = torch.from_numpy(x).requires_grad_(), torch.from_numpy(value).requires_grad_()
    tx.masked_fill(torch.from_numpy(mask), tv).backward(torch.from_numpy(g))
    graph = mg.Graph()
    a, v = graph.input("x", x.shape, x.dtype), graph.input("v", (), value.dtype)
    out = F.masked_fill(a, graph.const(mask), v)
    got = mg.compile([out, *mg.grad(F.sum(out * graph.const(g)), [a, v])]).run(
        {"x": x, "v": value})
    np.testing.assert_array_equal(got[0], np.where(mask, value, x))
    np.testing.assert_allclose(got[1], tx.grad.numpy())
    np.testing.assert_allclose(got[2], tv.grad.numpy())


@pytest.mark.parametrize("mask,value,message", [
    (np.ones((3, 4), np.float32), 0.0, r"masked_fill\(.*the mask must be bool, got float32"),
    (np.ones((2, 3, 4), np.bool_), 0.0,
     r"the mask \(2, 3, 4\) does not broadcast to the input's shape \(3, 4\)"),
    (np.ones((5,), np.bool_), 0.0, r"the mask \(5,\) does not broadcast"),
    (np.ones((3, 4), np.bool_), np.zeros(4, np.float32), r"a 0-d tensor, got shape \(4,\)"),
])
def test_masked_fill_refuses_bad_input(mask, value, message):
    g = mg.Graph()
    x = g.input("x", (3, 4), "float32")
    v = g.const(value) if isinstance(value, np.ndarray) else value
    with pytest.raises(OpError, match=message):
        F.masked_fill(x, g.const(mask), v)


# -- hardmax --------------------------------------------------------------------------------------
def hardmax_reference(x, axis):
    """ONNX's reference: the one-hot of np.argmax (the first maximum) along the axis."""
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, first, 1, axis=axis)
    return out


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2])
def test_hardmax_is_the_one_hot_of_the_first_maximum(axis):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    got = run(lambda v: F.hardmax(v, axis), x)
    np.testing.assert_array_equal(got, hardmax_reference(x, axis))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.sum(axis=axis), 1)


def test_hardmax_picks_the_first_of_ties_and_of_nans():
    x = np.array([[1.0, 3.0, 3.0], [np.nan, 2.0, np.nan], [-np.inf, -np.inf, -np.inf]])
    np.testing.assert_array_equal(run(F.hardmax, x), [[0, 1, 0], [1, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize("shape,axis,message", [
    ((3, 4), 2, r"hardmax\(f32\[3,4\]\): axis 2 is out of range for 2 dimensions"),
    ((3, 4), -3, "axis -3 is out of range"), ((), 0, "axis 0 is out of range for 0"),
    ((3, 0), 1, "axis 1 is empty"), ((3, 4), 1.0, "axis 1.0 is out of range"),
])
def test_hardmax_refuses_bad_axes(shape, axis, message):
    g = mg.Graph()
    with pytest.raises(OpError, match=message):
        F.hardmax(g.input("x", shape, "float32"), axis)


# -- eager mode and the model file ----------------------------------------------------------------
def test_eager_tensors():
    x = mg.tensor(np.array([0.5, -0.25, 2.5], np.float32))
    np.testing.assert_allclose(F.atan(x).numpy(), np.arctan(x.numpy()), rtol=1e-6)
    np.testing.assert_array_equal(F.round(x).numpy(), [1.0, -0.0, 3.0])
    np.testing.assert_array_equal(F.hardmax(x).numpy(), [0, 0, 1])
    np.testing.assert_array_equal(F.masked_fill(x, x.numpy() > 0, 0.0).numpy(), [0, -0.25, 0])


def test_a_plan_of_every_new_op_round_trips_bitwise(tmp_path):
    g = mg.Graph()
    x = g.input("x", (4, 6), "float32")
    u = F.tanh(x) * 0.9  # inside every domain but acosh's
    outs = [getattr(F, name)(u) for name in sorted(UNARY) if name != "acosh"]
    outs += [F.acosh(F.abs(x) + 1.0), F.atan2(x, u + 2.0), F.round(x * 2.0),
             F.round_half_even(x * 2.0), F.clip(x, u, 1.0), F.masked_fill(x, x > 0, -1.0),
             F.hardmax(x, 0)]
    plan = mg.compile(outs)
    mg.save(plan, tmp_path / "m.mgm")
    loaded = runtime.load(tmp_path / "m.mgm")
    feeds = {"x": uniform((4, 6), -2, 2, np.float32)}
    for a, b in zip(loaded.run(feeds), plan.run(feeds)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
