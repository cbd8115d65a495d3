"""Pins every implementation to the same thread count, tags each benchmark with the workload of
shared/BENCHMARKS.md it measures, and prints the benchmark table at the end of the run.

    python -m pytest benchmarks --benchmark-only [--workload NAME ...]

A test says which workload it measures with ``@pytest.mark.workload("mlp-train")`` (on a
parameter where one test measures several) and, through the ``tag`` fixture, which case and
implementation it is and what else it knows (the limit, arena and peak bytes). The table
(``mgegraph.tools.bench_table``) is built from pytest-benchmark's records of this run, the same
dicts ``--benchmark-json`` writes, which ``mgegraph bench`` renders with the same code.
"""
import os
import time

# Several thread pools share this process (SciPy's OpenBLAS, NumPy's, PyTorch's OpenMP). With
# PyTorch's OpenMP threads spinning while idle (its default), every OpenBLAS call on these 2 cores
# starved: mlp-infer batch 1 took 16 ms instead of 0.08 for every implementation. Idle OpenMP
# threads must sleep; the variable is read when libgomp loads, hence before any import below.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

from mgegraph.tools import bench_table

# The test modules that ran, for the summaries some of them add (see pytest_terminal_summary).
MODULES = pytest.StashKey[list]()
# Tagged benchmarks that were skipped (a peer not installed): rows of the table with the reason.
SKIPPED = pytest.StashKey[list]()
# Workload -> how many selected benchmarks measure it, and the workload now running (progress).
COUNTS = pytest.StashKey[dict]()
RUNNING = pytest.StashKey[list]()
THREADS = int(os.environ.get("MGEGRAPH_BENCH_THREADS", "2"))
PROGRESS = "mgegraph-bench:"  # the prefix of the lines mgegraph bench reads as progress


def pytest_addoption(parser):
    group = parser.getgroup("mgegraph benchmark table")
    group.addoption("--workload", action="append", default=[], metavar="NAME",
                    help="run only the benchmarks of this workload of BENCHMARKS.md "
                         f"(repeatable; one of {', '.join(bench_table.WORKLOADS)})")
    group.addoption("--bench-progress", action="store_true",
                    help="print a line when each workload starts and ends (mgegraph bench)")


def pytest_configure(config):
    config.addinivalue_line("markers", "workload(name): the BENCHMARKS.md workload a benchmark "
                                       "measures (its row in the table; --workload selects)")
    unknown = [w for w in config.getoption("workload") if w not in bench_table.WORKLOADS]
    if unknown:
        raise pytest.UsageError(f"--workload {unknown[0]!r} is not a workload; the workloads "
                                f"are {', '.join(bench_table.WORKLOADS)}")
    config.stash[SKIPPED] = []
    config.stash[RUNNING] = [None, 0.0]


def workload_of(item) -> str | None:
    marker = item.get_closest_marker("workload")
    return marker.args[0] if marker else None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if workload_of(item) not in (None, *bench_table.WORKLOADS):
            raise pytest.UsageError(f"{item.nodeid}: workload marker {workload_of(item)!r} "
                                    "is not a workload of BENCHMARKS.md")
    wanted = config.getoption("workload")
    if wanted:
        # Selected runs (mgegraph bench) run one workload after another, so that progress is
        # one line per workload; a stable sort keeps each module's order inside a workload.
        keep = [i for i in items if workload_of(i) in wanted]
        config.hook.pytest_deselected(items=[i for i in items if workload_of(i) not in wanted])
        keep.sort(key=lambda i: bench_table.WORKLOADS.index(workload_of(i)))
        items[:] = keep
    counts = {}
    for item in items:
        counts[workload_of(item)] = counts.get(workload_of(item), 0) + 1
    config.stash[COUNTS] = counts
    modules = {id(item.module): item.module for item in items if hasattr(item, "module")}
    config.stash[MODULES] = list(modules.values())


