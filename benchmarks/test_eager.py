"""Eager mode (issue 15): op-overhead on mg.tensor (against PyTorch eager and NumPy: at most
NumPy's time per op is the target), and mlp-train / convnet-train as an eager step
(GradManager + opt.step().clear_grad()), the same step under mg.jit.trace, compile_train_step and
PyTorch eager, each workload in one group (shared/BENCHMARKS.md)."""
import functools

import pytest
import workloads

# the figures terminal_summary() reads: (group, impl) -> median seconds
MEDIANS: dict[tuple[str, str], float] = {}

OP_GROUP = f"op-overhead eager ({workloads.OP_CHAIN} ops, 16 elements)"
OP_IMPLS = ["torch eager", "mgegraph eager", "mgegraph eager, python scalars", "numpy eager"]
TRAIN_IMPLS = ["torch eager", "mgegraph eager", "mgegraph trace", "mgegraph compile_train_step"]
TRAIN = {"mlp-train eager batch 128": "mlp_train_eager",
         "convnet-train eager batch 32": "convnet_train_eager"}
# group -> (workload, case): the row each group's benchmarks make in the table
ROWS = {"mlp-train eager batch 128": ("mlp-train", "batch 128"),
        "convnet-train eager batch 32": ("convnet-train", "batch 32")}


@functools.cache
def built(name):
    return getattr(workloads, name)()


def run(benchmark, group, impls, impl):
    benchmark.group = group
    if impl not in impls:
        pytest.skip(f"{impl} is not installed")
    benchmark(impls[impl])
    MEDIANS[group, impl] = benchmark.stats.stats.median


@pytest.mark.workload("op-overhead")
@pytest.mark.parametrize("impl", OP_IMPLS)
def test_op_overhead_eager(benchmark, tag, impl):
    tag(f"{workloads.OP_CHAIN} ops, 16 elements", impl, ops=workloads.OP_CHAIN)
    run(benchmark, OP_GROUP, built("op_overhead_eager"), impl)
    benchmark.extra_info["us_per_op"] = MEDIANS[OP_GROUP, impl] / workloads.OP_CHAIN * 1e6


@pytest.mark.parametrize("impl", TRAIN_IMPLS)
@pytest.mark.parametrize("group", [pytest.param(g, marks=pytest.mark.workload(ROWS[g][0]))
                                   for g in TRAIN])
def test_train_step_eager(benchmark, tag, group, impl):
    tag(ROWS[group][1], impl)
    run(benchmark, group, built(TRAIN[group]), impl)


def _ratio(group, a, b, target) -> list[str]:
    if (group, a) not in MEDIANS or (group, b) not in MEDIANS:
        return []
    return [f"  {a} / {b}: x{MEDIANS[group, a] / MEDIANS[group, b]:.3f} (target {target})"]


def terminal_summary() -> list[str]:
    """The issue's ratios from this run's medians; called by benchmarks/conftest.py."""
    lines = []
    if (OP_GROUP, "mgegraph eager") in MEDIANS:
        lines.append(f"{OP_GROUP}: us per op")
        for impl in OP_IMPLS:
            if (OP_GROUP, impl) in MEDIANS:
                us = MEDIANS[OP_GROUP, impl] / workloads.OP_CHAIN * 1e6
                lines.append(f"  {impl:40s} {us:7.3f}")
        lines += _ratio(OP_GROUP, "mgegraph eager", "torch eager", "<= 1")
        lines += _ratio(OP_GROUP, "mgegraph eager", "numpy eager", "<= 1")
    for group in TRAIN:
        if any(g == group for g, _ in MEDIANS):
            lines.append(group)
        lines += _ratio(group, "mgegraph eager", "torch eager", "<= 1.2")
        lines += _ratio(group, "mgegraph trace", "mgegraph compile_train_step", "<= 1.05")
    return lines
