"""``mgegraph bench``: run the workloads of shared/BENCHMARKS.md and print one table.

The command runs pytest on the repository's ``benchmarks/`` folder (pytest-benchmark, with
``--benchmark-only``, ``--workload`` for each workload named and ``--benchmark-json`` to a
temporary file), once per thread count, then renders ``mgegraph.tools.bench_table`` from those
JSON files: the table's medians are pytest-benchmark's, and ``python -m pytest benchmarks
--benchmark-only`` prints the same table from the same records.

Design: one pytest process per thread count. Inside a process every implementation is pinned to
that count (``benchmarks/conftest.py``: threadpoolctl, ``torch.set_num_threads``, ONNX Runtime's
session options) and idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``); a fresh process
per count also keeps a pool sized for one count from lingering into the other.

>>> main(["mlp-infer", "--threads", "1", "2", "--json", "table.json"])
0
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mgegraph.io.files import open_regular
from mgegraph.tools import bench_table
from mgegraph.tools.bench_svg import render_svg
from mgegraph.tools.bench_table import WORKLOADS

PROGRESS = "mgegraph-bench:"  # the prefix of the conftest's progress lines (--bench-progress)
QUICK = ["--benchmark-min-rounds=1", "--benchmark-max-time=0.01", "--benchmark-warmup=off"]


class BenchError(ValueError):
    """``mgegraph bench`` cannot run what was asked: the message names what the user wrote."""


def find_benchmarks(directory: str | None = None) -> Path:
    """The benchmarks folder: ``directory`` if given, else the one beside the installed
    package in a source checkout.

    >>> find_benchmarks().name
    'benchmarks'
    """
    path = Path(directory) if directory else Path(__file__).resolve().parents[2] / "benchmarks"
    if not (path / "conftest.py").is_file():
        where = f"--dir {directory}" if directory else f"{path} (next to the installed mgegraph)"
        raise BenchError(f"no benchmark suite at {where}: the benchmarks come with a source "
                         "checkout of mgegraph; pass --dir PATH/TO/benchmarks")
    return path


def require_pytest_benchmark() -> None:
    """The runner's own optional dependencies (the peers are each benchmark's to skip)."""
    missing = [m for m in ("pytest_benchmark", "threadpoolctl") if not importlib.util.find_spec(m)]
    if missing:
        raise BenchError(f"mgegraph bench needs {' and '.join(missing)}: pip install "
                         "'mgegraph[bench]' (in a checkout: pip install -e '.[bench]')")


def check_workloads(names: list[str]) -> list[str]:
    """The workloads asked for, in BENCHMARKS.md's order (all of them when none is named)."""
    for name in names:
        if name == "planner-suite":
            raise BenchError("planner-suite has no timed benchmark: run python -m pytest "
                             "benchmarks/test_planner.py -s for its tables")
        if name not in WORKLOADS:
            raise BenchError(f"unknown workload {name!r}; the workloads are "
                             f"{', '.join(WORKLOADS)}")
    return [w for w in WORKLOADS if w in names] if names else list(WORKLOADS)


def pytest_command(bench_dir: Path, workloads: list[str], json_path: str,
                   extra: list[str]) -> list[str]:
    selection = [arg for w in workloads for arg in ("--workload", w)]
    return [sys.executable, "-m", "pytest", str(bench_dir), "--benchmark-only", "-q", "-rfE",
            "-p", "no:cacheprovider", "--bench-progress", f"--benchmark-json={json_path}",
            *selection, *extra]


class Progress:
    """One line per workload on a terminal ('op-overhead (21 benchmarks, 2 threads) ... 41 s');
    nothing when the stream is not one."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stdout
        self.on = self.stream.isatty()

    def line(self, text: str) -> None:
        if not self.on:
            return
        kind, workload, *rest = text.split()
        if kind == "start":
            count, threads = rest
            plural = "s" if threads != "1" else ""
            self.stream.write(f"  {workload} ({count} benchmarks, {threads} thread{plural}) ... ")
        else:
            self.stream.write(f"{float(rest[0]):.0f} s\n")
        self.stream.flush()


def run_suite(bench_dir: Path, workloads: list[str], threads: int, extra: list[str],
              progress: Progress) -> dict:
    """One pytest process at ``threads`` threads: its pytest-benchmark JSON document, with
    ``"failed"`` listing the short summary lines of failed benchmarks."""
    env = {**os.environ, "MGEGRAPH_BENCH_THREADS": str(threads),
           "OMP_NUM_THREADS": str(threads)}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with tempfile.TemporaryDirectory(prefix="mgegraph-bench-") as tmp:
        json_path = os.path.join(tmp, "benchmarks.json")
        command = pytest_command(bench_dir, workloads, json_path, extra)
        code, tail, failed = _run(command, bench_dir.parent, env, progress)
        # pytest-benchmark leaves the file empty when no benchmark completed
        text = Path(json_path).read_text() if os.path.exists(json_path) else ""
    if code not in (0, 1) or not text:
        what = "no benchmark was measured" if code in (0, 1, 5) else f"pytest exited with {code}"
        raise BenchError(f"{what} ({threads} threads, workloads {' '.join(workloads)}); "
                         "the end of its output:\n" + "\n".join(tail))
    return {**json.loads(text), "failed": failed}


def _run(command, cwd, env, progress) -> tuple[int, list[str], list[str]]:
    """Runs pytest, passing its progress lines on; its exit code, the last 40 lines of its
    output and its FAILED/ERROR summary lines."""
    tail: collections.deque = collections.deque(maxlen=40)
    failed = []
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            # pytest -q may have written its progress ("..... [100%]") on the same line first
            line, _, said = line.rstrip("\n").partition(PROGRESS)
            if said:
                progress.line(said)
            if not line:
                continue
            tail.append(line)
            if line.startswith(("FAILED ", "ERROR ")):
                failed.append(line)
    return proc.returncode, list(tail), failed


def machine(docs: list[dict]) -> str:
    """'AMD EPYC, 2 cores' from pytest-benchmark's machine_info, or what this machine says."""
    cpu = next((d.get("machine_info", {}).get("cpu", {}) for d in docs), {})
    name = cpu.get("brand_raw") or cpu.get("arch") or "unknown CPU"
    return f"{name}, {cpu.get('count') or os.cpu_count()} cores"


