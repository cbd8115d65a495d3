"""The ``mgegraph`` command line: every subcommand in-process through ``cli.main`` and a few
through a real ``python -m mgegraph``; errors are one line on stderr, never a traceback."""
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import cli

ROOT = Path(__file__).resolve().parents[1]


def _python(*argv, **kwargs):
    """A fresh ``python argv...`` in the repository root, its output captured as text."""
    return subprocess.run([sys.executable, *map(str, argv)], check=False, capture_output=True,
                          text=True, timeout=120, cwd=ROOT, **kwargs)


def _cli(capsys, *argv):
    """(exit status, stdout, stderr) of ``mgegraph argv...`` run in this process."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(code, err, *phrases):
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mgegraph: error: "), err
    assert "Traceback" not in err
    for phrase in phrases:
        assert phrase in lines[0], err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A one-input model (x: f32[4,3] -> relu(x @ w + b), softmax), its weights, an input."""
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 5), dtype=np.float32), np.float32([0.1, -0.2, 0, 0.3, 1])
    g = mg.Graph()
    x = g.input("x", shape=(4, 3), dtype="float32")
    h = F.relu(x @ g.param("w", w) + g.param("b", b))
    mg.save(mg.compile([h, F.softmax(h, axis=-1)]), d / "model.mgm")
    mg.save({"w": w, "b": b}, d / "weights.mgm")
    xs = rng.standard_normal((4, 3), dtype=np.float32)
    np.save(d / "x.npy", xs)
    np.save(d / "wrong_shape.npy", np.zeros((2, 3), np.float32))
    np.save(d / "wrong_dtype.npy", xs.astype(np.float64))
    np.savez(d / "archive.npz", x=xs)
    (d / "junk.mgm").write_bytes(b"not a zip file")
    return d


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    g = mg.Graph()
    a = g.input("a", shape=(2, 3), dtype="float32")
    n = g.input("n", shape=(2, 3), dtype="int32")
    path = tmp_path_factory.mktemp("cli2") / "two.mgm"
    mg.save(mg.compile([a * 2.0 + F.astype(n, "float32")]), path)
    return path


def _expected(files):
    pred = mg.load(files / "model.mgm")
    return pred.run({"x": np.load(files / "x.npy")})


# -- global options -------------------------------------------------------------------------------
def test_version(capsys):
    code, out, _ = _cli(capsys, "--version")
    assert code == 0 and out.strip() == f"mgegraph {mg.__version__}"


def test_help_lists_every_subcommand(capsys):
    code, out, _ = _cli(capsys, "--help")
    assert code == 0
    for command in ("demo", "run", "report", "viz", "profile", "convert", "bench"):
        assert f"\n    {command} " in out, out


def test_demo_help_names_the_demos_default_output(capsys):
    from mgegraph import demo

    assert cli.DEMO_OUTPUT == demo.DEFAULT_OUTPUT
    code, out, _ = _cli(capsys, "demo", "--help")
    assert code == 0 and demo.DEFAULT_OUTPUT in out


@pytest.mark.parametrize("argv, phrase", [
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "required: COMMAND"),
    (["run"], "required: model"),
    (["demo", "--epochs", "0"], "'0' is not a positive integer"),
    (["run", "m.mgm", "--input", "=x.npy"], "the name before '=' is empty"),
    (["run", "m.mgm", "--input", "x="], "'x=': no file after '='"),
    (["viz", "m.mgm", "-o", "plan.png"], "'plan.png': the file name must end in one of"),
    (["convert", "m.onnx", "--input-shape", "x=1,a"], "is not NAME=D,D,..."),
])
def test_usage_errors_are_one_line_with_status_2(capsys, argv, phrase):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    _assert_one_line_error(code, err, phrase)


# -- run ------------------------------------------------------------------------------------------
def test_run_prints_each_output_summary(capsys, files):
    code, out, err = _cli(capsys, "run", files / "model.mgm", "--input", f"x={files / 'x.npy'}")
    assert code == 0 and err == ""
    relu, soft = _expected(files)
    lines = out.strip().splitlines()
    assert lines == [cli.summary_line("output0", relu), cli.summary_line("output1", soft)]
    assert lines[0].startswith("output0: float32[4, 5]  min 0  mean ")
    assert f"max {relu.max():.6g}" in lines[0]


