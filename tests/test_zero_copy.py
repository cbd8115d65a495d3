"""plan.run without copies: feeds read in place, outputs written where they are returned, and
the "arrays you own" contract kept in every case where that could go wrong."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import FeedError, KernelError

RNG = np.random.default_rng(0)


def chain_plan(n=1000):
    g = mg.Graph()
    x = g.input("x", (n,), "float32")
    a = g.input("a", (n,), "float32")
    return mg.compile([F.relu(x * a + 1.0) - F.tanh(x), x * 2.0])


def expected(x, a):
    return [np.maximum(x * a + np.float32(1), 0) - np.tanh(x), x * np.float32(2)]


def same(got, want):
    for g_, w in zip(got, want):
        np.testing.assert_allclose(g_, w, rtol=2e-6, atol=1e-6)


def test_feeds_are_read_in_place_and_never_written():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    x.flags.writeable = False  # a read-only feed is fine: nothing writes it
    keep = x.copy(), a.copy()
    same(plan.run({"x": x, "a": a}), expected(x, a))
    np.testing.assert_array_equal(x, keep[0])
    np.testing.assert_array_equal(a, keep[1])
    bound = plan.executable()._bound_feeds
    assert any(v is x for v in bound.values()) and any(v is a for v in bound.values())


def test_a_feed_changed_between_runs_is_read_anew():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    first = plan.run({"x": x, "a": a})
    x[:] = RNG.standard_normal(1000, dtype=np.float32)  # the same array, new values
    same(plan.run({"x": x, "a": a}), expected(x, a))
    assert not np.shares_memory(first[0], x)


@pytest.mark.parametrize("kind", ["strided", "unaligned", "fortran-2d"])
def test_feeds_that_cannot_be_read_in_place_are_copied(kind):
    g = mg.Graph()
    shape = (8, 6) if kind == "fortran-2d" else (48,)
    x = g.input("x", shape, "float32")
    plan = mg.compile([F.exp(x) + 1.0])
    base = RNG.standard_normal(200, dtype=np.float32)
    if kind == "strided":
        feed = base[::2][:48]
    elif kind == "unaligned":
        raw = np.empty(48 * 4 + 1, np.uint8)
        raw[1:] = base[:48].view(np.uint8)
        feed = raw[1:].view(np.float32)
        assert not feed.flags.aligned
    else:
        feed = np.asfortranarray(base[:48].reshape(8, 6))
    (y,) = plan.run({"x": feed})
    np.testing.assert_allclose(y, np.exp(feed) + 1, rtol=1e-6)
    assert not plan.executable()._bound_feeds


def test_the_same_array_fed_twice():
    plan = chain_plan()
    x = RNG.standard_normal(1000, dtype=np.float32)
    same(plan.run({"x": x, "a": x}), expected(x, x))


def test_an_output_fed_back_in_the_next_run():
    g = mg.Graph()
    x = g.input("x", (64,), "float64")
    plan = mg.compile([x * 0.5 + 1.0])
    value, want = np.zeros(64), np.zeros(64)
    for _ in range(20):
        (value,) = plan.run({"x": value})
        want = want * 0.5 + 1.0
        np.testing.assert_array_equal(value, want)


def test_returned_arrays_are_the_callers_alone():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    first = plan.run({"x": x, "a": a})
    keep = [f.copy() for f in first]
    second = plan.run({"x": a, "a": x})
    for f, k, s in zip(first, keep, second):
        np.testing.assert_array_equal(f, k)  # a later run wrote elsewhere
        assert not np.shares_memory(f, s)


def test_an_output_the_caller_dropped_is_reused():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    address = plan.run({"x": x, "a": a})[0].ctypes.data
    y = plan.run({"x": x, "a": a})[0]
    assert y.ctypes.data == address  # the pages of the dropped result, no fresh allocation
    held = plan.run({"x": x, "a": a})[0]
    assert held.ctypes.data != y.ctypes.data


def test_out_arrays_are_written_and_returned():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    out = [np.empty(1000, np.float32), None]
    got = plan.run({"x": x, "a": a}, out=out)
    assert got[0] is out[0] and got[1] is not None
    same(got, expected(x, a))
    # the executor alone (the benchmarks' timing) writes the plan's buffers, not out=
    before = out[0].copy()
    plan.executable().executor.run()
    np.testing.assert_array_equal(out[0], before)


def test_out_may_be_a_feed_of_the_same_run():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    want = expected(x, a)
    got = plan.run({"x": x, "a": a}, out=[x, None])  # y written over x, which the run reads
    assert got[0] is x
    same(got, want)


def test_out_arrays_that_are_not_contiguous_are_filled_by_a_copy():
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    holder = np.zeros(2000, np.float32)
    got = plan.run({"x": x, "a": a}, out=[holder[::2], None])
    same(got, expected(x, a))
    np.testing.assert_array_equal(holder[1::2], 0)


@pytest.mark.parametrize("out, message", [
    ([np.empty(1000, np.float32)], "list of 2"),
    ("no", "list of 2"),
    ([np.empty(999, np.float32), None], r"out\[0\] is float32\[999\]"),
    ([np.empty(1000, np.float64), None], r"out\[0\] is float64"),
    ([[0.0] * 1000, None], "numpy array"),
])
def test_bad_out_arguments_are_feed_errors(out, message):
    plan = chain_plan()
    x = np.ones(1000, np.float32)
    with pytest.raises(FeedError, match=message):
        plan.run({"x": x, "a": x}, out=out)


def test_read_only_and_overlapping_out_arrays_are_refused():
    plan = chain_plan()
    x = np.ones(1000, np.float32)
    frozen = np.empty(1000, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(FeedError, match="read-only"):
        plan.run({"x": x, "a": x}, out=[frozen, None])
    shared = np.empty(1000, np.float32)
    with pytest.raises(FeedError, match="overlaps"):
        plan.run({"x": x, "a": x}, out=[shared, shared])


def test_outputs_that_view_a_feed_or_each_other():
    g = mg.Graph()
    x = g.input("x", (2, 3, 4), "float32")
    y = x * 3.0
    plan = mg.compile([F.expand_dims(x, 1), y, F.reshape(y, (6, 4)), y], optimize=0)
    feed = RNG.standard_normal((2, 3, 4), dtype=np.float32)
    got = plan.run({"x": feed})
    np.testing.assert_array_equal(got[0][:, 0], feed)
    np.testing.assert_array_equal(got[1], feed * 3)
    np.testing.assert_array_equal(got[2], (feed * 3).reshape(6, 4))
    np.testing.assert_array_equal(got[3], feed * 3)
    assert not any(np.shares_memory(got[i], got[j]) for i in range(4) for j in range(i))
    assert not np.shares_memory(got[0], feed)


def test_a_feed_that_is_a_weight_the_run_assigns_is_read_before_the_update():
    g = mg.Graph()
    w = np.arange(4, dtype=np.float64)
    p = g.param("w", w, share=True)
    x = g.input("x", (4,), "float64")
    g.assign(p, p + x)
    plan = mg.compile([x * 10.0])
    (y,) = plan.run({"x": w})  # fed the very array the run updates
    np.testing.assert_array_equal(y, np.arange(4) * 10.0)
    np.testing.assert_array_equal(w, np.arange(4) * 2.0)


def test_a_failed_run_leaves_the_plan_correct():
    g = mg.Graph()
    x = g.input("x", (4,), "int32")
    e = g.input("e", (4,), "int32")
    plan = mg.compile([x ** e, x + 1])
    ok = np.arange(4, dtype=np.int32)
    with pytest.raises(KernelError):
        plan.run({"x": ok, "e": np.full(4, -1, np.int32)})
    got = plan.run({"x": ok, "e": np.full(4, 2, np.int32)})
    np.testing.assert_array_equal(got[0], ok ** 2)
    np.testing.assert_array_equal(got[1], ok + 1)


def test_switching_to_copies_after_in_place_runs():
    """A feed bound by an in-place run is unbound before the plan copies again, so the
    executor never reads an array the plan no longer holds."""
    plan = chain_plan()
    x, a = RNG.standard_normal((2, 1000), dtype=np.float32)
    plan.run({"x": x.copy(), "a": a.copy()})  # bound to arrays only the plan holds now
    plan.executable().in_place = False
    same(plan.run({"x": x, "a": a}), expected(x, a))
    assert not plan.executable()._bound_feeds
    plan.executable().executor.run()  # reads the plan's own buffers: the copies just made
