"""mgegraph.quantization's observers, fake quantizers and configurations: the parameters
MegEngine's formulas give, statistics updated eagerly and inside a compiled step alike,
enabling and disabling, LSQ's learned step, and clear errors."""
from functools import partial

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.quantization as Q
from mgegraph.dtype import get_scale, get_zero_point
from mgegraph.ir.errors import GraphError

RNG = np.random.default_rng(5)


def _batches(n=3, shape=(4, 6)):
    return [RNG.normal(size=shape).astype(np.float32) * (i + 1) + i for i in range(n)]


def _value(t) -> float:
    return float(np.asarray(t))


def test_min_max_symmetric_is_megengines_formula():
    ob = Q.MinMaxObserver(dtype="qint8")
    batches = _batches()
    for b in batches:
        ob(mg.tensor(b))
    lo, hi = min(0, min(b.min() for b in batches)), max(0, max(b.max() for b in batches))
    qp = ob.get_qparams()
    np.testing.assert_allclose(_value(qp.scale), max(-lo, hi) / 127.5, rtol=1e-6)
    assert qp.zero_point is None and qp.mode == Q.QuantMode.SYMMERTIC
    assert get_scale(ob.get_quantized_dtype()) == pytest.approx(max(-lo, hi) / 127.5, 1e-6)


def test_min_max_asymmetric_gives_a_zero_point():
    ob = Q.MinMaxObserver(mode=Q.QuantMode.ASYMMERTIC, dtype="quint8")
    x = np.linspace(-1, 3, 24, dtype=np.float32).reshape(4, 6)
    ob(mg.tensor(x))
    qp = ob.get_qparams()
    scale = 4 / 255
    np.testing.assert_allclose(_value(qp.scale), scale, rtol=1e-6)
    assert _value(qp.zero_point) == 0 - np.round(-1 / np.float32(scale))
    assert get_zero_point(ob.get_quantized_dtype()) == 64


def test_the_scale_never_falls_below_eps():
    ob = Q.MinMaxObserver(eps=0.01)
    ob(mg.tensor(np.zeros((3,), np.float32)))
    assert _value(ob.get_qparams().scale) == pytest.approx(0.01)


def test_ema_takes_the_first_batch_then_averages():
    ob = Q.ExponentialMovingAverageObserver(momentum=0.75)
    first, second = _batches(2)
    ob(mg.tensor(first))
    assert _value(ob.min_val) == first.min() and _value(ob.max_val) == first.max()
    ob(mg.tensor(second))
    np.testing.assert_allclose(_value(ob.max_val), 0.75 * first.max() + 0.25 * second.max(),
                               rtol=1e-6)


def test_a_compiled_step_updates_the_statistics_as_eager_mode():
    batches = _batches()
    eager, compiled = Q.ExponentialMovingAverageObserver(), Q.ExponentialMovingAverageObserver()
    for b in batches:
        eager(mg.tensor(b))
    g = mg.Graph()
    x = g.input("x", batches[0].shape)
    qp = compiled.observe(x)
    plan = mg.compile([qp.scale])
    for b in batches:
        (scale,) = plan.run({"x": b})
    np.testing.assert_allclose(_value(compiled.max_val), _value(eager.max_val), rtol=1e-6)
    np.testing.assert_allclose(scale, _value(eager.get_qparams().scale), rtol=1e-6)


def test_an_observer_in_eval_or_disabled_keeps_its_statistics():
    ob = Q.MinMaxObserver()
    first, second = _batches(2)
    ob(mg.tensor(first))
    ob.eval()
    ob(mg.tensor(second * 100))
    ob.train()
    ob.disable()
    ob(mg.tensor(second * 100))
    assert _value(ob.max_val) == first.max()


def test_fake_quantize_follows_its_observer():
    ob, fq = Q.MinMaxObserver(), Q.FakeQuantize("qint8")
    x = mg.tensor(_batches(1)[0])
    qp = ob.observe(x)
    y = fq(x, qp).numpy()
    s = np.float32(_value(qp.scale))
    np.testing.assert_array_equal(y, np.clip(np.rint(x.numpy() / s), -128, 127) * s)
    fq.disable()
    assert fq(x, qp) is x


def test_fake_quantize_refuses_parameters_of_another_dtype():
    ob = Q.MinMaxObserver(dtype="quint8")
    with pytest.raises(GraphError, match="qint8 was given parameters of quint8"):
        Q.FakeQuantize("qint8")(mg.tensor(np.ones(3, np.float32)), ob.get_qparams())


