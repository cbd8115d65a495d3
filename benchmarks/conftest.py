"""Pins every implementation to the same thread count and prints medians as ratios per group."""
import os

# Several thread pools share this process (SciPy's OpenBLAS, NumPy's, PyTorch's OpenMP). With
# PyTorch's OpenMP threads spinning while idle (its default), every OpenBLAS call on these 2 cores
# starved: mlp-infer batch 1 took 16 ms instead of 0.08 for every implementation. Idle OpenMP
# threads must sleep; the variable is read when libgomp loads, hence before any import below.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

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