@pytest.fixture(scope="session", autouse=True)
def same_threads_for_everyone():
    from threadpoolctl import threadpool_limits

    try:  # MGEGRAPH_BENCH_NO_TORCH (workloads._torch): PyTorch is left out, not even imported
        if not os.environ.get("MGEGRAPH_BENCH_NO_TORCH"):
            import torch

            torch.set_num_threads(THREADS)
    except ImportError:
        pass
    with threadpool_limits(limits=THREADS):
        yield


@pytest.fixture
def tag(request, benchmark):
    """``tag(case, implementation, **figures)`` names this benchmark's row in the table; call
    it before anything that may skip, so that a skipped peer still shows, with the reason.

    >>> tag("batch 128", "torch eager", peak_bytes=..., peak_kind="RSS growth")
    >>> tag("batch 128", "gemms only", role="limit", limit_what="the step's 8 GEMMs")
    """
    workload = workload_of(request.node)
    if workload is None:
        pytest.fail(f"{request.node.nodeid} uses tag but has no @pytest.mark.workload")

    def tag(case: str, implementation: str, **figures):
        benchmark.extra_info.update(workload=workload, case=case, implementation=implementation,
                                    threads=THREADS, **figures)

    return tag


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    bench = getattr(item, "funcargs", {}).get("benchmark")
    if report.skipped and bench is not None and "workload" in bench.extra_info:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        item.config.stash[SKIPPED].append({**bench.extra_info, "fullname": item.nodeid,
                                           "reason": reason.removeprefix("Skipped: ")})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With --bench-progress: a line as each workload starts and one as it ends."""
    config, workload = item.config, workload_of(item)
    show = config.getoption("bench_progress") and workload is not None
    running = config.stash[RUNNING]
    if show and running[0] != workload:
        running[:] = [workload, time.perf_counter()]
        _say(config, f"start {workload} {config.stash[COUNTS][workload]} {THREADS}")
    yield
    if show and (nextitem is None or workload_of(nextitem) != workload):
        _say(config, f"end {workload} {time.perf_counter() - running[1]:.1f}")
        running[0] = None


def _say(config, line):
    config.pluginmanager.get_plugin("terminalreporter").write_line(f"{PROGRESS} {line}")


def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["skipped"] = config.stash.get(SKIPPED, [])
    output_json["threads"] = THREADS


def session_rows(config) -> list:
    """The table's rows from this run's pytest-benchmark records (as --benchmark-json has them)."""
    session = getattr(config, "_benchmarksession", None)
    records = [b.as_dict(include_data=False) for b in session.benchmarks] if session else []
    return bench_table.rows_from_runs([{"benchmarks": records,
                                        "skipped": config.stash.get(SKIPPED, [])}])


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's own tables: the table ends the run
def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not (session.benchmarks or config.stash.get(SKIPPED, [])):
        return
    if not config.getoption("bench_progress"):  # mgegraph bench prints the table itself
        rows = session_rows(config)
        terminalreporter.section(f"benchmark table ({THREADS} threads, one run)")
        terminalreporter.write_line(bench_table.render(rows))
    untagged_groups(terminalreporter, session)
    # A module may add figures that need several groups at once (a limit computed from one case,
    # ratios across groups): its terminal_summary() returns the lines from what it measured.
    for module in config.stash.get(MODULES, []):
        lines = module.terminal_summary() if hasattr(module, "terminal_summary") else []
        if lines:
            terminalreporter.section(f"{module.__name__}: figures")
            for line in lines:
                terminalreporter.write_line(line)


def untagged_groups(terminalreporter, session):
    """Benchmarks that are no workload's row (kernels, GEMM backends, the arena solver): their
    medians as ratios to the first of each group."""
    groups = {}
    for bench in session.benchmarks:
        if "workload" not in bench.extra_info:
            groups.setdefault(bench.group, []).append(bench)
    if not groups:
        return
    terminalreporter.section(f"other benchmarks: medians and ratios ({THREADS} threads)")
    for group, benches in groups.items():
        base = benches[0].stats.median
        terminalreporter.write_line(f"{group}: ratio to {benches[0].name}")
        for b in benches:
            terminalreporter.write_line(f"  {b.name:60s} median {b.stats.median * 1e3:9.4f} ms  "
                                        f"x{b.stats.median / base:6.3f}")