def test_unknown_dtypes_and_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown dtype"):
        Q.MinMaxObserver(dtype="qint6")
    with pytest.raises(GraphError, match="unknown arguments"):
        Q.FakeQuantize("qint8", bins=3)
    with pytest.raises(ValueError, match="class generator"):
        Q.QConfig(Q.MinMaxObserver(), None, None, None)


def test_lsq_learns_its_step():
    lsq = Q.LSQ("qint8")
    ob = Q.MinMaxObserver()
    x = mg.tensor(_batches(1)[0])
    ob(x)
    lsq.set_qparams(ob.get_qparams())
    start = _value(lsq.step_size)
    gm = mg.GradManager().attach([lsq.step_size])
    with gm:
        d = lsq(x) - x * 1.5
        gm.backward((d * d).sum())
    assert lsq.step_size.grad is not None and _value(lsq.step_size.grad) != 0
    assert _value(lsq.get_qparams().scale) == pytest.approx(start + lsq.eps)


def test_passive_observer_holds_a_set_scale():
    ob = Q.PassiveObserver("qint8")
    with pytest.raises(GraphError, match="never set"):
        ob.get_qparams()
    ob.set_qparams(Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", scale=mg.tensor(0.5)))
    ob.scale = 0.25
    assert _value(ob.get_qparams().scale) == 0.25 and ob.orig_scale == 0.5


def test_predefined_configurations_make_their_parts():
    for qconfig in (Q.ema_fakequant_qconfig, Q.min_max_fakequant_qconfig,
                    Q.calibration_qconfig, Q.ema_lowbit_fakequant_qconfig):
        observer = qconfig.weight_observer()
        assert isinstance(observer, Q.Observer)
    assert Q.ema_lowbit_fakequant_qconfig.act_fake_quant().qmax == 7
    assert isinstance(partial(Q.LSQ, "qint8")(), Q.LSQ)


def test_histogram_search_cuts_an_outlier_where_l2_says_so():
    # a million values in [-1, 1] and one at 100: a grid wide enough for 100 costs the bulk
    # more squared error (1e6 * (101 / 256)^2 / 12, about 13000) than clipping the outlier
    # (99^2, about 9800), so the search cuts it; min-max keeps it
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.uniform(-1, 1, 1_000_000), [100.0]]).astype(np.float32)
    ob = Q.HistogramObserver()
    for part in np.array_split(values, 4):
        ob(mg.tensor(part))
    assert ob.histogram.numpy().sum() == pytest.approx(values.size, rel=1e-5)
    searched = _value(ob.get_qparams().scale)
    assert searched == pytest.approx(1 / 127.5, rel=0.05)

    def l2(scale):
        q = np.clip(np.rint(values / np.float32(scale)), -128, 127) * scale
        return float(np.sum((q.astype(np.float64) - values) ** 2))
    assert l2(searched) < l2(100 / 127.5)


def test_histogram_keeps_the_range_of_a_single_far_value():
    # one value far out among few: clipping it costs more than a coarse grid (L2)
    values = np.random.default_rng(4).normal(size=2000).astype(np.float32)
    values[0] = 40.0
    ob = Q.HistogramObserver()
    ob(mg.tensor(values))
    assert _value(ob.get_qparams().scale) == pytest.approx(40 / 127.5, rel=0.02)


def test_histogram_counts_survive_a_growing_range():
    ob = Q.HistogramObserver(bins=64)
    ob(mg.tensor(np.linspace(0, 1, 1000, dtype=np.float32)))
    ob(mg.tensor(np.linspace(-1, 3, 1000, dtype=np.float32)))
    hist = ob.histogram.numpy()
    assert hist.sum() == pytest.approx(2000, rel=1e-6)
    # the first batch's counts lie in [0, 1]: a quarter of the bins from a quarter of the way
    inside = hist[16:32].sum()
    assert inside == pytest.approx(1000 + 250, rel=0.02)


def test_histogram_observes_eager_values_only():
    ob = Q.HistogramObserver()
    g = mg.Graph()
    with pytest.raises(GraphError, match="eager values only"):
        ob.observe(g.input("x", (3,)))


def test_qparams_compare_by_value():
    a = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", scale=mg.tensor(0.5))
    b = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", scale=mg.tensor(0.5))
    c = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", scale=mg.tensor(0.25))
    assert a == b and a != c and a != Q.create_qparams(Q.QuantMode.SYMMERTIC, "quint8",
                                                        scale=mg.tensor(0.5))


