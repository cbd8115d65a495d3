"""mgegraph.amp: autocast's dtypes per op family and per thread, GradScaler's rules, and a
mixed-precision MLP that trains as its float32 twin does."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import amp, nn
from mgegraph.ir.errors import GraphError

F16, BF16, F32 = np.dtype(np.float16), np.dtype("bfloat16"), np.dtype(np.float32)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_gemm_ops_run_low_and_softmax_norms_losses_high(low):
    x, w = mg.tensor(rand(4, 8)), mg.tensor(rand(3, 8, seed=1))
    img, k = mg.tensor(rand(2, 3, 6, 6)), mg.tensor(rand(4, 3, 3, 3, seed=2))
    with amp.autocast(low_prec_dtype=low):
        assert amp.enabled and amp.low_prec_dtype == low
        y = F.linear(x, w)
        assert y.dtype == low and F.matmul(x, w.T).dtype == low
        assert F.conv2d(img, k, padding=1).dtype == low
        assert F.softmax(y, axis=-1).dtype == F32
        assert F.layer_norm(y, (3,), affine=False).dtype == F32
        assert F.cross_entropy(y, mg.tensor(np.array([0, 1, 2, 0]))).dtype == F32
        assert F.relu(y).dtype == low  # the rest follows its inputs
    assert not amp.enabled and F.linear(x, w).dtype == F32
    # the low-precision result is the float32 product of the rounded operands, rounded once
    want = (x.numpy().astype(low).astype(F32) @ w.numpy().astype(low).astype(F32).T).astype(low)
    np.testing.assert_array_equal(y.numpy().view(np.uint16), want.view(np.uint16))


def test_autocast_is_a_decorator_nests_and_stays_on_its_thread():
    seen = {}

    @amp.autocast()
    def inner():
        seen["inner"] = amp.enabled
        with amp.autocast(enabled=False):
            seen["off"] = amp.enabled
        seen["after"] = amp.enabled

    def other():
        seen["other"] = amp.enabled

    with amp.autocast(low_prec_dtype="bfloat16"):
        inner()
        t = threading.Thread(target=other)
        t.start()
        t.join()
        seen["low"] = amp.low_prec_dtype
    assert seen == {"inner": True, "off": False, "after": True, "other": False,
                    "low": "bfloat16"}
    with pytest.raises(ValueError, match="low_prec_dtype"):
        amp.autocast(low_prec_dtype="float32").__enter__()


def test_float32_weights_get_float32_gradients_through_the_casts():
    w = nn.Parameter(rand(3, 8, seed=3))
    x = mg.tensor(rand(5, 8, seed=4))
    gm = mg.GradManager().attach([w])
    with amp.autocast(), gm:
        loss = F.mean(F.square(F.linear(x, w)))
        gm.backward(loss)
    assert loss.dtype == F16 and w.grad.dtype == F32
    xs, ws = x.numpy().astype(F16).astype(F32), w.numpy().astype(F16).astype(F32)
    want = 2 * ((xs @ ws.T) / 15).T @ xs
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=2e-2, atol=2e-3)


def _scaled_step(scaler, grad_value, loss_scale=1.0):
    w = nn.Parameter(np.ones(3, np.float32))
    gm = mg.GradManager().attach([w])
    with gm:
        loss = F.sum(w * mg.tensor(np.full(3, grad_value, np.float32))) * loss_scale
        scaler.backward(gm, loss)
    return w


def test_grad_scaler_unscales_exactly_and_counts_towards_growth():
    scaler = amp.GradScaler(init_scale=1024.0, growth_interval=2)
    w = _scaled_step(scaler, 0.375)
    np.testing.assert_array_equal(w.grad.numpy(), np.full(3, 0.375, np.float32))
    assert scaler.scale_factor == 1024.0
    _scaled_step(scaler, 0.5)
    assert scaler.scale_factor == 2048.0  # two finite steps in a row
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_grad_scaler_drops_non_finite_gradients_and_backs_off():
    scaler = amp.GradScaler(init_scale=2.0 ** 10)
    w = _scaled_step(scaler, np.inf)
    assert w.grad is None and scaler.scale_factor == 2.0 ** 9
    opt = mg.optim.SGD([w], lr=0.1)
    before = w.numpy().copy()
    opt.step()  # a weight without a gradient is skipped
    np.testing.assert_array_equal(w.numpy(), before)
    fixed = amp.GradScaler(init_scale=4.0, growth_interval=0)
    assert _scaled_step(fixed, 0.5).grad is not None and fixed.scale_factor == 4.0


def test_grad_scaler_refuses_bad_arguments():
    with pytest.raises(GraphError, match="init_scale"):
        amp.GradScaler(init_scale=0.0)
    with pytest.raises(GraphError, match="growth_interval"):
        amp.GradScaler(growth_interval=-1)


def test_a_scaled_float16_mlp_trains_like_its_float32_twin():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 10)).astype(np.float32)
    labels = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    init = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in [(16, 10), (16,),
                                                                         (2, 16), (2,)]]

    def train(mixed: bool):
        params = [nn.Parameter(a.copy()) for a in init]
        gm, opt = mg.GradManager().attach(params), mg.optim.SGD(params, lr=0.5)
        scaler = amp.GradScaler(init_scale=2.0 ** 12)
        losses = []
        for _ in range(40):
            with amp.autocast(enabled=mixed), gm:
                w1, b1, w2, b2 = params
                h = F.relu(F.linear(mg.tensor(x), w1, b1))
                loss = F.cross_entropy(F.linear(h, w2, b2), mg.tensor(labels))
                scaler.backward(gm, loss) if mixed else gm.backward(loss)
            opt.step().clear_grad()
            losses.append(float(loss.numpy()))
        return losses, params

    mixed, full = train(True), train(False)
    assert all(p.dtype == F32 for p in mixed[1])
    assert mixed[0][-1] < 0.5 * mixed[0][0]
    assert abs(mixed[0][-1] - full[0][-1]) < 0.05
