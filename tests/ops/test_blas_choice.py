"""The BLAS as a measured choice: OpenBLAS always, MKL where installed and faster; the same
numbers (within float rounding) whichever runs, and a cache that cannot go wrong silently."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from threads import run_in_threads

import mgegraph as mg
from mgegraph._kernels import blas_select, blas_table, linalg
from mgegraph.ir.errors import GraphError

MKL, WHY_NOT = blas_select.load_mkl()
needs_mkl = pytest.mark.skipif(MKL is None, reason=f"MKL is not usable here: {WHY_NOT}")


@pytest.fixture(autouse=True)
def restore_the_choice():
    before = blas_select.choice()
    yield
    blas_table.use(before.name, MKL if before.name == "mkl" else None)


def gemm_plans():
    """Float32 and float64 GEMMs and GEMVs with both transposes, and what they equal."""
    rng = np.random.default_rng(0)
    w, v = rng.standard_normal((70, 45)).astype(np.float32), rng.standard_normal((70, 70))
    feeds = {"a": rng.standard_normal((33, 70)).astype(np.float32),
             "b": rng.standard_normal((70, 1))}
    g = mg.Graph()
    a, b = g.input("a", (33, 70), "float32"), g.input("b", (70, 1), "float64")
    gw, gv = g.param("w", w), g.param("v", v)
    plan = mg.compile([a @ gw, mg.functional.matmul(a, a, transpose_b=True), gv @ b,
                       mg.functional.matmul(gv, gv, transpose_a=True)])
    a64 = feeds["a"].astype(np.float64)
    return plan, feeds, [a64 @ w, a64 @ a64.T, v @ feeds["b"], v.T @ v]


def test_openblas_is_chosen_on_request_and_computes_the_gemms():
    assert blas_select.select("openblas").name == "openblas"
    assert blas_table.current() == "openblas"
    plan, feeds, wanted = gemm_plans()
    for got, want in zip(plan.run(feeds), wanted):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)


@needs_mkl
def test_mkl_gives_the_same_numbers_as_openblas():
    plan, feeds, _ = gemm_plans()
    blas_select.select("openblas")
    with_openblas = plan.run(feeds)
    chosen = blas_select.select("mkl")
    assert chosen.name == blas_table.current() == "mkl"
    for got, want in zip(plan.run(feeds), with_openblas):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_wrong_setting_is_a_clear_error():
    with pytest.raises(GraphError, match="MGEGRAPH_BLAS='atlas' is not one of auto, openblas"):
        blas_select.select("atlas")


def test_asking_for_mkl_without_it_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(blas_select, "load_mkl", lambda: (None, "libmkl_rt is not installed"))
    with pytest.raises(GraphError, match="MGEGRAPH_BLAS=mkl.*not installed.*mgegraph\\[mkl\\]"):
        blas_select.select("mkl")
    assert blas_select.select("auto").name == "openblas"  # auto without MKL: no calibration


@needs_mkl
def test_auto_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    path = tmp_path / "blas.json"
    calls = []

    def fake(mkl):
        calls.append(1)
        return {"openblas": 2.0, "mkl": 1.0}

    monkeypatch.setattr(blas_select, "calibrate", fake)
    first = blas_select.select("auto", cache=path)
    second = blas_select.select("auto", cache=path)
    assert calls == [1] and first.name == second.name == "mkl"
    assert "cached" in second.reason and blas_table.current() == "mkl"
    assert json.loads(path.read_text())[blas_select.machine_key(MKL)] == {"openblas": 2.0,
                                                                          "mkl": 1.0}


@needs_mkl
@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"k": {"openblas": -1}}', ""])
def test_a_corrupted_cache_is_measured_again(tmp_path, monkeypatch, content):
    path = tmp_path / "blas.json"
    path.write_text(content)
    monkeypatch.setattr(blas_select, "calibrate", lambda mkl: {"openblas": 1.0, "mkl": 1.0})
    chosen = blas_select.select("auto", cache=path)
    assert chosen.name == "openblas"  # equal times: OpenBLAS keeps its place (MARGIN)
    assert blas_select.machine_key(MKL) in json.loads(path.read_text())


@pytest.mark.parametrize("content", ["[" * 200_000, '{"k": {"openblas": true, "mkl": 1}}',
                                     '{"k": {"openblas": Infinity, "mkl": 1}}',
                                     '{"k": {"openblas": NaN, "mkl": 1}}'])
def test_a_hostile_cache_file_is_no_cache(tmp_path, content):
    path = tmp_path / "blas.json"
    path.write_text(content)
    assert blas_select._read_cache(path) == {}


@needs_mkl
def test_a_real_calibration_times_both_and_leaves_openblas_in_place():
    seconds = blas_select.calibrate(MKL)
    assert set(seconds) == {"openblas", "mkl"} and all(s > 0 for s in seconds.values())
    assert blas_table.current() == "openblas"


def test_the_probe_checks_its_buffers():
    small = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="too small"):
        blas_table.time_sgemm(8, 8, 8, small, small, small, 1)
    with pytest.raises(ValueError, match="addresses"):
        blas_table.use("mkl", {"sgemm": 0})


# -- known before either library loads: the thread policy is decided from it --------------------
def test_expected_name_follows_the_setting_and_the_installed_libraries(monkeypatch):
    monkeypatch.setenv("MGEGRAPH_BLAS", "openblas")
    assert blas_select.expected_name() == "openblas"
    monkeypatch.setenv("MGEGRAPH_BLAS", "auto")
    monkeypatch.setattr(blas_select, "mkl_path", lambda: None)
    assert blas_select.expected_name() == "openblas"  # auto without MKL: nothing to measure


@needs_mkl
@pytest.mark.parametrize("seconds, name", [({"openblas": 2.0, "mkl": 1.0}, "mkl"),
                                           ({"openblas": 1.0, "mkl": 1.0}, "openblas")])
def test_expected_name_is_what_the_cached_measurement_will_choose(tmp_path, monkeypatch,
                                                                  seconds, name):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("MGEGRAPH_BLAS", "auto")
    assert blas_select.expected_name() is None  # not measured on this machine yet
    monkeypatch.setattr(blas_select, "calibrate", lambda mkl: dict(seconds))
    chosen = blas_select.select("auto", cache=blas_select.cache_file())
    assert blas_select.expected_name() == chosen.name == name
    monkeypatch.setenv("MGEGRAPH_BLAS", "mkl")
    assert blas_select.expected_name() == "mkl"


def _policy_in_a_fresh_process(**env) -> str:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MGEGRAPH_BLAS")}
    code = ("import os, mgegraph._kernels; "
            "print(os.environ.get('OMP_WAIT_POLICY', 'libgomp default'))")
    done = subprocess.run([sys.executable, "-c", code],
                          env={**base, **env}, capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout.strip()


def test_idle_threads_sleep_only_beside_a_second_pool_and_a_users_policy_wins():
    # OpenBLAS with its per-thread count has its GEMMs split on the one pool (linalg.pyx);
    # without it, its own pthread pool runs them beside ours
    split = bool(blas_select.openblas_addresses())
    assert _policy_in_a_fresh_process(MGEGRAPH_BLAS="openblas") == \
        ("libgomp default" if split else "PASSIVE")
    assert _policy_in_a_fresh_process(MGEGRAPH_BLAS="openblas",
                                      OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert _policy_in_a_fresh_process(MGEGRAPH_BLAS="openblas",
                                      GOMP_SPINCOUNT="1000") == "libgomp default"


@needs_mkl
def test_idle_threads_spin_a_while_when_mkl_shares_their_pool():
    assert _policy_in_a_fresh_process(MGEGRAPH_BLAS="mkl") == "libgomp default"


# -- OpenBLAS: GEMMs split among the plan's threads, one single-threaded BLAS call each ----------
def test_openblas_gemms_are_split_by_the_plan_and_give_the_same_bits_on_one_core_or_two():
    blas_select.select("openblas")
    if not blas_table.splits_gemms():
        pytest.skip("this OpenBLAS has no per-thread thread count: its own pool runs the GEMMs")
    rng = np.random.default_rng(3)
    for dtype in ("float32", "float64"):
        for (m, n, k), ta, tb in [((128, 1024, 784), False, True), ((300, 37, 500), True, False),
                                  ((40, 2000, 300), True, True), ((1000, 1000, 8), False, False)]:
            a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
            b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
            g = mg.Graph()
            y = mg.functional.matmul(g.input("a", a.shape, dtype), g.input("b", b.shape, dtype),
                                     transpose_a=ta, transpose_b=tb)
            with threadpool_limits(2):
                plan = mg.compile([y])
                (two,) = plan.run({"a": a, "b": b})
            with threadpool_limits(1):
                (one,) = plan.run({"a": a, "b": b})
            want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b)
            np.testing.assert_allclose(two, want, rtol=1e-4 if dtype == "float32" else 1e-10,
                                       atol=1e-3 if dtype == "float32" else 1e-9)
            assert one.tobytes() == two.tobytes(), (dtype, m, n, k)


@pytest.mark.parametrize("blas", ["openblas"] + (["mkl"] if MKL is not None else []))
def test_a_single_row_is_split_by_columns_on_either_blas_with_the_same_bits(blas):
    # a gemv reads its whole matrix once: its bytes plan the threads (3 MiB: two), and its
    # column blocks give the bits one core gives
    blas_select.select(blas)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 784)).astype(np.float32)
    w = rng.standard_normal((784, 1024)).astype(np.float32)
    g = mg.Graph()
    y = g.input("a", a.shape, "float32") @ g.param("w", w)
    with threadpool_limits(2):
        plan = mg.compile([y])
        (two,) = plan.run({"a": a})
    (ins,) = plan.instructions
    assert dict(zip(linalg.MATMUL_FIELDS, ins.ints))["threads"] == 2
    with threadpool_limits(1):
        (one,) = plan.run({"a": a})
    assert one.tobytes() == two.tobytes()
    np.testing.assert_allclose(two, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


def test_a_split_gemm_gives_the_callers_blas_thread_count_back():
    # SciPy's OpenBLAS keeps its "per-thread" count for the whole process: the parts must not
    # leave it at the 1 they ran with (every later GEMM outside the plan would run on one core)
    blas_select.select("openblas")
    if not blas_table.splits_gemms():
        pytest.skip("this OpenBLAS has no per-thread thread count")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    def product():
        g = mg.Graph()
        return mg.compile([g.input("x", x.shape, "float32") @ g.param("v", x.T.copy())])

    with threadpool_limits(2):
        plans = [product(), product()]
        before = blas_table.local_threads(7)
        for _ in range(20):
            plans[0].run({"x": x})
        assert blas_table.local_threads(7) == 7
        # two plans at once, from two threads: the last one out restores it

        def runs(plan):
            for _ in range(50):
                plan.run({"x": x})

        failures = run_in_threads(runs, [(p,) for p in plans])
        assert not failures
        assert blas_table.local_threads(before) == 7