def test_run_writes_the_outputs_bitwise_to_npz(capsys, files, tmp_path):
    # one input: NAME= may be left out
    code, out, _ = _cli(capsys, "run", files / "model.mgm", "--input", files / "x.npy",
                        "-o", tmp_path / "y")
    assert code == 0 and out.strip() == f"wrote output0, output1 to {tmp_path / 'y.npz'}"
    with np.load(tmp_path / "y.npz") as saved:
        assert sorted(saved.files) == ["output0", "output1"]
        for name, want in zip(("output0", "output1"), _expected(files)):
            np.testing.assert_array_equal(saved[name], want)


def test_an_input_path_may_hold_an_equals_sign(capsys, files, tmp_path):
    (tmp_path / "run=1").mkdir()
    np.save(tmp_path / "run=1" / "x.npy", np.load(files / "x.npy"))
    code, out, _ = _cli(capsys, "run", files / "model.mgm", "--input",
                        f"x={tmp_path / 'run=1' / 'x.npy'}")
    assert code == 0 and out.startswith("output0: float32[4, 5]")


def test_summary_line_counts_values_that_are_not_finite():
    line = cli.summary_line("y", np.float32([1, np.nan, 3, np.inf]))
    assert line == "y: float32[4]  min 1  mean 2  max 3  (2 not finite)"
    assert cli.summary_line("e", np.zeros((0, 2), np.int64)) == "e: int64[0, 2]  (empty)"


@pytest.mark.parametrize("args, phrases", [
    (["junk.mgm", "--input", "x.npy"], ["model file: not a zip container"]),
    (["missing.mgm", "--input", "x.npy"], ["cannot read", "missing.mgm"]),
    (["weights.mgm", "--input", "x.npy"], ["holds a state dict"]),
    (["model.mgm"], ["no --input NAME=FILE.npy for the model's input(s) x (float32[4, 3])"]),
    (["model.mgm", "--input", "x=wrong_shape.npy"],
     ["wrong_shape.npy: the array is float32[2, 3], the model's input x is float32[4, 3]"]),
    (["model.mgm", "--input", "x=wrong_dtype.npy"], ["the array is float64[4, 3]"]),
    (["model.mgm", "--input", "y=x.npy"], ["the model has no input 'y'; its inputs are ['x']"]),
    (["model.mgm", "--input", "x.npy", "--input", "x=x.npy"], ["--input x=...: given twice"]),
    (["model.mgm", "--input", "x=archive.npz"], ["an .npz archive"]),
    (["model.mgm", "--input", "x=junk.mgm"], ["junk.mgm: not an array file written by np.save"]),
    (["model.mgm", "--input", "x=nothere.npy"], ["No such file", "nothere.npy"]),
    (["net.onnx"], [("net.onnx is an ONNX model, not a model file; convert it first: "
                     "mgegraph convert net.onnx -o net.mgm")]),
])
def test_run_errors_are_one_line(capsys, files, monkeypatch, args, phrases):
    monkeypatch.chdir(files)
    code, out, err = _cli(capsys, "run", *args)
    assert code == 1 and out == ""
    _assert_one_line_error(code, err, *phrases)


def test_an_input_without_a_name_needs_a_one_input_model(capsys, two_inputs, files):
    code, _, err = _cli(capsys, "run", two_inputs, "--input", files / "x.npy")
    _assert_one_line_error(code, err, "the model has 2 inputs ['a', 'n']; write --input NAME=")


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(capsys, files, where):
    argv = ["run", files / "junk.mgm", "--input", files / "x.npy"]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    code, _, err = _cli(capsys, *argv)
    assert code == 1
    assert err.startswith("Traceback (most recent call last):"), err
    assert "mgegraph.ir.errors.ModelFormatError: model file: not a zip container" in err
    assert "mgegraph: error:" not in err


def test_an_unexpected_error_names_its_type(capsys, files, monkeypatch):
    def broken(path):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(mg.runtime, "load", broken)
    code, _, err = _cli(capsys, "run", files / "model.mgm", "--input", files / "x.npy")
    _assert_one_line_error(code, err, "RuntimeError: boom second line (--debug shows the "
                                      "traceback)")


def test_ctrl_c_is_one_line_and_status_130(capsys, files, monkeypatch):
    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(mg.runtime, "load", interrupted)
    code, _, err = _cli(capsys, "run", files / "model.mgm", "--input", files / "x.npy")
    assert code == 130 and err == "mgegraph: interrupted\n"


