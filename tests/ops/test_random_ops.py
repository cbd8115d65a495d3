"""The random-draw ops (ops/random.py, kernels _kernels/rng.pyx over rng_sample.h): uniform
bits against a NumPy rendering of the counter-based generator, bitwise; a draw is a pure
function of (seed, step); a plan advancing its step draws anew; bad types are refused."""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import nn
from mgegraph.ops.builder import apply

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def reference_uniform(seed: int, step: int, n: int, dtype):
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) + GOLDEN)
        key = _mix(key ^ _mix(np.uint64(step) + GOLDEN))
        bits = _mix(key + np.arange(n, dtype=np.uint64) * GOLDEN)
    if dtype == np.float32:
        return ((bits >> np.uint64(40)).astype(np.float64) * 2.0**-24).astype(np.float32)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _plan(op, dtype=np.float32, n=1000, seed=11):
    g = mg.Graph()
    step = g.input("step", (), "int64")
    if op == "rng_uniform":
        out = apply(op, (step,), shape=(n,), dtype=np.dtype(dtype).name, seed=seed)
    else:
        out = apply(op, (g.input("p", (n,), dtype), step), seed=seed)
    return mg.compile([out])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_bits_are_the_counter_based_generators(dtype):
    plan = _plan("rng_uniform", dtype, seed=2**64 - 5)
    for step in (0, 1, -3):
        (got,) = plan.run({"step": np.array(step, np.int64)})
        want = reference_uniform(2**64 - 5, step & (2**64 - 1), 1000, dtype)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == dtype and got.min() >= 0 and got.max() < 1


@pytest.mark.parametrize("op", ["rng_gamma", "rng_poisson"])
def test_a_draw_is_a_function_of_seed_and_step(op):
    plan = _plan(op, np.float64)
    p = np.full(1000, 3.5)
    a, b = (plan.run({"p": p, "step": np.array(s, np.int64)})[0] for s in (4, 4))
    c = plan.run({"p": p, "step": np.array(5, np.int64)})[0]
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.5
    f32 = _plan(op, np.float32).run({"p": p.astype(np.float32), "step": np.array(4, np.int64)})
    np.testing.assert_array_equal(f32[0], a.astype(np.float32))  # double sampled, rounded once


def test_a_plan_that_assigns_its_step_draws_new_numbers_each_run():
    counter = nn.Buffer(np.zeros((), np.int64))
    g = mg.Graph()
    step = g.bind(counter)
    g.assign(step, step + 1)
    plan = mg.compile([apply("rng_uniform", (step,), shape=(16,), seed=1)])
    runs = [plan.run({})[0] for _ in range(3)]
    assert int(counter.value) == 3
    np.testing.assert_array_equal(runs[1], reference_uniform(1, 1, 16, np.float32))
    assert not (runs[0] == runs[1]).all()


def test_bad_parameters_fail_in_the_kernel_and_bad_types_in_the_rule():
    plan = _plan("rng_gamma", np.float32, n=3)
    with pytest.raises(mg.KernelError, match="rng_gamma.*a value is invalid"):
        plan.run({"p": np.array([1, 0, 2], np.float32), "step": np.array(0, np.int64)})
    plan = _plan("rng_poisson", np.float32, n=2)
    with pytest.raises(mg.KernelError, match="rng_poisson.*a value is invalid"):
        plan.run({"p": np.array([1, np.nan], np.float32), "step": np.array(0, np.int64)})
    g = mg.Graph()
    with pytest.raises(mg.OpError, match="rng_uniform.*step input must be one int64"):
        apply("rng_uniform", (g.input("s", (), "int32"),), shape=(2,))
    with pytest.raises(mg.OpError, match="rng_uniform.*dtype must be float32 or float64"):
        apply("rng_uniform", (g.input("t", (), "int64"),), shape=(2,), dtype="int32")
    with pytest.raises(mg.OpError, match="rng_gamma.*not supported"):
        apply("rng_gamma", (g.input("i", (2,), "int32"), g.input("u", (), "int64")))
    with pytest.raises(mg.OpError, match="seed must be an int"):
        apply("rng_uniform", (g.input("v", (), "int64"),), shape=(2,), seed=1.5)


def test_model_file_round_trip(tmp_path):
    plan = _plan("rng_poisson", np.float32, n=50)
    mg.save(plan, tmp_path / "m.mgm")
    loaded = mg.load(tmp_path / "m.mgm")
    feeds = {"p": np.full(50, 2.0, np.float32), "step": np.array(9, np.int64)}
    np.testing.assert_array_equal(loaded.run(feeds)[0], plan.run(feeds)[0])
