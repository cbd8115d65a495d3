"""Pins every implementation to the same thread count and prints medians as ratios per group."""
import os

# Several thread pools share this process (SciPy's OpenBLAS, NumPy's, PyTorch's OpenMP). With
# PyTorch's OpenMP threads spinning while idle (its default), every OpenBLAS call on these 2 cores
# starved: mlp-infer batch 1 took 16 ms instead of 0.08 for every implementation. Idle OpenMP
# threads must sleep; the variable is read when libgomp loads, hence before any import below.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

# The test modules that ran, for the summaries some of them add (see pytest_terminal_summary).
MODULES = pytest.StashKey[list]()
THREADS = int(os.environ.get("MGEGRAPH_BENCH_THREADS", "2"))


@pytest.fixture(scope="session", autouse=True)
def same_threads_for_everyone():
    from threadpoolctl import threadpool_limits

    try:
        import torch

        torch.set_num_threads(THREADS)
    except ImportError:
        pass
    with threadpool_limits(limits=THREADS):
        yield


def pytest_collection_modifyitems(config, items):
    modules = {id(item.module): item.module for item in items if hasattr(item, "module")}
    config.stash[MODULES] = list(modules.values())


def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    groups = {}
    for bench in session.benchmarks:
        groups.setdefault(bench.group, []).append(bench)
    terminalreporter.section(f"medians and ratios ({THREADS} threads, one run)")
    for group, benches in groups.items():
        base = benches[0].stats.median
        terminalreporter.write_line(f"{group}: ratio to {benches[0].name}")
        for b in benches:
            ops = getattr(b, "extra_info", {}).get("ops")
            extra = f"  ({b.stats.median / ops * 1e6:.3f} us/op)" if ops else ""
            terminalreporter.write_line(
                f"  {b.name:60s} median {b.stats.median * 1e3:9.4f} ms  "
                f"x{b.stats.median / base:6.3f}{extra}")
    # A module may add figures that need several groups at once (a limit computed from one case,
    # ratios across groups): its terminal_summary() returns the lines from what it measured.
    for module in config.stash.get(MODULES, []):
        lines = module.terminal_summary() if hasattr(module, "terminal_summary") else []
        if lines:
            terminalreporter.section(f"{module.__name__}: figures")
            for line in lines:
                terminalreporter.write_line(line)
