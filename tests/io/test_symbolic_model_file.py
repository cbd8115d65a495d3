"""Model files with named dimensions: round trips at several bindings (bitwise the plan that was
saved), the runtime's symbolic signature and feed errors, old fixed-shape files, and every
refusal of a hostile dimension as one ModelFormatError with nothing run."""
from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from test_model_file import description, first, members, refused, same, with_json

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, runtime
from mgegraph.io import Limits
from mgegraph.symbolic_plan import SymbolicPlan

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def digits_plan(**options):
    """The demo's predictor in small: input0: (batch, 1, 8, 8) -> softmax over 10 classes."""
    rng = np.random.default_rng(1)
    g = mg.Graph()
    x = g.input("input0", ("batch", 1, 8, 8))
    w, b = g.param("w", rand(rng, 64, 10)), g.param("b", rand(rng, 10))
    h = F.reshape(x, (x.shape[0], -1)) @ w + b
    return mg.compile([F.softmax(h, axis=1), h.sum(axis=1)], **options)


def mlp_plan(batch="batch"):
    rng = np.random.default_rng(2)
    g = mg.Graph()
    x = g.input("x", (batch, 16))
    w1, w2 = g.param("w1", rand(rng, 16, 32)), g.param("w2", rand(rng, 32, 4), share=True)
    return mg.compile([F.relu(x @ w1) @ w2])


def saved(tmp_path, plan, name="m.mgm", **save_options):
    path = tmp_path / name
    mg.save(plan, path, **save_options)
    return path


# -- round trips -----------------------------------------------------------------------------
def test_a_symbolic_mlp_round_trips_bitwise_at_two_batch_sizes(tmp_path):
    plan = mlp_plan()
    path = saved(tmp_path, plan)
    assert description(path.read_bytes())["format_version"] == 2
    predictor = runtime.load(path)
    assert isinstance(predictor.plan, SymbolicPlan) and predictor.symbolic
    rng = np.random.default_rng(3)
    for batch in (1, 7):
        x = rand(rng, batch, 16)
        same(predictor.run({"x": x}), plan.run({"x": x}))
        # and both give what the graph built with the number gives
        same(predictor.run({"x": x}), mlp_plan(batch).run({"x": x}))
    assert predictor.plan.specialisations == 2


