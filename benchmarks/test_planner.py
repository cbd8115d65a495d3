"""planner-suite (shared/BENCHMARKS.md), planning time, and peak memory of training vs PyTorch.

Run with ``python -m pytest benchmarks/test_planner.py -s -q``: the figures are printed tables.
Nothing here asserts a speed; the suite asserts that every plan verifies and that no arena is
below its lower bound.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
import models
from mgegraph import nn, optim
from mgegraph.backend import get_backend
from mgegraph.planner.memory import arena as arena_module
from mgegraph.planner.memory.plan import memory_options, plan_memory
from mgegraph.planner.memory.schedule import memory_aware_order
from mgegraph.testing import random_graph
from workloads import SEED, _batch

# (nodes asked of random_graph, seeds): the default size, then bigger DAGs
RANDOM_SIZES = ((24, 200), (200, 50), (1000, 10))
OPTIONS = {"best": None, **{s: mg.planner.MemoryOptions(strategy=s)
                            for s in mg.planner.STRATEGIES}}


def ratio(plan) -> float:
    m = plan.memory
    return m.arena_bytes / m.lower_bound_bytes if m.lower_bound_bytes else 1.0


def mib(nbytes) -> str:
    return f"{nbytes / 2**20:.2f}M" if nbytes >= 2**20 else f"{nbytes / 2**10:.2f}K"


# -- planner-suite ---------------------------------------------------------------------------------
def suite_graphs():
    """(name, compile(memory) -> Plan) for the named graphs and every random DAG."""
    for name, build in models.SUITE.items():
        yield name, build
    for nodes, seeds in RANDOM_SIZES:
        for seed in range(seeds):
            _, outputs, _ = random_graph(seed, nodes=nodes)
            yield (f"random n={nodes} seed={seed}",
                   lambda memory, o=outputs: mg.compile(o, memory=memory))


def plan_suite() -> list[dict]:
    """One row per graph: the default plan's figures and the ratio of every strategy."""
    rows = []
    for name, build in suite_graphs():
        plans = {s: build(memory=options) for s, options in OPTIONS.items()}
        for plan in plans.values():
            mg.planner.verify(plan)
            assert plan.arena_bytes >= plan.lower_bound_bytes, name
        m = plans["best"].memory
        rows.append(dict(graph=name, instructions=len(plans["best"].instructions),
                         arena=m.arena_bytes, bound=m.lower_bound_bytes, naive=m.naive_bytes,
                         strategy=m.strategy, schedule=m.schedule,
                         ratios={s: ratio(p) for s, p in plans.items()}))
    return rows


def print_rows(rows):
    print(f"{'graph':28s} {'instr':>6s} {'arena':>10s} {'bound':>10s} {'ratio':>7s} "
          f"{'naive':>10s} {'strategy':22s} schedule")
    for r in rows:
        print(f"{r['graph']:28s} {r['instructions']:6d} {mib(r['arena']):>10s} "
              f"{mib(r['bound']):>10s} {r['ratios']['best']:7.4f} {mib(r['naive']):>10s} "
              f"{r['strategy']:22s} {r['schedule']}")


def summarise(label, rows):
    values = [r["ratios"]["best"] for r in rows]
    print(f"{label:34s} n={len(values):4d}  mean {np.mean(values):.4f}  max {max(values):.4f}")


def print_strategies(rows):
    """Mean and max ratio per strategy, how often it matches the best plan, how often it
    reaches the bound, and how often "best" kept its plan."""
    print(f"{'strategy':22s} {'mean':>7s} {'max':>7s} {'=best':>6s} {'=bound':>7s} {'chosen':>7s}")
    for s in OPTIONS:
        values = [r["ratios"][s] for r in rows]
        ties = sum(r["ratios"][s] <= r["ratios"]["best"] for r in rows)
        exact = sum(v == 1.0 for v in values)
        chosen = sum(r["strategy"] == s for r in rows)
        print(f"{s:22s} {np.mean(values):7.4f} {max(values):7.4f} {ties:6d} {exact:7d} "
              f"{chosen if s != 'best' else '':>7}")


