"""The benchmark table (mgegraph.tools.bench_table, bench_svg) on synthetic pytest-benchmark JSON,
``mgegraph bench``'s errors, and one real run of ``mgegraph.tools.bench.main`` on mlp-infer."""
import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mgegraph.tools import bench, bench_table
from mgegraph.tools.bench_svg import render_svg
from mgegraph.tools.bench_table import from_json, render, render_summary, rows_from_runs

MS = 1e-3


def record(workload, case, impl, median, threads=2, module="test_core", **tags):
    """One benchmark as pytest-benchmark's --benchmark-json writes it, tagged as the conftest
    tags it."""
    return {"group": f"{workload} {case}", "name": f"test_x[{impl}]",
            "fullname": f"benchmarks/{module}.py::test_x[{impl}]", "params": {"impl": impl},
            "extra_info": {"workload": workload, "case": case, "implementation": impl,
                           "threads": threads, **tags},
            "stats": {"median": median, "mean": median, "rounds": 7, "iterations": 1}}


def skipped(workload, case, impl, reason, threads=2):
    return {"workload": workload, "case": case, "implementation": impl, "threads": threads,
            "fullname": f"benchmarks/test_core.py::test_x[{impl}]", "reason": reason}


def doc(*benchmarks, skips=(), threads=2):
    return {"benchmarks": list(benchmarks), "skipped": list(skips), "threads": threads,
            "machine_info": {"cpu": {"brand_raw": "AMD EPYC", "count": 2}}}


LIMIT = {"role": "limit", "limit_what": "8 GEMMs"}
MLP = doc(record("mlp-train", "batch 128", "torch eager", 10 * MS),
          record("mlp-train", "batch 128", "mgegraph step", 5 * MS, arena_bytes=3 << 20,
                 peak_bytes=7 << 20, peak_kind="RSS growth"),
          record("mlp-train", "batch 128", "gemms only", 4 * MS, **LIMIT),
          record("mlp-train", "batch 128", "numpy", 8 * MS))


def by_impl(rows):
    return {r.implementation: r for r in rows}


def test_ratios_to_torch_and_to_the_limit():
    rows = by_impl(rows_from_runs([MLP]))
    assert rows["mgegraph step"].vs_torch == pytest.approx(0.5)
    assert rows["mgegraph step"].vs_limit == pytest.approx(1.25)
    assert rows["mgegraph step"].limit_s == pytest.approx(4 * MS)
    assert rows["numpy"].vs_limit == pytest.approx(2.0)
    assert rows["torch eager"].vs_torch == pytest.approx(1.0)
    limit = rows["gemms only"]
    assert limit.is_limit and limit.vs_limit is None and limit.vs_torch == pytest.approx(0.4)
    assert rows["mgegraph step"].arena_bytes == 3 << 20 and rows["numpy"].arena_bytes is None


def test_a_scaled_limit_is_the_copy_rate_times_the_bytes_to_move():
    # 128 MiB copied in 20 ms; the chain moves 80 MiB: its limit is 12.5 ms
    copy = record("fusion-chain", "4M", "np.copyto", 20 * MS, role="limit",
                  limit_scale=80 / 128, limit_what="80 MiB at the copy rate")
    rows = by_impl(rows_from_runs([doc(copy, record("fusion-chain", "4M", "fused", 15 * MS))]))
    assert rows["np.copyto"].limit_s == pytest.approx(12.5 * MS)
    assert rows["fused"].vs_limit == pytest.approx(1.2)
    assert rows["fused"].vs_torch is None  # no PyTorch eager in this group


def test_the_text_table_shows_medians_ratios_memory_and_the_limit():
    lines = render(rows_from_runs([MLP]), title="AMD EPYC, 2 cores").splitlines()
    assert lines[0] == "AMD EPYC, 2 cores"
    assert lines[1].split() == ["workload", "case", "threads", "implementation", "median",
                                "x", "torch", "x", "limit", "arena", "peak", "note"]
    assert lines[2].split()[:9] == ["mlp-train", "batch", "128", "2", "gemms", "only", "4",
                                    "ms", "0.40"]
    assert "the limit, 4 ms: 8 GEMMs" in lines[2]
    mine = next(line for line in lines if "mgegraph step" in line)
    assert mine.split()[2:] == ["5", "ms", "0.50", "1.25", "3.00", "MiB", "7.00", "MiB*"]
    assert lines[-1] == "* peak: RSS growth"