# -- report ---------------------------------------------------------------------------------------
def test_report_json_matches_the_loaded_plan(capsys, files):
    code, out, _ = _cli(capsys, "report", files / "model.mgm", "--json")
    assert code == 0
    report = json.loads(out)
    plan = mg.load(files / "model.mgm").plan
    assert report["kind"] == "plan" and report["device"] == "cpu"
    assert report["inputs"] == [{"name": "x", "shape": [4, 3], "dtype": "float32"}]
    assert [o["shape"] for o in report["outputs"]] == [[4, 5], [4, 5]]
    assert report["instructions"] == len(plan.instructions)
    assert report["memory"] == json.loads(plan.memory_report(format="json"))
    assert report["memory"]["arena_bytes"] == plan.arena_bytes
    assert [p["name"] for p in report["passes"]] == [name for name, _ in plan.passes]
    assert report["remat"] is None


def test_report_text_has_memory_passes_and_remat(capsys, files):
    code, out, _ = _cli(capsys, "report", files / "model.mgm")
    plan = mg.load(files / "model.mgm").plan
    assert code == 0
    assert out.startswith(f"model {files / 'model.mgm'}: a plan for cpu, "
                          f"{len(plan.instructions)} instructions over {len(plan.slots)} slots")
    assert "  inputs   x: float32[4, 3]\n" in out
    assert f"\nmemory\n{plan.memory_report()}\n" in out
    assert f"\npasses\n{plan.passes_report()}\n" in out
    assert "\nremat\nnot compiled with remat=\n" in out
    assert out.endswith(f"\n{plan.kernels_report()}\n")


def test_report_of_a_remat_plan_includes_its_remat_report(capsys, tmp_path):
    g = mg.Graph()
    x = g.input("x", shape=(8, 16), dtype="float32")
    rng = np.random.default_rng(0)
    ws = [g.param(f"w{i}", rng.standard_normal((16, 16), dtype=np.float32)) for i in range(6)]
    h = x
    for w in ws:
        h = F.relu(h @ w)
    loss = F.mean(h * h)
    mg.save(mg.compile([loss, *mg.grad(loss, ws)], remat="sqrt"), tmp_path / "remat.mgm")
    code, out, _ = _cli(capsys, "report", tmp_path / "remat.mgm", "--json")
    assert code == 0
    report = json.loads(out)
    want = json.loads(mg.load(tmp_path / "remat.mgm").plan.remat_report("json"))
    assert report["remat"] == want and report["remat"]["mode"] == "sqrt"
    code, out, _ = _cli(capsys, "report", tmp_path / "remat.mgm")
    assert "\nremat\nremat (sqrt): " in out


def test_report_of_a_weights_file(capsys, files):
    code, out, _ = _cli(capsys, "report", files / "weights.mgm", "--json")
    assert code == 0
    assert json.loads(out) == {
        "model": str(files / "weights.mgm"), "kind": "state_dict", "bytes": 15 * 4 + 5 * 4,
        "arrays": [{"name": "w", "shape": [3, 5], "dtype": "float32", "bytes": 60},
                   {"name": "b", "shape": [5], "dtype": "float32", "bytes": 20}]}
    code, out, _ = _cli(capsys, "report", files / "weights.mgm")
    assert out.splitlines()[1:] == ["  w: float32[3, 5]", "  b: float32[5]"]


# -- viz ------------------------------------------------------------------------------------------
def test_viz_dot_is_the_plans_dot(capsys, files, tmp_path):
    code, out, _ = _cli(capsys, "viz", files / "model.mgm", "-o", tmp_path / "plan.dot")
    assert code == 0 and out.strip() == f"wrote {tmp_path / 'plan.dot'}"
    plan = mg.load(files / "model.mgm").plan
    assert (tmp_path / "plan.dot").read_text() == plan.to_dot() + "\n"


def test_viz_svg_is_the_viewers_drawing(capsys, files, tmp_path):
    code, _, _ = _cli(capsys, "viz", files / "model.mgm", "-o", tmp_path / "plan.svg")
    assert code == 0
    want = mg.viz.to_svg(mg.load(files / "model.mgm").plan)
    assert (tmp_path / "plan.svg").read_text() == want and want.startswith("<svg")


@pytest.mark.parametrize("profiled", [False, True])
def test_viz_html_page_with_and_without_times(capsys, files, tmp_path, profiled):
    page = tmp_path / "plan.html"
    extra = ["--profile", "2"] if profiled else []
    code, out, _ = _cli(capsys, "viz", files / "model.mgm", "-o", page, *extra)
    assert code == 0 and out.strip() == f"wrote {page}"
    text = page.read_text()
    assert text.lstrip().lower().startswith("<!doctype html")
    assert "<title>model.mgm</title>" in text
    assert ("profiled run" in text) == profiled and ("time (ms)" in text) == profiled


