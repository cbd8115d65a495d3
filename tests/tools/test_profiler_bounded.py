"""mg.profile over very many runs: every run is aggregated as it is recorded (calls, total,
fastest and slowest call per instruction), and only the first runs, up to ``trace_limit``
instruction events, are kept whole for the Chrome trace. Memory is judged by what is kept
(records, not RSS); the tables are judged against a profile that kept every run."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import ProfileError


def plan_and_feeds():
    g = mg.Graph()
    x = g.input("x", (8, 16))
    w = g.param("w", np.ones((16, 4), np.float32))
    plan = mg.compile([F.sum(F.relu(F.matmul(x, w)) * 2.0, axis=1)], optimize=0)
    return plan, {"x": np.ones((8, 16), np.float32)}


def test_a_long_profile_keeps_the_first_runs_and_aggregates_every_run():
    plan, feeds = plan_and_feeds()
    n = len(plan.instructions)
    with mg.profile(trace_limit=10**9) as everything, \
            mg.profile(trace_limit=5 * n + n // 2) as bounded:
        for _ in range(300):
            plan.run(feeds)
    assert everything.run_count == bounded.run_count == 300
    assert len(everything.runs) == 300
    assert len(bounded.runs) == 5 and bounded.runs == everything.runs[:5]
    # the tables of both are the same figures
    assert bounded.instructions() == everything.instructions()
    assert bounded.table(by="instruction") == everything.table(by="instruction")
    assert bounded.instruction_times(plan) == everything.instruction_times(plan)
    durations = np.array([run.times[:, 1] for run in everything.runs])
    rows = bounded.instructions()
    assert [r.calls for r in rows] == [300.0] * n
    assert [r.seconds for r in rows] == pytest.approx(list(durations.sum(axis=0) * 1e-9))
    assert [r.fastest for r in rows] == pytest.approx(list(durations.min(axis=0) * 1e-9))
    assert [r.slowest for r in rows] == pytest.approx(list(durations.max(axis=0) * 1e-9))


def test_a_trace_of_a_bounded_profile_says_what_it_left_out():
    plan, feeds = plan_and_feeds()
    n = len(plan.instructions)
    with mg.profile(trace_limit=2 * n) as prof:
        for _ in range(7):
            plan.run(feeds)
    trace = prof.chrome_trace()
    runs = [e for e in trace["traceEvents"] if e.get("cat") == "run"]
    assert len(runs) == 2 and trace["otherData"]["runs"] == 7
    assert trace["otherData"]["runs_in_trace"] == 2
    assert "the first 2 of 7 runs" in trace["otherData"]["note"]
    with mg.profile() as whole:
        plan.run(feeds)
    assert "note" not in whole.chrome_trace()["otherData"]


def test_trace_limit_zero_keeps_no_run_and_the_tables_still_count_them():
    plan, feeds = plan_and_feeds()
    with mg.profile(trace_limit=0) as prof:
        for _ in range(1000):
            plan.run(feeds)
    assert prof.runs == () and prof.run_count == 1000
    assert prof.chrome_trace()["otherData"]["runs_in_trace"] == 0
    assert all(r.calls == 1000 for r in prof.ops())
    assert prof.table().startswith("mg.profile: 1000 run(s) of 1 plan(s) from 1 calling")


def test_a_failed_run_counts_only_where_it_reached():
    g = mg.Graph()
    x = g.input("x", (4,))
    plan = mg.compile([F.log(x - 5.0) * 2.0 + 1.0], optimize=0, check_numerics=True)
    with mg.profile(trace_limit=0) as prof:
        plan.run({"x": np.full(4, 10.0, np.float32)})
        with pytest.raises(mg.NumericsError):
            plan.run({"x": np.ones(4, np.float32)})  # log of -4: NaN, the run stops there
    rows = prof.instructions()
    assert [r.op for r in rows] == ["sub", "log", "mul", "add"]
    assert [r.calls for r in rows] == [2, 2, 1, 1] and prof.run_count == 2


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_a_bad_trace_limit_is_a_profile_error_naming_it(bad):
    with pytest.raises(ProfileError, match="trace_limit"):
        mg.profile(trace_limit=bad)