def test_resnet18_round_trips_bitwise_at_two_batch_sizes(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from models import resnet18  # the benchmark's model (benchmarks/ is not a package)

    nn.init.manual_seed(0)
    model = resnet18(10).eval()
    g = mg.Graph()
    plan = mg.compile([model(g.input("x", ("batch", 3, 32, 32)))])
    path = saved(tmp_path, plan)
    predictor = runtime.load(path)
    assert repr(predictor) == "<mgegraph.runtime.Predictor (x: float32[batch, 3, 32, 32]) -> " \
                              "1 outputs>"
    rng = np.random.default_rng(4)
    for batch in (1, 3):
        x = rand(rng, batch, 3, 32, 32)
        (y,) = predictor.run({"x": x})
        assert y.shape == (batch, 10)
        same([y], plan.run({"x": x}))


def test_a_compile_module_predictor_of_a_symbolic_plan_saves_it(tmp_path):
    from mgegraph.train import Predictor  # what compile_module returns, around its plan

    plan = digits_plan()
    path = saved(tmp_path, Predictor(plan))
    loaded = mg.io.read(path)
    assert loaded.kind == "predictor" and isinstance(loaded.plan, SymbolicPlan)
    x = np.ones((2, 1, 8, 8), np.float32)
    same(loaded.plan.run({"input0": x}), plan.run({"input0": x}))


def test_the_predictor_reports_the_symbolic_signature(tmp_path):
    predictor = runtime.load(saved(tmp_path, digits_plan()))
    assert repr(predictor) == ("<mgegraph.runtime.Predictor (input0: float32[batch, 1, 8, 8]) "
                               "-> 2 outputs>")
    assert predictor.signature() == ("input0: float32[batch, 1, 8, 8] -> float32[batch, 10], "
                                     "float32[batch]")
    assert predictor.input_names == ("input0",)
    assert [str(t) for t in predictor.input_types] == ["f32[batch, 1, 8, 8]"]
    assert [str(d) for d in predictor.input_shapes[0]] == ["batch", "1", "8", "8"]


def test_one_image_runs_on_a_model_saved_for_a_batch(tmp_path):
    plan = digits_plan()
    batch = np.random.default_rng(5).standard_normal((360, 1, 8, 8)).astype(np.float32)
    plan.run({"input0": batch})  # the demo's batch, specialised before saving
    predictor = runtime.load(saved(tmp_path, plan))
    (probs, _) = predictor.run({"input0": batch[:1]})
    assert probs.shape == (1, 10)
    same(predictor.run([batch[:1]]), plan.run({"input0": batch[:1]}))
    assert predictor(batch[:2])[0].shape == (2, 10)


def test_nonconforming_feeds_name_the_input_and_both_types(tmp_path):
    predictor = runtime.load(saved(tmp_path, digits_plan()))
    declared = "the model takes float32[batch, 1, 8, 8]"
    for fed, text in [(np.zeros((1, 1, 9, 8), np.float32), "fed float32[1, 1, 9, 8]"),
                      (np.zeros((1, 8, 8), np.float32), "fed float32[1, 8, 8]"),
                      (np.zeros((0, 1, 8, 8), np.float32), "fed float32[0, 1, 8, 8]"),
                      (np.zeros((2, 1, 8, 8), np.float64), "fed float64[2, 1, 8, 8]")]:
        with pytest.raises(mg.FeedError, match="input input0") as info:
            predictor.run({"input0": fed})
        assert text in str(info.value) and declared in str(info.value)
    with pytest.raises(mg.FeedError, match="missing"):
        predictor.run({"x": np.zeros((1, 1, 8, 8), np.float32)})


def test_options_bounds_cache_size_and_warm_travel(tmp_path):
    plan = digits_plan(optimize=0, cache_size=3, bounds={"batch": (1, 64)})
    path = saved(tmp_path, plan, warm=[{"batch": 8}, {"batch": 1}])
    options = description(path.read_bytes())["options"]
    assert options["cache_size"] == 3 and options["bounds"] == {"batch": [1, 64]}
    assert options["warm"] == [{"batch": 8}, {"batch": 1}] and options["optimize"] == 0
    loaded = runtime.load(path).plan
    assert loaded.cache_size == 3 and loaded.bounds == {"batch": (1, 64)}
    assert [b for b, _ in loaded.plans] == [{"batch": 8}, {"batch": 1}]  # made at load
    assert loaded.options["optimize"] == 0
    with pytest.raises(mg.FeedError, match="outside its bounds 1..64"):
        runtime.load(path).run({"input0": np.zeros((65, 1, 8, 8), np.float32)})


@pytest.mark.parametrize("warm, match", [
    ([{"batch": 0}], "batch=0"), ([{"batch": 100}], "batch=100"), ([{"n": 2}], "every name"),
    ([{"batch": 2.0}], "not an int"), (["batch"], "every name")])
def test_save_refuses_warm_bindings_a_run_would_refuse(tmp_path, warm, match):
    with pytest.raises(mg.GraphError, match=match):
        mg.save(digits_plan(bounds={"batch": (1, 64)}), tmp_path / "m.mgm", warm=warm)
    with pytest.raises(mg.GraphError, match="all numbers"):
        mg.save(mg.compile([mg.Graph().input("x", (2,)) * 2.0]), tmp_path / "f.mgm",
                warm=[{"batch": 1}])


def test_fed_shapes_that_break_a_recorded_fact_are_a_feed_error(tmp_path):
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    plan = mg.compile([x + y])  # add records batch == n
    predictor = runtime.load(saved(tmp_path, plan))
    assert [str(f) for f in predictor.plan.constraints] == ["batch == n"]
    ones = np.ones((3, 4), np.float32)
    same(predictor.run({"x": ones, "y": ones}), plan.run({"x": ones, "y": ones}))
    with pytest.raises(mg.FeedError, match=r"break batch == n \(batch=3, n=5\)"):
        predictor.run({"x": ones, "y": np.ones((5, 4), np.float32)})
    with pytest.raises(mg.GraphError, match="batch == n"):  # and save(warm=) checks it too
        mg.save(plan, tmp_path / "w.mgm", warm=[{"batch": 2, "n": 3}])


def test_a_binding_over_the_limits_is_refused_before_it_is_specialised(tmp_path):
    path = saved(tmp_path, digits_plan())
    predictor = runtime.load(path, limits=Limits(max_tensor_bytes=1 << 14))
    predictor.run({"input0": np.zeros((8, 1, 8, 8), np.float32)})
    with pytest.raises(mg.FeedError, match=r"batch=100: .* over the limit of 16384"):
        predictor.run({"input0": np.zeros((100, 1, 8, 8), np.float32)})
    assert [b for b, _ in predictor.plan.plans] == [{"batch": 8}]
    predictor = runtime.load(path, limits=Limits(max_plan_bytes=4096))
    with pytest.raises(mg.FeedError, match="batch=200: needs .* over the limit of 4096"):
        predictor.run({"input0": np.zeros((200, 1, 8, 8), np.float32)})


# -- old and fixed-shape files ---------------------------------------------------------------
def fixed_v1_plan():
    """The graph of ``data/fixed_v1.mgm``, written by mgegraph before named dimensions."""
    rng = np.random.default_rng(34)
    g = mg.Graph()
    x = g.input("x", (2, 3, 4))
    w = g.param("w", rng.standard_normal((12, 5)).astype(np.float32))
    b = g.param("b", rng.standard_normal(5).astype(np.float32), share=True)
    h = F.relu(F.reshape(x, (2, -1)) @ w + b)
    return mg.compile([F.softmax(h, axis=1), h.sum(axis=0)])


def test_an_old_fixed_shape_file_still_loads_bitwise():
    data = (DATA / "fixed_v1.mgm").read_bytes()
    assert description(data)["format_version"] == 1
    predictor = runtime.load(DATA / "fixed_v1.mgm")
    assert not predictor.symbolic and predictor.input_shapes == ((2, 3, 4),)
    assert repr(predictor) == "<mgegraph.runtime.Predictor (x: float32[2, 3, 4]) -> 2 outputs>"
    x = np.random.default_rng(6).standard_normal((2, 3, 4)).astype(np.float32)
    expected = fixed_v1_plan()
    same(predictor.run([x]), expected.run({"x": x}))


def test_a_fixed_shape_plan_is_still_written_as_version_1(tmp_path):
    data = saved(tmp_path, fixed_v1_plan()).read_bytes()
    d = description(data)
    assert d["format_version"] == 1 and '"dim"' not in json.dumps(d)
    assert not {"cache_size", "bounds", "warm"} & set(d["options"])


# -- hostile dimensions --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def symbolic_bytes(tmp_path_factory) -> bytes:
    return saved(tmp_path_factory.mktemp("s"), digits_plan()).read_bytes()


def input_dim(d, value):
    first(d, "input")["outputs"][0]["shape"][0] = value
    d["inputs"][0]["shape"][0] = value


def reshape_dim(d, value):
    first(d, "reshape")["attrs"]["shape"]["tuple"][0] = value


HOSTILE_DIMS = [
    ({"dim": "__import__('os').system('touch pwned')"}, "malformed"),
    ({"dim": "exec"}, "node 3 \\(reshape\\)"),  # a name is only a name: the rules decide
    ({"dim": "batch; 1"}, "malformed"),
    ({"dim": "lambda: 1"}, "malformed"),
    ({"dim": "-3"}, "non-negative"),
    ({"dim": "0 - batch"}, "never negative"),
    ({"dim": "(" * 200 + "batch" + ")" * 200}, "malformed"),
    ({"dim": "+".join(f"n{i}" for i in range(100))}, "malformed"),
    ({"dim": "batch" + "*batch" * 40}, "malformed"),
    ({"dim": "9" * 30 + "*batch"}, "malformed"),
    ({"dim": "b" * 70}, "malformed"),
    ({"dim": "x" * 70000}, "malformed"),
    ({"dim": ""}, "malformed"),
    ({"dim": 3}, "a named dimension is"),
    ({"dim": ["batch"]}, "a named dimension is"),
    ({"dim": "batch", "extra": 1}, "non-negative ints"),
    ({"dim": "2**40*batch"}, "malformed"),
    ({"dim": "1099511627776*batch"}, "over the limit"),
    ("batch", "non-negative ints"),
]


@pytest.mark.parametrize("value, match", HOSTILE_DIMS)
def test_hostile_input_dims_are_refused(tmp_path, symbolic_bytes, value, match):
    refused(tmp_path, with_json(symbolic_bytes, lambda d: input_dim(d, value)), match)


@pytest.mark.parametrize("value, match", [
    ({"dim": "__import__('os')"}, "node 3 \\(reshape\\) attr shape: .* malformed"),
    ({"dim": "open"}, "node 3 \\(reshape\\)"),
    ({"dim": "(((((((((batch)))))))))//2" * 20}, "malformed"),
    ({"dim": ["x"]}, "a named dimension is"),
    ({"dimension": "batch"}, "not an attribute value"),
])
def test_hostile_attribute_dims_are_refused_naming_the_node(tmp_path, symbolic_bytes, value,
                                                            match):
    refused(tmp_path, with_json(symbolic_bytes, lambda d: reshape_dim(d, value)), match)


def test_a_version_1_file_holds_no_named_dimension(tmp_path, symbolic_bytes):
    refused(tmp_path, with_json(symbolic_bytes, lambda d: d.update(format_version=1)),
            "non-negative ints")
    fixed = saved(tmp_path, fixed_v1_plan(), "f.mgm").read_bytes()
    refused(tmp_path, with_json(fixed, lambda d: d["options"].update(cache_size=4)),
            "options.cache_size: .* version 1")


@pytest.mark.parametrize("change, match", [
    (lambda o: o.update(cache_size=0), "cache_size must be an int >= 1"),
    (lambda o: o.update(cache_size="16"), "cache_size must be an int >= 1"),
    (lambda o: o.update(bounds={"batch": [1]}), "bounds must map"),
    (lambda o: o.update(bounds={"batch": [0, 4]}), "does not compile.*bounds"),
    (lambda o: o.update(bounds={"other": [1, 4]}), "does not compile.*not a name"),
    (lambda o: o.update(warm=[{"batch": 1}] * 65), "at most 64 bindings"),
    (lambda o: o.update(warm=[{"batch": "1"}]), "bindings of names to ints"),
    (lambda o: o.update(warm=[{"batch": 0}]), "does not compile.*batch=0"),
    (lambda o: o.update(warm=[{"batch": 1 << 40}]), "options.warm .* over the limit"),
])
def test_hostile_symbolic_options_are_refused(tmp_path, symbolic_bytes, change, match):
    refused(tmp_path, with_json(symbolic_bytes, lambda d: change(d["options"])), match)


def test_a_hostile_dimension_runs_nothing(tmp_path, symbolic_bytes, monkeypatch):
    from mgegraph import compiler
    calls = []
    monkeypatch.setattr(compiler, "compile", lambda *a, **k: calls.append(a))
    monkeypatch.chdir(tmp_path)
    code = {"dim": "__import__('os').system('touch pwned')"}
    refused(tmp_path, with_json(symbolic_bytes, lambda d: input_dim(d, code)), "malformed")
    refused(tmp_path, with_json(symbolic_bytes, lambda d: reshape_dim(d, code)), "malformed")
    assert not calls and not (tmp_path / "pwned").exists()


def test_every_dim_of_a_saved_model_is_read_with_parse_dim(tmp_path, symbolic_bytes,
                                                            monkeypatch):
    from mgegraph.io import graph_json
    seen, parse = [], graph_json.parse_dim
    monkeypatch.setattr(graph_json, "parse_dim", lambda text: seen.append(text) or parse(text))
    path = tmp_path / "copy.mgm"
    path.write_bytes(symbolic_bytes)
    runtime.load(path)
    assert len(seen) == members(symbolic_bytes)["model.json"].count(b'{"dim":') > 0


def test_model_json_is_plain_data(symbolic_bytes):
    with zipfile.ZipFile(io.BytesIO(symbolic_bytes)) as zf:
        text = zf.read("model.json").decode()
    assert '"shape":[{"dim":"batch"},1,8,8]' in text
    assert '"attrs":{"shape":{"tuple":[{"dim":"batch"},-1]}}' in text
