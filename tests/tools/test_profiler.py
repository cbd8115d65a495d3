"""mg.profile: per-instruction wall times from the executor's C loop,
the table, the Chrome trace, threads, nesting, failures and every front end that runs plans."""
import itertools
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.ir.errors import ProfileError
from mgegraph.tools.profiler import instruction_bytes, instruction_flops

RNG = np.random.default_rng(0)
N_ADDS = 40


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def gemm_and_adds(n=384):
    """One big GEMM and N_ADDS tiny adds (unfused: optimize=0)."""
    g = mg.Graph()
    x, b = g.input("x", (n, n)), g.input("b", (4,))
    y = F.matmul(x, g.param("w", rand(n, n)))
    c = b
    for _ in range(N_ADDS):
        c = c + b
    plan = mg.compile([y, c], optimize=0)
    return plan, {"x": rand(n, n), "b": rand(4)}


def small_plan():
    g = mg.Graph()
    x = g.input("x", (8, 16))
    y = F.relu(F.matmul(x, g.param("w", rand(16, 4)))) * 2.0
    return mg.compile([F.sum(y, axis=1)], optimize=0), {"x": rand(8, 16)}


def instruction_events(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "instruction"]


# -- the timings are real ------------------------------------------------------------------------
def test_the_big_gemm_takes_most_of_the_time():
    plan, feeds = gemm_and_adds(512)  # ~270 MFLOP against 40 adds of 4 elements
    with mg.profile(warmup=1) as prof:
        for _ in range(6):
            plan.run(feeds)
    ops = prof.ops()
    assert ops[0].op == "matmul" and ops[0].share > 50
    assert {r.op: r.calls for r in ops} == {"matmul": 5, "add": 5 * N_ADDS}
    first_row = prof.table().splitlines()[3]
    assert first_row.startswith("matmul ")
    assert all(r.seconds > 0 for r in ops)


def test_shares_sum_to_100_and_totals_are_the_recorded_durations():
    plan, feeds = gemm_and_adds(64)
    with mg.profile() as prof:
        for _ in range(4):
            plan.run(feeds)
    recorded = sum(int(run.times[:, 1].sum()) for run in prof.runs) * 1e-9
    for rows in (prof.ops(), prof.instructions(), prof.ops(average=True)):
        assert sum(r.share for r in rows) == pytest.approx(100.0)
    assert sum(r.seconds for r in prof.ops()) == pytest.approx(recorded)
    assert prof.profiled_seconds() == pytest.approx(recorded)
    assert sum(r.seconds for r in prof.ops(average=True)) == pytest.approx(recorded / 4)
    rows = prof.instructions()
    assert len(rows) == len(plan.instructions) and all(r.calls == 4 for r in rows)
    for r in rows:
        assert r.seconds == pytest.approx(sum(int(run.times[r.index, 1]) for run in prof.runs)
                                          * 1e-9)
        assert r.nbytes == 4 * instruction_bytes(plan, r.index)
        assert r.mean == pytest.approx(r.seconds / 4)


def test_average_gives_one_run_of_each_plan():
    plan, feeds = small_plan()
    other, other_feeds = gemm_and_adds(32)
    with mg.profile() as prof:
        for _ in range(5):
            plan.run(feeds)
        other.run(other_feeds)
    per_run = {(r.plan, r.index): r for r in prof.instructions(average=True)}
    total = {(r.plan, r.index): r for r in prof.instructions()}
    assert all(r.calls == 1 for r in per_run.values())
    for key, r in per_run.items():
        runs = 5 if key[0] == "plan0" else 1
        assert r.seconds == pytest.approx(total[key].seconds / runs)
    assert "per run of each plan" in prof.table(average=True)


def test_instruction_times_are_the_mean_per_instruction_and_land_on_the_plan():
    plan, feeds = small_plan()
    assert "instruction_times" not in plan._cache
    with mg.profile() as prof:
        for _ in range(3):
            plan.run(feeds)
    times = prof.instruction_times(plan)
    assert isinstance(times, tuple) and len(times) == len(plan.instructions)
    expected = np.mean([run.times[:, 1] for run in prof.runs], axis=0) * 1e-9
    np.testing.assert_allclose(times, expected)
    assert plan._cache["instruction_times"] == times
    assert prof.instruction_times(gemm_and_adds(8)[0]) is None


