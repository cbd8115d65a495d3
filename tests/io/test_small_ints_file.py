"""The model file holds the small integers: uint8, int8 and int16 inputs, constants, params and
casts save and load with their dtypes, and the loaded plan's outputs equal the compiled plan's
bitwise; a state dict of small-integer arrays round-trips; a feed of the wrong dtype is a
FeedError naming it."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime

SMALL = (np.uint8, np.int8, np.int16)


def small_plan(dt):
    info = np.iinfo(dt)
    g = mg.Graph()
    x = g.input("x", (3, 5), dtype=dt)
    table = g.param("table", np.arange(15, dtype=dt).reshape(3, 5))
    edges = g.const(np.array([info.min, info.max, 0, 1, 7], dt))
    mixed = x * table + edges                      # wraps as NumPy
    frame = F.pad(x, ((1, 0), (0, 1)), constant_value=3).T
    scaled = x.astype(np.float32) * 0.5 - 1.0
    return mg.compile([mixed, frame, scaled, F.maximum(x, edges) > 1,
                       scaled.astype(dt)]), x


@pytest.mark.parametrize("dt", SMALL)
def test_a_small_int_plan_round_trips_bitwise(tmp_path, dt):
    plan, _ = small_plan(dt)
    mg.save(plan, tmp_path / "m.mgm")
    predictor = runtime.load(tmp_path / "m.mgm")
    assert predictor.input_dtypes == (np.dtype(dt),)
    info = np.iinfo(dt)
    x = np.random.default_rng(1).integers(info.min, info.max, (3, 5), endpoint=True).astype(dt)
    got, want = predictor.run({"x": x}), plan.run({"x": x})
    for u, v in zip(got, want):
        assert u.dtype == v.dtype and u.tobytes() == v.tobytes()
    assert [v.dtype for v in got] == [np.dtype(dt), np.dtype(dt), np.dtype(np.float32),
                                      np.dtype(np.bool_), np.dtype(dt)]
    assert predictor.plan == plan
    loaded = mg.load(tmp_path / "m.mgm").plan
    assert all(u.tobytes() == v.tobytes() for u, v in zip(loaded.run({"x": x}), want))


@pytest.mark.parametrize("dt", SMALL)
def test_a_feed_of_another_dtype_is_refused_by_name(tmp_path, dt):
    plan, _ = small_plan(dt)
    mg.save(plan, tmp_path / "m.mgm")
    predictor = runtime.load(tmp_path / "m.mgm")
    with pytest.raises(mg.FeedError, match=np.dtype(dt).name):
        predictor.run({"x": np.zeros((3, 5), np.float32)})


def test_a_state_dict_of_small_ints_round_trips(tmp_path):
    state = {f"w_{np.dtype(dt).name}": np.arange(-3, 9).astype(dt).reshape(3, 4)
             for dt in SMALL}
    mg.save(state, tmp_path / "w.mgm")
    loaded = mg.load(tmp_path / "w.mgm")
    assert list(loaded) == list(state)
    for name, array in state.items():
        assert loaded[name].dtype == array.dtype and loaded[name].tobytes() == array.tobytes()
