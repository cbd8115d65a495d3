"""csrc_cuda/movement.cu and mgegraph/cuda/kernels/movement.py: NVRTC compiles, and, as these
kernels use no shared memory or barriers, the plain host emulation (host_emu.h) of every op
against the CPU kernels, bitwise (the adjoints' atomic adds run in order on the host); (marker
cuda) the ops on a device."""
import numpy as np
import pytest
from kernel_checks import (
    ARCHS,
    assert_close,
    cpu_result,
    emulate,
    node_of,
    nvrtc_compile,
    ptx_of,
    run_on_device,
)

from mgegraph.cuda.abi import STATUS, decode
from mgegraph.cuda.kernels import movement as family

ALL = (np.float32, np.float64, np.int32, np.int64, np.bool_)
NUMERIC = (np.float32, np.float64, np.int32, np.int64)


@pytest.fixture(scope="module")
def compiled():
    return {arch: nvrtc_compile("movement.cu", arch) for arch in ARCHS}


@pytest.mark.nvrtc
def test_every_kernel_has_its_entries(compiled):
    ptx = ptx_of(compiled["sm_90"][2])
    for name in family.KERNELS:
        assert f".entry mg_{name}(" in ptx
    assert ".shared" not in ptx and "bar.sync" not in ptx
    assert "red.global.add.f32" in ptx or "atom.global.add.f32" in ptx


def _x(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "i":
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _same(op, arrays, **attrs):
    node = node_of(op, arrays, **attrs)
    for g, w in zip(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


def _idx(values, dtype=np.int64):
    return np.asarray(values, dtype)


MOVING = [  # (op, input shapes, attributes): the kernels that copy bits, for every dtype
    ("transpose", [(2, 3, 4)], {"pattern": (2, 0, 1)}),
    ("transpose", [(3, 4)], {"pattern": (1, "x", 0)}),
    ("broadcast_to", [(3, 1)], {"shape": (2, 3, 5)}),
    ("slice", [(6, 7)], {"starts": (1, None), "stops": (5, None), "steps": (2, -2)}),
    ("slice_backward", [(2, 4)], {"shape": (6, 7), "starts": (1, None), "stops": (5, None),
                                  "steps": (2, -2)}),
    ("concat", [(2, 3), (2, 1), (2, 4)], {"axis": 1}),
    ("concat", [(1, 3), (2, 3)], {"axis": 0}),
    ("split", [(3, 7)], {"axis": 1, "ranges": ((0, 2), (2, 7), (1, 4))}),
    ("pad", [(3, 4)], {"pad_width": ((1, 2), (0, 3)), "mode": "constant",
                       "constant_value": 1}),
    ("pad", [(3, 4)], {"pad_width": ((2, 2), (5, 1)), "mode": "reflect"}),
    ("pad", [(3, 4)], {"pad_width": ((2, 0), (1, 4)), "mode": "edge"}),
]


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("case", MOVING, ids=lambda c: c[0])
def test_moving_kernels_are_bitwise(dtype, case):
    op, shapes, attrs = case
    _same(op, [_x(dtype, s, seed=i) for i, s in enumerate(shapes)], **attrs)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("index_dtype", (np.int32, np.int64))
def test_take_and_gather_are_bitwise(dtype, index_dtype):
    x = _x(dtype, (4, 5, 3))
    _same("take", [x, _idx([4, -1, 0, 2, 2], index_dtype)], axis=1)
    index = _idx(np.random.default_rng(1).integers(-5, 5, (4, 2, 3)), index_dtype)
    _same("gather", [x, index], axis=1)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("index_dtype", (np.int32, np.int64))
def test_adjoints_match_cpu(dtype, index_dtype):
    # repeated indices accumulate; on the host the adds run in the CPU's order: bitwise
    g = _x(dtype, (4, 5, 3))
    _same("index_add", [g, _idx([1, 1, -2, 0, 1], index_dtype)], axis=1, size=4)
    index = _idx(np.random.default_rng(1).integers(0, 3, (4, 5, 3)), index_dtype)
    _same("scatter_add", [g, index], axis=1, shape=(4, 3, 3))
    for mode in ("constant", "edge", "reflect"):
        _same("pad_backward", [_x(dtype, (6, 9))], pad_width=((1, 2), (4, 1)), mode=mode)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", (np.int32, np.int64))
def test_one_hot(dtype):
    _same("one_hot", [_idx([0, 3, 2, 3], dtype)], num_classes=5)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", ALL)
def test_fill(dtype):
    _same("fill", [], shape=(3, 5), dtype=np.dtype(dtype).name, value=1 if dtype != np.bool_
          else True)


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", NUMERIC)
def test_ranges_are_bitwise(dtype):
    _same("arange", [], start=-3, stop=17, step=0.7 if np.dtype(dtype).kind == "f" else 2,
          dtype=np.dtype(dtype).name)
    _same("linspace", [], start=-1.5, stop=2.25, num=13, dtype=np.dtype(dtype).name)


@pytest.mark.nvrtc
def test_a_bad_index_reads_zero_and_fails_the_run():
    # the CPU kernel refuses it; a GPU kernel cannot stop, so it reads nothing and reports the
    # CPU's status in the status word (the run raises the CPU's KernelError)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = node_of("take", [x, _idx([0, 7])], axis=1)
    (y,), word = emulate(family, node, [x, _idx([0, 7])], fibers=False, status=True)
    np.testing.assert_array_equal(y, [[0, 0], [3, 0]])
    assert decode(word) == (0, STATUS["INDEX_OUT_OF_RANGE"])


def test_steps():
    x = np.zeros((3, 7), np.float32)
    steps = family.KERNELS["split_f32"].steps(
        node_launch := _launch("split", [x], axis=1, ranges=((0, 2), (2, 7))), ())
    assert [(s.entry, s.grid) for s in steps] == [("mg_split_f32", (1, 2, 1))]
    assert node_launch.workspace == 0
    steps = family.KERNELS["pad_backward_f64"].steps(
        _launch("pad_backward", [np.zeros((6, 9))], pad_width=((1, 2), (4, 1))), ())
    assert [s.entry for s in steps] == ["mg_pad_backward_f64_zero", "mg_pad_backward_f64"]


def _launch(op, arrays, **attrs):
    from mgegraph.backend import KernelTable
    table = KernelTable("cuda")
    family.implement(table)
    return table.impl(op).lower(node_of(op, arrays, **attrs))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("case", MOVING, ids=lambda c: c[0])
def test_moving_on_device(dtype, case):
    op, shapes, attrs = case
    arrays = [_x(dtype, s, seed=i) for i, s in enumerate(shapes)]
    node = node_of(op, arrays, **attrs)
    for g, w in zip(run_on_device(node, arrays), cpu_result(node, arrays)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", NUMERIC)
def test_adjoints_on_device(dtype):
    g = _x(dtype, (64, 500, 8))
    index = _idx(np.random.default_rng(1).integers(0, 50, 500))
    node = node_of("index_add", [g, index], axis=1, size=50)
    assert_close(run_on_device(node, [g, index])[0], cpu_result(node, [g, index])[0],
                 rtol=1e-5, atol=1e-5)
