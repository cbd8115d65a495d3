"""``mgegraph tune MODEL``: the kernels' ways of a saved model measured on this machine and
stored, so that loading the model here later takes them (``compile(tune=...)``)."""
import json

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import cli, runtime


@pytest.fixture
def model(tmp_path, monkeypatch):
    """A small CNN with a named batch, saved; the store of choices is the test's own."""
    monkeypatch.setenv("MGEGRAPH_TUNE_CACHE", str(tmp_path / "choices.json"))
    rng = np.random.default_rng(3)
    g = mg.Graph()
    x = g.input("input0", ("batch", 8, 12, 12))
    w = g.param("w", rng.standard_normal((16, 8, 3, 3), dtype=np.float32))
    v = g.param("v", rng.standard_normal((16 * 12 * 12, 10), dtype=np.float32))
    h = F.relu(F.conv2d(x, w, padding=1))
    mg.save(mg.compile([F.reshape(h, (x.shape[0], -1)) @ v]), tmp_path / "cnn.mgm")
    return tmp_path


def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _hows(out: str) -> set[str]:
    return {r["how"] for r in json.loads(out)["instructions"]}


def test_tune_measures_stores_and_a_second_run_reads_the_store(capsys, model):
    code, out, _ = _cli(capsys, "tune", model / "cnn.mgm", "--dim", "batch=4", "--json")
    assert code == 0 and _hows(out) == {"measured"}
    report = json.loads(out)
    assert report["bindings"] == {"batch": 4} and report["store"] == str(model / "choices.json")
    assert all(r["seconds"] > 0 for r in report["instructions"])
    assert {r["op"] for r in report["instructions"]} == {"conv2d", "matmul"}
    stored = json.loads((model / "choices.json").read_text())
    assert len(stored) == len(report["instructions"])
    code, again, _ = _cli(capsys, "tune", model / "cnn.mgm", "--dim", "batch=4", "--json")
    assert code == 0 and _hows(again) == {"cached"}
    assert [r["path"] for r in json.loads(again)["instructions"]] == \
        [r["path"] for r in report["instructions"]]
    code, forced, _ = _cli(capsys, "tune", model / "cnn.mgm", "--dim", "batch=4", "--json",
                           "--again")
    assert code == 0 and _hows(forced) == {"measured"}


def test_loading_and_reporting_after_tuning_take_the_stored_ways(capsys, model):
    code, out, _ = _cli(capsys, "tune", model / "cnn.mgm", "--dim", "batch=2")
    assert code == 0 and "measured" in out and "choices stored in" in out
    plan = runtime.load(model / "cnn.mgm").specialize({"batch": 2})
    assert {r.how for r in plan.kernels_report().rows} == {"cached"}
    code, text, _ = _cli(capsys, "report", model / "cnn.mgm", "--dim", "batch=2")
    assert code == 0 and text.rstrip().endswith(str(plan.kernels_report()))
    code, out, _ = _cli(capsys, "report", model / "cnn.mgm", "--dim", "batch=2", "--json")
    assert {r["how"] for r in json.loads(out)["kernels"]} == {"cached"}
    # another batch was never measured: the rules decide it
    other = runtime.load(model / "cnn.mgm").specialize({"batch": 3})
    assert {r.how for r in other.kernels_report().rows} == {"rules"}


def test_tune_refuses_a_weights_file(capsys, model):
    mg.save({"w": np.zeros(3, np.float32)}, model / "weights.mgm")
    code, _, err = _cli(capsys, "tune", model / "weights.mgm")
    assert code == 1 and err.startswith("mgegraph: error: ") and "state dict" in err