# -- FLOPs and bytes -----------------------------------------------------------------------------
def test_matmul_linear_and_conv_flops_are_the_formula():
    g = mg.Graph()
    a, b = g.input("a", (6, 7)), g.input("b", (7, 5))
    x = g.input("x", (2, 3, 10, 9))
    conv = F.conv2d(x, g.param("w", rand(8, 3, 3, 2)), stride=(1, 2), padding=(1, 0))
    lin = F.linear(a, g.param("lw", rand(11, 7)))
    plan = mg.compile([F.matmul(a, b), conv, lin], optimize=0)
    feeds = {"a": rand(6, 7), "b": rand(7, 5), "x": rand(2, 3, 10, 9)}
    flops = {ins.op: instruction_flops(plan, i) for i, ins in enumerate(plan.instructions)}
    assert flops["matmul"] == 2 * 6 * 5 * 7
    assert flops["linear"] == 2 * 6 * 11 * 7
    ho, wo = 10 + 2 - 3 + 1, (9 - 2) // 2 + 1
    assert flops["conv2d"] == 2 * (2 * 8 * ho * wo) * (3 * 3 * 2)
    with mg.profile() as prof:
        plan.run(feeds)
        plan.run(feeds)
    rows = {r.op: r for r in prof.ops()}
    assert rows["conv2d"].flops == 2 * flops["conv2d"]
    assert rows["conv2d"].gflops == pytest.approx(rows["conv2d"].flops / rows["conv2d"].seconds
                                                  / 1e9)


def test_elementwise_and_fused_flops_come_from_the_table_and_movement_has_none():
    g = mg.Graph()
    x = g.input("x", (3, 4))
    fused = mg.compile([F.relu(x * 2.0 + 1.0)])
    (ins,) = [i for i, s in enumerate(fused.instructions) if s.op == "fused_elementwise"]
    assert instruction_flops(fused, ins) == 3 * 12  # mul, add, relu: 1 FLOP each per element
    plan = mg.compile([F.exp(x), F.transpose(x, (1, 0)) + 0.0, F.sum(x)], optimize=0)
    by_op = {s.op: instruction_flops(plan, i) for i, s in enumerate(plan.instructions)}
    assert by_op["exp"] == 8 * 12 and by_op["add"] == 12
    assert by_op["sum"] is None
    assert instruction_bytes(plan, 0) == sum(plan.slots[s].nbytes for s in
                                             plan.instructions[0].inputs
                                             + plan.instructions[0].outputs)


# -- the Chrome trace ----------------------------------------------------------------------------
def test_trace_has_one_complete_event_per_instruction_per_run_in_order(tmp_path):
    plan, feeds = gemm_and_adds(48)
    with mg.profile() as prof:
        for _ in range(3):
            plan.run(feeds)
    prof.save_chrome_trace(tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text())
    events = instruction_events(trace)
    n = len(plan.instructions)
    assert len(events) == 3 * n
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    runs = [e for e in trace["traceEvents"] if e.get("cat") == "run"]
    assert len(runs) == 3 and all(r["args"]["complete"] for r in runs)
    for number, run in enumerate(runs):
        mine = [e for e in events if e["args"]["run"] == number]
        assert [e["args"]["instruction"] for e in mine] == list(range(n))
        assert [e["name"] for e in mine] == [ins.op for ins in plan.instructions]
        for e, nxt in itertools.pairwise(mine):
            assert e["ts"] + e["dur"] <= nxt["ts"] + 1e-3  # one after the other
        assert run["ts"] <= mine[0]["ts"] + 1e-3
        assert mine[-1]["ts"] + mine[-1]["dur"] <= run["ts"] + run["dur"] + 1e-3
    first = events[0]["args"]
    ins = plan.instructions[0]
    assert first["kernel"] == ins.kernel and first["location"] == ins.location
    assert first["outputs"] == [f"s{s} {plan.slots[s].type}" for s in ins.outputs]
    assert first["inputs"][0] == f"s{ins.inputs[0]} f32[48,48]" and first["plan"] == "plan0"
    assert first["flops"] == instruction_flops(plan, 0)


