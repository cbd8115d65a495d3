"""The measured choice of the kernels' ways, ``compile(tune=...)`` (mgegraph/tuning.py): the
modes, the store of choices per machine, what reaches the report, and a store that is corrupt,
unwritable or shared by threads."""
import dataclasses
import json
import os
import types

import numpy as np
import pytest
from threads import fresh_thread_openmp, run_in_threads

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim, tuning
from mgegraph._kernels import measure
from mgegraph.backend import get_backend
from mgegraph.plan import Choice

CPU = get_backend("cpu")
R = np.random.default_rng(5)
W1, W2, WL, X = (R.standard_normal(shape).astype(np.float32) for shape in (
    (16, 8, 3, 3), (16, 16, 3, 3), (10, 10), (2, 8, 10, 10)))


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    """Each test's own store of choices (the session's is shared by every test)."""
    path = tmp_path / "kernel_choices.json"
    monkeypatch.setenv("MGEGRAPH_TUNE_CACHE", str(path))
    return path


@pytest.fixture(autouse=True)
def fresh_threads():
    with fresh_thread_openmp():
        yield


@pytest.fixture
def measured(monkeypatch):
    """The calls of the CPU's measurer, counted (``measured.calls``)."""
    timing, log = CPU.measurer.time, types.SimpleNamespace(calls=0)

    def counted(*args):
        log.calls += 1
        return timing(*args)
    monkeypatch.setattr(CPU.measurer, "time", counted)
    return log


def forbid_measuring(monkeypatch):
    def refuse(*args):
        raise AssertionError("measured, where the stored choices should have served")
    monkeypatch.setattr(CPU.measurer, "time", refuse)


def net(batch=2, second=False):
    """conv + relu (+ a second conv) + linear over the last axis: two or three instructions
    with several ways."""
    g = mg.Graph()
    x = g.input("x", (batch, 8, 10, 10), np.float32)
    y = F.relu(F.conv2d(x, g.param("w1", W1), padding=1))
    if second:
        y = F.conv2d(y, g.param("w2", W2), padding=1)
    return F.linear(y, g.param("wl", WL))


def rows(plan):
    return plan.kernels_report().rows


def ways(plan):
    return [(r.op, r.path) for r in rows(plan)]


def hows(plan):
    return {r.how for r in rows(plan)}


def test_measure_times_every_way_and_stores_the_fastest(store, monkeypatch, measured):
    monkeypatch.setattr(measure, "HOPELESS", float("inf"))  # every way timed: a runner-up
    plan = mg.compile([net()], tune="measure")
    report = rows(plan)
    assert [r.op for r in report] == ["conv2d", "linear"] and measured.calls == 2
    for r in report:
        assert r.how == "measured" and r.seconds > 0
        assert r.runner_up not in (None, r.path) and r.runner_up_seconds >= r.seconds
    stored = json.loads(store.read_text())
    assert isinstance(stored, dict) and len(stored) == 2
    assert sorted(e["path"] for e in stored.values()) == sorted(r.path for r in report)


@pytest.mark.parametrize("mode", [None, "cached"])
def test_stored_choices_serve_without_measuring(monkeypatch, mode):
    first = mg.compile([net()], tune="measure")
    forbid_measuring(monkeypatch)
    plan = mg.compile([net()], tune=mode)
    assert ways(plan) == ways(first) and hows(plan) == {"cached"}
    assert [r.seconds for r in rows(plan)] == [r.seconds for r in rows(first)]


def test_measure_measures_again_whatever_is_stored(measured):
    mg.compile([net()], tune="measure")
    mg.compile([net()], tune="measure")
    assert measured.calls == 4


def test_rules_ignore_the_store(store, monkeypatch):
    by_rules = ways(mg.compile([net()], tune="rules"))
    assert not store.exists()
    mg.compile([net()], tune="measure")
    rules_of, stored_of, entries = dict(by_rules), {}, json.loads(store.read_text())
    for entry in entries.values():  # each stored as the way that the rules did not choose
        op = "linear" if entry["path"].startswith(("blas", "tiles")) else "conv2d"
        # the two ways measured are this CPU's candidates: one of them is not the rules' way
        entry["path"] = stored_of[op] = next(
            way for way in (entry["path"], entry["runner_up"]) if way != rules_of[op])
    store.write_text(json.dumps(entries))
    assert ways(mg.compile([net()])) == [("conv2d", stored_of["conv2d"]),
                                         ("linear", stored_of["linear"])]  # read by None
    forbid_measuring(monkeypatch)
    plan = mg.compile([net()], tune="rules")
    assert ways(plan) == by_rules and hows(plan) == {"rules"}


