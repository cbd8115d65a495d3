"""The convolution's GEMM paths on several threads (conv_gemm.pxi): whole (image, group) units
per thread, or threads sharing one unit's im2col and GEMM rows, and the backward passes split by
(group, input channel) pairs; every result against NumPy, and the same bits whether the plan's
threads run on one core or two."""
import numpy as np
import pytest
from test_conv import backward_data_ref, backward_filter_ref, conv_attrs, conv_ref
from test_conv_tiles import FIELD, check, compile_op, run_twice
from threadpoolctl import threadpool_limits

import mgegraph.functional as F
from mgegraph._kernels import blas_table
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.backend import Launch, get_backend
from mgegraph.ops import conv as C

RNG = np.random.default_rng(7)
GEMM_PATHS = ("im2col", "shifted", "direct", "batched")

# x shape, weight shape, stride, padding, groups: whole units (4 images, 2 groups of 1 image),
# shared units (1 or 3 images on 2 threads), channels that do not split evenly, a stride
CASES = [
    ((4, 6, 9, 7), (10, 6, 3, 3), 1, 1, 1),
    ((1, 6, 9, 7), (40, 6, 3, 3), 1, 1, 1),
    ((3, 5, 8, 8), (33, 5, 3, 3), 1, 1, 1),
    ((1, 4, 8, 8), (12, 2, 3, 3), 1, 1, 2),
    ((2, 3, 11, 11), (17, 3, 3, 3), 2, 1, 1),
    ((1, 7, 6, 6), (9, 7, 1, 1), 1, 0, 1),
    ((5, 8, 6, 6), (8, 1, 3, 3), 1, 1, 8),  # depthwise: one input channel per group
    ((2, 3, 16, 16), (4, 3, 3, 3), 1, 1, 1),  # batched: a plane too large for the cell table
    ((1, 6, 8, 10), (5, 6, 2, 2), 2, 0, 1),  # backward data's col2im by rows, taps in pairs
]


@pytest.fixture(params=GEMM_PATHS)
def gemm_path(request, monkeypatch):
    """Take one GEMM path wherever it applies, however small the convolution."""
    path = request.param
    monkeypatch.setattr(lowering, "_tiled_path", lambda *a: None)
    monkeypatch.setattr(lowering, "_batched_pays", lambda *a: path == "batched")
    monkeypatch.setattr(lowering, "_shifted_pays", lambda *a: path == "shifted")
    return path


def _compile(op, xs, ws, stride, padding, groups, dtype):
    conv = conv_attrs(stride, padding, 1, groups)
    y_shape = conv_ref(np.zeros(xs), np.zeros(ws), None, stride, padding, 1, groups).shape
    if op == "conv2d":
        return compile_op(lambda a, b: F.conv2d(a, b, stride=stride, padding=padding,
                                                groups=groups), [xs, ws], dtype)
    if op == "conv2d_backward_data":
        return compile_op(lambda a, b: C.conv2d_backward_data(a, b, xs[2:], **conv),
                          [ws, y_shape], dtype)
    return compile_op(lambda a, b: C.conv2d_backward_filter(a, b, ws[2:], **conv),
                      [xs, y_shape], dtype)


