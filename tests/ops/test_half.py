"""float16 and bfloat16: casts bitwise as NumPy and ml_dtypes round, every other op as float32
rounded once (in plans at every level and in eager mode), gradients, the model file."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.ir.errors import OpError
from mgegraph.ir.types import HALF_DTYPES, SUPPORTED, is_float

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
HALVES = (F16, BF16)
OTHERS = tuple(d for d in SUPPORTED if d not in HALF_DTYPES)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def same_bits(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=str(what))


def plan_run(outs, feeds, optimize=1):
    return mg.compile(outs, optimize=optimize).run(feeds)


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's own NaN/overflow casts


def every_half(dtype) -> np.ndarray:
    """All 65536 values of a half type, NaNs and infinities included."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)


def rounding_cases() -> np.ndarray:
    """float64 values at every rounding rule of both half types: ties either way, just off a
    tie, the subnormal ranges and their edges, overflow to infinity, NaN, signed zero."""
    rng = np.random.default_rng(0)
    f16 = every_half(F16).astype(np.float64)
    bf16 = every_half(BF16).astype(np.float64)
    finite = np.concatenate([f16[np.isfinite(f16)], bf16[np.isfinite(bf16)]])
    nxt = np.sort(finite)
    mids = (nxt[:-1] + nxt[1:]) / 2  # exact ties between neighbours
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 2.0 ** -24,
                2.0 ** -25, 2.0 ** -25 * (1 + 2 ** -40), 2.0 ** -26, 2.0 ** -133, 2.0 ** -134,
                2.0 ** -134 * (1 + 2 ** -30), 3.4e38, 3.39e38, 1e300, -1e300, 5e-324]
    random = rng.standard_normal(20000) * 10.0 ** rng.integers(-40, 40, 20000)
    return np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                           specials, random])


def numpy_cast(x, dst):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return x.astype(dst)


# -- casts ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dst", HALVES, ids=str)
@pytest.mark.parametrize("src", (np.float64, np.float32), ids=str)
def test_float_to_half_rounds_as_numpy_and_ml_dtypes(src, dst):
    x = rounding_cases().astype(src)
    g = mg.Graph()
    out = g.input("x", x.shape, src).astype(dst)
    (got,) = plan_run([out], {"x": x}, optimize=0)
    want = numpy_cast(x, dst)
    nan = np.isnan(x)
    same_bits(got[~nan], want[~nan], (src, dst))
    # a NaN stays a NaN of its sign (bfloat16: quiet; float16: NumPy's payload rule)
    assert np.isnan(got[nan].astype(np.float32)).all()
    if dst == F16:
        same_bits(got[nan], want[nan], "nan payload")


@pytest.mark.parametrize("src", HALVES, ids=str)
def test_every_half_value_widens_exactly(src):
    x = every_half(src)
    g = mg.Graph()
    xv = g.input("x", x.shape, src)
    got32, got64 = plan_run([xv.astype(np.float32), xv.astype(np.float64)], {"x": x})
    same_bits(got32, x.astype(np.float32))
    # to float64 through the float32: a signalling NaN arrives quiet (NumPy keeps it signalling)
    nan = np.isnan(got64)
    same_bits(got64[~nan], x[~nan].astype(np.float64))
    np.testing.assert_array_equal(nan, np.isnan(x.astype(np.float64)))
    np.testing.assert_array_equal(np.signbit(got64), np.signbit(x.astype(np.float64)))


@pytest.mark.parametrize("dst", [d for d in OTHERS if d.kind != "f"], ids=str)
@pytest.mark.parametrize("src", HALVES, ids=str)
def test_half_to_integers_and_bool_as_float32_would(src, dst):
    """A half value casts as the float32 holding it casts (NumPy's rule; ml_dtypes gives 0 for
    a NaN or out-of-range bfloat16, NumPy's float32 gives INT_MIN: mgegraph follows NumPy)."""
    x = every_half(src)
    g = mg.Graph()
    (got,) = plan_run([g.input("x", x.shape, src).astype(dst)], {"x": x})
    same_bits(got, numpy_cast(x.astype(np.float32), dst), (src, dst))


@pytest.mark.parametrize("dst", HALVES, ids=str)
@pytest.mark.parametrize("src", [d for d in OTHERS if d.kind != "f"] + [F16, BF16], ids=str)
def test_integers_bool_and_halves_to_half(src, dst):
    if src in HALVES:
        x = every_half(src)
    elif src == np.bool_:
        x = np.array([True, False, True])
    else:
        info = np.iinfo(src)
        x = np.array([info.min, info.max, 0, 1, -1, 2049, 2051, 65504, 65519, 65520, 1 << 24,
                      (1 << 24) + 1, 300, -300], np.int64).clip(info.min, info.max).astype(src)
    g = mg.Graph()
    (got,) = plan_run([g.input("x", x.shape, src).astype(dst)], {"x": x})
    # a half source converts through float32 (exact), as ml_dtypes does between the halves
    want = numpy_cast(x.astype(np.float32) if src in HALVES else x.astype(np.float64), dst)
    nan = np.isnan(want.astype(np.float32))
    same_bits(got[~nan], want[~nan], (src, dst))
    assert np.isnan(got[nan].astype(np.float32)).all()


