"""The CUDA kernels of uint8, int8 and int16, run on the host (csrc_cuda/host_emu.h), equal the
CPU kernels bit for bit: the movement kernels (1- and 2-byte elements), the casts to and from
every dtype (floats outside the range: truncated to int32, INT_MIN for NaN and inf, then the
low bits), and the integer ops wrapping; NVRTC compiles every entry. (The table-wide checks of
tests/cuda/test_host_elementwise.py run the small integers' unary, binary, compare and where
kernels too.)"""
import numpy as np
import pytest
from host_emu import have_compiler, run_on_host
from kernel_checks import ARCHS, cpu_result, emulate, node_of, nvrtc_compile, ptx_of

from mgegraph.backend import KernelTable
from mgegraph.cuda import render
from mgegraph.cuda.kernels import elementwise, reduce
from mgegraph.cuda.kernels import movement as family

SMALL = (np.uint8, np.int8, np.int16)
EVERY = tuple(render.CTYPES)


def _x(dtype, shape, seed=0):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def _same(op, arrays, **attrs):
    node = node_of(op, arrays, **attrs)
    for got, want in zip(emulate(family, node, arrays, fibers=False), cpu_result(node, arrays)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (op, got, want)


def test_every_small_int_kernel_is_declared():
    for dt in ("u8", "i8", "i16"):
        for kernel in ("strided", "slice_backward", "concat", "split", "take", "gather", "pad",
                       "fill"):
            assert f"{kernel}_{dt}" in family.KERNELS
        for kernel in ("unary", "binary", "compare", "where", "cast"):
            assert f"{kernel}_{dt}" in elementwise.KERNELS


@pytest.mark.nvrtc
def test_nvrtc_compiles_the_small_int_entries():
    ptx = ptx_of(nvrtc_compile("movement.cu", ARCHS[-1])[2])
    for dt in ("u8", "i8", "i16"):
        assert f".entry mg_strided_{dt}(" in ptx and f".entry mg_fill_{dt}(" in ptx


MOVING = [
    ("transpose", [(3, 5, 7)], {"pattern": (2, 0, 1)}),
    ("broadcast_to", [(3, 1)], {"shape": (2, 3, 5)}),
    ("slice", [(6, 7)], {"starts": (1, None), "stops": (5, None), "steps": (2, -2)}),
    ("slice_backward", [(2, 4)], {"shape": (6, 7), "starts": (1, None), "stops": (5, None),
                                  "steps": (2, -2)}),
    ("concat", [(2, 3), (2, 1), (2, 5)], {"axis": 1}),
    ("split", [(3, 7)], {"axis": 1, "ranges": ((0, 2), (2, 7), (1, 4))}),
    ("pad", [(3, 5)], {"pad_width": ((1, 2), (0, 3)), "mode": "constant",
                       "constant_value": 9}),
    ("pad", [(3, 5)], {"pad_width": ((2, 2), (4, 1)), "mode": "reflect"}),
    ("pad", [(3, 5)], {"pad_width": ((2, 0), (1, 4)), "mode": "edge"}),
]


@pytest.mark.parametrize("dtype", SMALL)
@pytest.mark.parametrize("case", MOVING, ids=lambda c: c[0])
def test_moving_kernels_are_bitwise(dtype, case):
    op, shapes, attrs = case
    _same(op, [_x(dtype, s, seed=i) for i, s in enumerate(shapes)], **attrs)


@pytest.mark.parametrize("dtype", SMALL)
def test_take_gather_and_fill_are_bitwise(dtype):
    x = _x(dtype, (4, 5, 3))
    _same("take", [x, np.array([4, -1, 0, 2, 2], np.int64)], axis=1)
    index = np.random.default_rng(1).integers(-5, 5, (4, 2, 3)).astype(np.int32)
    _same("gather", [x, index], axis=1)
    _same("fill", [], shape=(3, 5), dtype=np.dtype(dtype).name, value=int(np.iinfo(dtype).min))


def _cast_values(src) -> np.ndarray:
    src = np.dtype(src)
    if src.kind == "f":
        return np.array([np.nan, np.inf, -np.inf, 0.5, -1.5, 127.5, 128.0, -129.0, 255.9,
                         300.7, -300.7, 32768.0, 70000.5, 3e9, -3e9, 1e20], src)
    if src.kind == "b":
        return np.array([True, False, True])
    info = np.iinfo(src)
    return np.array([info.min, -129, -1, 0, 1, 127, 128, 255, 256, 32768, info.max],
                    np.int64).clip(info.min, info.max).astype(src)


SMALL_NAMES = ("uint8", "int8", "int16")
PAIRS = [(s, d) for s in EVERY for d in EVERY if s != d and (s in SMALL_NAMES or d in SMALL_NAMES)]
# every cast to or from a small integer in one module, built once with g++
CASTS = render.module([render.cast_kernel(s, d)[1] for s, d in PAIRS])


@pytest.mark.parametrize("src", EVERY)
def test_casts_to_and_from_the_small_ints_are_bitwise(src):
    if not have_compiler():
        pytest.skip("no g++ for the host emulation")
    for dst in (d for s, d in PAIRS if s == src):
        x = _cast_values(src)
        node = node_of("cast", [x], dtype=dst)
        (want,) = cpu_result(node, [x])
        table = KernelTable("cuda")
        elementwise.implement(table)
        launch = table.impl("cast").lower(node)
        entry, _ = render.cast_kernel(src, dst)
        steps = elementwise.launch_steps(entry, launch.ints, [v.type for v in node.inputs
                                                              + node.outputs], 1)
        got = np.zeros(want.shape, want.dtype)
        run_on_host(CASTS, steps, [x, got], launch.ints, launch.floats)
        assert got.tobytes() == want.tobytes(), (src, dst, x, got, want)


@pytest.mark.parametrize("op", ("sum", "prod", "mean", "var", "max", "min", "argmax", "argmin"))
@pytest.mark.parametrize("shape,axis", [((5, 7), (1,)), ((5, 7), (0,)), ((3, 4, 6), (0, 2)),
                                         ((300,), None)])
def test_uint8_reductions_equal_the_cpu(op, shape, axis):
    x = _x(np.uint8, shape, seed=len(shape))
    node = node_of(op, [x], axis=axis)
    (want,) = cpu_result(node, [x])
    (got,) = emulate(reduce, node, [x])
    assert got.dtype == want.dtype
    if want.dtype.kind == "f":  # mean and var: the parts meet in another order
        np.testing.assert_allclose(got, want, rtol=1e-12)
    else:
        assert got.tobytes() == want.tobytes(), (op, got, want)