def test_missing_peers_are_rows_that_say_why():
    d = doc(record("mlp-infer", "batch 1", "mgegraph plan.run", 0.1 * MS),
            skips=[skipped("mlp-infer", "batch 1", "torch eager", "torch is not installed")])
    rows = rows_from_runs([d])
    assert [r.implementation for r in rows] == ["mgegraph plan.run", "torch eager"]
    assert rows[0].vs_torch is None  # the baseline did not run
    assert rows[1].median_s is None and rows[1].note == "skipped: torch is not installed"
    text = render(rows)
    line = next(x for x in text.splitlines() if "torch eager" in x)
    assert "skipped" in line and "torch is not installed" in line
    assert "100 us        -        -" in text  # no ratio without the baseline or a limit


def test_untagged_benchmarks_are_not_rows():
    untagged = dict(record("mlp-train", "b", "x", 1.0), extra_info={"ops": 3})
    assert rows_from_runs([doc(untagged)]) == []
    assert render([]) == "(no tagged benchmark ran)"


def test_sorting_workloads_threads_limit_then_fastest_then_skipped():
    d1 = doc(record("op-overhead", "1000 ops", "b", 3 * MS, threads=1),
             record("op-overhead", "1000 ops", "a", 2 * MS, threads=1), threads=1,
             skips=[skipped("op-overhead", "1000 ops", "onnxruntime", "no", threads=1)])
    d2 = doc(record("op-overhead", "1000 ops", "a", 1 * MS),
             record("mlp-train", "batch 128", "slow", 9 * MS),
             record("mlp-train", "batch 128", "limit", 20 * MS, **LIMIT),
             record("mlp-train", "batch 128", "fast", 1 * MS))
    rows = rows_from_runs([d2, d1])
    assert [(r.workload, r.threads, r.implementation) for r in rows] == [
        ("mlp-train", 2, "limit"), ("mlp-train", 2, "fast"), ("mlp-train", 2, "slow"),
        ("op-overhead", 1, "a"), ("op-overhead", 1, "b"), ("op-overhead", 1, "onnxruntime"),
        ("op-overhead", 2, "a")]
    text = render(rows).splitlines()
    assert text[1].startswith("mlp-train") and text[2].startswith(" ")  # lead written once
    assert text[4] == ""  # a blank line between workloads
    assert text[5].split()[:4] == ["op-overhead", "1000", "ops", "1"]
    assert text[8].split()[:4] == ["op-overhead", "1000", "ops", "2"]  # a new thread count


def test_a_name_measured_by_two_modules_is_told_apart_and_compared_within_its_module():
    d = doc(record("op-overhead", "c", "torch eager", 2 * MS, module="test_core"),
            record("op-overhead", "c", "torch eager", 4 * MS, module="test_eager"),
            record("op-overhead", "c", "mgegraph eager", 3 * MS, module="test_eager"),
            record("op-overhead", "c", "mgegraph plan.run", 1 * MS, module="test_core"))
    rows = rows_from_runs([d])
    assert bench_table.labels(rows) == ["mgegraph plan.run", "torch eager [test_core]",
                                        "mgegraph eager", "torch eager [test_eager]"]
    ratios = {r.implementation: r.vs_torch for r in rows}
    assert ratios["mgegraph eager"] == pytest.approx(0.75)     # 3 / test_eager's 4
    assert ratios["mgegraph plan.run"] == pytest.approx(0.5)   # 1 / test_core's 2


def test_ops_give_microseconds_per_op():
    d = doc(record("op-overhead", "c", "mgegraph", 7.1e-6, ops=1000))
    assert "0.0071 us per op" in render(rows_from_runs([d]))


def test_json_round_trip(tmp_path):
    rows = rows_from_runs([MLP, doc(skips=[skipped("mlp-train", "batch 128", "onnxruntime",
                                                   "onnxruntime is not installed")])])
    path = tmp_path / "table.json"
    path.write_text(json.dumps(bench_table.to_json(rows, "AMD EPYC, 2 cores")))
    loaded = json.loads(path.read_text())
    assert loaded["machine"] == "AMD EPYC, 2 cores" and len(loaded["rows"]) == 5
    assert from_json(loaded) == rows and render(from_json(loaded)) == render(rows)
    with pytest.raises(ValueError, match="version 99"):
        from_json({**loaded, "version": 99})