def test_tqt_gradient_is_the_papers():
    # d y / d log2(s): ln 2 * s * (rint(x / s) - x / s) inside the range, ln 2 * s * qmin or
    # qmax outside (Jain et al.), from the op's LSQ rule and the chain rule through 2 ** scale
    tqt = Q.TQT("qint8")
    ob = Q.MinMaxObserver()
    x = _batches(1, (40,))[0] * 3
    ob(mg.tensor(x * 0.5))  # a range x exceeds: some values clip
    tqt.set_qparams(ob.get_qparams())
    w = np.random.default_rng(8).normal(size=x.shape).astype(np.float32)
    gm = mg.GradManager().attach([tqt.scale])
    with gm:
        gm.backward((tqt(mg.tensor(x)) * mg.tensor(w)).sum())
    s = np.float32(2.0) ** tqt.scale.numpy()
    v = x / s
    q = np.rint(v)
    inner = np.where(v < -128.5, -128.0, np.where(v > 127.5, 127.0, q - v))
    assert (v > 127.5).any() or (v < -128.5).any()
    np.testing.assert_allclose(tqt.scale.grad.numpy(), np.log(2) * s * np.sum(w * inner),
                               rtol=1e-4)
    assert _value(tqt.get_qparams().scale) == pytest.approx(float(s))


def _megengine_tqt(x, log_t, g, lb, ub):
    """MegEngine's TQT_Function.backward as its tests' NumPy reference writes it (np.round:
    half to even, as mgegraph rounds): (dL/dx, dL/dlog_t)"""
    t = 2.0 ** log_t
    v = x / t
    rounded = np.round(np.clip(v, lb, ub))
    clip = (v < lb - 0.5) | (v > ub + 0.5)
    ds = np.where(clip, g * rounded, g * (rounded - v)).sum() * t * np.log(2)
    return g * ~clip, ds


@pytest.mark.parametrize("dtype, lb", [("qint8", -128), ("qint8_narrow", -127)])
def test_tqt_gradient_at_the_clip_edges_is_megengines(dtype, lb):
    # x / t on both sides of each end, exactly on the ties 127.5 and lb - 0.5 (t = 1/8: exact):
    # a tie past an odd end rounds outside but TQT counts it inside (dx = g, -0.5 for log t)
    v = np.array([-140, lb - 0.6, lb - 0.5, lb - 0.4, -3.3, 0.2, 126.6, 127.3, 127.5, 127.6,
                  150], np.float32)
    x = v / np.float32(8)
    tqt = Q.TQT(dtype)
    tqt.scale = Q.fake_quant.Parameter(np.asarray(-3.0, np.float32))
    w = np.random.default_rng(3).normal(size=x.shape).astype(np.float32)
    xt = mg.tensor(x)
    gm = mg.GradManager().attach([tqt.scale, xt])
    with gm:
        gm.backward((tqt(xt) * mg.tensor(w)).sum())
    dx, ds = _megengine_tqt(x.astype(np.float64), -3.0, w.astype(np.float64), lb, 127)
    np.testing.assert_array_equal(xt.grad.numpy(), dx.astype(np.float32))
    np.testing.assert_allclose(tqt.scale.grad.numpy(), ds, rtol=1e-5)
    assert xt.grad.numpy()[8] == w[8]  # 127.5: inside (LSQ's rule at a tie: clipped)


def test_tqt_gradient_of_clipped_values_is_the_finite_difference():
    # every x / t past the ends: the output is t * qmin or t * qmax, whose derivative in log t
    # is exact (no rounding in it), so a central difference checks the rule there
    x = np.array([-50.0, -31.0, 17.0, 40.0], np.float64).astype(np.float32)
    w = np.array([0.7, -1.3, 0.4, 2.0], np.float32)

    def loss(log_t):
        tqt = Q.TQT("qint8")
        tqt.scale = Q.fake_quant.Parameter(np.asarray(log_t, np.float32))
        return tqt, float((tqt(mg.tensor(x)) * mg.tensor(w)).sum().numpy())

    tqt, _ = loss(-4.0)  # t = 1/16: |x / t| >= 272
    gm = mg.GradManager().attach([tqt.scale])
    with gm:
        gm.backward((tqt(mg.tensor(x)) * mg.tensor(w)).sum())
    h = 1e-3
    fd = (loss(-4.0 + h)[1] - loss(-4.0 - h)[1]) / (2 * h)
    np.testing.assert_allclose(tqt.scale.grad.numpy(), fd, rtol=1e-3)
