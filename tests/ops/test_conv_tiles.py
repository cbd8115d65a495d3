"""The tiled convolution paths of conv.pyx (conv_blocked.pxi, conv_tile.h): row tiles
("blocked") and gather tiles ("gather"), forced on every instruction set this CPU runs, against
NumPy references; threads, workspace, gradients and the path rule."""
import numpy as np
import pytest
from test_conv import backward_data_ref, backward_filter_ref, conv_attrs, conv_ref, pair

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.backend import Launch, get_backend
from mgegraph.ops import conv as C
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(1)
FIELD = {name: i for i, name in enumerate(K.CONV_FIELDS)}
TILED = [(path, isa) for path in ("blocked", "gather") for isa in K.blocked_isas()]


@pytest.fixture(params=TILED, ids=[f"{p}-{i}" for p, i in TILED])
def tiled(request, monkeypatch):
    """Take one tiled path on one instruction set wherever it applies; returns (path, isa)."""
    path, isa = request.param
    monkeypatch.setattr(lowering, "_winograd_pays", lambda *a: False)
    monkeypatch.setattr(lowering, "_tiled_path", lambda paths, *a: path if path in paths else None)
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    return request.param


def check(out, expected):
    # float32 sums of up to a few hundred products of unit normals: a few ulps of the terms
    assert out.dtype == np.float32 and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def compile_op(op, shapes, dtype=np.float32, memory="debug", **attrs):
    """A plan of one conv op over inputs of ``shapes`` and its instruction. memory="debug"
    refills the dead workspace with NaN after each run: a cell read before it is written shows
    in the second run."""
    g = mg.Graph()
    ins = [g.input(f"x{i}", s, dtype) for i, s in enumerate(shapes)]
    out = op(*ins, **attrs)
    plan = mg.compile([out], memory=memory)
    (ins,) = [i for i in plan.instructions if i.op.startswith("conv2d")]
    return plan, ins


def run_twice(plan, *arrays):
    """The plan's output on ``arrays``; a second run must give the same bits."""
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    (first,), (second,) = plan.run(feeds), plan.run(feeds)
    np.testing.assert_array_equal(first, second)
    return first


FORWARD_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups
    ((2, 5, 7, 9), (11, 5, 3, 3), 1, 1, 1, 1),      # channels not a multiple of a vector
    ((1, 32, 12, 12), (64, 32, 3, 3), 1, 1, 1, 1),  # batch 1, whole packed blocks
    ((3, 3, 10, 10), (50, 3, 5, 5), 1, 2, 1, 1),    # 50 channels: a part-filled block
    ((2, 4, 6, 6), (3, 4, 3, 3), 1, 0, 1, 1),       # unpadded
    ((1, 3, 5, 5), (4, 3, 1, 1), 1, 1, 1, 1),       # 1x1, padded
    ((1, 2, 2, 2), (3, 2, 3, 3), 1, 3, 1, 1),       # padding larger than the kernel
    ((1, 3, 11, 11), (7, 3, 3, 3), 1, 2, 2, 1),     # dilation
    ((2, 6, 9, 8), (10, 3, 3, 3), 1, 1, 1, 2),      # groups
    ((2, 4, 6, 5), (4, 1, 3, 3), 1, 1, 1, 4),       # depthwise
    ((2, 6, 9, 8), (10, 3, 3, 3), 2, 1, 1, 2),      # stride 2 (rows: four phases), groups
    ((1, 3, 15, 13), (9, 3, 7, 7), 2, 3, 1, 1),     # a ResNet stem: 7x7, stride 2
    ((2, 5, 10, 7), (9, 5, 3, 3), 2, 0, 1, 1),      # stride 2 unpadded, odd and even sides
    ((1, 2, 9, 9), (8, 2, 4, 4), 2, 1, 1, 1),       # stride 2, an even kernel
    ((1, 4, 8, 8), (6, 4, 1, 1), 2, 0, 1, 1),       # stride 2 1x1: three phases without taps
    ((1, 3, 16, 17), (70, 3, 5, 5), 2, 2, 1, 1),    # stride 2, 70 channels: a part-filled tile
    ((2, 4, 9, 10), (5, 4, 3, 2), (2, 3), (1, 0), (1, 2), 1),
    ((0, 3, 5, 5), (4, 3, 3, 3), 1, 1, 1, 1),       # empty batch
    ((2, 3, 1, 40), (17, 3, 1, 3), 1, (0, 1), 1, 1),  # one row, many tiles
    # backward filter's 64-channel tiles (AVX-512): two blocks, two groups of one, a stride
    ((2, 5, 7, 10), (128, 5, 3, 3), 1, 1, 1, 1),
    ((2, 6, 9, 8), (128, 3, 3, 3), 2, 1, 1, 2),
]