def test_viz_profile_needs_the_html_page(capsys, files, tmp_path):
    code, _, err = _cli(capsys, "viz", files / "model.mgm", "-o", tmp_path / "p.svg",
                        "--profile", "2")
    _assert_one_line_error(code, err, "--profile 2: only the .html page shows the times")
    assert not (tmp_path / "p.svg").exists()


# -- profile ---------------------------------------------------------------------------------------
def test_random_feeds_follow_the_input_types_and_the_seed(two_inputs):
    pred = mg.load(two_inputs)
    a = cli.read_feeds(pred, [], rng=np.random.default_rng(3))
    b = cli.read_feeds(pred, [], rng=np.random.default_rng(3))
    assert a["a"].dtype == np.float32 and a["a"].shape == (2, 3) and a["a"].std() > 0
    np.testing.assert_array_equal(a["a"], b["a"])
    np.testing.assert_array_equal(a["n"], np.zeros((2, 3), np.int32))


def test_profile_prints_the_table_and_writes_the_trace(capsys, files, tmp_path):
    plan = mg.load(files / "model.mgm").plan
    trace = tmp_path / "trace.json"
    code, out, err = _cli(capsys, "profile", files / "model.mgm", "--runs", "3", "--trace", trace)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("mg.profile: 3 run(s) of 1 plan(s) from 1 calling thread(s); ")
    assert lines[0].endswith(" per run of each plan")
    ops = {ins.op for ins in plan.instructions}
    assert {line.split()[0] for line in lines[3:3 + len(ops)]} == ops, out
    assert lines[-1] == f"wrote {trace} (open it in ui.perfetto.dev or chrome://tracing)"
    events = json.loads(trace.read_text())["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") == "instruction"]
    assert len(timed) == 3 * len(plan.instructions)  # the warm-up run is not in the profile


def test_profile_by_instruction_with_given_inputs(capsys, two_inputs, tmp_path):
    np.save(tmp_path / "n.npy", np.ones((2, 3), np.int32))
    code, out, _ = _cli(capsys, "profile", two_inputs, "--input", f"n={tmp_path / 'n.npy'}",
                        "--by", "instruction", "--top", "1", "--runs", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[2].startswith("plan:#") and lines[3].startswith("plan0:")
    n = len(mg.load(two_inputs).plan.instructions)
    assert len(lines) == 4 + (n > 1), out


def test_profile_needs_no_inputs_but_checks_given_ones(capsys, files):
    code, _, err = _cli(capsys, "profile", files / "model.mgm", "--input",
                        f"x={files / 'wrong_shape.npy'}")
    _assert_one_line_error(code, err, "the array is float32[2, 3]")


# -- convert ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    """MatMul + Relu with a symbolic batch dimension, and its weight."""
    pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, w


@pytest.mark.parametrize("freeze", [False, True])
def test_convert_then_run(capsys, onnx_file, tmp_path, freeze):
    path, w = onnx_file
    out_path = tmp_path / "tiny.mgm"
    code, out, _ = _cli(capsys, "convert", path, "-o", out_path, "--input-shape", "x=2,4",
                        *(["--freeze"] if freeze else []))
    assert code == 0
    assert out.startswith(f"converted {path} -> {out_path}: inputs x: float32[2, 4]; 1 outputs")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = mg.load(out_path).run({"x": x})
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-6)
    assert json.loads(_cli(capsys, "report", out_path, "--json")[1])["inputs"][0]["shape"] == [2, 4]


def test_convert_defaults_the_output_beside_the_model(capsys, onnx_file, tmp_path):
    path, _ = onnx_file
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(path.read_bytes())
    assert _cli(capsys, "convert", copy, "--input-shape", "x=1,4")[0] == 0
    assert mg.load(tmp_path / "copy.mgm").input_shapes == ((1, 4),)


def test_convert_keeps_a_named_dimension(capsys, onnx_file, tmp_path):
    path, w = onnx_file
    out_path = tmp_path / "named.mgm"
    code, out, _ = _cli(capsys, "convert", path, "-o", out_path)
    assert code == 0 and "inputs x: float32[N, 4]" in out
    model = mg.load(out_path)
    for rows in (1, 3):
        x = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
        np.testing.assert_allclose(model.run({"x": x})[0], np.maximum(x @ w, 0), rtol=1e-6)