def test_summary_one_line_per_group():
    text = render_summary(rows_from_runs([MLP])).splitlines()
    assert len(text) == 2
    assert text[1].split() == ["mlp-train", "batch", "128", "2", "5", "ms", "step", "1.25",
                               "10", "ms", "8", "ms", "numpy", "4", "ms", "(gemms", "only)"]


def test_svg_is_one_well_formed_document_with_a_bar_per_measured_row():
    d = doc(*MLP["benchmarks"], record("mlp-train", "batch 128", "<odd & name>", 6 * MS),
            record("mlp-train", "batch 128", "torch eager", 9 * MS, module="test_eager"),
            skips=[skipped("mlp-train", "batch 128", "onnxruntime", "not installed")])
    svg = render_svg(rows_from_runs([d]), "title & more")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}rect")) == 6  # the skipped row has no bar
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "<odd & name>" in texts and "title & more" in texts
    assert {"torch eager [test_core]", "torch eager [test_eager]"} <= set(texts)
    assert "mlp-train · batch 128 · 2 threads" in texts
    assert "onnxruntime: skipped: not installed" in texts
    assert len(root.findall(f"{ns}line")) == 2  # the limit and PyTorch eager


# -- mgegraph bench: arguments and errors ---------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["mlp-trian"], "unknown workload 'mlp-trian'; the workloads are mlp-train"),
    (["planner-suite"], "planner-suite has no timed benchmark"),
    (["--threads", "0"], "--threads 0: a thread count is at least 1"),
    (["--dir", "/nonexistent/benchmarks"], "no benchmark suite at --dir /nonexistent"),
    (["--from-json", "/nonexistent.json"], "--from-json: cannot read"),
])
def test_bad_input_is_one_line_naming_it(argv, message, capsys):
    assert bench.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"mgegraph: error: {message}") and err.count("\n") == 1


