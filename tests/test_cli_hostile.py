"""The command line against hostile-but-realistic use: devices and FIFOs where files are
expected, output names ``np.savez`` would drop or choke on, out-of-range numbers, and
profiles of very many runs. Each is one clear line (usage errors: status 2), never a hang."""
import argparse
import json
import os
import zipfile

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import cli


def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str, *phrases) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mgegraph: error: "), err
    for phrase in phrases:
        assert phrase in lines[0], err


def _renamed(source, target, names) -> None:
    """``source``'s model file with its outputs named ``names``, at ``target``."""
    with zipfile.ZipFile(source) as zf:
        members = {info.filename: zf.read(info) for info in zf.infolist()}
    description = json.loads(members["model.json"])
    for entry, name in zip(description["outputs"], names, strict=True):
        entry["name"] = name
    members["model.json"] = json.dumps(description).encode()
    with zipfile.ZipFile(target, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A model of three outputs (x: f32[4,3]) and an input file."""
    d = tmp_path_factory.mktemp("hostile")
    g = mg.Graph()
    x = g.input("x", (4, 3), "float32")
    mg.save(mg.compile([F.relu(x), x * 2.0, x + 1.0]), d / "m.mgm")
    np.save(d / "x.npy", np.arange(12, dtype=np.float32).reshape(4, 3) - 5)
    return d


# -- numbers out of range --------------------------------------------------------------------
@pytest.mark.parametrize("command", [["profile"], ["viz", "-o", "p.html", "--profile", "1"]])
def test_a_negative_seed_is_a_usage_error_naming_seed(capsys, model, command):
    code, _, err = _cli(capsys, command[0], model / "m.mgm", *command[1:], "--seed", "-1")
    assert code == 2
    _one_line(err, "argument --seed: '-1' is not an integer >= 0")


# -- what -o writes --------------------------------------------------------------------------
def test_run_writes_outputs_named_like_savez_parameters(capsys, model, tmp_path):
    names = ["file", "allow_pickle", "arr_0"]
    _renamed(model / "m.mgm", tmp_path / "named.mgm", names)
    code, out, err = _cli(capsys, "run", tmp_path / "named.mgm", "--input", model / "x.npy",
                          "-o", tmp_path / "y")
    assert code == 0, err
    assert out == f"wrote file, allow_pickle, arr_0 to {tmp_path / 'y'}.npz\n"
    x = np.load(model / "x.npy")
    with np.load(tmp_path / "y.npz") as saved:
        assert sorted(saved.files) == sorted(names)
        for name, want in zip(names, (np.maximum(x, 0), x * 2, x + 1)):
            assert saved[name].tobytes() == want.tobytes() and saved[name].dtype == want.dtype


@pytest.mark.parametrize("names, phrase", [
    (["y", "y", "z"], "the outputs repeat the name(s) ['y']"),
    (["a/b", "c", "d"], "the output name 'a/b' cannot name an array"),
    (["", "c", "d"], "the output name '' cannot name an array"),
])
def test_run_refuses_output_names_an_npz_cannot_hold(capsys, model, tmp_path, names, phrase):
    _renamed(model / "m.mgm", tmp_path / "bad.mgm", names)
    code, _, err = _cli(capsys, "run", tmp_path / "bad.mgm", "--input", model / "x.npy",
                        "-o", tmp_path / "y.npz")
    assert code == 1
    _one_line(err, phrase)
    assert sorted(os.listdir(tmp_path)) == ["bad.mgm"]  # nothing written, no temporary


# -- files that are not files ----------------------------------------------------------------
@pytest.mark.parametrize("where", ["model", "input"])
@pytest.mark.parametrize("path, kind", [("/dev/zero", "a character device"),
                                        ("fifo", "a FIFO"), ("folder", "a directory")])
def test_a_device_fifo_or_folder_is_refused_at_once(capsys, model, tmp_path, where, path, kind):
    if path == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif path == "folder":
        path = tmp_path
    argv = (["run", path, "--input", model / "x.npy"] if where == "model"
            else ["run", model / "m.mgm", "--input", f"x={path}"])
    code, _, err = _cli(capsys, *argv)
    assert code == 1
    _one_line(err, f"{str(path)!r} is {kind}", *(["--input x="] if where == "input" else []))


def test_an_input_header_claiming_a_huge_array_is_refused_before_its_data(capsys, model,
                                                                          tmp_path):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as f:  # a header for 4 TB of float32 and no data at all
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    code, _, err = _cli(capsys, "run", model / "m.mgm", "--input", f"x={path}")
    assert code == 1
    _one_line(err, "the array is float32[1000000000000], the model's input x is float32[4, 3]")


def test_convert_refuses_a_device(capsys, tmp_path):
    pytest.importorskip("onnx")
    code, _, err = _cli(capsys, "convert", "/dev/zero", "-o", tmp_path / "m.mgm")
    assert code == 1
    _one_line(err, "'/dev/zero' is a character device")


# -- profiles of many runs -------------------------------------------------------------------
def _args(trace=None):
    return argparse.Namespace(input=[], seed=0, trace=trace)


@pytest.mark.parametrize("trace", [False, True])
def test_profile_without_a_trace_keeps_no_run_and_its_table_counts_them_all(model, trace):
    predictor = mg.load(model / "m.mgm")
    prof = cli._profiled(predictor, _args(), 200, trace=trace)
    assert prof.run_count == 200 and len(prof.runs) == (200 if trace else 0)
    rows = prof.instructions()
    assert [r.calls for r in rows] == [200.0] * len(predictor.plan.instructions)
    assert all(0 <= r.fastest <= r.mean <= r.slowest for r in rows)
    assert "mg.profile: 200 run(s) of 1 plan(s)" in prof.table()


@pytest.mark.parametrize("command", [["profile", "--trace"], ["viz", "--profile", "5", "-o"]])
def test_an_output_that_is_a_folder_is_refused_before_the_work(capsys, model, tmp_path,
                                                               monkeypatch, command):
    folder = tmp_path / "out.json" if command[0] == "profile" else tmp_path / "out.html"
    folder.mkdir()
    monkeypatch.setattr(cli, "_profiled", lambda *a, **k: pytest.fail("profiled first"))
    code, out, err = _cli(capsys, command[0], model / "m.mgm", *command[1:], folder)
    assert code == 1 and out == ""
    _one_line(err, f"{command[-1]} {folder}: is a directory")


# -- a model with a named batch --------------------------------------------------------------
@pytest.fixture(scope="module")
def symbolic(tmp_path_factory):
    d = tmp_path_factory.mktemp("symbolic")
    g = mg.Graph()
    x = g.input("input0", ("batch", 1, 8, 8), "float32")
    mg.save(mg.compile([F.relu(x)]), d / "m.mgm")
    return d / "m.mgm"


def test_a_header_claiming_a_huge_batch_is_refused_before_its_data(capsys, symbolic,
                                                                   tmp_path):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as f:  # a conforming header for 256 TB of float32 and no data
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 1, 8, 8)})
    code, _, err = _cli(capsys, "run", symbolic, "--input", f"input0={path}")
    assert code == 1
    _one_line(err, "the header promises float32[1000000000000, 1, 8, 8], 256000000000000 "
              "bytes, the file holds 0 after it")


@pytest.mark.parametrize("command", [["profile"], ["report"], ["viz", "-o", "p.dot"]])
def test_a_huge_dim_is_refused_by_the_limits_before_any_array(capsys, symbolic, monkeypatch,
                                                             command):
    from mgegraph.io import feeds
    monkeypatch.setattr(feeds, "random_array", lambda *a: pytest.fail("made an array"))
    code, out, err = _cli(capsys, command[0], symbolic, *command[1:], "--dim",
                          f"batch={10**12}")
    assert code == 1 and out == ""
    _one_line(err, f"batch={10**12}: ", "is over the limit of 4294967296")


@pytest.mark.parametrize("spec", ["batch=0", "batch=-2", "batch", "=3", "1x=2", "batch=two"])
def test_a_malformed_dim_is_a_usage_error(capsys, symbolic, spec):
    code, _, err = _cli(capsys, "profile", symbolic, "--dim", spec)
    assert code == 2
    _one_line(err, f"argument --dim: {spec!r} is not NAME=N with N >= 1")