@pytest.mark.parametrize("bias,relu", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", FORWARD_CASES)
def test_conv2d_tiles_match_reference(tiled, xs, ws, stride, padding, dilation, groups, bias,
                                      relu):
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    attrs = {**conv_attrs(stride, padding, dilation, groups),
             "activation": "relu" if relu else "none"}
    shapes = [xs, ws] + ([b.shape] if bias else [])
    from mgegraph.ops.builder import apply
    plan, ins = compile_op(lambda *v: apply("conv2d", v, **attrs), shapes)
    out = run_twice(plan, x, w, *([b] if bias else []))
    want_path = tiled[0] if tiled[0] in lowering._tiles_apply(
        "conv2d", "float32", ws[2:], pair(stride), pair(padding), pair(dilation)) else None
    if want_path is not None:
        assert ins.ints[FIELD["path"]] == K.CONV_PATHS[want_path]
        assert ins.ints[FIELD["isa"]] == K.BLOCKED_ISAS[tiled[1]]
    expected = conv_ref(x, w, b if bias else None, stride, padding, dilation, groups)
    check(out, np.maximum(expected, 0) if relu else expected)


BACKWARD_CASES = [c for c in FORWARD_CASES if pair(c[2]) == (1, 1)]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", BACKWARD_CASES)
def test_conv2d_backward_data_tiles_match_reference(tiled, xs, ws, stride, padding, dilation,
                                                    groups):
    conv = conv_attrs(stride, padding, dilation, groups)
    w = RNG.standard_normal(ws).astype(np.float32)
    oshape = conv_ref(np.zeros(xs), w, None, stride, padding, dilation, groups).shape
    dy = RNG.standard_normal(oshape).astype(np.float32)
    plan, ins = compile_op(lambda k, d: C.conv2d_backward_data(k, d, xs[2:], **conv),
                           [ws, oshape])
    applies = all(p <= d * (k - 1) for p, d, k in zip(pair(padding), pair(dilation), ws[2:]))
    assert (ins.ints[FIELD["path"]] == K.CONV_PATHS[tiled[0]]) == applies
    out = run_twice(plan, w, dy)
    check(out, backward_data_ref(w, dy, xs[2:], stride, padding, dilation, groups).astype(
        np.float32))


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", FORWARD_CASES)
def test_conv2d_backward_filter_tiles_match_reference(tiled, xs, ws, stride, padding, dilation,
                                                      groups):
    conv = conv_attrs(stride, padding, dilation, groups)
    x = RNG.standard_normal(xs).astype(np.float32)
    oshape = conv_ref(x, np.zeros(ws), None, stride, padding, dilation, groups).shape
    dy = RNG.standard_normal(oshape).astype(np.float32)
    plan, ins = compile_op(lambda v, d: C.conv2d_backward_filter(v, d, ws[2:], **conv),
                           [xs, oshape])
    direct = ws[2:] == (1, 1) and pair(stride) == (1, 1) and pair(padding) == (0, 0)
    assert (ins.ints[FIELD["path"]] == K.CONV_PATHS["gather"]) == (tiled[0] == "gather"
                                                                   and not direct)
    out = run_twice(plan, x, dy)
    check(out, backward_filter_ref(x, dy, ws[2:], stride, padding, dilation, groups).astype(
        np.float32))


def test_backward_filter_tiles_take_up_to_max_cols_columns():
    applies = lowering._tiles_apply
    args = ("conv2d_backward_filter", "float32", (3, 3), (1, 1), (1, 1), (1, 1))
    assert applies(*args, K.MAX_COLS) == ("gather",) and applies(*args, K.MAX_COLS + 1) == ()


def test_backward_data_zeros_are_positive(tiled):
    # -0 gradients and cells no window reads give +0, as on the GEMM paths
    w, dy = -np.ones((2, 3, 3, 3), np.float32), np.full((1, 2, 4, 4), -0.0, np.float32)
    conv = conv_attrs(1, 1, 1, 1)
    plan, _ = compile_op(lambda k, d: C.conv2d_backward_data(k, d, (4, 4), **conv),
                         [w.shape, dy.shape])
    out = run_twice(plan, w, dy)
    assert not np.signbit(out).any() and not out.any()


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_data", "conv2d_backward_filter"])
@pytest.mark.parametrize("batch", [1, 3])
def test_tiles_give_the_same_bits_on_one_and_two_threads(tiled, monkeypatch, op, batch):
    # batch 3 >= 2 threads: images go to threads (a workspace slot each); batch 1: its tiles do
    xs, ws = (batch, 19, 13, 11), (21, 19, 3, 3)
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    dy = RNG.standard_normal((batch, 21, 13, 11)).astype(np.float32)
    conv = conv_attrs(1, 1, 1, 1)
    outs, sizes = [], []
    for threads in (1, 2):
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, n=threads: n)
        if op == "conv2d":
            plan, ins = compile_op(lambda a, b: F.conv2d(a, b, padding=1), [xs, ws])
            outs.append(run_twice(plan, x, w))
        elif op == "conv2d_backward_filter":
            plan, ins = compile_op(lambda a, d: C.conv2d_backward_filter(a, d, ws[2:], **conv),
                                   [xs, dy.shape])
            outs.append(run_twice(plan, x, dy))
        else:
            plan, ins = compile_op(lambda a, b: C.conv2d_backward_data(a, b, xs[2:], **conv),
                                   [ws, dy.shape])
            outs.append(run_twice(plan, w, dy))
        assert ins.ints[FIELD["threads"]] == threads
        sizes.append(plan.slots[ins.workspace].nbytes)
    # the tiles give the same bits whatever the threads. Backward filter has no row tiles: it
    # runs as im2col GEMMs, one per thread's share of the input channels, and a BLAS may round
    # a column differently by where it falls in its register tile (OpenBLAS's AVX2 sgemm does,
    # on AMD Zen 3), so there the threads may change the last bits
    if ins.ints[FIELD["path"]] != K.CONV_PATHS["im2col"]:
        np.testing.assert_array_equal(outs[0], outs[1])
    want = {"conv2d": lambda: conv_ref(x, w, None, 1, 1, 1, 1),
            "conv2d_backward_data": lambda: backward_data_ref(w, dy, xs[2:], 1, 1, 1, 1),
            "conv2d_backward_filter": lambda: backward_filter_ref(x, dy, ws[2:], 1, 1, 1, 1)}
    for out in outs:
        check(out, want[op]().astype(np.float32))
    # a second slot only when images are split among threads; backward filter's gather tiles
    # split the tiles and prepare the next image in a second buffer, its GEMM path (no tiles
    # for it here) gives each thread its channels' rows
    if op == "conv2d_backward_filter":
        assert sizes[1] > sizes[0]
    else:
        assert (sizes[1] > sizes[0]) == (batch >= 2)


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_data"])
def test_tiles_of_a_plan_for_more_threads_than_run_stay_in_their_workspace(tiled, monkeypatch,
                                                                           op):
    # a plan lowered for more threads than run it (another machine's, or the policy's cap): a
    # batch below the plan's threads has one workspace slot, so the threads that run must share
    # each image's tiles rather than take whole images into slots past the workspace
    from mgegraph._kernels import parallel
    nt = parallel.max_threads()
    if nt < 2:
        pytest.skip("one thread runs here")
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: nt + 1)
    batch = nt
    xs, ws = (batch, 9, 12, 10), (20, 9, 3, 3)
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    dy = RNG.standard_normal((batch, 20, 12, 10)).astype(np.float32)
    if op == "conv2d":
        plan, ins = compile_op(lambda a, b: F.conv2d(a, b, padding=1), [xs, ws])
        outs, want = [run_twice(plan, x, w) for _ in range(3)], conv_ref(x, w, None, 1, 1, 1, 1)
    else:
        conv = conv_attrs(1, 1, 1, 1)
        plan, ins = compile_op(lambda a, b: C.conv2d_backward_data(a, b, xs[2:], **conv),
                               [ws, dy.shape])
        outs = [run_twice(plan, w, dy) for _ in range(3)]
        want = backward_data_ref(w, dy, xs[2:], 1, 1, 1, 1)
    assert ins.ints[FIELD["threads"]] == nt + 1
    for out in outs:
        check(out, want.astype(np.float32))