def _arrays(op, xs, ws, stride, padding, groups, dtype):
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    dy = RNG.standard_normal(conv_ref(x, w, None, stride, padding, 1, groups).shape)
    dy = dy.astype(dtype)
    ref = {"conv2d": lambda: conv_ref(x, w, None, stride, padding, 1, groups),
           "conv2d_backward_data": lambda: backward_data_ref(w, dy, xs[2:], stride, padding, 1,
                                                             groups),
           "conv2d_backward_filter": lambda: backward_filter_ref(x, dy, ws[2:], stride, padding,
                                                                 1, groups)}[op]()
    feeds = {"conv2d": (x, w), "conv2d_backward_data": (w, dy),
             "conv2d_backward_filter": (x, dy)}[op]
    return feeds, ref


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_data", "conv2d_backward_filter"])
@pytest.mark.parametrize("case", CASES, ids=[str(c[0]) + str(c[1]) for c in CASES])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_paths_on_threads(gemm_path, monkeypatch, op, case, threads):
    xs, ws, stride, padding, groups = case
    if op != "conv2d" and gemm_path in ("shifted", "batched"):
        pytest.skip("a forward path only")
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: threads)
    plan, ins = _compile(op, xs, ws, stride, padding, groups, np.float32)
    if ins.ints[FIELD["path"]] != K.CONV_PATHS[gemm_path]:
        pytest.skip(f"{gemm_path} does not apply to this convolution")
    assert ins.ints[FIELD["threads"]] == threads
    feeds, ref = _arrays(op, xs, ws, stride, padding, groups, np.float32)
    out = run_twice(plan, *feeds)  # memory="debug": a workspace cell read unwritten is NaN
    check(out, ref.astype(np.float32))
    # a plan's split is the lowering's: the same bits on one core as on two
    with threadpool_limits(limits=1, user_api="openmp"):
        one_core = run_twice(plan, *feeds)
    np.testing.assert_array_equal(one_core, out)


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_data", "conv2d_backward_filter"])
def test_gemm_paths_on_threads_in_float64(gemm_path, monkeypatch, op):
    xs, ws, stride, padding, groups = CASES[2]
    if op != "conv2d" and gemm_path in ("shifted", "batched"):
        pytest.skip("a forward path only")
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: 2)
    plan, ins = _compile(op, xs, ws, stride, padding, groups, np.float64)
    if ins.ints[FIELD["path"]] != K.CONV_PATHS[gemm_path]:
        pytest.skip(f"{gemm_path} does not apply to this convolution")
    feeds, ref = _arrays(op, xs, ws, stride, padding, groups, np.float64)
    np.testing.assert_allclose(run_twice(plan, *feeds), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", CASES, ids=[str(c[0]) + str(c[1]) for c in CASES])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_gemm_giving_y_transposed(monkeypatch, case, threads, dtype):
    # y^T = col^T w^T into the workspace, then transposed (with bias and relu) into y
    xs, ws, stride, padding, groups = case
    monkeypatch.setattr(lowering, "_tiled_path", lambda *a: None)
    monkeypatch.setattr(lowering, "_batched_pays", lambda *a: False)
    monkeypatch.setattr(lowering, "_shifted_pays", lambda *a: False)
    monkeypatch.setattr(lowering, "_transposed_pays", lambda *a: True)
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: threads)
    bias = RNG.standard_normal(ws[0]).astype(dtype)
    plan, ins = compile_op(lambda a, b, c: F.relu(F.conv2d(a, b, c, stride=stride,
                                                           padding=padding, groups=groups)),
                           [xs, ws, bias.shape], dtype)
    if ins.ints[FIELD["path"]] != K.CONV_PATHS["im2col"]:
        pytest.skip("im2col does not apply to this convolution")
    assert ins.ints[FIELD["transposed"]] == 1
    (x, w), ref = _arrays("conv2d", xs, ws, stride, padding, groups, dtype)
    ref = np.maximum(ref + bias[:, None, None], 0)
    out = run_twice(plan, x, w, bias)  # memory="debug": a workspace cell read unwritten is NaN
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out, ref.astype(dtype), rtol=tol, atol=tol)
    with threadpool_limits(limits=1, user_api="openmp"):
        np.testing.assert_array_equal(run_twice(plan, x, w, bias), out)


def test_only_mkl_and_few_cells_take_the_transposed_gemm(monkeypatch):
    from mgegraph._kernels import blas_select
    monkeypatch.setattr(blas_select, "choice", lambda: blas_select.BlasChoice("mkl", "test"))
    assert lowering._transposed_pays("conv2d", "im2col", 49, 512)
    assert not lowering._transposed_pays("conv2d", "im2col", 196, 512)  # cells enough
    assert not lowering._transposed_pays("conv2d", "im2col", 49, 128)
    assert not lowering._transposed_pays("conv2d", "batched", 49, 512)
    assert not lowering._transposed_pays("conv2d_backward_data", "im2col", 49, 512)
    monkeypatch.setattr(blas_select, "choice",
                        lambda: blas_select.BlasChoice("openblas", "test"))
    assert not lowering._transposed_pays("conv2d", "im2col", 49, 512)


def test_blas_threads_are_set_per_thread_and_restored():
    # the guard the split GEMMs run under: -1 where the library in use has no such call
    previous = blas_table.local_threads(1)
    if previous == -1:
        pytest.skip(f"{blas_table.current()} has no per-thread thread count here")
    assert blas_table.local_threads(previous) == 1