def test_from_json_renders_and_writes_rows(tmp_path, capsys):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({**MLP, "failed": []}))
    out_json, svg = tmp_path / "rows.json", tmp_path / "t.svg"
    assert bench.main(["--from-json", str(raw), "--json", str(out_json), "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("mgegraph bench on AMD EPYC, 2 cores, threads 2:")
    assert out.rstrip("\n") == render(rows_from_runs([MLP]), title=out.splitlines()[0])
    assert from_json(json.loads(out_json.read_text())) == rows_from_runs([MLP])
    assert svg.read_text().startswith("<svg")


def test_failed_benchmarks_make_the_exit_status_1(tmp_path, capsys):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({**MLP, "failed": ["FAILED benchmarks/test_core.py::x - boom"]}))
    assert bench.main(["--from-json", str(raw)]) == 1
    assert "mgegraph bench: FAILED benchmarks/test_core.py::x - boom" in capsys.readouterr().err


def test_progress_is_one_line_per_workload_on_a_terminal_only():
    class Terminal:
        def __init__(self, tty):
            self.text, self.tty = "", tty

        def isatty(self):
            return self.tty

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    for tty, want in ((True, "  mlp-infer (14 benchmarks, 2 threads) ... 3 s\n"), (False, "")):
        stream = Terminal(tty)
        progress = bench.Progress(stream)
        progress.line(" start mlp-infer 14 2")
        progress.line(" end mlp-infer 3.2")
        assert stream.text == want


def test_the_pytest_command_selects_workloads_and_writes_json(tmp_path):
    cmd = bench.pytest_command(tmp_path, ["mlp-infer", "op-overhead"], "/t/x.json", ["-x"])
    assert cmd[1:4] == ["-m", "pytest", str(tmp_path)]
    assert "--benchmark-only" in cmd and "--benchmark-json=/t/x.json" in cmd
    assert cmd[-5:] == ["--workload", "mlp-infer", "--workload", "op-overhead", "-x"]


# -- one real run ---------------------------------------------------------------------------------
def test_a_real_run_of_mlp_infer(tmp_path, capsys, monkeypatch):
    """mgegraph bench on the cheapest workload, one short round per benchmark, PyTorch left out
    (MGEGRAPH_BENCH_NO_TORCH): the rows are those of test_core and test_deploy."""
    bench_dir = Path(bench_table.__file__).parents[2] / "benchmarks"
    if not (bench_dir / "conftest.py").exists():
        pytest.skip("no benchmarks/ folder (not a source checkout)")
    pytest.importorskip("pytest_benchmark")
    monkeypatch.setenv("MGEGRAPH_BENCH_NO_TORCH", "1")
    out_json = tmp_path / "rows.json"
    start = time.perf_counter()
    code = bench.main(["mlp-infer", "--threads", "1", "--quick", "--json", str(out_json)])
    took = time.perf_counter() - start
    out = capsys.readouterr().out
    assert code == 0, out
    rows = from_json(json.loads(out_json.read_text()))
    assert {(r.workload, r.case, r.threads) for r in rows} == {("mlp-infer", "batch 1", 1),
                                                              ("mlp-infer", "batch 128", 1)}
    impls = {r.implementation: r for r in rows if r.case == "batch 128"}
    assert {"gemms only (the BLAS in use)", "mgegraph plan.run", "mgegraph nn.Linear", "numpy eager",
            "mgegraph freeze=True", "mgegraph optimize=1", "torch eager", "onnxruntime"} == set(impls)
    assert impls["gemms only (the BLAS in use)"].is_limit
    assert impls["mgegraph plan.run"].vs_limit == pytest.approx(
        impls["mgegraph plan.run"].median_s / impls["gemms only (the BLAS in use)"].median_s)
    assert impls["torch eager"].median_s is None and "skipped" in impls["torch eager"].note
    assert impls["mgegraph optimize=1"].arena_bytes > 0
    assert out.rstrip("\n").endswith(render(rows).splitlines()[-1])
    assert took < 120, f"{took:.0f} s: the quick run should take seconds"


def test_a_missing_pytest_benchmark_is_named(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pytest_benchmark" else find_spec(name, *a))
    assert bench.main(["mlp-infer"]) == 2
    assert "needs pytest_benchmark: pip install 'mgegraph[bench]'" in capsys.readouterr().err


def test_every_benchmark_of_the_workload_modules_has_a_workload():
    """No test of the modules that measure the workloads lacks a workload marker (which would
    leave its benchmark out of mgegraph bench and of the table): -m 'not workload' collects
    none of them."""
    import subprocess
    import sys

    bench_dir = Path(bench_table.__file__).parents[2] / "benchmarks"
    if not (bench_dir / "conftest.py").exists():
        pytest.skip("no benchmarks/ folder (not a source checkout)")
    modules = [str(bench_dir / f"test_{m}.py") for m in ("core", "eager", "fusion", "deploy",
                                                           "remat")]
    done = subprocess.run([sys.executable, "-m", "pytest", *modules, "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-m", "not workload"], capture_output=True,
                          text=True, cwd=bench_dir.parent, check=False,
                          env={**os.environ, "MGEGRAPH_BENCH_NO_TORCH": "1"})
    unmarked = [line for line in done.stdout.splitlines() if "::" in line]
    assert unmarked == [] and "deselected" in done.stdout, done.stdout[-2000:]
    assert done.returncode == 5  # no test collected, and no collection error


def test_the_benchmarks_are_found_beside_the_installed_package():
    import mgegraph

    default = Path(mgegraph.__file__).parent.parent / "benchmarks"
    if not (default / "conftest.py").exists():
        pytest.skip("no benchmarks/ folder (not a source checkout)")
    assert bench.find_benchmarks() == default
    assert bench.find_benchmarks(str(default)) == default


def test_a_usage_error_is_one_line_too(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--nonsense"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mgegraph: error: unrecognized arguments: --nonsense") \
        and err.count("\n") == 1


def test_from_json_refuses_a_device_or_a_folder(tmp_path, capsys):
    for path, kind in (("/dev/zero", "a character device"), (str(tmp_path), "a directory")):
        assert bench.main(["--from-json", path]) == 2  # /dev/zero was read without end
        err = capsys.readouterr().err
        assert err.startswith(f"mgegraph: error: --from-json: '{path}' is {kind}"), err
