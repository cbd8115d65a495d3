"""The pointwise path of conv2d (conv_pointwise.pxi, conv_pointwise.h): float32 1x1 convolutions
at stride 1 without padding on register tiles over NCHW, the bias and activation fused into the
store; against conv_ref (test_conv.py) and PyTorch, on odd channel counts and plane sizes (whole
tiles, tiles of fewer vectors, a last vector overlapping, planes narrower than a vector), with
groups, batches, on every instruction set this CPU runs, on one thread and two (the same bits);
and the rule that picks it. The kernel tests take the path on every plane, where the rule would
leave the narrowest to the direct GEMM (the pointwise_everywhere fixture)."""
import numpy as np
import pytest
from test_conv import CONV_PATH_FIELD, conv_ref

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels import parallel
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(0)

CASES = [  # x shape, output channels, groups
    ((1, 32, 56, 56), 192, 1),    # MobileNet-v2's expand and project layers
    ((1, 192, 28, 28), 32, 1),
    ((2, 5, 7, 9), 3, 1),         # 63 cells: tiles of fewer vectors, a last one overlapping
    ((1, 3, 1, 1), 11, 1),        # one cell: narrower than a vector, cell by cell
    ((3, 7, 2, 5), 9, 1),         # 10 cells
    ((1, 6, 16, 3), 10, 2),       # groups
    ((2, 4, 13, 17), 4, 4),       # one channel per group
    ((1, 17, 24, 24), 13, 1),     # 576 cells: several ranges per thread
    ((1, 1, 50, 1), 1, 1),
]
ACTIVATIONS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
               "relu6": lambda v: np.clip(v, 0, 6)}


@pytest.fixture
def pointwise_everywhere(monkeypatch):
    monkeypatch.setattr(lowering, "_pointwise_pays", lambda cg, cells, ocg, batch: True)


def _plan(xs, ws, bias, activation, groups, dtype=np.float32):
    g = mg.Graph()
    ins = [g.input("x", xs, dtype), g.input("w", ws, dtype)]
    if bias:
        ins.append(g.input("b", (ws[0],), dtype))
    y = apply("conv2d", tuple(ins), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
              groups=groups, activation=activation)
    return mg.compile([y], optimize=0, memory="debug")


def _problem(xs, oc, groups, bias, dtype=np.float32):
    x = 3 * RNG.standard_normal(xs).astype(dtype)  # beyond relu6's 6 too
    w = RNG.standard_normal((oc, xs[1] // groups, 1, 1)).astype(dtype)
    b = RNG.standard_normal(oc).astype(dtype) if bias else None
    return x, w, b, {"x": x, "w": w, **({"b": b} if bias else {})}


def _path(plan):
    (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
    return ins


def _check_threads_agree(plan, xs, x, w, b, feeds):
    """``plan`` (relu6 with a bias, on its threads) gives the bits of the same plan on one
    thread, and PyTorch's values."""
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_limits
    (two,) = plan.run(feeds)
    with threadpool_limits(limits=1):
        (one,) = _plan(xs, w.shape, True, "relu6", 1).run(feeds)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
    want = torch.nn.functional.relu6(torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))).numpy()
    np.testing.assert_allclose(two, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias,activation", [(True, "relu6"), (False, "none"), (True, "none"),
                                             (True, "relu"), (False, "relu6")])
@pytest.mark.parametrize("xs,oc,groups", CASES)
def test_pointwise_matches_reference(xs, oc, groups, bias, activation, pointwise_everywhere):
    x, w, b, feeds = _problem(xs, oc, groups, bias)
    plan = _plan(xs, w.shape, bias, activation, groups)
    ins = _path(plan)
    assert ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS["pointwise"]
    assert ins.workspace is None
    (out,) = plan.run(feeds)
    (again,) = plan.run(feeds)
    np.testing.assert_array_equal(out, again)
    want = ACTIVATIONS[activation](conv_ref(x, w, b, 1, 0, 1, groups))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", K.blocked_isas())