def test_each_thread_gets_its_lane_and_a_name():
    plan, feeds = small_plan()
    barrier = threading.Barrier(2)

    def work():
        barrier.wait()
        for _ in range(5):
            plan.run(feeds)

    with mg.profile() as prof:
        threads = [threading.Thread(target=work, name=f"worker-{k}") for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    trace = prof.chrome_trace()
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["worker-0", "worker-1"]
    assert {t.native_id for t in threads} == set(names)
    events = instruction_events(trace)
    assert len(events) == 10 * len(plan.instructions)
    for number in range(10):
        lanes = {e["tid"] for e in events if e["args"]["run"] == number}
        assert len(lanes) == 1  # a run stays in the lane of its thread
    assert "from 2 calling thread(s)" in prof.table()


# -- what runs plans -----------------------------------------------------------------------------
def _mlp():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def test_training_steps_predictors_and_traced_functions_are_recorded():
    x, y = rand(4, 6), np.array([0, 1, 2, 0], np.int64)
    model = _mlp()
    step = mg.compile_train_step(model, F.cross_entropy,
                                 optim.SGD(model.parameters(), lr=0.1), example_batch=(x, y))
    predict = mg.compile_module(model, example_inputs=(x,))

    @mg.jit.trace
    def traced(v):
        return F.relu(model(v))

    traced(x)  # records (eager) and compiles
    with mg.profile() as prof:
        step(x, y)
        predict(x)
        traced(x)
    ran = [run.plan for run in prof.runs]
    for plan in (step.plan, predict.plan, traced.plan):
        assert sum(p is plan for p in ran) == 1
        assert prof.instruction_times(plan) is not None
    assert len(instruction_events(prof.chrome_trace())) == sum(len(p.instructions) for p in ran)


def test_a_prologue_run_is_recorded_and_named_after_its_plan():
    g = mg.Graph()
    x = g.input("x", (4, 6))
    w = g.param("w", rand(6, 5), share=True)
    plan = mg.compile([F.matmul(x, F.exp(w) * 2.0)])
    assert plan.prologue is not None
    with mg.profile() as prof:
        plan.run({"x": rand(4, 6)})  # the executable is made here: the prologue runs once
    plans = [run.plan for run in prof.runs]
    assert plans[0] is plan.prologue and plans[1] is plan
    assert "plan0.prologue: " in prof.table()
    assert {e["args"]["plan"] for e in instruction_events(prof.chrome_trace())} == \
        {"plan0", "plan0.prologue"}


def test_check_numerics_plans_are_timed_one_instruction_at_a_time():
    g = mg.Graph()
    x = g.input("x", (4,))
    plan = mg.compile([F.sum(F.log(x) * 2.0)], check_numerics=True, optimize=0)
    with mg.profile() as prof:
        plan.run({"x": np.ones(4, np.float32)})
        with pytest.raises(mg.NumericsError):
            plan.run({"x": -np.ones(4, np.float32)})
    good, bad = prof.runs
    assert good.complete and len(good.times) == len(plan.instructions)
    assert not bad.complete and len(bad.times) == 1  # the log wrote the NaN
    assert (good.times[:, 1] >= 0).all() and (np.diff(good.times[:, 0]) > 0).all()


# -- results and the untimed path ----------------------------------------------------------------
def test_results_under_profiling_are_bitwise_those_without():
    x, y = rand(16, 6), np.array([0, 1, 2, 0] * 4, np.int64)
    results = []
    for profiled in (False, True):
        model = _mlp()
        step = mg.compile_train_step(model, F.cross_entropy,
                                     optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     example_batch=(x, y))
        with mg.profile() if profiled else _nothing():
            losses = [step(x, y) for _ in range(3)]
        results.append((losses, [p.value.copy() for p in model.parameters()]))
    (l0, p0), (l1, p1) = results
    assert [np.asarray(a).tobytes() for a in l0] == [np.asarray(a).tobytes() for a in l1]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(p0, p1))