def test_cast_of_a_strided_view_and_in_eager_mode():
    x = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    g = mg.Graph()
    (got,) = plan_run([g.input("x", x.shape, np.float32).T.astype(BF16)], {"x": x})
    same_bits(got, x.T.astype(BF16))
    same_bits(mg.tensor(x).astype("float16").numpy(), x.astype(np.float16))


# -- movement: the bytes as they are ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_movement_ops_move_half_bits(dtype):
    x = every_half(dtype)[:4 * 6 * 5].reshape(4, 6, 5)  # NaN payloads included in the tail
    x = np.concatenate([x.reshape(-1)[:-4], every_half(dtype)[-4:]]).reshape(4, 6, 5)
    g = mg.Graph()
    xv = g.input("x", x.shape, dtype)
    outs = [xv.transpose(2, 0, 1), xv[1:3, ::2], F.concat([xv, xv], axis=1),
            F.pad(xv, [(0, 0), (1, 2), (0, 1)], constant_value=-1.5),
            F.broadcast_to(xv[:, :1], (4, 3, 5)), F.split(xv, 2, axis=1)[1],
            F.where(xv.astype(np.float32) > 0, xv, F.zeros_like(xv))]
    wants = [x.transpose(2, 0, 1), x[1:3, ::2], np.concatenate([x, x], 1),
             np.pad(x, [(0, 0), (1, 2), (0, 1)], constant_values=np.array(-1.5, dtype)),
             np.broadcast_to(x[:, :1], (4, 3, 5)), np.split(x, 2, axis=1)[1],
             np.where(x.astype(np.float32) > 0, x, np.zeros_like(x))]
    for optimize in (0, 1):
        for got, want in zip(plan_run(outs, {"x": x}, optimize), wants):
            same_bits(got, want, (dtype, optimize))


# -- every other op: float32, rounded once ----------------------------------------------------------
def _graph_ops(x, w, b):
    h = F.relu(F.matmul(x, w) + b)
    return [h, F.softmax(h, axis=-1), F.sum(h, axis=0), F.mean(h * h), F.exp(-h), h / 3.0,
            F.layer_norm(h, (h.shape[-1],), affine=False)]


def _reference(x, w, b, dtype):
    """The same model computed op by op in float32, each result rounded to ``dtype``."""
    r = lambda a: np.asarray(a, np.float32).astype(dtype)
    f = lambda a: np.asarray(a).astype(np.float32)
    mm = r(f(x) @ f(w))
    h = r(np.maximum(f(r(f(mm) + f(b))), 0))
    e = np.exp(f(h) - f(h).max(-1, keepdims=True))
    soft = r(e / e.sum(-1, keepdims=True))
    return h, soft, r(f(h).sum(0))


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_ops_on_half_are_float32_rounded_once(dtype):
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in [(6, 9), (9, 5), (5,)])
    g = mg.Graph()
    outs = _graph_ops(g.input("x", x.shape, dtype), g.input("w", w.shape, dtype),
                      g.input("b", b.shape, dtype))
    assert all(v.dtype == dtype for v in outs)
    feeds = {"x": x, "w": w, "b": b}
    runs = [plan_run(outs, feeds, level) for level in (0, 1, 2)]
    for got in runs[1:]:  # the passes change no value
        for a, c in zip(got, runs[0]):
            same_bits(a, c, dtype)
    h, soft, total = _reference(x, w, b, dtype)
    same_bits(runs[0][0], h)
    np.testing.assert_allclose(runs[0][1].astype(np.float32), soft.astype(np.float32),
                               rtol=0, atol=float(np.finfo(np.float32).eps) * 4 + 2.0 ** -9)
    same_bits(runs[0][2], total)
    # eager mode gives a plan's bits
    eager = _graph_ops(mg.tensor(x), mg.tensor(w), mg.tensor(b))
    for a, c in zip(eager, runs[0]):
        same_bits(a.numpy(), c, ("eager", dtype))


def test_widening_shows_in_the_report_and_keeps_movement_native():
    g = mg.Graph()
    x = g.input("x", (4, 4), F16)
    y = (x.T * 2.0).reshape(16)
    plan = mg.compile([y])
    assert dict(plan.passes)["widen_half"] == {"nodes_widened": 1}
    text = str(plan)
    assert "cast" in text and "strided_f16" in text or "transpose" in text


def test_half_with_float32_promotes_to_float32_as_numpy():
    g, other = mg.Graph(), mg.Graph()
    a, b = g.input("a", (3,), F16), g.input("b", (3,), F32)
    c, d = other.input("c", (3,), BF16), other.input("d", (3,), F16)
    assert (a + b).dtype == F32 and (c * d).dtype == F32 and (a + 1.5).dtype == F16
    av, bv = np.array([1.5, 2.25, -3], F16), np.array([0.1, 0.2, 0.3], F32)
    (got,) = plan_run([a + b], {"a": av, "b": bv})
    same_bits(got, av.astype(F32) + bv)


