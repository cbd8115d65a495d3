"""The executor under threads, fork and Ctrl-C (issue 14, items 3-5)."""
import multiprocessing
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
from threads import run_in_threads

import mgegraph as mg
import mgegraph.functional as F

# big enough that the fused kernel runs on every OpenMP thread (lowering.fused.PARALLEL_WORK)
N_BIG = 1 << 20


def big_chain_plan():
    g = mg.Graph()
    x = g.input("x", (N_BIG,), "float32")
    y = F.tanh(F.exp(x) * 0.5 + 1.0) * 3.0 - x
    return mg.compile([y])


_FORK_PLAN = None


def _run_in_child(seed):
    x = np.random.default_rng(seed).standard_normal(N_BIG).astype(np.float32)
    return _FORK_PLAN.run({"x": x})[0]


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_forked_children_run_a_threaded_plan():
    global _FORK_PLAN
    from mgegraph._kernels import fused
    _FORK_PLAN = plan = big_chain_plan()
    expected = [_run_in_child(s) for s in range(2)]  # the parent starts its OpenMP pool
    assert fused.max_threads() >= 1
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map_async(_run_in_child, range(2)).get(timeout=60)
    for e, r in zip(expected, got):
        np.testing.assert_array_equal(e, r)
    _FORK_PLAN = None
    assert plan.run({"x": np.zeros(N_BIG, np.float32)})[0].shape == (N_BIG,)


def slow_plan(steps=300):
    g = mg.Graph()
    x = g.input("x", (256, 256), "float32")
    y = x
    for _ in range(steps):
        y = F.matmul(y, x) * 0.001
    return mg.compile([y], optimize=0)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach the main thread only")
def test_ctrl_c_stops_a_long_run_and_the_plan_stays_usable():
    plan = slow_plan()
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) * 0.1
    expected = plan.run({"x": x})[0]  # the first run also makes the executable: not timed
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        plan.run({"x": x})
        runs.append(time.perf_counter() - start)
    took = sorted(runs)[1]
    executor = plan.executable().executor
    n = len(executor)
    assert executor.ran == n
    # the signal comes an eighth, a quarter or half into a run (as long as this machine takes
    # for one, so a loaded or sanitised build does not finish first); tries absorb scheduling
    # delays (on a loaded machine the timer thread may wake after the run ended)
    for k in range(12):
        timer = threading.Timer(took * (0.125, 0.25, 0.5)[k % 3], os.kill,
                                (os.getpid(), signal.SIGINT))
        interrupted = False
        try:
            try:
                timer.start()
                plan.run({"x": x})
            finally:
                timer.join()
        except KeyboardInterrupt:
            interrupted = True
        if interrupted and executor.ran < n:
            break
    assert interrupted
    assert executor.ran < n  # stopped between instructions, not after the whole run
    np.testing.assert_array_equal(plan.run({"x": x})[0], expected)
    assert executor.ran == n


def test_one_plan_from_many_threads_matches_serial_runs_bitwise():
    g = mg.Graph()
    x = g.input("x", (64, 128), "float32")
    w = g.param("w", np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32))
    v = g.param("v", np.random.default_rng(2).standard_normal((256, 32)).astype(np.float32))
    y = F.matmul(F.relu(F.matmul(x, w)), v)
    plan = mg.compile([F.tanh(y), F.sum(y)])
    feeds = [np.random.default_rng(10 + i).standard_normal((64, 128)).astype(np.float32)
             for i in range(8)]
    serial = [plan.run({"x": f}) for f in feeds]
    errors = []

    def work(i):
        for _ in range(50):
            got = plan.run({"x": feeds[i]})
            if not all(np.array_equal(a, b) for a, b in zip(got, serial[i])):
                errors.append(i)

    assert run_in_threads(work, [(i,) for i in range(8)]) == []
    assert errors == []