def test_the_timed_loop_poisons_dead_buffers_as_the_untimed_one_does():
    g = mg.Graph()
    x, w = g.input("x", (1, 2, 6, 6)), g.input("w", (2, 2, 3, 3))
    plan = mg.compile([F.conv2d(x, w, padding=1)], memory="debug")
    feeds = {"x": rand(1, 2, 6, 6), "w": rand(2, 2, 3, 3)}
    (expected,) = plan.run(feeds)
    (ins,) = [i for i in plan.instructions if i.workspace is not None]
    workspace = plan.executable().buffers[ins.workspace]
    workspace[:] = 0
    with mg.profile() as prof:
        (got,) = plan.run(feeds)
    assert prof.runs[0].complete and got.tobytes() == expected.tobytes()
    assert workspace.size and (workspace == 0xFF).all()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Spy:
    """Stands in for an executable's Executor and records which loop ran."""

    def __init__(self, executor):
        self.executor, self.calls = executor, []

    def __getattr__(self, name):
        attr = getattr(self.executor, name)
        if name.startswith("run"):
            self.calls.append(name)
        return attr


def test_the_untimed_loop_runs_when_no_profile_is_active():
    plan, feeds = small_plan()
    executable = plan.executable()
    executable.executor = spy = _Spy(executable.executor)
    plan.run(feeds)
    assert spy.calls == ["run"]
    with mg.profile():
        plan.run(feeds)
    assert spy.calls == ["run", "run_timed"]
    plan.run(feeds)
    assert spy.calls == ["run", "run_timed", "run"]
    assert "instruction_times" in plan._cache


# -- nesting, concurrency, empty and failing profiles --------------------------------------------
def test_nested_profiles_each_record_their_window():
    plan, feeds = small_plan()
    with mg.profile() as outer:
        plan.run(feeds)
        with mg.profile() as inner:
            plan.run(feeds)
            plan.run(feeds)
            assert plan._cache["instruction_times"] == inner.instruction_times(plan)
        plan.run(feeds)
        assert plan._cache["instruction_times"] == outer.instruction_times(plan)
    assert len(outer.runs) == 4 and len(inner.runs) == 2
    assert all(any(r is o for o in outer.runs) for r in inner.runs)
    plan.run(feeds)
    assert len(outer.runs) == 4  # nothing after the profile ended


def test_concurrent_profiles_in_two_threads_both_see_runs_while_both_are_active():
    plan, feeds = small_plan()
    entered, ran, done = threading.Event(), threading.Event(), threading.Event()
    other = {}

    def second():
        with mg.profile() as prof:
            entered.set()
            ran.wait(10)
        other["prof"] = prof
        done.set()

    with mg.profile() as mine:
        plan.run(feeds)  # before the second profile began
        thread = threading.Thread(target=second)
        thread.start()
        entered.wait(10)
        plan.run(feeds)  # both record this one
        ran.set()
        done.wait(10)
        plan.run(feeds)  # the second ended
    thread.join()
    assert len(mine.runs) == 3
    assert len(other["prof"].runs) == 1 and other["prof"].runs[0] is mine.runs[1]


def test_a_profile_with_no_runs():
    with mg.profile() as prof:
        pass
    assert prof.runs == () and prof.ops() == [] and prof.instructions() == []
    assert prof.profiled_seconds() == 0.0
    assert "no plan ran inside this profile" in prof.table()
    trace = json.loads(json.dumps(prof.chrome_trace()))
    assert instruction_events(trace) == []
    assert {e["ph"] for e in trace["traceEvents"]} == {"M"}


