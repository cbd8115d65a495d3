"""quantized_add's vectorised rows (_kernels/quantized_add_rows.pxi): where a and b share a
dtype and are read contiguously, the integers are tests/quant_reference.py's bit for bit (float32
products, a float32 sum, no fused multiply-add), over every dtype pair, odd row lengths that
leave vector tails, ties, saturation both ways, relu, a multiplier large enough to overflow an
int, and 1-3 threads; the rows broadcasting along the last axis keep the portable loop."""
import numpy as np
import pytest
import quant_reference as ref

import mgegraph as mg
from mgegraph.ir.quant import per_tensor
from mgegraph.ops import quantized as Q

DTYPES = ("int8", "uint8")


def _ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _add(a, ap, b, bp, attrs, threads=None, monkeypatch=None):
    from mgegraph._kernels import parallel
    if threads is not None:
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0: threads)
    g = mg.Graph()
    y = Q.quantized_add(g.input("a", a.shape, a.dtype, quant=ap),
                        g.input("b", b.shape, b.dtype, quant=bp), **attrs)
    plan = mg.compile([y])
    if monkeypatch is not None:
        monkeypatch.undo()
    return plan.run({"a": a, "b": b})[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", DTYPES)
@pytest.mark.parametrize("relu", (False, True))
@pytest.mark.parametrize("shape", [(1,), (63,), (3, 129), (2, 5, 1001)])
def test_rows_are_the_reference(dtype, out_dtype, relu, shape):
    rng = np.random.default_rng(sum(shape))
    a, b = _ints(rng, shape, dtype), _ints(rng, shape, dtype)
    ap, bp = per_tensor(0.0371, 5 if dtype == "int8" else 131),\
        per_tensor(0.1113, -7 if dtype == "int8" else 99)
    attrs = {"out_dtype": out_dtype, "out_scale": 0.0917, "out_zero_point": 3, "relu": relu}
    np.testing.assert_array_equal(_add(a, ap, b, bp, attrs),
                                  ref.quantized_add(a, ap, b, bp, **attrs))


def test_ties_saturation_and_huge_multipliers():
    a = np.tile(np.arange(-128, 128, dtype=np.int8), 41)
    b = a[::-1].copy()
    for out_scale in (0.25, 1e-9, 3.0):  # halves, saturation both ways, small results
        attrs = {"out_dtype": "int8", "out_scale": out_scale, "out_zero_point": -5,
                 "relu": False}
        ap, bp = per_tensor(0.125, 0), per_tensor(0.0625, 1)
        np.testing.assert_array_equal(_add(a, ap, b, bp, attrs),
                                      ref.quantized_add(a, ap, b, bp, **attrs))


@pytest.mark.parametrize("threads", (1, 2, 3))
def test_threads_give_the_same_integers(threads, monkeypatch):
    rng = np.random.default_rng(7)
    a, b = _ints(rng, (64, 517), "uint8"), _ints(rng, (64, 517), "uint8")
    ap, bp = per_tensor(0.02, 128), per_tensor(0.03, 120)
    attrs = {"out_dtype": "uint8", "out_scale": 0.04, "out_zero_point": 128, "relu": False}
    np.testing.assert_array_equal(_add(a, ap, b, bp, attrs, threads, monkeypatch),
                                  ref.quantized_add(a, ap, b, bp, **attrs))


def test_broadcast_rows_keep_the_portable_loop():
    rng = np.random.default_rng(8)
    a, b = _ints(rng, (4, 33), "int8"), _ints(rng, (4, 1), "int8")
    ap, bp = per_tensor(0.05, 1), per_tensor(0.07, -1)
    attrs = {"out_dtype": "int8", "out_scale": 0.06, "out_zero_point": 0, "relu": False}
    np.testing.assert_array_equal(_add(a, ap, b, bp, attrs),
                                  ref.quantized_add(a, ap, b, bp, **attrs))
