"""Host buffers on a cache line: the arrays a plan owns, an nn.Parameter's array and the outputs
a run returns start on a 64-byte boundary (NumPy aligns to 16 bytes only)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.host_memory import CACHE_LINE, aligned_copy, aligned_empty, host_arena


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (7, 5), (784, 1024)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64", "bool"])
def test_aligned_empty_is_a_c_contiguous_array_of_the_shape_on_a_line(shape, dtype):
    array = aligned_empty(shape, dtype)
    assert array.shape == shape and array.dtype == np.dtype(dtype)
    assert array.flags.c_contiguous and array.flags.writeable and array.flags.aligned
    # (an empty array has no byte to load: NumPy may leave its pointer where the slice began)
    assert array.ctypes.data % CACHE_LINE == 0 or array.size == 0
    array[...] = 1  # every byte is its own to write
    assert array.sum() == array.size


def test_aligned_empty_takes_an_int_and_other_alignments():
    assert aligned_empty(5, np.float32).shape == (5,)
    assert aligned_empty(np.int64(5), np.float32).shape == (5,)
    assert all(aligned_empty(100, np.uint8, 4096).ctypes.data % 4096 == 0 for _ in range(4))


def test_aligned_copy_keeps_values_and_drops_the_layout():
    source = np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2]  # strided
    copy = aligned_copy(source)
    np.testing.assert_array_equal(copy, source)
    assert copy.flags.c_contiguous and copy.ctypes.data % CACHE_LINE == 0
    assert not np.shares_memory(copy, source)
    assert aligned_copy([[1, 2], [3, 4]]).dtype == np.asarray([[1, 2]]).dtype
    assert aligned_copy(2.5).shape == ()


def test_host_arena_is_zeroed_and_aligned():
    arena = host_arena(1000, 256)
    assert arena.size == 1000 and arena.dtype == np.uint8 and not arena.any()
    assert arena.ctypes.data % 256 == 0


def _plan():
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input("x", (3, 33), "float32")
    w = g.param("w", rng.standard_normal((33, 17), dtype=np.float32))
    k = g.const(rng.standard_normal(17).astype(np.float32))
    return mg.compile([F.relu(x @ w + k), x * 2.0])


def test_every_buffer_of_a_plan_starts_on_a_line():
    plan = _plan()
    x = np.random.default_rng(1).standard_normal((3, 33), dtype=np.float32)
    outs = plan.run({"x": x})
    buffers = plan.executable().buffers
    assert buffers and all(b.ctypes.data % CACHE_LINE == 0 for b in buffers.values())
    # the arrays a run returns (written in place by the kernels) too, here and on reuse
    assert all(o.ctypes.data % CACHE_LINE == 0 for o in outs)
    del outs
    assert all(o.ctypes.data % CACHE_LINE == 0 for o in plan.run({"x": x}))


def test_a_parameters_array_starts_on_a_line_and_keeps_its_values():
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    param = nn.Parameter(value)
    assert param.value.ctypes.data % CACHE_LINE == 0
    np.testing.assert_array_equal(param.value, value)
    assert not np.shares_memory(param.value, value)
    layer = nn.Linear(784, 1024)
    assert layer.weight.value.ctypes.data % CACHE_LINE == 0