def test_a_failing_run_is_recorded_up_to_the_failing_instruction():
    g = mg.Graph()
    x, idx = g.input("x", (2, 4)), g.input("i", (2, 2), "int64")
    y = F.gather(F.relu(x), 1, idx) + 1.0
    plan = mg.compile([y], optimize=0)
    failing = next(i for i, ins in enumerate(plan.instructions) if ins.op == "gather")
    good = {"x": rand(2, 4), "i": np.zeros((2, 2), np.int64)}
    bad = {"x": rand(2, 4), "i": np.full((2, 2), 9, np.int64)}
    with mg.profile() as prof:
        with pytest.raises(mg.KernelError, match="gather"):
            plan.run(bad)
        (expected,) = plan.run(good)
    failed, ok = prof.runs
    assert not failed.complete and len(failed.times) == failing + 1
    assert ok.complete and len(ok.times) == len(plan.instructions)
    calls = {r.index: r.calls for r in prof.instructions()}
    assert calls[failing] == 2 and calls[len(plan.instructions) - 1] == 1
    runs = [e for e in prof.chrome_trace()["traceEvents"] if e.get("cat") == "run"]
    assert [r["args"]["complete"] for r in runs] == [False, True]
    np.testing.assert_array_equal(expected, plan.run(good)[0])


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach the main thread only")
def test_ctrl_c_in_a_profiled_run_keeps_what_ran():
    g = mg.Graph()
    x = g.input("x", (192, 192))
    y = x
    for _ in range(150):
        y = F.matmul(y, x) * 0.001
    plan = mg.compile([y], optimize=0)
    feeds = {"x": rand(192, 192) * 0.1}
    start = time.perf_counter()
    plan.run(feeds)
    took = time.perf_counter() - start
    n = len(plan.instructions)
    for _ in range(10):  # a loaded machine may deliver the signal after the run ended
        with mg.profile() as prof:
            timer = threading.Timer(took / 4, os.kill, (os.getpid(), signal.SIGINT))
            try:
                timer.start()
                plan.run(feeds)
            except KeyboardInterrupt:
                pass
            finally:
                timer.join()
        if prof.runs and not prof.runs[0].complete:
            break
    (run,) = prof.runs
    assert not run.complete and 0 < len(run.times) < n
    assert (run.times[:, 1] >= 0).all()


def test_bad_arguments_raise_profile_errors_naming_them():
    with pytest.raises(ProfileError, match="warmup"):
        mg.profile(warmup=-1)
    prof = mg.profile()
    with pytest.raises(ProfileError, match="sort_by='time'.*total"):
        prof.table(sort_by="time")
    with pytest.raises(ProfileError, match="by='kernel'"):
        prof.table(by="kernel")
    with pytest.raises(ProfileError, match="top=0"):
        prof.table(top=0)
    with prof:
        pass
    with pytest.raises(ProfileError, match="already entered"), prof:
        pass


def test_warmup_leaves_out_the_first_runs_of_each_plan():
    plan, feeds = small_plan()
    with mg.profile(warmup=2) as prof:
        for _ in range(5):
            plan.run(feeds)
    assert len(prof.runs) == 3


def test_table_sorting_and_the_instruction_view():
    plan, feeds = gemm_and_adds(32)
    with mg.profile() as prof:
        plan.run(feeds)
    rows = prof.table(by="instruction", sort_by="order", top=None).splitlines()
    assert rows[2].split()[:2] == ["plan:#", "op"]
    assert [r.split()[0] for r in rows[3:]] == [f"plan0:{i}" for i in
                                                 range(len(plan.instructions))]
    assert "test_profiler.py:" in rows[3]
    by_calls = prof.table(sort_by="calls").splitlines()
    assert by_calls[3].startswith("add ")
    shown = prof.table(by="instruction", top=3).splitlines()
    assert len(shown) == 3 + 3 + 1 and shown[-1].startswith(f"... {len(plan.instructions) - 3} "
                                                             "more instructions")


def test_the_instruction_view_names_the_way_each_kernel_took():
    plan, feeds = gemm_and_adds(32)
    with mg.profile() as prof:
        plan.run(feeds)
    rows = prof.instructions()
    ways = {r.index: r.way for r in rows}
    for i, ins in enumerate(plan.instructions):  # a GEMM has ways, an add has one
        assert ways[i] == (ins.choice.path if ins.choice is not None else None)
    assert any(w is not None for w in ways.values())
    table = prof.table(by="instruction", sort_by="order", top=None).splitlines()
    gemm = next(i for i, w in ways.items() if w is not None)
    assert f"{plan.instructions[gemm].kernel} ({ways[gemm]}) " in table[3 + gemm]


def test_mg_profile_is_public():
    assert "profile" in mg.__all__ and mg.profile().__class__.__name__ == "Profile"
