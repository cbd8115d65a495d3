"""Issue 19, part 3: what ``plan.run`` costs around the kernels, with and without copies.

    python -m pytest benchmarks/test_run_copies.py --benchmark-only

fusion-chain (4M float32 per input: 64 MiB of feeds, 16 MiB of output) and op-overhead (1,000
ops on 16 elements), each as: the executor alone (the kernels and the C loop), ``plan.run``
reading its feeds in place and writing its output where it returns it, the same with ``out=``,
the same while the caller keeps each result until the next call (so no result is reused: fresh
pages each call), and ``plan.run`` with the copies it made before (every feed copied in, every
output copied out: the executable's bindings switched off). The copy bandwidth is the limit.
"""
from __future__ import annotations

import functools

import models
import numpy as np
import pytest
import workloads

import mgegraph as mg

N = 4_194_304
COPY_BYTES = 64 << 20
MEDIANS: dict[tuple[str, str], float] = {}


@functools.cache
def chain():
    rng = np.random.default_rng(workloads.SEED)
    feeds = {k: rng.standard_normal(N, dtype=np.float32) for k in "xabc"}
    return models.fusion_chain_graph(N), feeds


@functools.cache
def op_chain():
    return workloads.op_chain_graph(), {"x": workloads.op_chain_input()}


def with_copies(plan):
    """The run path before issue 19: no feed read in place, every output copied out."""
    plan.executable().in_place = False
    return plan


def cases(build):
    """impl -> () -> callable, for the workload ``build`` makes."""

    def plan():
        graph, feeds = build()
        p = mg.compile([graph])
        p.run(feeds)
        return p, feeds

    def keeping():
        p, feeds = plan()
        kept = [None]

        def run():
            kept[0] = p.run(feeds)  # the last result is held while this call allocates its own
            return kept[0]
        return run

    def with_out():
        p, feeds = plan()
        out = [np.empty_like(p.run(feeds)[0])]
        return functools.partial(p.run, feeds, out=out)

    def copying():
        p, feeds = plan()
        return functools.partial(with_copies(p).run, feeds)

    return {
        "mgegraph executor only": lambda: plan()[0].executable().executor.run,
        "mgegraph plan.run": lambda: functools.partial(plan()[0].run, plan()[1]),
        "mgegraph plan.run out=": with_out,
        "mgegraph plan.run, each result kept": keeping,
        "mgegraph plan.run with copies (before)": copying,
    }


def copy_bandwidth():
    src = np.ones(COPY_BYTES // 4, np.float32)
    return functools.partial(np.copyto, np.empty_like(src), src)


WORKLOADS = {"fusion-chain": chain, "op-overhead": op_chain}
IMPLS = list(cases(chain))


@pytest.mark.parametrize("impl", IMPLS + ["np.copyto 64 MiB (bandwidth)"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_run_copies(benchmark, workload, impl):
    if impl.startswith("np.copyto"):
        if workload != "fusion-chain":
            pytest.skip("the copy bandwidth is fusion-chain's limit")
        fn = copy_bandwidth()
    else:
        fn = cases(WORKLOADS[workload])[impl]()
    benchmark.group = f"{workload}: plan.run around the kernels"
    benchmark.extra_info.update(workload=workload, implementation=impl)
    benchmark(fn)
    if benchmark.stats is not None:
        MEDIANS[workload, impl] = benchmark.stats.stats.median


def test_results_equal_with_and_without_copies():
    graph, feeds = chain()
    fast = mg.compile([graph])
    slow = with_copies(mg.compile([graph]))
    np.testing.assert_array_equal(fast.run(feeds)[0], slow.run(feeds)[0])


def terminal_summary() -> list[str]:
    lines = []
    for workload in WORKLOADS:
        alone = MEDIANS.get((workload, "mgegraph executor only"))
        if not alone:
            continue
        for impl in IMPLS[1:]:
            if (workload, impl) in MEDIANS:
                lines.append(f"{workload}: {impl} / executor only = "
                             f"x{MEDIANS[workload, impl] / alone:.3f}")
        copy = MEDIANS.get((workload, "np.copyto 64 MiB (bandwidth)"))
        if copy:  # 80 MiB at the rate np.copyto moves 128 MiB
            limit = copy * (5 * N * 4) / (2 * COPY_BYTES)
            lines.append(f"{workload}: executor only / 80 MiB at copy bandwidth = "
                         f"x{alone / limit:.3f}; plan.run / that = "
                         f"x{MEDIANS[workload, 'mgegraph plan.run'] / limit:.3f}")
    return lines
