"""Eager tensors of uint8, int8 and int16: made from NumPy arrays, computed by the same kernels
as a compiled graph (wrapping as NumPy), promoted as NumPy, kept by Python scalars, traced and
replayed; an op without small-integer kernels is an OpError naming it and the dtype."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import GraphError, OpError

SMALL = (np.uint8, np.int8, np.int16)


def short(dt) -> str:
    return {np.uint8: "u8", np.int8: "i8", np.int16: "i16"}[dt]


def values(dt) -> np.ndarray:
    info = np.iinfo(dt)
    return np.array([[info.min, info.max, 0], [1, 7, info.max - 1]], dt)


@pytest.mark.parametrize("dt", SMALL)
def test_a_tensor_keeps_the_arrays_dtype_and_bits(dt):
    a = values(dt)
    t = mg.tensor(a)
    assert t.dtype == np.dtype(dt) and t.shape == (2, 3)
    assert t.numpy().tobytes() == a.tobytes()


@pytest.mark.parametrize("dt", SMALL)
def test_arithmetic_wraps_and_comparisons_give_bools_as_numpy(dt):
    a = values(dt)
    t = mg.tensor(a)
    with np.errstate(all="ignore"):
        pairs = [(t + t, a + a), (t * 3, a * dt(3)), (t - 1, a - dt(1)), (-t, -a),
                 (F.abs(t), np.abs(a)), (F.maximum(t, 5), np.maximum(a, dt(5))),
                 (t // 3, a // dt(3)), (t % 4, a % dt(4)), (t >= 7, a >= 7),
                 (t == t.T.T, a == a.T.T)]
    for k, (got, want) in enumerate(pairs):
        got = got.numpy()
        assert got.dtype == want.dtype and np.array_equal(got, want), (dt, k, got, want)


@pytest.mark.parametrize("dt", SMALL)
def test_casts_indexing_and_movement(dt):
    a = values(dt)
    t = mg.tensor(a)
    f = t.astype(np.float32) / 2
    assert f.dtype == np.float32 and np.array_equal(f.numpy(), a.astype(np.float32) / 2)
    back = mg.tensor(np.array([np.nan, 300.7, -1.5, 1e10], np.float32)).astype(dt)
    with np.errstate(all="ignore"):
        assert np.array_equal(back.numpy(), np.array([np.nan, 300.7, -1.5, 1e10],
                                                     np.float32).astype(dt))
    assert np.array_equal(t[:, ::-1].numpy(), a[:, ::-1])
    assert np.array_equal(F.concat([t, t], axis=0).numpy(), np.concatenate([a, a]))
    assert np.array_equal(t.transpose((1, 0)).numpy(), a.T)
    assert np.array_equal(F.where(t > 1, t, F.zeros_like(t)).numpy(), np.where(a > 1, a, 0))


@pytest.mark.parametrize("dt", SMALL)
def test_mixed_dtypes_promote_as_numpy(dt):
    a = values(dt)
    i32 = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = (mg.tensor(a) + mg.tensor(i32)).numpy()
    assert got.dtype == np.result_type(dt, np.int32) and np.array_equal(got, a + i32)
    got = (mg.tensor(a) * 0.5).numpy()
    assert got.dtype == np.result_type(dt, 0.5)


@pytest.mark.parametrize("dt", SMALL)
def test_refusals_name_the_op_and_dtype(dt):
    t = mg.tensor(values(dt))
    with pytest.raises(OpError, match=rf"matmul\({short(dt)}\[2,3\].*{np.dtype(dt)}"):
        t @ t.T
    if dt is np.uint8:  # the reductions read uint8 (as bool); sums are int64
        got = F.sum(t, axis=1).numpy()
        assert got.dtype == np.int64 and np.array_equal(got, values(dt).sum(1))
    else:
        with pytest.raises(OpError, match=f"sum has no kernels for {np.dtype(dt)}"):
            F.sum(t)
    with pytest.raises(GraphError, match="does not fit"):
        t + 70000


def test_a_trace_replays_a_uint8_frame_step():
    @mg.trace
    def prepare(frame):
        return frame.transpose((2, 0, 1)).astype(np.float32) / 255.0 - 0.5

    rng = np.random.default_rng(0)
    for _ in range(3):
        a = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
        got = prepare(mg.tensor(a)).numpy()
        want = a.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0) - np.float32(0.5)
        assert got.dtype == np.float32 and np.array_equal(got, want)
