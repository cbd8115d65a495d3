"""quantized_add on a (32, 64, 56, 56) activation (a residual add of a ResNet stage): a and b of
one dtype take the vectorised rows (_kernels/quantized_add_rows.pxi); int8 + uint8 takes the
portable loop over the same elements (the rows need one dtype); the float32 add of dequantized
values is the float path it replaces. Each a compiled plan of the one op.

    python -m pytest benchmarks/test_quantized_add.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import THREADS
from threadpoolctl import threadpool_limits

import mgegraph as mg
from mgegraph.ir.quant import per_tensor
from mgegraph.ops import quantized as Q

SHAPE = (32, 64, 56, 56)
ATTRS = {"out_dtype": "int8", "out_scale": 0.07, "out_zero_point": 3, "relu": True}
CASES = {"int8 + int8, vectorised rows": ("int8", "int8"),
         "int8 + uint8, portable loop": ("int8", "uint8"),
         "float32 add": ("float32", "float32")}


def _input(g, name, dtype):
    if dtype == "float32":
        return g.input(name, SHAPE)
    return g.input(name, SHAPE, dtype, quant=per_tensor(0.05, 1 if dtype == "int8" else 128))


@pytest.mark.parametrize("case", sorted(CASES))
def test_quantized_add(benchmark, case):
    rng = np.random.default_rng(0)
    dtypes = CASES[case]
    feeds = {name: rng.integers(0, 100, SHAPE).astype(d) for name, d in zip("ab", dtypes)}
    g = mg.Graph()
    a, b = (_input(g, name, d) for name, d in zip("ab", dtypes))
    y = a + b if dtypes[0] == "float32" else Q.quantized_add(a, b, **ATTRS)
    with threadpool_limits(limits=THREADS):
        plan = mg.compile([y])
        plan.run(feeds)
        benchmark(plan.run, feeds)
