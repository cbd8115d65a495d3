"""csrc_cuda/sorting.cu and mgegraph/cuda/kernels/sorting.py: NVRTC compiles, the steps, the host
emulation against the CPU kernels (bitwise: the same algorithms and roundings) on odd sizes,
ties, NaN, every numeric dtype and every scan mode, and (marker cuda) on a device."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    cpu_result,
    cuda_launch,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
)

from mgegraph.cuda.kernels import sorting as family

RNG = np.random.default_rng(11)
DTYPES = (np.float32, np.float64, np.int32, np.int64)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("sorting.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_compiles_without_warnings_or_contraction(compiled):
    for result, log, _ in compiled.values():
        assert result == 0 and "warning" not in log.lower(), log
    ptx = ptx_of(compiled["sm_90"][2])
    body = ptx.split(".entry mg_cumprod_backward_f32(")[1].split(".entry")[0]
    assert "mul.rn.f32" in body and "add.rn.f32" in body and "fma.rn.f32" not in body


def sample(shape, dtype):
    x = RNG.integers(-3, 4, shape).astype(dtype)  # ties
    if np.dtype(dtype).kind == "f":
        x = x + RNG.choice([0.0, 0.25], shape).astype(dtype)
        x.reshape(-1)[::11] = np.nan
    return x


def _same(got, want):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ((1,), (5, 1), (3, 17), (2, 3, 40), (0, 4)))
@pytest.mark.parametrize("descending", (False, True))
def test_sort_and_topk_match_cpu_bitwise(dtype, shape, descending):
    x = sample(shape, dtype)
    nodes = [node_of("sort", [x], descending=descending)]
    if shape[-1] > 0:
        nodes.append(node_of("topk", [x], k=(shape[-1] + 1) // 2, descending=descending))
    for node in nodes:
        _same(emulate(family, node, [x], fibers=False), cpu_result(node, [x]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", (((7,), 0), ((3, 17), 1), ((3, 17), 0), ((2, 5, 9), 1),
                                         ((2, 0, 3), 1)))
@pytest.mark.parametrize("exclusive, reverse", ((False, False), (True, False), (False, True),
                                                (True, True)))
def test_scans_match_cpu_bitwise(dtype, shape, axis, exclusive, reverse):
    x = RNG.standard_normal(shape) * 2
    x.reshape(-1)[::5] = 0.0
    x, g = x.astype(dtype), RNG.standard_normal(shape).astype(dtype)
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    for op, arrays in (("cumsum", [x]), ("cumprod", [x]), ("cumprod_backward", [x, g])):
        node = node_of(op, arrays, **attrs)
        _same(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays))


def test_steps_and_workspace():
    x = np.zeros((6, 7, 10), np.float32)
    launch, _, steps = cuda_launch(family, node_of("topk", [x], k=3))
    assert [s.entry for s in steps] == ["mg_topk_f32"] and steps[0].block == (128, 1, 1)
    assert launch.workspace == 42 * 2 * 10 * 4  # two int32 index arrays per row
    assert launch.ints[4] == 42  # a sorting thread per row
    launch, _, steps = cuda_launch(family, node_of("cumsum", [x], axis=1))
    assert [s.entry for s in steps] == ["mg_cumsum_f32"] and launch.workspace == 0
    assert cuda_launch(family, node_of("sort", [np.zeros((0, 3), np.float32)]))[2] == []


@pytest.mark.nvrtc
def test_long_rows_share_a_bounded_workspace(monkeypatch):
    # fewer sorting threads than rows: each sorts rows in turn in its own slot
    monkeypatch.setattr(family, "SLOTS_BUDGET", 3 * 2 * 50 * 4)
    monkeypatch.setattr(family, "MIN_SORTERS", 1)
    x = sample((7, 2, 50), np.float32)
    node = node_of("topk", [x], k=9, descending=True)
    launch, _, steps = cuda_launch(family, node)
    assert launch.ints[4] == 3 and launch.workspace == 3 * 2 * 50 * 4
    assert steps[0].grid == (1, 1, 1)  # one block: threads past the 3 sorters return
    _same(emulate(family, node, [x], fibers=False), cpu_result(node, [x]))


@pytest.mark.cuda
def test_on_device():
    x = sample((33, 257), np.float32)
    for node, arrays in ((node_of("sort", [x], descending=True), [x]),
                         (node_of("topk", [x], k=5), [x]),
                         (node_of("cumprod_backward", [x, x], axis=0), [x, x])):
        _same(run_on_device(node, arrays), cpu_result(node, arrays))