def test_convert_refuses_inputs_that_decide_shapes(capsys, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "reshape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, _, err = _cli(capsys, "convert", path)
    _assert_one_line_error(code, err, "the inputs shape decide shapes", "constants=")


def test_convert_errors(capsys, onnx_file, files, monkeypatch):
    path, _ = onnx_file
    code, _, err = _cli(capsys, "convert", files / "x.npy")
    _assert_one_line_error(code, err, "x.npy': not an ONNX model")
    monkeypatch.setitem(sys.modules, "onnx", None)  # as without the extra installed
    code, _, err = _cli(capsys, "convert", path)
    _assert_one_line_error(code, err, 'convert needs the onnx package: pip install -e ".[onnx]"')


# -- bench -----------------------------------------------------------------------------------------
def test_bench_gets_its_arguments_untouched(capsys, monkeypatch):
    seen = []

    class Bench:
        @staticmethod
        def main(argv):
            seen.append(argv)
            return 3

    monkeypatch.setattr(cli, "_tool", lambda module, what: Bench)
    assert cli.main(["bench", "mlp-infer", "--json", "out.json", "--help"]) == 3
    assert cli.main(["--debug", "bench"]) == 3
    assert cli.main(["bench", "--debug", "x"]) == 3
    assert seen == [["mlp-infer", "--json", "out.json", "--help"], [], ["x"]]


def test_bench_is_the_benchmark_tables_own_command(capsys):
    code, out, _ = _cli(capsys, "bench", "--help")
    assert code == 0 and out.startswith("usage: mgegraph bench ")
    code, out, err = _cli(capsys, "bench", "no-such-workload")
    assert code != 0 and "no-such-workload" in err and "Traceback" not in err


def test_a_tool_missing_from_the_build_is_one_line(capsys, files, monkeypatch, tmp_path):
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec",
                        lambda name: None if name == "mgegraph.viz" else real(name))
    code, _, err = _cli(capsys, "viz", files / "model.mgm", "-o", tmp_path / "p.html")
    _assert_one_line_error(code, err, "the viewer (mgegraph.viz) is not part of this mgegraph")


# -- demo ------------------------------------------------------------------------------------------
def test_demo_below_target_fails_only_the_full_run(capsys, monkeypatch):
    from mgegraph import demo

    calls = []

    def fake(**kwargs):
        calls.append(kwargs)
        return {"mlp": 0.5, "cnn": 0.99}

    monkeypatch.setattr(demo, "run_demo", fake)
    code, _, err = _cli(capsys, "demo")
    _assert_one_line_error(code, err, "below target accuracy: {'mlp': 0.5}")
    assert calls[0] == {"epochs": None, "train_size": None, "output": demo.DEFAULT_OUTPUT,
                        "progress": False}
    assert _cli(capsys, "demo", "--epochs", "1")[0] == 0


def test_demo_without_scikit_learn_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    code, _, err = _cli(capsys, "demo", "--epochs", "1")
    _assert_one_line_error(code, err, 'the demo needs scikit-learn: pip install -e ".[demo]"')


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    """The demo, 1 epoch on 128 images, run in this process; its stdout, stderr and model."""
    pytest.importorskip("sklearn")
    from mgegraph.demo import load_digits_split

    d = tmp_path_factory.mktemp("demo")
    _, _, x_test, y_test = load_digits_split()
    np.save(d / "x_test.npy", x_test.reshape(-1, 1, 8, 8))
    # stdout is a pipe, not a terminal: no progress line
    proc = _python("-m", "mgegraph", "demo", "--epochs", "1", "--train-size", "128",
                   "-o", d / "cnn.mgm")
    return proc.returncode, proc.stdout, proc.stderr, d, y_test


def test_demo_trains_saves_and_prints_the_memory_report(demo_model):
    code, out, err, d, _ = demo_model
    assert code == 0, err
    assert err == ""  # not a terminal: no progress line
    assert out.startswith("digits: 128 train / 360 test images, 10 classes\n")
    assert "\nmlp: test accuracy " in out and "\ncnn: test accuracy " in out
    assert "after 1 epochs" in out
    assert "\nthe cnn's training step, memory:\nmemory plan: arena " in out
    assert f"saved the cnn's predictor to {d / 'cnn.mgm'}" in out