def _adam_model(traced: bool):
    """A linear model of fixed weights, its Adam optimiser and one training step on a fixed
    batch (the same batch every step: steps from two threads are then the same steps in any
    order)."""
    from mgegraph import nn

    model = nn.Linear(16, 4)
    model.weight.value = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    model.bias.value = np.zeros(4, np.float32)
    opt = mg.optim.Adam(model.parameters(), lr=1e-2)
    gm = mg.GradManager().attach(model.parameters())
    rng = np.random.default_rng(5)
    x = mg.tensor(rng.standard_normal((32, 16)).astype(np.float32))
    y = mg.tensor(rng.standard_normal((32, 4)).astype(np.float32))

    def step():
        with gm:
            loss = ((model(x) - y) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    return model, opt, (mg.jit.trace(step) if traced else step)


def _assert_threads_match_serial_steps(model_and_step):
    """101 steps from one thread and 50 + 51 from two give bitwise the same weights (every
    step sees the same batch, so their order cannot matter)."""
    serial, step = model_and_step()
    for _ in range(101):
        step()
    threaded, step2 = model_and_step()
    _in_threads(step2, [50, 51])
    for a, b in zip(serial.parameters(), threaded.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _in_threads(work, counts):
    def run(n):
        for _ in range(n):
            work()

    assert run_in_threads(run, [(n,) for n in counts]) == []


def test_a_traced_adam_step_from_two_threads_matches_serial_steps_bitwise():
    serial, opt, step = _adam_model(traced=True)
    for _ in range(101):
        step()
    threaded, opt2, step2 = _adam_model(traced=True)
    _in_threads(step2, [50, 51])  # both threads' first calls meet the recording
    assert opt2.step_count == opt.step_count == 101
    for a, b in zip(serial.parameters(), threaded.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_eager_adam_steps_from_two_threads_match_serial_steps_bitwise():
    def model_and_step():
        model, opt, _ = _adam_model(traced=False)
        grads = [np.full(p.shape, 0.5, np.float32) for p in model.parameters()]

        def step():  # the same gradients every step: their order cannot matter
            for p, g in zip(model.parameters(), grads):
                p.grad = mg.tensor(g)
            opt.step()

        return model, step

    _assert_threads_match_serial_steps(model_and_step)


def test_a_compiled_train_step_from_two_threads_matches_serial_steps_bitwise():
    def model_and_step():
        model, opt, _ = _adam_model(traced=False)
        rng = np.random.default_rng(6)
        batch = (rng.standard_normal((32, 16)).astype(np.float32), np.arange(32) % 4)
        step = mg.compile_train_step(model, F.cross_entropy, opt, batch)
        return model, lambda: step(*batch)

    _assert_threads_match_serial_steps(model_and_step)


def test_get_backend_from_many_threads_makes_one_backend():
    import time

    from mgegraph import backend as B
    made = []

    def factory():  # a slow first use (importing, resolving kernels) lets other threads in
        time.sleep(0.05)
        made.append(object())
        return made[-1]

    B.register_backend("slow_for_threads", factory)
    try:
        got = []
        raised = run_in_threads(lambda: got.append(B.get_backend("slow_for_threads")),
                                [()] * 8)
    finally:
        B.unregister_backend("slow_for_threads")
    assert raised == [] and len(made) == 1 and all(b is made[0] for b in got)


_BLAS_PLANS = None


def _blas_plans():
    g, h = mg.Graph(), mg.Graph()
    a, b = g.input("a", (256, 256)), g.input("b", (256, 256))
    img, w = h.input("img", (2, 16, 32, 32)), h.input("w", (32, 16, 3, 3))
    return mg.compile([F.matmul(a, b)]), mg.compile([F.conv2d(img, w, padding=1)])


def _blas_feeds(seed):
    rng = np.random.default_rng(seed)
    return ({"a": rng.standard_normal((256, 256), np.float32),
             "b": rng.standard_normal((256, 256), np.float32)},
            {"img": rng.standard_normal((2, 16, 32, 32), np.float32),
             "w": rng.standard_normal((32, 16, 3, 3), np.float32)})


def _run_blas_in_child(seed):
    (gemm, conv), (fg, fc) = _BLAS_PLANS, _blas_feeds(seed)
    return gemm.run(fg)[0], conv.run(fc)[0]


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_forked_children_run_gemm_and_conv_plans_after_the_parent_did():
    # the parent's BLAS has started its threads before the fork; a child that inherited a
    # BLAS pool it cannot use would hang: the timeout makes that a failure, not a stuck suite
    global _BLAS_PLANS
    _BLAS_PLANS = _blas_plans()
    expected = [_run_blas_in_child(s) for s in range(2)]
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            got = pool.map_async(_run_blas_in_child, range(2)).get(timeout=60)
    finally:
        _BLAS_PLANS = None
    for (eg, ec), (rg, rc) in zip(expected, got):
        np.testing.assert_array_equal(eg, rg)
        np.testing.assert_array_equal(ec, rc)


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_forked_children_run_gemms_after_threadpoolctl_limited_the_parent():
    # threadpoolctl restores MKL's threads through a per-thread count, which outranks the
    # global one a fork hook sets: the child's GEMM then opened the parent's pool and hung
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        pass
    test_forked_children_run_gemm_and_conv_plans_after_the_parent_did()