def test_cached_measures_only_what_is_missing(measured):
    mg.compile([net()], tune="measure")
    measured.calls = 0
    plan = mg.compile([net(second=True)], tune="cached")
    assert measured.calls == 1
    assert [(r.op, r.how) for r in rows(plan)] == [("conv2d", "cached"), ("conv2d", "measured"),
                                                   ("linear", "cached")]


def test_the_measured_plan_computes_what_the_rules_plan_does():
    (fast,) = mg.compile([net(second=True)], tune="measure").run({"x": X})
    (ruled,) = mg.compile([net(second=True)], tune="rules").run({"x": X})
    np.testing.assert_allclose(fast, ruled, rtol=1e-4, atol=1e-4 * np.abs(ruled).max())


CORRUPT_FILES = {
    "garbage bytes": b"\xff\xfe\x00\x9c garbage",
    "a JSON list": b"[1, 2, 3]",
    "a JSON number": b"42",
    "empty": b"",
    "cut short": b'{"abc": {"path": "im2col, 1 thread", "sec',
    "deeply nested": b"[" * 200_000,
}
@pytest.mark.parametrize("content", [pytest.param(v, id=k) for k, v in CORRUPT_FILES.items()])
def test_a_corrupt_store_is_ignored_then_replaced(store, content):
    by_rules = ways(mg.compile([net()], tune="rules"))
    store.write_bytes(content)
    plan = mg.compile([net()])
    assert ways(plan) == by_rules and hows(plan) == {"rules"}
    assert hows(mg.compile([net()], tune="cached")) == {"measured"}
    assert len(json.loads(store.read_text())) == 2


def _entry_broken(field, value):
    return lambda entry: {**entry, field: value}


MALFORMED = [
    pytest.param(_entry_broken("path", 3), id="path a number"),
    pytest.param(lambda entry: {k: v for k, v in entry.items() if k != "path"}, id="no path"),
    pytest.param(_entry_broken("seconds", "fast"), id="seconds a string"),
    pytest.param(_entry_broken("seconds", -1.0), id="seconds negative"),
    pytest.param(_entry_broken("runner_up", 7), id="runner-up a number"),
    pytest.param(lambda entry: [entry["path"]], id="a list"),
    pytest.param(_entry_broken("path", "warp drive, 9 threads"), id="a way no longer offered"),
    pytest.param(_entry_broken("seconds", True), id="seconds true"),
    pytest.param(_entry_broken("seconds", float("inf")), id="seconds Infinity"),
    pytest.param(_entry_broken("runner_up_seconds", "fast"), id="runner-up seconds a string"),
]


@pytest.mark.parametrize("breaks", MALFORMED)
def test_a_malformed_entry_is_ignored(store, breaks):
    by_rules = ways(mg.compile([net()], tune="rules"))
    mg.compile([net()], tune="measure")
    entries = json.loads(store.read_text())
    store.write_text(json.dumps({key: breaks(entry) for key, entry in entries.items()}))
    plan = mg.compile([net()])
    assert str(plan.kernels_report()).count("\n") == 3  # the title, the header, two rows
    assert ways(plan) == by_rules and hows(plan) == {"rules"}
    assert hows(mg.compile([net()], tune="cached")) == {"measured"}


@pytest.mark.parametrize("where", ["missing folders", "a file for a folder", "read-only"])
def test_an_unwritable_store_does_not_fail_a_compile(tmp_path, monkeypatch, where):
    folder = tmp_path / "a" / "b"
    if where == "a file for a folder":
        folder = tmp_path / "file"
        folder.write_text("not a folder")
    elif where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        folder.mkdir(parents=True)
        folder.chmod(0o500)
    monkeypatch.setenv("MGEGRAPH_TUNE_CACHE", str(folder / "k.json"))
    assert hows(mg.compile([net()], tune="measure")) == {"measured"}
    stored = where == "missing folders"
    assert hows(mg.compile([net()])) == ({"cached"} if stored else {"rules"})


def test_an_unknown_mode_is_a_value_error_naming_the_modes():
    for bogus in ("bogus", "Measure", True):
        with pytest.raises(ValueError, match=r"tune=.*None.*'rules'.*'measure'.*'cached'"):
            mg.compile([net()], tune=bogus)
    model = nn.Sequential(nn.Linear(4, 3))
    with pytest.raises(ValueError, match="'measure'"):
        mg.compile_module(model, (np.zeros((2, 4), np.float32),), tune="bogus")