def test_the_demos_model_runs_and_reports(capsys, demo_model):
    code, out, err, d, y_test = demo_model
    assert code == 0, err
    accuracy = float(out.split("\ncnn: test accuracy ")[1].split()[0])
    code, out, _ = _cli(capsys, "run", d / "cnn.mgm", "--input", f"input0={d / 'x_test.npy'}",
                        "-o", d / "y.npz")
    assert code == 0
    with np.load(d / "y.npz") as saved:
        logits = saved["output0"]
    assert logits.shape == (360, 10)
    assert round(float((logits.argmax(1) == y_test).mean()), 4) == accuracy
    code, out, _ = _cli(capsys, "report", d / "cnn.mgm", "--json")
    report = json.loads(out)
    assert code == 0 and report["kind"] == "predictor"
    assert report["inputs"] == [{"name": "input0", "shape": ["batch", 1, 8, 8],
                                 "dtype": "float32"}]
    assert {p["name"] for p in report["passes"]} >= {"bnfold", "epilogue"}
    # the saved predictor names its batch: one image runs as the whole test set did
    np.save(d / "one.npy", np.load(d / "x_test.npy")[:1])
    code, out, _ = _cli(capsys, "run", d / "cnn.mgm", "--input", f"input0={d / 'one.npy'}",
                        "-o", d / "one.npz")
    assert code == 0 and "input0: float32[batch, 1, 8, 8]" in out and "batch=1" in out
    with np.load(d / "one.npz") as saved:
        np.testing.assert_allclose(saved["output0"], logits[:1], rtol=1e-5, atol=1e-5)


def test_demo_shows_progress_on_a_terminal(capsys, monkeypatch, tmp_path):
    pytest.importorskip("sklearn")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, _, err = _cli(capsys, "demo", "--epochs", "1", "--train-size", "64",
                        "-o", tmp_path / "m.mgm")
    assert code == 0
    assert "epoch 1/1 [1/1] loss " in err and "steps/s" in err