def title(docs: list[dict]) -> str:
    threads = sorted({d.get("threads") for d in docs if d.get("threads")})
    return (f"mgegraph bench on {machine(docs)}, threads {', '.join(map(str, threads))}: "
            "pytest-benchmark medians; ratios to PyTorch eager and to the physical limit "
            "measured in the same run")


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, as every error of the ``mgegraph`` command."""

    def error(self, message):
        self.exit(2, f"mgegraph: error: {message} (see `mgegraph bench --help`)\n")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Arguments after ``--`` go to pytest unchanged."""
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = _Parser(
        prog="mgegraph bench", description="Run the workloads of BENCHMARKS.md against the "
        "peers that are installed and print one table.", epilog="Arguments after -- go to pytest.")
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help=f"some of: {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[2], metavar="N",
                        help="thread counts, one pytest process each (default: 2)")
    parser.add_argument("--json", metavar="FILE", help="write the table's rows as JSON")
    parser.add_argument("--svg", metavar="FILE", help="write a bar chart of the table")
    parser.add_argument("--summary", action="store_true",
                        help="one line per workload, case and thread count (mgegraph's best, "
                             "PyTorch eager, the best peer, the limit) instead of every row")
    parser.add_argument("--dir", metavar="PATH", help="the benchmarks folder (default: the "
                        "one beside the installed package)")
    parser.add_argument("--quick", action="store_true", help="one short round per benchmark, "
                        "to check that the table builds (its figures mean little)")
    parser.add_argument("--from-json", nargs="+", metavar="FILE", dest="from_json",
                        help="render pytest-benchmark --benchmark-json files instead of running")
    parser.add_argument("--keep-json", metavar="DIR", dest="keep_json",
                        help="also keep each run's pytest-benchmark JSON in DIR (for --from-json)")
    return parser.parse_args(argv), extra


def _read_json(path: str) -> dict:
    """The JSON document at ``path``, a regular file (``/dev/zero`` would be read forever)."""
    def refuse(message: str):
        raise BenchError(f"--from-json: {message}")

    with open_regular(path, refuse) as f:
        try:
            return json.loads(f.read())
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8, or not JSON
            refuse(f"cannot read {path}: {exc}")


def collect(args, extra: list[str]) -> list[dict]:
    """The pytest-benchmark documents: read from files, or one run per thread count."""
    if args.from_json:
        return [_read_json(path) for path in args.from_json]
    bad = [n for n in args.threads if n < 1]
    if bad:
        raise BenchError(f"--threads {bad[0]}: a thread count is at least 1")
    bench_dir, workloads = find_benchmarks(args.dir), check_workloads(args.workloads)
    require_pytest_benchmark()
    extra = QUICK + extra if args.quick else extra
    progress = Progress()
    docs = []
    for threads in dict.fromkeys(args.threads):
        docs.append(run_suite(bench_dir, workloads, threads, extra, progress))
        if args.keep_json:
            Path(args.keep_json).mkdir(parents=True, exist_ok=True)
            Path(args.keep_json, f"bench-{threads}-threads.json").write_text(json.dumps(docs[-1]))
    return docs


def write_outputs(args, rows, docs) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(bench_table.to_json(rows, machine(docs)),
                                              indent=1) + "\n")
    if args.svg:
        Path(args.svg).write_text(render_svg(rows, title(docs)))


def main(argv: list[str]) -> int:
    """``mgegraph bench [WORKLOAD...] [--threads N ...] [--json FILE] [--svg FILE]``: 0 when
    every benchmark ran, 1 when some failed (the table shows the others), 2 on bad input.

    >>> main(["op-overhead", "--threads", "1", "--quick"])
    0
    """
    args, extra = parse_args(argv)
    try:
        docs = collect(args, extra)
        rows = bench_table.rows_from_runs(docs)
        write_outputs(args, rows, docs)
    except BenchError as exc:
        print(f"mgegraph: error: {exc}", file=sys.stderr)
        return 2
    render = bench_table.render_summary if args.summary else bench_table.render
    print(render(rows, title=title(docs)))
    failed = [line for d in docs for line in d.get("failed", [])]
    for line in failed:
        print(f"mgegraph bench: {line}", file=sys.stderr)
    return 1 if failed else 0