class FakeMeasurer:
    """Times given per way's path (None: refused), whatever the machine does."""

    def __init__(self, seconds):
        self.seconds, self.asked = seconds, []

    def machine(self):
        return "a fake machine"

    def time(self, kernel, node, launches, budget):
        self.asked.append([launch.path for launch in launches])
        return [self.seconds(launch.path) for launch in launches]


def conv_node():
    g = mg.Graph()
    x, w = g.input("x", (2, 16, 12, 12), np.float32), g.input("w", (16, 16, 3, 3), np.float32)
    return g.add_node("conv2d", (x, w), {"padding": (1, 1)})


def test_the_tuner_takes_the_fastest_way_and_records_the_runner_up(store):
    node, impl = conv_node(), CPU.impl("conv2d")
    kernel, candidates = CPU.kernel("conv2d", np.float32), impl.candidates(node)
    paths = [c.path for c in candidates]
    times = {paths[-1]: 3e-6, paths[1]: 4e-6, paths[0]: None}  # the last fastest, one refused
    fake = FakeMeasurer(lambda path: times.get(path, 9e-6))
    tuner = tuning.Tuner(types.SimpleNamespace(measurer=fake), "measure")
    launch, choice = tuner.choose(node, impl, kernel)
    assert fake.asked == [paths]
    assert launch == candidates[-1]
    assert choice == Choice(paths[-1], "measured", 3e-6, paths[1], 4e-6)
    tuner.save()
    key = tuning.entry_key("a fake machine", node, kernel.name)
    assert json.loads(store.read_text())[key]["path"] == paths[-1]


def test_a_way_that_needs_far_more_scratch_than_the_rules_is_not_tried(store):
    node, impl = conv_node(), CPU.impl("conv2d")
    kernel, candidates = CPU.kernel("conv2d", np.float32), impl.candidates(node)
    rules = impl.lower(node)
    limit = tuning.workspace_limit(node, rules)
    # one way as it is, one asking for a byte past the limit: the arena would grow by it
    hungry = dataclasses.replace(candidates[-1], path="hungry, 1 thread", workspace=limit + 1)
    fitting = dataclasses.replace(candidates[-1], path="fitting, 1 thread", workspace=limit)
    greedy = types.SimpleNamespace(lower=impl.lower, candidates=lambda n: (hungry, fitting))
    fake = FakeMeasurer(lambda path: 1e-6 if path == "hungry, 1 thread" else 5e-6)
    launch, choice = tuning.Tuner(types.SimpleNamespace(measurer=fake), "measure").choose(
        node, greedy, kernel)
    assert fake.asked == [["fitting, 1 thread", rules.path]]
    assert launch.path != "hungry, 1 thread" and choice.how == "measured"


def test_a_measurer_that_refuses_every_way_leaves_the_rules(store, monkeypatch):
    by_rules = ways(mg.compile([net()], tune="rules"))
    monkeypatch.setattr(CPU.measurer, "time", lambda kernel, node, launches, budget:
                        [None] * len(launches))
    plan = mg.compile([net()], tune="measure")
    assert ways(plan) == by_rules and hows(plan) == {"rules"} and not store.exists()


def test_a_symbolic_graph_is_measured_at_each_specialisation(store, measured):
    g = mg.Graph()
    x = g.input("x", ("batch", 8, 10, 10), np.float32)
    y = F.relu(F.conv2d(x, g.param("w1", W1), padding=1))
    plan = mg.compile([F.linear(y, g.param("wl", WL))], tune="measure")
    plan.run({"x": X})
    report = rows(plan.specialize({"batch": 2}))
    assert {r.how for r in report} == {"measured"} and measured.calls == 2
    assert report[0].inputs.startswith("f32[2,8,10,10]")
    plan.run({"x": np.concatenate([X, X[:1]])})
    assert rows(plan.specialize({"batch": 3}))[0].inputs.startswith("f32[3,8,10,10]")
    assert measured.calls == 4 and len(json.loads(store.read_text())) == 4


def convnet():
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(1600, 10))


def test_compile_module_passes_tune_on():
    predictor = mg.compile_module(convnet(), (X,), tune="measure")
    assert [r.op for r in rows(predictor.plan)] == ["conv2d", "conv2d", "linear"]
    assert hows(predictor.plan) == {"measured"}
    assert predictor(X).shape == (2, 10)


