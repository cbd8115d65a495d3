"""csrc_cuda/collective.cu and the steps of mgegraph/cuda/kernels/collective.py: NVRTC compiles
it, and on the host the scale after NCCL's sum rounds as the CPU's (_kernels/collective.pyx)
and the deterministic all-reduce's sum runs in rank order, bitwise NumPy's ((x0 + x1) + x2)."""
import functools

import numpy as np
import pytest
from host_emu import run_on_host
from kernel_checks import ARCHS, nvrtc_compile

from mgegraph.backend import Launch
from mgegraph.cuda.kernel import CommStep, Step
from mgegraph.cuda.kernels.collective import FIELDS, KERNELS
from mgegraph.kernel_abi.layout import pack


def _launch(count, ranks, scale=1.0, deterministic=False, is_float=True, bucket=3):
    ints = pack(FIELDS, count=count, ranks=ranks, members=2, is_float=is_float,
                deterministic=deterministic, bucket=bucket)
    return Launch(ints, (scale,), ranks * count * 8 if deterministic else 0)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_the_source_compiles(arch):
    result, log, _ = nvrtc_compile("collective.cu", arch)
    assert result == 0, log


def test_a_bucket_is_one_start_and_a_wait_then_the_scale_of_its_first_buffer():
    launch = _launch(1000, ranks=2, scale=0.5)
    (start,) = KERNELS["all_reduce_start_f32"].steps(launch, ())
    assert start == CommStep("nccl_start", "start", (0,), 1000, "float32", 3)
    wait, scale = KERNELS["all_reduce_wait_f32"].steps(launch, ())
    assert wait == CommStep("nccl_wait", "wait", (1,), 1000, "float32", 3)
    assert scale.entry == "mg_collective_scale_f32" and scale.buffers == (1,)
    # a group of one: no NCCL call; a sum, or integers: no scale
    assert KERNELS["all_reduce_start_f32"].steps(_launch(1000, ranks=1, scale=0.5), ()) == []
    assert [s.entry for s in KERNELS["all_reduce_wait_f32"].steps(
        _launch(1000, ranks=1, scale=0.5), ())] == ["mg_collective_scale_f32"]
    assert [s.action for s in KERNELS["all_reduce_wait_i64"].steps(
        _launch(10, ranks=2, is_float=False), ())] == ["wait"]
    copy, _ = KERNELS["all_reduce_f64"].steps(_launch(10, ranks=1, scale=0.5), ())
    assert copy.action == "copy" and copy.buffers == (0, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_scale_rounds_as_the_cpus(dtype):
    x = np.random.default_rng(0).standard_normal(1037).astype(dtype)
    scale = 1.0 / 3.0
    steps = [s for s in KERNELS[f"all_reduce_wait_{np.dtype(dtype).name[0]}"
                                f"{np.dtype(dtype).itemsize * 8}"].steps(
        _launch(x.size, ranks=3, scale=scale), ()) if isinstance(s, Step)]
    got = x.copy()
    assert run_on_host("collective.cu", steps, [got], _launch(x.size, 3, scale).ints,
                       (scale,)) == 0
    k = dtype(scale) if dtype == np.float32 else scale  # the CPU's: float32 x * (float)k
    np.testing.assert_array_equal(got, (x * k).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_the_deterministic_sum_adds_the_ranks_in_order(dtype):
    ranks, count = 4, 517
    rng = np.random.default_rng(1)
    gathered = (rng.standard_normal((ranks, count)) * 1e3).astype(dtype)
    launch = _launch(count, ranks, deterministic=True, is_float=False)
    name = f"all_reduce_{'f' if dtype in (np.float32, np.float64) else 'i'}" \
           f"{np.dtype(dtype).itemsize * 8}"
    gather, summed = KERNELS[name].steps(launch, ())
    assert gather == CommStep("nccl_all_gather", "all_gather", (0, 2), count,
                              np.dtype(dtype).name, 3)
    assert summed.buffers == (2, 1)
    y = np.full(count, 99, dtype)
    assert run_on_host("collective.cu", [summed], [gathered, y], launch.ints) == 0
    np.testing.assert_array_equal(y, functools.reduce(np.add, list(gathered)))
