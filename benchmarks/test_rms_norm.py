"""RMS norm's kernel (mgegraph/_kernels/rms_norm.pyx) against the same computation composed of
elementwise ops and a mean, and against layer_norm's kernel, on a (32, 512, 768) float32
activation (a transformer's hidden states), each a compiled plan of the one function.

    python -m pytest benchmarks/test_rms_norm.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import THREADS
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops import elementwise as ew
from mgegraph.ops import reduce

SHAPE = (32, 512, 768)


def _composed(x, w):
    mean_square = reduce.mean(ew.square(x), (2,), keepdims=True)
    return x * ew.rsqrt(mean_square + 1e-6) * w


CASES = {
    "rms_norm kernel": lambda x, w, b: F.rms_norm(x, SHAPE[-1], weight=w, eps=1e-6),
    "rms_norm composed": lambda x, w, b: _composed(x, w),
    "layer_norm kernel": lambda x, w, b: F.layer_norm(x, SHAPE[-1:], weight=w, bias=b),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rms_norm(benchmark, case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    g = mg.Graph()
    w = g.const(rng.standard_normal(SHAPE[-1:], dtype=np.float32))
    b = g.const(np.zeros(SHAPE[-1:], np.float32))
    with threadpool_limits(limits=THREADS):
        plan = mg.compile([CASES[case](g.input("x", SHAPE), w, b)])
        feeds = {"x": x}
        plan.run(feeds)
        benchmark(plan.run, feeds)