@pytest.mark.parametrize("remat", [None, "sqrt"])
def test_compile_train_step_measures_the_backward_convolutions_too(remat):
    model, labels = convnet(), np.array([1, 7], np.int32)
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1),
                                 example_batch=(X, labels), remat=remat, tune="measure")
    ops = {r.op for r in rows(step.plan)}
    assert {"conv2d", "conv2d_backward_data", "conv2d_backward_filter"} <= ops
    assert hows(step.plan) == {"measured"}
    assert np.isfinite(step(X, labels))


def test_the_report_is_plain_data_and_a_table():
    plan = mg.compile([net()], tune="measure")
    data = plan.kernels_report().to_dict()
    assert json.loads(json.dumps(data)) == data
    assert [d["how"] for d in data["instructions"]] == ["measured", "measured"]
    with_choice = [i for i, ins in enumerate(plan.instructions) if ins.choice is not None]
    lines = str(plan.kernels_report()).splitlines()
    assert lines[0] == "kernels: 2 instructions with a choice of way (2 measured)"
    assert len(lines) == 2 + len(with_choice)
    for line, r in zip(lines[2:], rows(plan)):
        assert line.split()[0] == str(r.index) and r.path in line and "measured" in line
        assert r.index in with_choice
    g = mg.Graph()
    plain = mg.compile([F.relu(g.input("x", (4,), np.float32))], tune="measure")
    assert str(plain.kernels_report()) == "kernels: no instruction has a choice of way"


def test_a_choice_stored_for_another_machine_is_not_used(store, monkeypatch, measured):
    mg.compile([net()], tune="measure")
    monkeypatch.setattr(measure.CpuMeasurer, "machine", lambda self: "another machine")
    assert hows(mg.compile([net()])) == {"rules"}
    assert hows(mg.compile([net()], tune="cached")) == {"measured"}
    assert measured.calls == 4 and len(json.loads(store.read_text())) == 4


def test_two_threads_measuring_at_once_share_one_valid_store(store, monkeypatch):
    def work(batch):
        assert hows(mg.compile([net(batch)], tune="measure")) == {"measured"}
    assert run_in_threads(work, [(2,), (3,)]) == []
    assert len(json.loads(store.read_text())) == 4  # both threads' choices
    forbid_measuring(monkeypatch)
    assert hows(mg.compile([net(2)])) == hows(mg.compile([net(3)])) == {"cached"}


def test_rules_reach_the_prologue_too():
    a, b = (R.standard_normal(shape).astype(np.float32) for shape in ((64, 64), (64, 32)))
    g = mg.Graph()  # the prologue's packed product, stored by a plan that runs it on an input
    mg.compile([F.matmul(g.input("a", a.shape, np.float32), g.param("b", b))], tune="measure")
    g = mg.Graph()
    product = F.matmul(g.param("a", a), g.param("b", b))  # weights alone: the prologue's
    plan = mg.compile([F.matmul(g.input("x", (2, 32), np.float32), product, transpose_b=True)],
                      tune="rules")
    chosen = [i.choice.how for i in (plan.prologue.instructions if plan.prologue else ())
              if i.choice is not None]
    if not chosen:
        pytest.skip("this CPU packs no such weight: no prologue instruction has several ways")
    assert chosen == ["rules"]


def test_race_keeps_the_fastest_call_of_each_way_and_drops_a_refusal(monkeypatch):
    clock = fake_clock(monkeypatch)
    calls = [clock.call([3, 2, 2.5, 4, 3, 2]), clock.call([1, 1], status=7),
             clock.call([5, 4, 4, 4, 4, 4])]
    assert measure._race(calls, budget=100.0) == [2, None, 4]


def test_race_does_not_judge_a_way_by_its_warm_up_call(monkeypatch):
    clock = fake_clock(monkeypatch)
    calls = [clock.call([10, 1, 1, 1, 1, 1]), clock.call([2, 2, 2, 2, 2, 2])]
    assert measure._race(calls, budget=100.0) == [1, 2]


def fake_clock(monkeypatch):
    """measure's clock, advanced only by the calls ``clock.call(durations)`` makes."""
    clock = types.SimpleNamespace(now=0.0)

    def call(durations, status=0):
        left = list(durations)

        def run():
            clock.now += left.pop(0) if left else durations[-1]
            return status
        return run
    clock.call = call
    monkeypatch.setattr(measure, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    return clock