def test_python_m_mgegraph_demo_is_the_same_command():
    proc = _python("-m", "mgegraph.demo", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: mgegraph demo ")
    proc = _python("-m", "mgegraph.demo", "--train-size", "10")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("mgegraph: error: --train-size 10: the demo trains on batches of "
                           "64, so it needs at least 64 images\n")


# -- a model with a named batch ------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The demo's predictor in small, saved as the demo saves it: input0 of a named batch,
    run at batch 360 before saving; .npy inputs of batch 1 and 3 and one that does not fit."""
    d = tmp_path_factory.mktemp("digits")
    rng = np.random.default_rng(7)
    g = mg.Graph()
    x = g.input("input0", ("batch", 1, 8, 8))
    w = g.param("w", rng.standard_normal((64, 10), dtype=np.float32))
    plan = mg.compile([F.softmax(F.reshape(x, (x.shape[0], -1)) @ w, axis=1)])
    plan.run({"input0": rng.standard_normal((360, 1, 8, 8), dtype=np.float32)})
    mg.save(plan, d / "digits.mgm")
    for name, shape in [("one", (1, 1, 8, 8)), ("three", (3, 1, 8, 8)), ("bad", (3, 1, 9, 8))]:
        np.save(d / f"{name}.npy", rng.standard_normal(shape, dtype=np.float32))
    return d, plan


SIGNATURE = "input0: float32[batch, 1, 8, 8] -> float32[batch, 10]"


@pytest.mark.parametrize("batch, name", [(1, "one"), (3, "three")])
def test_run_a_symbolic_model_at_any_batch(capsys, digits, tmp_path, batch, name):
    d, plan = digits
    code, out, err = _cli(capsys, "run", d / "digits.mgm", "--input", f"input0={d}/{name}.npy")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"{SIGNATURE}; ran with batch={batch}"
    assert lines[1].startswith(f"output0: float32[{batch}, 10]  min ")
    code, out, _ = _cli(capsys, "run", d / "digits.mgm", "--input", f"{d}/{name}.npy", "-o",
                        tmp_path / "y.npz")
    (expected,) = plan.run({"input0": np.load(d / f"{name}.npy")})
    assert np.load(tmp_path / "y.npz")["output0"].tobytes() == expected.tobytes()


def test_run_a_symbolic_model_errors_show_the_symbolic_type(capsys, digits):
    d, _ = digits
    code, _, err = _cli(capsys, "run", d / "digits.mgm", "--input", f"{d}/bad.npy")
    _assert_one_line_error(code, err, "the array is float32[3, 1, 9, 8], the model's input "
                           "input0 is float32[batch, 1, 8, 8]")
    code, _, err = _cli(capsys, "run", d / "digits.mgm")
    _assert_one_line_error(code, err, "no --input NAME=FILE.npy for the model's input(s) "
                           "input0 (float32[batch, 1, 8, 8])")


def test_run_refuses_shapes_that_break_a_recorded_fact(capsys, tmp_path):
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    mg.save(mg.compile([x * y]), tmp_path / "two.mgm")
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    np.save(tmp_path / "y.npy", np.ones((5, 4), np.float32))
    code, _, err = _cli(capsys, "run", tmp_path / "two.mgm", "--input", f"x={tmp_path}/x.npy",
                        "--input", f"y={tmp_path}/y.npy")
    _assert_one_line_error(code, err, "the fed shapes break batch == n (batch=2, n=5)")


def test_report_a_symbolic_model_at_the_default_binding(capsys, digits):
    d, plan = digits
    code, out, _ = _cli(capsys, "report", d / "digits.mgm")
    assert code == 0
    lines = out.splitlines()
    assert lines[1:5] == [
        "  inputs   input0: float32[batch, 1, 8, 8]", "  outputs  output0: float32[batch, 10]",
        "  names    batch >= 1; up to 16 specialised plans kept",
        ("  plan for batch=1 (batch: not given, its least value; --dim NAME=N or an --input "
         "sets it): the reports below")]
    assert plan.specialize({"batch": 1}).memory_report() in out


@pytest.mark.parametrize("args, batch", [(["--dim", "batch=8"], 8), (["--input", "three"], 3),
                                         (["--input", "three", "--dim", "batch=3"], 3)])
def test_report_json_of_the_plan_for_the_inputs_given(capsys, digits, args, batch):
    d, plan = digits
    args = [f"input0={d}/three.npy" if a == "three" else a for a in args]
    code, out, _ = _cli(capsys, "report", d / "digits.mgm", "--json", *args)
    report = json.loads(out)
    assert code == 0 and report["inputs"][0]["shape"] == ["batch", 1, 8, 8]
    assert report["symbolic"] == {"names": ["batch"], "bounds": {}, "constraints": [],
                                  "cache_size": 16, "bindings": {"batch": batch},
                                  "defaulted": []}
    fixed = plan.specialize({"batch": batch})
    assert report["memory"] == json.loads(fixed.memory_report(format="json"))
    assert report["instructions"] == len(fixed.instructions)


def test_report_shows_bounds_and_recorded_facts(capsys, tmp_path):
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    mg.save(mg.compile([x + y], bounds={"batch": (2, 32)}), tmp_path / "two.mgm")
    code, out, _ = _cli(capsys, "report", tmp_path / "two.mgm")
    assert code == 0
    assert "  names    batch in 2..32, n >= 1; up to 16 specialised plans kept" in out
    assert "  requires batch == n  (add at " in out
    # n's least value is 1, but batch == n and batch >= 2
    assert "  plan for batch=2, n=2 (batch, n: not given, its least value; " in out
    code, out, _ = _cli(capsys, "report", tmp_path / "two.mgm", "--dim", "n=5")
    assert code == 0 and "  plan for batch=5, n=5 (batch: not given, its least value; " in out
    code, _, err = _cli(capsys, "report", tmp_path / "two.mgm", "--dim", "n=5", "--dim",
                        "batch=4")
    _assert_one_line_error(code, err, "break batch == n (batch=4, n=5)")
    code, out, _ = _cli(capsys, "report", tmp_path / "two.mgm", "--dim", "n=5", "--dim",
                        "batch=5")
    assert code == 0 and "  plan for batch=5, n=5: the reports below" in out


@pytest.mark.parametrize("args, phrase", [
    (["--dim", "seq=4"], "--dim seq=4: the model has no dimension 'seq'; its names are batch"),
    (["--dim", "batch=4", "--input", "three"], "is 3, but batch is already bound to 4"),
])
def test_dim_errors_are_one_line(capsys, digits, args, phrase):
    d, _ = digits
    args = [f"input0={d}/three.npy" if a == "three" else a for a in args]
    code, _, err = _cli(capsys, "report", d / "digits.mgm", *args)
    _assert_one_line_error(code, err, phrase)


def test_dim_on_a_fixed_shape_model_is_refused(capsys, files):
    code, _, err = _cli(capsys, "profile", files / "model.mgm", "--dim", "batch=2")
    _assert_one_line_error(code, err, "--dim batch=2: the model has no dimension 'batch'; it "
                           "names none")


def test_profile_a_symbolic_model(capsys, digits):
    d, _ = digits
    code, out, _ = _cli(capsys, "profile", d / "digits.mgm", "--runs", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (f"{SIGNATURE}; profiled with batch=1 (batch: not given, its least "
                        "value; --dim NAME=N or an --input sets it)")
    assert lines[1].startswith("mg.profile: 2 run(s) of 1 plan(s)")
    code, out, _ = _cli(capsys, "profile", d / "digits.mgm", "--runs", "2", "--input",
                        f"{d}/three.npy")
    assert code == 0 and out.splitlines()[0] == f"{SIGNATURE}; profiled with batch=3"
    code, out, _ = _cli(capsys, "profile", d / "digits.mgm", "--runs", "1", "--dim", "batch=5")
    assert code == 0 and out.splitlines()[0] == f"{SIGNATURE}; profiled with batch=5"


def test_viz_draws_the_plan_for_the_binding(capsys, digits, tmp_path):
    d, plan = digits
    code, out, _ = _cli(capsys, "viz", d / "digits.mgm", "-o", tmp_path / "p.dot", "--dim",
                        "batch=2")
    assert code == 0 and out.strip() == f"wrote {tmp_path / 'p.dot'} (the plan for batch=2)"
    assert (tmp_path / "p.dot").read_text() == plan.specialize({"batch": 2}).to_dot() + "\n"


def test_convert_keeps_the_named_dimensions_of_the_import(capsys, onnx_file, monkeypatch,
                                                          tmp_path):
    path, w = onnx_file
    g = mg.Graph()  # what the importer gives for the ONNX file's dim_param N
    x = g.input("x", ("N", 4))
    symbolic = mg.compile([F.relu(x @ g.param("w", w))])
    monkeypatch.setattr(cli.mg_onnx, "import_model", lambda *a, **k: symbolic)
    code, out, _ = _cli(capsys, "convert", path, "-o", tmp_path / "tiny.mgm")
    assert code == 0
    assert out.strip() == (f"converted {path} -> {tmp_path / 'tiny.mgm'}: inputs x: "
                           "float32[N, 4]; 1 outputs, specialised per binding of N when run")
    predictor = mg.load(tmp_path / "tiny.mgm")
    assert repr(predictor) == "<mgegraph.runtime.Predictor (x: float32[N, 4]) -> 1 outputs>"
    for n in (1, 5):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        np.testing.assert_allclose(predictor.run([x])[0], np.maximum(x @ w, 0), rtol=1e-6)


def test_python_m_mgegraph_runs_one_image_on_a_model_saved_for_a_batch(digits):
    d, _ = digits
    proc = _python("-m", "mgegraph", "run", d / "digits.mgm", "--input",
                   f"input0={d / 'one.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("output0: float32[1, 10]  min ")


# -- a real process ------------------------------------------------------------------------------
def test_python_m_mgegraph_runs_and_fails_cleanly(files):
    proc = _python("-m", "mgegraph", "run", files / "model.mgm", "--input", f"x={files / 'x.npy'}")
    assert proc.returncode == 0 and proc.stdout.startswith("output0: float32[4, 5]  min 0")
    proc = _python("-m", "mgegraph", "run", files / "junk.mgm")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("mgegraph: error: model file: not a zip container (File is not a "
                           "zip file)\n")
    proc = _python("-m", "mgegraph", "nope")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_a_deployments_subcommands_load_no_training_layer(files):
    proc = _python("-c", "import sys; from mgegraph.cli import main; rc = main(sys.argv[1:]); "
                   "print(sorted({'mgegraph.nn', 'mgegraph.optim', 'mgegraph.autodiff'} & "
                   "set(sys.modules))); sys.exit(rc)",
                   "run", files / "model.mgm", "--input", files / "x.npy")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


# -- the README ------------------------------------------------------------------------------------
def _readme_commands():
    text = (ROOT / "README.md").read_text()
    main_job = next(line for line in text.splitlines() if "# main job" in line)
    section = text.split("\n## Command line\n")[1].split("\n## ")[0]
    block = section.split("```bash\n")[1].split("```")[0]
    lines = [main_job.split("&&")[1]] + block.splitlines()
    return [line.split("#")[0].split() for line in lines if line.strip()]


def test_the_readmes_commands_parse():
    commands = _readme_commands()
    assert commands[0] == ["mgegraph", "demo"]  # the main job
    shown = [c[1] for c in commands[1:]]
    assert sorted(shown) == sorted({"demo", "run", "report", "tune", "viz", "profile",
                                    "convert", "bench"})  # each subcommand once
    for command in commands:
        assert command[0] == "mgegraph"
        if command[1] != "bench":
            cli.build_parser().parse_args(command[1:])


# -- the console script ----------------------------------------------------------------------------
def test_pyproject_declares_the_console_script():
    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["mgegraph"] == "mgegraph.cli:main"


def test_installed_console_script_is_cli_main():
    from importlib.metadata import PackageNotFoundError, entry_points

    try:
        found = [ep for ep in entry_points(group="console_scripts") if ep.name == "mgegraph"]
    except PackageNotFoundError:
        found = []
    if not found:
        pytest.skip("the installed metadata predates [project.scripts]: pip install -e . again")
    assert found[0].value == "mgegraph.cli:main" and found[0].load() is cli.main