def test_planner_suite():
    rows = plan_suite()
    named = [r for r in rows if not r["graph"].startswith("random")]
    random_rows = [r for r in rows if r["graph"].startswith("random")]
    print("\nplanner-suite: arena / lower bound, default memory options (strategy 'best')")
    print_rows(named)
    print("random DAGs, the worst ratios first, then the most instructions:")
    print_rows(sorted(random_rows, key=lambda r: (-r["ratios"]["best"], -r["instructions"]))[:5])
    summarise("all graphs", rows)
    summarise("named graphs", named)
    summarise("chain-like (" + ", ".join(models.CHAIN) + ")",
              [r for r in rows if r["graph"] in models.CHAIN])
    for nodes, _ in RANDOM_SIZES:
        summarise(f"random DAGs, nodes={nodes}",
                  [r for r in random_rows if r["graph"].startswith(f"random n={nodes} ")])
    print("per strategy, all graphs:")
    print_strategies(rows)
    print("per strategy, named graphs:")
    print_strategies(named)


# -- planning time ---------------------------------------------------------------------------------
def chain_graph(ops):
    """op-overhead's chain of ``ops`` elementwise ops on 16 elements: (graph, outputs)."""
    g = mg.Graph()
    y = g.input("x", (16,), "float32")
    ca, cm = g.const(np.float32(0.5)), g.const(np.float32(0.999))
    for i in range(ops):
        y = (y + ca, y * cm, F.relu(y))[i % 3]
    return g, [y]


def train_graph(depth, width=64, batch=32):
    """The graph mg.compile_train_step compiles for a deep MLP (SGD, cross-entropy), built the
    same way, so that compile and its phases can be timed on it alone."""
    nn.init.manual_seed(SEED)
    model = models.deep_mlp(depth, width, width, 10).train()
    x, y = _batch((batch, width))
    g = mg.Graph()
    xs, ys = g.input("input0", x.shape, x.dtype), g.input("input1", y.shape, y.dtype)
    loss = F.cross_entropy(model(xs), ys)
    opt = optim.SGD(model.parameters(), lr=0.01)
    grads = mg.grad(loss, [g.bind(p) for p in opt.params])
    opt.build(g, {id(p): dg for p, dg in zip(opt.params, grads)})
    return g, [F.reshape(loss, ())]


def random_dag(nodes):
    graph, outputs, _ = random_graph(0, nodes=nodes)
    return graph, outputs


TIMED = {  # kind -> (builder, argument for ~1k, argument for ~10k)
    "op chain": (chain_graph, 1000, 10000),
    "deep-mlp train w64 b32": (train_graph, 100, 1000),
    "random_graph": (random_dag, 1000, 10000),
}


def timed(fn, rounds=3) -> list[float]:
    """Seconds of each call, with the collector off (as timeit does): a collection of the big
    graph inside one phase would otherwise be charged to it."""
    gc.collect()
    gc.disable()
    try:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return times
    finally:
        gc.enable()