# -- Winograd's F(2x2, 3x3) -----------------------------------------------------------------------
WINOGRAD_CASES = [
    # x shape, output channels, padding: even and odd planes (cropped tiles), no padding, a
    # padding of 2, one cell, channels that do not split evenly among threads, more tiles than
    # one block holds (blocks of 32 tiles or more: several blocks per image, images across one)
    ((2, 5, 8, 8), 7, 1), ((3, 4, 7, 9), 6, 1), ((1, 3, 6, 5), 2, 0), ((2, 2, 4, 4), 3, 2),
    ((1, 1, 1, 1), 1, 1), ((4, 9, 5, 5), 11, 1), ((3, 64, 13, 11), 80, 1),
    ((3, 200, 11, 11), 160, 1),  # 108 tiles in blocks of 80, which cross images
    ((0, 4, 6, 6), 5, 1),  # an empty batch: no tiles
    # wino_tile.h's vectors (16, 8 or 4 tiles): rows of 35 tiles (two whole vectors and a
    # partial one, both edges padded), 66 (runs of 64 and 2), 8 and 9 (AVX2's vectors, or
    # AVX-512's partial ones), with paddings of 0 and 2
    ((2, 3, 9, 70), 5, 1), ((1, 2, 6, 133), 3, 0), ((2, 4, 10, 16), 4, 2), ((1, 3, 5, 18), 6, 2),
]


@pytest.fixture
def always_winograd(monkeypatch):
    monkeypatch.setattr(lowering, "_winograd_pays", lambda *a: True)


def _winograd_plan(case, bias, relu, dtype):
    xs, oc, padding = case

    def conv(a, k, *b):
        y = F.conv2d(a, k, *b, padding=padding)
        return F.relu(y) if relu else y
    return compile_op(conv, [xs, (oc, xs[1], 3, 3)] + ([(oc,)] if bias else []), dtype)


@pytest.mark.parametrize("bias,relu", [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=[str(c) for c in WINOGRAD_CASES])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_winograd_matches_reference(always_winograd, monkeypatch, case, bias, relu, threads):
    xs, oc, padding = case
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: threads)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((oc, xs[1], 3, 3)).astype(np.float32)
    b = RNG.standard_normal(oc).astype(np.float32) if bias else None
    plan, ins = _winograd_plan(case, bias, relu, np.float32)
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS["winograd"]
    feeds = (x, w, *([b] if bias else []))
    out = run_twice(plan, *feeds)  # memory="debug": a workspace cell read unwritten is NaN
    ref = conv_ref(x, w, b, 1, padding, 1, 1)
    ref = np.maximum(ref, 0) if relu else ref
    # the transforms round otherwise than the direct sum: a few ulps of the largest term
    scale = np.abs(x).max(initial=0) * np.abs(w).max() * xs[1] * 9
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6 * scale)
    with threadpool_limits(limits=1, user_api="openmp"):
        np.testing.assert_array_equal(run_twice(plan, *feeds), out)


def test_winograd_is_for_float32_3x3_stride_1_without_groups(always_winograd):
    takes = {"float32": True, "float64": False}
    for dtype, expected in takes.items():
        _, ins = compile_op(lambda a, k: F.conv2d(a, k, padding=1), [(2, 4, 9, 9), (4, 4, 3, 3)],
                            np.dtype(dtype))
        assert (ins.ints[FIELD["path"]] == K.CONV_PATHS["winograd"]) == expected
    for kw in ({"stride": 2}, {"dilation": 2}, {"groups": 2}):
        _, ins = compile_op(lambda a, k, kw=kw: F.conv2d(a, k, padding=1, **kw),
                            [(2, 4, 9, 9), (4, 4 // kw.get("groups", 1), 3, 3)])
        assert ins.ints[FIELD["path"]] != K.CONV_PATHS["winograd"]
    _, ins = compile_op(lambda a, k: F.conv2d(a, k, padding=2), [(2, 4, 9, 9), (4, 4, 5, 5)])
    assert ins.ints[FIELD["path"]] != K.CONV_PATHS["winograd"]


@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=[str(c) for c in WINOGRAD_CASES])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_winograd_backward_data_matches_reference(always_winograd, monkeypatch, case, threads):
    # dx: the convolution of dy by the transposed, turned filters, on the same Winograd path
    xs, oc, padding = case
    ws = (oc, xs[1], 3, 3)
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: threads)
    plan, ins = _compile("conv2d_backward_data", xs, ws, 1, padding, 1, np.float32)
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS["winograd"]
    (w, dy), ref = _arrays("conv2d_backward_data", xs, ws, 1, padding, 1, np.float32)
    out = run_twice(plan, w, dy)
    scale = np.abs(dy).max(initial=0) * np.abs(w).max() * oc * 9
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6 * scale)
    with threadpool_limits(limits=1, user_api="openmp"):
        np.testing.assert_array_equal(run_twice(plan, w, dy), out)