def test_an_op_without_float_meaning_refuses_halves_naming_them():
    g = mg.Graph()
    x = g.input("x", (3,), F16)
    with pytest.raises(OpError, match="one_hot.*float16 inputs compute as float32"):
        g.add_node("one_hot", (x,), {"num_classes": 4})


# -- gradients and training -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_gradients_follow_the_float32_ones(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    w0 = (rng.standard_normal((6, 3)) * 0.5).astype(np.float32)

    def grads(dt):
        w = nn.Parameter(w0.astype(dt))
        gm = mg.GradManager().attach([w])
        with gm:
            loss = F.mean(F.square(F.tanh(mg.tensor(x.astype(dt)) @ w)))
            gm.backward(loss)
        return w.grad.numpy()

    half, full = grads(dtype), grads(np.float32)
    assert half.dtype == dtype and is_float(half.dtype)
    eps = 2.0 ** -10 if dtype == F16 else 2.0 ** -7
    np.testing.assert_allclose(half.astype(np.float32), full, rtol=8 * eps, atol=8 * eps * 0.1)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_a_half_mlp_trains(dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 8)).astype(dtype)
    y = (x.astype(np.float32) @ rng.standard_normal((8, 1)).astype(np.float32)).astype(dtype)

    init = np.random.default_rng(5)
    params = [nn.Parameter((init.standard_normal(s) * 0.3).astype(dtype))
              for s in [(8, 16), (16,), (16, 1), (1,)]]

    def model(inp):
        w1, b1, w2, b2 = params
        return F.relu(inp @ w1 + b1) @ w2 + b2

    opt = mg.optim.SGD(params, lr=0.05)
    gm = mg.GradManager().attach(params)
    losses = []
    for _ in range(30):
        with gm:
            loss = F.mean(F.square(model(mg.tensor(x)) - mg.tensor(y)))
            gm.backward(loss)
        opt.step()
        opt.clear_grad()
        losses.append(float(loss.numpy().astype(np.float32)))
    assert all(p.dtype == dtype for p in params)
    assert losses[-1] < 0.5 * losses[0], losses


# -- the model file ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_weights_save_and_load_bitwise(tmp_path, dtype):
    rng = np.random.default_rng(6)
    g = mg.Graph()
    x = g.input("x", (2, 5), dtype)
    w = g.param("w", rng.standard_normal((5, 3)).astype(dtype))
    plan = mg.compile([F.relu(x @ w)])
    path = tmp_path / "half.mgm"
    mg.save(plan, path)
    loaded = mg.load(path)
    xv = rng.standard_normal((2, 5)).astype(dtype)
    same_bits(loaded.run({"x": xv})[0], plan.run({"x": xv})[0])
    # the file holds two bytes per weight
    assert path.stat().st_size < 4096


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_eager_and_traced_half_steps_give_the_same_weights(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 6)).astype(dtype)
    y = rng.standard_normal((16, 2)).astype(dtype)
    init = [(rng.standard_normal(s) * 0.4).astype(dtype) for s in [(6, 8), (8,), (8, 2)]]

    def train(traced: bool):
        params = [nn.Parameter(a.copy()) for a in init]
        gm, opt = mg.GradManager().attach(params), mg.optim.Adam(params, lr=0.01)

        def step(xb, yb):
            with gm:
                w1, b1, w2 = params
                loss = F.mean(F.square(F.relu(xb @ w1 + b1) @ w2 - yb))
                gm.backward(loss)
            opt.step().clear_grad()
            return loss
        step = mg.jit.trace(step) if traced else step
        losses = [step(mg.tensor(x), mg.tensor(y)).numpy() for _ in range(5)]
        return losses, [p.numpy() for p in params]

    (eager_losses, eager_w), (traced_losses, traced_w) = train(False), train(True)
    for a, b in zip(eager_losses + eager_w, traced_losses + traced_w):
        same_bits(a, b, dtype)
    assert eager_w[0].dtype == dtype


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_check_numerics_sees_a_nan_in_a_half_value(dtype):
    g = mg.Graph()
    x = g.input("x", (3,), dtype)
    plan = mg.compile([F.sqrt(x) * 2.0], check_numerics=True)
    plan.run({"x": np.array([1, 4, 9], dtype)})
    with pytest.raises(mg.NumericsError, match="sqrt"):
        plan.run({"x": np.array([1, -4, 9], dtype)})
    with pytest.raises(mg.NumericsError, match="feed.*'x' already held NaN"):
        plan.run({"x": np.array([1, np.nan, 9], dtype)})


def test_a_bfloat16_npy_written_by_numpy_is_read_as_bfloat16(tmp_path):
    from mgegraph.io.arrays import read_npy

    x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(BF16)
    np.save(tmp_path / "x.npy", x)  # NumPy writes bfloat16 as 2-byte void records

    def refuse(message):
        raise ValueError(message)
    same_bits(read_npy(tmp_path / "x.npy", (2, 3), BF16, refuse), x)
    with pytest.raises(ValueError, match="float16"):
        read_npy(tmp_path / "x.npy", (2, 3), F16, refuse)
