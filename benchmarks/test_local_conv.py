"""local_conv2d's and region_restricted_conv's plain-loop kernels (mgegraph/_kernels/
local_conv.pyx), forward and a training step (both gradients), on a (2, 64, 32, 32) float32
input with 3x3 windows: the local layer with 64 outputs (a 151 MB weight), the depthwise
region-restricted one beside conv2d's depthwise kernel on the same shapes.

    python -m pytest benchmarks/test_local_conv.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import THREADS
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F

SHAPE = (2, 64, 32, 32)
RNG = np.random.default_rng(0)
IDS = RNG.integers(0, 3, (2, 32, 32)).astype(np.int32)
WEIGHTS = {"local": RNG.standard_normal((1, 32, 32, 64, 3, 3, 64), dtype=np.float32),
           "depthwise": RNG.standard_normal((64, 1, 1, 3, 3), dtype=np.float32)}

CASES = {
    "local_conv2d": lambda g, x, w: F.local_conv2d(x, w["local"], padding=1),
    "region_restricted_conv depthwise": lambda g, x, w: F.region_restricted_conv(
        x, w["depthwise"], g.const(IDS), g.const(IDS), padding=1, groups=64),
    "conv2d depthwise": lambda g, x, w: F.conv2d(x, F.reshape(w["depthwise"], (64, 1, 3, 3)),
                                                 padding=1, groups=64),
}


@pytest.mark.parametrize("step", ["forward", "training"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_local_conv(benchmark, case, step):
    g = mg.Graph()
    x = g.input("x", SHAPE)
    weights = {k: g.param(k, v) for k, v in WEIGHTS.items()}
    y = CASES[case](g, x, weights)
    w = weights["local" if case == "local_conv2d" else "depthwise"]
    outputs = [y] if step == "forward" else mg.grad(F.sum(y * y), [x, w])
    with threadpool_limits(limits=THREADS):
        plan = mg.compile(outputs)
        feeds = {"x": RNG.standard_normal(SHAPE, dtype=np.float32)}
        plan.run(feeds)
        benchmark(plan.run, feeds)