@pytest.mark.parametrize("isa", K.blocked_isas())
@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_data"])
@pytest.mark.parametrize("case", WINOGRAD_CASES[-4:], ids=[str(c) for c in WINOGRAD_CASES[-4:]])
def test_winograd_transforms_of_every_instruction_set(always_winograd, monkeypatch, isa, op,
                                                      case):
    # wino_tile.h's transforms as built for each instruction set this CPU runs (the GEMMs on the
    # tiles or the BLAS), with the masked loads and stores at the planes' edges
    xs, oc, padding = case
    ws = (oc, xs[1], 3, 3)
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    plan, ins = _compile(op, xs, ws, 1, padding, 1, np.float32)
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS["winograd"]
    assert ins.ints[FIELD["isa"]] == K.BLOCKED_ISAS[isa]
    feeds, ref = _arrays(op, xs, ws, 1, padding, 1, np.float32)
    out = run_twice(plan, *feeds)
    scale = np.abs(feeds[0]).max(initial=0) * np.abs(feeds[1]).max(initial=0) * 9 * max(ws[:2])
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6 * scale)


def test_winograd_refuses_float64(always_winograd):
    # a parameter block naming Winograd for float64 (as a hostile file could) is refused by the
    # kernel, not run: the transforms are float32's
    _, ins = compile_op(lambda a, k: F.conv2d(a, k, padding=1), [(2, 4, 9, 9), (4, 4, 3, 3)],
                        np.float32)
    cpu = get_backend("cpu")
    for op, shapes in (("conv2d", [(2, 4, 9, 9), (4, 4, 3, 3), (2, 4, 9, 9)]),
                       ("conv2d_backward_data", [(4, 4, 3, 3), (2, 4, 9, 9), (2, 4, 9, 9)])):
        for dtype, runs in ((np.float32, True), (np.float64, False)):
            bufs = (*(np.zeros(s, dtype) for s in shapes), np.zeros(1 << 20, np.uint8))
            status = cpu.launcher(cpu.kernel(op, dtype), Launch(ins.ints, ins.floats, 1 << 20),
                                  2, False)(bufs)
            assert (status == 0) == runs


def test_winograd_backward_data_needs_a_padding_of_at_most_2(always_winograd):
    # dx is dy padded by 2 - p: a larger padding leaves it to the other paths
    conv = conv_attrs(1, 3, 1, 1)
    _, ins = compile_op(lambda k, d: C.conv2d_backward_data(k, d, (9, 9), **conv),
                        [(4, 4, 3, 3), (2, 4, 13, 13)])
    assert ins.ints[FIELD["path"]] != K.CONV_PATHS["winograd"]


@pytest.mark.parametrize("xs,slots", [((4, 3, 4, 4), 0), ((4, 3, 16, 16), 2)])
def test_batched_workspace_has_a_slot_per_thread_only_without_the_table(monkeypatch, xs, slots):
    # planes whose taps x cells fit the source table (1024) im2col straight into the batch's
    # matrix; larger ones through an image's matrix per thread
    monkeypatch.setattr(lowering, "_tiled_path", lambda *a: None)
    monkeypatch.setattr(lowering, "_winograd_pays", lambda *a: False)
    monkeypatch.setattr(lowering, "_batched_pays", lambda *a: True)
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: 2)
    plan, ins = compile_op(lambda a, b: F.conv2d(a, b, padding=1), [xs, (5, 3, 3, 3)])
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS["batched"]
    kdim, cells = 3 * 9, xs[2] * xs[3]
    want = (kdim * (slots + xs[0]) + 5 * xs[0]) * cells * 4
    assert plan.slots[ins.workspace].nbytes == want
