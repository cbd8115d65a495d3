"""What ``mg.profile()`` adds to a run: mlp-train (the issue's bound: under 5%) and, as the worst
case, op-overhead (1,000 instructions of 16 elements, where two clock reads per instruction and
the per-run bookkeeping weigh most). Each group times the same callable without and inside a
profile that stays open over all rounds (every run recorded, as a user profiling a loop has it).

    python -m pytest benchmarks/test_profiler.py --benchmark-only
"""
import functools

import pytest
import workloads

import mgegraph as mg

MODES = ["unprofiled", "inside mg.profile()"]
CASES = {"mlp-train batch 128": ("mlp_train", "mgegraph step"),
         "op-overhead (1000 ops, 16 elements)": ("op_overhead", "mgegraph plan.run")}
MEDIANS: dict[tuple[str, str], float] = {}


@functools.cache
def built(name):
    return getattr(workloads, name)()


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mode", MODES)
def test_profiling_overhead(benchmark, case, mode):
    benchmark.group = f"profiler overhead: {case}"
    name, impl = CASES[case]
    run = built(name)[impl]
    if mode == "unprofiled":
        benchmark(run)
    else:
        with mg.profile() as prof:
            benchmark(run)
        assert len(prof.runs) >= benchmark.stats.stats.rounds  # every round was recorded
    MEDIANS[case, mode] = benchmark.stats.stats.median


def terminal_summary() -> list[str]:
    """Profiled over unprofiled medians, per workload (conftest prints these lines)."""
    lines = []
    for case in CASES:
        base, profiled = MEDIANS.get((case, MODES[0])), MEDIANS.get((case, MODES[1]))
        if base and profiled:
            lines.append(f"{case}: unprofiled {base * 1e3:.4f} ms, profiled "
                         f"{profiled * 1e3:.4f} ms, ratio {profiled / base:.4f} "
                         f"({(profiled / base - 1) * 100:+.2f}%)")
    return lines