@contextlib.contextmanager
def timing_solve(spent: list):
    """Appends the seconds each arena.solve call takes to ``spent``. The planner calls
    ``arena.solve`` through the module, so wrapping the attribute sees every call."""
    solve = arena_module.solve

    def timed_solve(*args, **kwargs):
        start = time.perf_counter()
        try:
            return solve(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    arena_module.solve = timed_solve
    try:
        yield
    finally:
        arena_module.solve = solve


def phases(graph, outputs) -> dict:
    """Median seconds of compile and of its parts, called the way mg.compile calls them:
    lower, then plan_memory (its schedule, one arena solve, and the rest: liveness and in-place
    choice for each order tried), then the plan's assembly."""
    options = memory_options(None)
    lowered = mg.lowering.lower(graph, outputs, get_backend("cpu"))
    spent = []
    with timing_solve(spent):
        planning = timed(lambda: plan_memory(lowered.slots, lowered.instructions, options))
    times = {
        "compile": timed(lambda: mg.compile(outputs)),
        "lower": timed(lambda: mg.lowering.lower(graph, outputs, get_backend("cpu"))),
        "plan_memory": planning,
        "schedule": timed(lambda: memory_aware_order(lowered.slots, lowered.instructions)),
        "solve": spent if len(spent) == len(planning) else [float("nan")],
    }
    times = {k: statistics.median(v) for k, v in times.items()}
    times["liveness etc"] = times["plan_memory"] - times["schedule"] - times["solve"]
    times["assemble"] = times["compile"] - times["lower"] - times["plan_memory"]
    return times


def test_planning_time():
    columns = ("compile", "lower", "plan_memory", "schedule", "solve", "liveness etc",
               "assemble")
    print("\nplanning time, median of 3 (ms): compile = lower + plan_memory + assemble; "
          "plan_memory = schedule + solve + liveness etc (differences of medians)")
    print(f"{'graph':32s} {'nodes':>6s} {'instr':>6s} {'build':>8s} "
          + " ".join(f"{c:>11s}" for c in columns))
    for kind, (builder, *sizes) in TIMED.items():
        for size in sizes:
            start = time.perf_counter()
            graph, outputs = builder(size)
            build = time.perf_counter() - start
            times = phases(graph, outputs)
            instr = len(mg.compile(outputs).instructions)
            print(f"{kind + f' ({size})':32s} {len(graph.nodes):6d} {instr:6d} "
                  f"{build * 1e3:8.1f} " + " ".join(f"{times[c] * 1e3:11.2f}" for c in columns))


# -- peak memory vs PyTorch ------------------------------------------------------------------------
SCRIPT = Path(__file__).with_name("peak_memory.py")


PEAK_RUNS = 3


def peak_memory(impl, workload) -> dict:
    """The run of median RSS growth among PEAK_RUNS fresh processes: PyTorch's varies by tens
    of percent from one process to the next."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    runs = []
    for _ in range(PEAK_RUNS):
        done = subprocess.run([sys.executable, str(SCRIPT), impl, workload], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return sorted(runs, key=lambda r: r["peak_growth"])[len(runs) // 2]


def test_peak_memory():
    have_torch = importlib.util.find_spec("torch") is not None
    print(f"\npeak memory of the first 3 training steps (RSS high-water mark over the baseline "
          f"once model and batch exist; 2 threads; median of {PEAK_RUNS} processes)")
    print(f"{'workload':14s} {'mg planned':>11s} {'mg new':>9s} {'mg RSS':>9s} {'torch RSS':>10s} "
          f"{'mg/torch':>9s} {'torch alloc':>12s} {'new/alloc':>10s} {'torch file':>11s}")
    for workload in ("mlp-train", "convnet-train"):
        mine = peak_memory("mgegraph", workload)
        assert mine["peak_growth"] > 0
        theirs = peak_memory("torch", workload) if have_torch else None
        line = (f"{workload:14s} {mib(mine['planned']):>11s} {mib(mine['planned_new']):>9s} "
                f"{mib(mine['peak_growth']):>9s} ")
        if theirs is None:
            print(line + "torch is not installed")
            continue
        alloc = theirs["allocated_peak"]
        print(line + f"{mib(theirs['peak_growth']):>10s} "
              f"{mine['peak_growth'] / theirs['peak_growth']:9.3f} "
              f"{mib(alloc) if alloc else 'n/a':>12s} "
              f"{mine['planned_new'] / alloc if alloc else float('nan'):10.3f} "
              f"{mib(theirs['file_growth']):>11s}")
    print("mg planned = arena + persistent; mg new = that less the parameters the plan shares "
          "with the model; torch alloc = peak bytes its allocator held (profiler); torch file = "
          "resident library pages read during the steps, part of torch RSS")


if __name__ == "__main__":
    pytest.main([__file__, "-s", "-q"])