def tiled_workspace(path, xs, ws, stride, padding, dilation, groups, threads=1):
    """The bytes the tiled layouts take: packed weights, then per slot the padded input (with
    the widest row tile's slack) and the result."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    oc, cg, kh, kw = ws
    hp, wp = xs[2] + 2 * ph, xs[3] + 2 * pw
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    ocg, up = oc // groups, lambda a, b: -(-a // b) * b
    if path == "gather":
        rows = up(ocg, 16) + 32  # the widest rounding of any gather tile's channels
        packed, padded, res = rows * cg * kh * kw, cg * hp * wp, (oh * ow + 12) * rows
    else:
        phases = 4 if (sh, sw) == (2, 2) and (dh, dw) == (1, 1) else 1
        if phases == 4:  # four planes of the padded image's (row, column) parities
            hp, wp = -(-hp // 2), -(-wp // 2)
        ncols = (oh - 1) * wp + ow
        packed, padded = up(ocg, 8) * cg * kh * kw, phases * cg * hp * wp + 48
        res = ocg * up(ncols, 48)
    slots = threads if xs[0] >= threads else 1
    return 4 * (groups * packed + slots * (padded + res))


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups",
                         FORWARD_CASES[:8] + FORWARD_CASES[9:15])
def test_tiled_workspace_size(tiled, xs, ws, stride, padding, dilation, groups):
    plan, ins = compile_op(lambda a, b: F.conv2d(a, b, stride=stride, padding=padding,
                                                 dilation=dilation, groups=groups), [xs, ws])
    if ins.ints[FIELD["path"]] == K.CONV_PATHS[tiled[0]]:
        assert plan.slots[ins.workspace].nbytes == tiled_workspace(
            tiled[0], xs, ws, stride, padding, dilation, groups)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_tiles_are_float32_only(tiled, dtype):
    if dtype == np.int32:
        assert lowering._tiles_apply("conv2d", "int32", (3, 3), (1, 1), (1, 1), (1, 1)) == ()
        return
    _plan, ins = compile_op(lambda a, b: F.conv2d(a, b, padding=1), [(2, 3, 8, 8), (4, 3, 3, 3)],
                           dtype=dtype)
    assert ins.ints[FIELD["path"]] not in (K.CONV_PATHS["blocked"], K.CONV_PATHS["gather"])


def test_strided_backward_data_keeps_the_gemm_paths():
    applies = lowering._tiles_apply
    assert applies("conv2d_backward_filter", "float32", (3, 3), (2, 2), (1, 1), (1, 1)) == (
        "gather",)
    assert applies("conv2d_backward_data", "float32", (3, 3), (2, 2), (1, 1), (1, 1)) == ()
    # padding beyond d (k - 1) would need a cropped output gradient
    assert applies("conv2d_backward_data", "float32", (3, 3), (1, 1), (3, 1), (1, 1)) == ()
    # row tiles forward at stride 1, and 2 undilated (by phases); gather tiles at any stride
    assert applies("conv2d", "float32", (3, 3), (2, 2), (1, 1), (1, 1)) == ("blocked", "gather")
    assert applies("conv2d", "float32", (3, 3), (2, 2), (1, 1), (2, 2)) == ("gather",)
    assert applies("conv2d", "float32", (3, 3), (3, 3), (1, 1), (1, 1)) == ("gather",)
    assert applies("conv2d", "float32", (9, 9), (1, 1), (4, 4), (1, 1)) == ()  # 81 taps


def test_kernel_refuses_an_instruction_set_the_cpu_lacks(monkeypatch):
    # a plan carried to a CPU without its tiles' instruction set fails with a KernelError
    missing = [k for k in K.BLOCKED_ISAS if k not in K.blocked_isas()]
    if not missing:
        pytest.skip("this CPU runs every tile build")
    monkeypatch.setattr(lowering, "_isa", lambda: missing[0])
    monkeypatch.setattr(lowering, "_tiled_path", lambda paths, *a: "gather")
    plan, _ = compile_op(lambda a, b: F.conv2d(a, b, padding=1), [(1, 2, 5, 5), (3, 2, 3, 3)])
    with pytest.raises(mg.KernelError):
        plan.run({"x0": np.ones((1, 2, 5, 5), np.float32), "x1": np.ones((3, 2, 3, 3), np.float32)})


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (1, 0)])
def test_tiled_gradients(tiled, stride, padding):
    # float32 gradients through the tiles against the float64 ones of the GEMM paths, which
    # gradcheck holds to finite differences
    x, w = RNG.standard_normal((2, 3, 7, 6)), RNG.standard_normal((5, 3, 3, 3))

    def net(a, k):
        return F.relu(F.conv2d(a, k, stride=stride, padding=padding))

    want = gradcheck(net, x, w, rtol=1e-4, atol=1e-6)
    g = mg.Graph()
    a, k = g.input("a", x.shape, np.float32), g.input("k", w.shape, np.float32)
    y = net(a, k)
    c = g.const(np.random.default_rng(0).standard_normal(y.shape).astype(np.float32))
    plan = mg.compile(mg.grad(F.sum(y * c), [a, k]))
    ops = {i.op: i.ints[FIELD["path"]] for i in plan.instructions if i.op.startswith("conv")}
    # the forward pass takes either tiles at stride 1 and 2 (the row tiles by phases there);
    # the gather tiles take both passes with weights
    assert ops["conv2d"] == K.CONV_PATHS[tiled[0]]
    assert (ops["conv2d_backward_filter"] == K.CONV_PATHS["gather"]) == (tiled[0] == "gather")
    got = plan.run({"a": x.astype(np.float32), "k": w.astype(np.float32)})
    # gradcheck differentiates sum(fn * c) for its own c; take it from the same seed
    for mine, theirs in zip(got, want):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-4)


def test_optimized_plan_matches_unoptimized_through_the_tiles(tiled):
    # conv-bias-relu becomes one conv with an epilogue under optimize=1
    from mgegraph import nn

    nn.init.manual_seed(3)
    net = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.ReLU(), nn.Conv2d(12, 9, 3, stride=2,
                                                                            padding=1), nn.ReLU())
    x = RNG.standard_normal((2, 3, 10, 10)).astype(np.float32)
    fast, slow = (np.asarray(mg.compile_module(net, (x,), optimize=o)(x)) for o in (1, 0))
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,xs,ws,kw,path", [
    ("conv2d", (32, 32, 32, 32), (64, 32, 3, 3), {"padding": 1}, "winograd"),  # convnet
    ("conv2d", (32, 16, 32, 32), (64, 16, 3, 3), {"padding": 1}, "blocked"),
    ("conv2d_backward_data", (32, 64, 16, 16), (128, 64, 3, 3), {"padding": 1}, "winograd"),
    ("conv2d_backward_data", (32, 64, 16, 16), (16, 64, 3, 3), {"padding": 1}, "blocked"),
    ("conv2d", (1, 3, 224, 224), (64, 3, 7, 7), {"padding": 3, "stride": 2}, "blocked"),  # stem
    ("conv2d", (8, 3, 64, 64), (64, 3, 7, 7), {"padding": 3, "stride": 2}, "blocked"),
    ("conv2d", (1, 3, 28, 28), (64, 3, 7, 7), {"padding": 3, "stride": 2}, "gather"),  # 14x14
    ("conv2d", (1, 64, 56, 56), (128, 64, 3, 3), {"padding": 1, "stride": 2}, "blocked"),
    ("conv2d", (1, 128, 28, 28), (256, 128, 3, 3), {"padding": 1, "stride": 2}, "im2col"),
    ("conv2d", (8, 512, 2, 2), (512, 512, 3, 3), {"padding": 1}, "batched"),   # 2x2 plane
    ("conv2d", (8, 256, 8, 8), (512, 256, 3, 3), {"padding": 1, "stride": 2}, "batched"),
    ("conv2d", (1, 512, 2, 2), (512, 512, 3, 3), {"padding": 1}, "im2col"),    # one image
    ("conv2d", (8, 1, 4, 4), (4, 1, 3, 3), {"padding": 1}, "im2col"),          # a short sum
    ("conv2d", (8, 128, 8, 8), (128, 128, 3, 3), {"padding": 1}, "winograd"),  # 8x8
    ("conv2d", (32, 64, 16, 16), (128, 64, 3, 3), {"padding": 1}, "winograd"),  # convnet
    ("conv2d_backward_data", (8, 512, 2, 2), (512, 512, 3, 3), {"padding": 1}, "gather"),
    ("conv2d", (1, 256, 14, 14), (256, 256, 3, 3), {"padding": 1}, "winograd"),
    ("conv2d", (1, 512, 7, 7), (512, 512, 3, 3), {"padding": 1}, "im2col"),    # GEMMs win
    ("conv2d", (1, 256, 14, 14), (512, 256, 3, 3), {"padding": 1, "stride": 2}, "im2col"),
    ("conv2d", (32, 3, 32, 32), (32, 3, 3, 3), {"padding": 1}, "im2col"),      # 3 channels in
    # the RGB layer: AVX2's 16-channel tiles take its 32 output channels, AVX-512's 64 do not
    ("conv2d_backward_filter", (32, 3, 32, 32), (32, 3, 3, 3), {"padding": 1},
     "gather" if K.blocked_isas()[-1] == "avx2" else "im2col"),
    ("conv2d_backward_filter", (8, 512, 7, 7), (512, 512, 3, 3), {"padding": 1}, "im2col"),
    ("conv2d_backward_filter", (8, 256, 14, 14), (256, 256, 3, 3), {"padding": 1}, "im2col"),
    # depthwise: its own path (lowering/conv.py, _depthwise_applies), not the tiles
    ("conv2d", (8, 32, 32, 32), (32, 1, 3, 3), {"padding": 1, "groups": 32}, "depthwise"),
])
def test_default_rule_picks_the_measured_path(op, xs, ws, kw, path):
    conv = {**conv_attrs(1, 0, 1, 1), **{k: pair(v) for k, v in kw.items() if k != "groups"},
            "groups": kw.get("groups", 1)}
    oshape = (xs[0], ws[0], *conv_ref(np.zeros((1, ws[1] * conv["groups"], *xs[2:])),
                                      np.zeros((1, ws[1], *ws[2:])), None, conv["stride"],
                                      conv["padding"], 1, 1).shape[2:])
    build = {"conv2d": lambda a, b: F.conv2d(a, b, **kw),
             "conv2d_backward_data": lambda b, d: C.conv2d_backward_data(b, d, xs[2:], **conv),
             "conv2d_backward_filter": lambda a, d: C.conv2d_backward_filter(a, d, ws[2:],
                                                                             **conv)}[op]
    shapes = {"conv2d": [xs, ws], "conv2d_backward_data": [ws, oshape],
              "conv2d_backward_filter": [xs, oshape]}[op]
    _, ins = compile_op(build, shapes, memory=None)
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS[path]


@pytest.mark.parametrize("xs,ws,stride", [((32, 32, 32, 32), (64, 32, 3, 3), 1),
                                          ((8, 64, 56, 56), (128, 64, 3, 3), 2)])
def test_backward_filter_takes_the_gather_tiles_where_measured(xs, ws, stride):
    # AVX-512's 64-channel tile or AVX2's 16-channel one, for whole tiles of output channels on
    # planes of 256 cells or more; the baseline build keeps the GEMMs
    conv = conv_attrs(stride, 1, 1, 1)
    oshape = conv_ref(np.zeros((1, *xs[1:])), np.zeros(ws), None, stride, 1, 1, 1).shape
    _, ins = compile_op(lambda a, d: C.conv2d_backward_filter(a, d, ws[2:], **conv),
                        [xs, (xs[0], *oshape[1:])], memory=None)
    tiles = K.blocked_isas()[-1] in lowering.FILTER_TILE_CHANNELS
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS["gather" if tiles else "im2col"]


@pytest.mark.parametrize("threads", [2, 3])
def test_backward_filter_64_channel_tiles_give_the_same_bits_on_any_threads(monkeypatch,
                                                                            threads):
    # the threads share each image (padding, dy's transpose, tiles); every sum runs over the
    # images in order
    monkeypatch.setattr(lowering, "_tiled_path", lambda paths, *a: "gather")
    xs, ws = (3, 7, 15, 14), (128, 7, 3, 3)
    x = RNG.standard_normal(xs).astype(np.float32)
    dy = RNG.standard_normal((3, 128, 15, 14)).astype(np.float32)
    conv = conv_attrs(1, 1, 1, 1)
    outs = []
    for n in (1, threads):
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, n=n: n)
        plan, ins = compile_op(lambda a, d: C.conv2d_backward_filter(a, d, ws[2:], **conv),
                               [xs, dy.shape])
        assert ins.ints[FIELD["path"]] == K.CONV_PATHS["gather"]
        outs.append(run_twice(plan, x, dy))
    np.testing.assert_array_equal(outs[0], outs[1])
    check(outs[1], backward_filter_ref(x, dy, ws[2:], 1, 1, 1, 1).astype(np.float32))


@pytest.mark.parametrize("batch", [1, 3])
def test_stride_two_row_tiles_give_the_same_bits_on_one_and_two_threads(monkeypatch, batch):
    monkeypatch.setattr(lowering, "_tiled_path", lambda paths, *a: "blocked")
    xs, ws = (batch, 5, 21, 18), (19, 5, 5, 5)
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, n=threads: n)
        plan, ins = compile_op(lambda a, b: F.conv2d(a, b, stride=2, padding=2), [xs, ws])
        assert ins.ints[FIELD["path"]] == K.CONV_PATHS["blocked"]
        outs.append(run_twice(plan, x, w))
    np.testing.assert_array_equal(outs[0], outs[1])
    check(outs[1], conv_ref(x, w, None, 2, 2, 1, 1).astype(np.float32))


@pytest.mark.parametrize("attrs", [{"stride": 3}, {"stride": 2, "dilation": 2}])
def test_row_tiles_refuse_a_stride_they_do_not_run(monkeypatch, attrs):
    # a parameter block naming the row tiles where they do not apply (as a hostile file could)
    # is refused by the kernel, not computed at the wrong stride
    monkeypatch.setattr(lowering, "_tiled_path", lambda paths, *a: "gather")
    g = mg.Graph()
    x, w = g.input("x", (1, 3, 12, 12), np.float32), g.input("w", (8, 3, 3, 3), np.float32)
    node = F.conv2d(x, w, padding=1, **attrs).node
    cpu = get_backend("cpu")
    launch = cpu.impl("conv2d").lower(node)
    ints = list(launch.ints)
    ints[FIELD["path"]] = K.CONV_PATHS["blocked"]
    bufs = (np.zeros((1, 3, 12, 12), np.float32), np.zeros((8, 3, 3, 3), np.float32),
            np.zeros(node.outputs[0].shape, np.float32), np.zeros(1 << 20, np.uint8))
    status = cpu.launcher(cpu.kernel("conv2d", np.float32), Launch(tuple(ints), launch.floats,
                                                                   1 << 20), 2, False)(bufs)
    assert status != 0