def test_pointwise_on_each_instruction_set(isa, monkeypatch, pointwise_everywhere):
    """conv_pointwise.h's build for each instruction set this CPU runs, against PyTorch: every
    width from one cell to several tiles, so every tail of a range runs."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    for cells in (1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 47, 48, 49, 64, 95, 100):
        x, w, b, feeds = _problem((1, 9, 1, cells), 10, 1, True)
        plan = _plan(x.shape, w.shape, True, "relu6", 1)
        assert _path(plan).ints[K.CONV_FIELDS.index("isa")] == K.BLOCKED_ISAS[isa]
        (out,) = plan.run(feeds)
        want = torch.nn.functional.relu6(torch.nn.functional.conv2d(
            torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))).numpy()
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_pointwise_gives_the_same_bits_on_one_thread_and_two():
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_limits
    x, w, b, feeds = _problem((1, 32, 48, 48), 64, 1, True)
    plan = _plan(x.shape, w.shape, True, "none", 1)
    assert _path(plan).ints[K.CONV_FIELDS.index("threads")] == parallel.max_threads()
    (two,) = plan.run(feeds)
    with threadpool_limits(limits=1):
        (one,) = _plan(x.shape, w.shape, True, "none", 1).run(feeds)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                      torch.from_numpy(b))
    np.testing.assert_allclose(two, want.numpy(), rtol=1e-5, atol=1e-5)


def test_relu6_epilogue_keeps_nan_and_signed_zero_as_clip(pointwise_everywhere):
    """The fused relu6 is bitwise clip(x, 0, 6) of the unfused plan: NaN stays NaN, a sum of
    -0 without a bias stays -0."""
    x = np.ones((1, 2, 4, 5), np.float32)
    x[0, 0, 1, 2] = np.nan
    w = np.array([[1.0, 1.0], [-0.0, -0.0], [4.0, 3.0]], np.float32).reshape(3, 2, 1, 1)
    for bias in (None, np.array([0.5, -0.0, -1.0], np.float32)):
        g = mg.Graph()
        ins = [g.input("x", x.shape), g.input("w", w.shape)]
        feeds = {"x": x, "w": w}
        if bias is not None:
            ins.append(g.input("b", bias.shape))
            feeds["b"] = bias
        fused = mg.compile([apply("conv2d", tuple(ins), stride=(1, 1), padding=(0, 0),
                                  dilation=(1, 1), groups=1, activation="relu6")], optimize=0)
        unfused = mg.compile([F.relu6(F.conv2d(*ins))], optimize=0)
        assert _path(fused).ints[CONV_PATH_FIELD] == K.CONV_PATHS["pointwise"]
        (got,), (want,) = fused.run(feeds), unfused.run(feeds)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert np.isnan(got).any()


@pytest.mark.parametrize("dtype,xs,oc,kw,path", [
    (np.float32, (1, 8, 10, 10), 16, {}, "pointwise"),
    (np.float32, (8, 256, 4, 4), 256, {}, "pointwise"),    # a vector's cells per image
    (np.float64, (1, 8, 10, 10), 16, {}, "direct"),        # the tiles are float32's
    (np.float32, (1, 512, 2, 2), 512, {}, "direct"),       # narrower than a vector
    (np.float32, (1, 1024, 7, 7), 1024, {}, "direct"),     # a strip beyond L1: the GEMM's
    (np.float32, (1, 8, 10, 10), 16, {"padding": 1}, "im2col"),  # not its own im2col matrix
])
def test_rule_takes_pointwise_for_float32_1x1_at_stride_1(dtype, xs, oc, kw, path):
    g = mg.Graph()
    y = F.conv2d(g.input("x", xs, dtype), g.input("w", (oc, xs[1], 1, 1), dtype), **kw)
    assert _path(mg.compile([y])).ints[CONV_PATH_FIELD] == K.CONV_PATHS[path]
    paths = lowering.applicable_paths("conv2d", np.dtype(dtype).name, (1, 1), (1, 1),
                                      (1, 1) if kw else (0, 0), (1, 1), 1, xs[1], xs[3], oc)
    assert ("pointwise" in paths) == (dtype == np.float32 and not kw)


def test_pointwise_is_not_prepacked():
    """A frozen plan keeps a 1x1 stride-1 convolution on its path: the prepack pass packs only
    the convolutions whose path loses to the packed gather tiles."""
    g = mg.Graph()
    w = g.param("w", RNG.standard_normal((192, 32, 1, 1)).astype(np.float32))
    y = F.relu6(F.conv2d(g.input("x", (1, 32, 14, 14)), w))
    plan = mg.compile([y], freeze=True)
    assert [i.op for i in plan.instructions] == ["conv2d"]
    assert _path(plan).ints[CONV_PATH_FIELD] == K.CONV_PATHS["pointwise"]


@pytest.mark.parametrize("isa", K.blocked_isas())
@pytest.mark.parametrize("cin", [K.POINTWISE_NARROW_CHANNELS - 1, K.POINTWISE_NARROW_CHANNELS,
                                 K.POINTWISE_NARROW_CHANNELS + 1, 193])
def test_pointwise_tiles_by_input_channels(isa, cin, monkeypatch, pointwise_everywhere):
    """AVX2's two tiles (2 vectors up to POINTWISE_NARROW_CHANNELS input channels, 3 above;
    the first block of a strip prefetching the next) on both sides of the boundary, against
    PyTorch: output channels not a multiple of a tile's rows, planes of whole strips, tails and
    a last vector overlapping, bias and relu6; the same bits on one thread and two."""
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: parallel.max_threads())
    for xs, oc in (((1, cin, 17, 23), 7), ((2, cin, 9, 9), 13), ((1, cin, 5, 3), 5)):
        x, w, b, feeds = _problem(xs, oc, 1, True)
        plan = _plan(xs, w.shape, True, "relu6", 1)
        assert _path(plan).ints[K.CONV_FIELDS.index("threads")] == parallel.max_threads()
        _check_threads_agree(plan, xs, x, w, b, feeds)


@pytest.mark.parametrize("isa,cg,cells,ocg,batch,pays", [
    ("avx512", 160, 49, 960, 1, True),   # AVX-512's rule: the tiles on 7x7 planes
    ("avx2", 160, 49, 960, 1, False),    # AVX2: one image's small plane with many weights
    ("avx2", 64, 49, 384, 1, True),      # 24K weights: still the tiles
    ("avx2", 160, 49, 960, 2, True),     # more images: the tiles
    ("avx2", 256, 64, 256, 1, True),     # 8 vectors of cells: the tiles
    ("avx2", 32, 3136, 192, 1, True),    # MobileNet-v2's expand
    ("avx2", 1024, 49, 1024, 1, False),  # beyond the strip's channels on any CPU
    ("avx512", 512, 4, 512, 1, False),   # narrower than a vector
])
def test_pointwise_rule_by_instruction_set(isa, cg, cells, ocg, batch, pays, monkeypatch):
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    assert lowering._pointwise_pays(cg, cells, ocg, batch) is pays


@pytest.mark.parametrize("xs,oc", [
    ((1, 32, 28, 28), 192),   # MobileNet-v2's expand at 28x28: half the plane is half a line
    ((1, 32, 20, 20), 24),
    ((1, 19, 13, 31), 40),    # 403 cells: a plane that does not start on a line
    ((1, 192, 56, 56), 32),   # its project: eight ranges
])
def test_pointwise_ranges_begin_on_cache_lines(xs, oc, monkeypatch, pointwise_everywhere):
    """On two threads each plane's cells are cut into ranges that begin on a 64-byte line of
    y (16 floats), so two threads never write one line where the plane starts on one; the
    bits are one thread's, and the values PyTorch's."""
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: parallel.max_threads())
    x, w, b, feeds = _problem(xs, oc, 1, True)
    plan = _plan(xs, w.shape, True, "relu6", 1)
    cells = xs[2] * xs[3]
    starts = K.pointwise_range_starts(_path(plan).ints, 2)
    assert starts[0] == 0 and starts[-1] == cells and len(starts) > 2
    assert all(a < b for a, b in zip(starts, starts[1:]))
    assert all(c % 16 == 0 for c in starts[:-1])
    assert K.pointwise_range_starts(_path(plan).ints, 1) == (0, cells)
    _check_threads_agree(plan, xs, x, w, b, feeds)


def test_pointwise_range_starts_refuses_a_short_parameter_block():
    with pytest.raises(ValueError, match="Conv parameters"):
        K.pointwise_range_starts((1, 2, 3), 2)
