"""The executor's float32 reductions (_kernels/reduce.pyx over reduce.h) against another build of
the module: say main's, copied before a change to the kernels.

    cp mgegraph/_kernels/reduce.cpython-*.so /tmp/before/   # in main's checkout, before
    python benchmarks/reduce_kernels.py --baseline /tmp/before/reduce.cpython-311-*.so
    python benchmarks/reduce_kernels.py --baseline ... --threads 2 --rounds 41

In one process, the two builds' kernels are called on the same arrays through a Launcher (the
executor's call of one instruction), alternately (ABBA... rounds, each a batch of calls of about
2 ms), with the threads field set to ``--threads``. Per workload and op: the median CPU time of a
call of each build and the ratio of the medians (this build / the baseline), after a check that
the two wrote the same bits. On a shared machine quote the ratios as "in-process, under load".
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

import numpy as np

from mgegraph._kernels import launch
from mgegraph._kernels import reduce as this_build
from mgegraph.kernel_abi.reduce import CODES, reduce_params

# name: (shape, axes)
WORKLOADS = {
    "row of 1e6": ((1_000_000,), (0,)),
    "(256, 1024) over 0": ((256, 1024), (0,)),
    "(256, 1024) over 1": ((256, 1024), (1,)),
    "NCHW (8,64,56,56) over (2,3)": ((8, 64, 56, 56), (2, 3)),
    "NCHW (8,64,56,56) over (0,2,3)": ((8, 64, 56, 56), (0, 2, 3)),
}
OPS = ("sum", "mean", "var", "max")


def load_baseline(path: str):
    """The reduce module built at ``path``, loaded beside this one (its init function is named
    by the last part of the module name; the modules it cimports are this package's)."""
    spec = importlib.util.spec_from_file_location("reduce_baseline.reduce", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launcher(module, op: str, shape, axes, threads: int) -> launch.Launcher:
    ints = reduce_params(CODES[op], shape, axes, threads)
    return launch.Launcher(module.KERNELS["reduce_f32"], ints, (), 1, True)


def batch_seconds(call, count: int) -> float:
    # CPU time, not wall: on a shared machine a descheduled process keeps its wall clock running
    t0 = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - t0) / count


def compare(baseline, shape, axes, op: str, threads: int, rounds: int) -> tuple[float, float]:
    """(median seconds per call of this build, of the baseline)."""
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    out_shape = [n for d, n in enumerate(shape) if d not in axes] or [1]
    ys = [np.empty(out_shape, np.float32) for _ in range(2)]
    launches = [launcher(m, op, shape, axes, threads) for m in (this_build, baseline)]
    calls = [lambda k=k: launches[k]((x, ys[k])) for k in range(2)]
    for call in calls:
        assert call() == 0
    assert ys[0].tobytes() == ys[1].tobytes(), f"{op} {shape} {axes}: the builds' bits differ"
    count = max(1, int(2e-3 / batch_seconds(calls[0], 3)))
    times = [[], []]
    for r in range(rounds):
        for k in ((0, 1) if r % 2 else (1, 0)):  # ABBA: neither build always goes first
            times[k].append(batch_seconds(calls[k], count))
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the reduce .so to compare against")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args(argv)
    baseline = load_baseline(args.baseline)
    print(f"{'workload':34} {'op':5} {'this us':>9} {'base us':>9} {'ratio':>6}")
    ratios = []
    for name, (shape, axes) in WORKLOADS.items():
        for op in OPS:
            new, old = compare(baseline, shape, axes, op, args.threads, args.rounds)
            ratios.append(new / old)
            print(f"{name:34} {op:5} {new * 1e6:9.1f} {old * 1e6:9.1f} {new / old:6.3f}")
    print(f"geometric mean of the ratios: {np.exp(np.mean(np.log(ratios))):.3f}")


if __name__ == "__main__":
    main()
