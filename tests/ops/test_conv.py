"""conv2d and pooling against direct NumPy references: stride, padding, dilation, groups (the
GEMM paths of conv.pyx; the tiled ones are test_conv_tiles.py's)."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ops import conv as C
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(0)
FLOATS = [np.float32, np.float64]


@pytest.fixture(autouse=True)
def gemm_paths(monkeypatch):
    """This module checks the GEMM paths (direct, im2col, shifted, and batched where a test
    forces it) and their rule; the tiled float32 paths, and the rule that picks them, are
    test_conv_tiles.py's, and Winograd's test_conv_threads.py's."""
    monkeypatch.setattr(lowering, "_tiled_path", lambda *args: None)
    monkeypatch.setattr(lowering, "_batched_pays", lambda batch, plane, kdim: False)
    monkeypatch.setattr(lowering, "_winograd_pays", lambda *args: False)
    # depthwise convolutions too keep the GEMM paths here (test_conv_depthwise.py has theirs)
    monkeypatch.setattr(lowering, "_depthwise_applies", lambda op, groups_dims: False)


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def check(out, expected):
    assert out.dtype == expected.dtype and out.shape == expected.shape
    tol = {"rtol": 1e-5, "atol": 1e-5} if out.dtype == np.float32 else {"rtol": 1e-12,
                                                                        "atol": 1e-12}
    np.testing.assert_allclose(out, expected, **tol)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_ref(x, w, b, stride, padding, dilation, groups):
    """Sum over kernel taps of a strided slice of the padded input times that tap's weights."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, oc, oh, ow))
    ocg = oc // groups
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            tap = xp[:, :, rows, cols]
            for g in range(groups):
                out[:, g * ocg:(g + 1) * ocg] += np.einsum(
                    "nchw,oc->nohw", tap[:, g * cg:(g + 1) * cg], w[g * ocg:(g + 1) * ocg, :, i, j])
    if b is not None:
        out += b.reshape(1, oc, 1, 1)
    return out.astype(x.dtype)


CONV_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 3), 2, 1, 1, 1),
    ((1, 2, 9, 8), (3, 2, 3, 2), (2, 3), (1, 2), 1, 1),
    ((1, 2, 9, 9), (3, 2, 3, 3), 1, 2, 2, 1),                 # dilation
    ((2, 2, 10, 7), (2, 2, 2, 3), (1, 2), 0, (3, 1), 1),
    ((2, 4, 6, 6), (6, 2, 3, 3), 1, 1, 1, 2),                 # groups
    ((2, 4, 6, 5), (4, 1, 3, 3), 1, 1, 1, 4),                 # depthwise
    ((1, 3, 5, 5), (6, 1, 3, 3), 2, 1, 1, 3),                 # depthwise, multiplier 2
    ((2, 3, 5, 4), (5, 3, 1, 1), 1, 0, 1, 1),                 # 1x1: GEMM on the input
    ((2, 4, 5, 4), (6, 2, 1, 1), 1, 0, 1, 2),                 # 1x1 grouped
    ((2, 3, 5, 4), (5, 3, 1, 1), 2, 0, 1, 1),                 # 1x1 strided: im2col
    ((2, 3, 3, 3), (5, 3, 1, 1), 1, 1, 1, 1),                 # 1x1 padded: im2col
    ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0, 1, 1),
    ((1, 2, 4, 4), (3, 2, 4, 4), 1, 0, 1, 1),                 # kernel covers the input
    ((3, 2, 1, 5), (2, 2, 1, 3), 1, (0, 1), 1, 1),
    ((0, 3, 5, 5), (4, 3, 3, 3), 1, 1, 1, 1),                 # empty batch
    ((2, 3, 5, 5), (0, 3, 3, 3), 1, 1, 1, 1),                 # no output channels
    ((2, 0, 5, 5), (4, 0, 3, 3), 1, 1, 1, 1),                 # no input channels: bias only
    # stride 1 shifts the input plane per tap; with ow == w ('same' padding) one run per tap
    ((1, 2, 7, 5), (3, 2, 5, 5), 1, 2, 1, 1),                 # 'same' 5x5, h != w
    ((2, 2, 5, 8), (3, 2, 3, 5), 1, (1, 2), 1, 1),            # 'same', non-square kernel
    ((1, 2, 7, 6), (2, 2, 3, 3), 1, 2, 2, 1),                 # 'same' with dilation 2
    ((1, 2, 6, 7), (2, 2, 3, 3), 1, (0, 1), 1, 1),            # ow == w, oh < h
    ((1, 2, 6, 7), (2, 2, 3, 3), 1, 2, 1, 1),                 # ow > w
    ((1, 2, 6, 7), (2, 2, 1, 3), 1, (2, 0), 1, 1),            # ow < w, oh > h
    ((2, 6, 4, 5), (4, 3, 3, 3), 1, 1, 1, 2),                 # 'same', groups
    ((2, 1, 1, 4), (2, 1, 3, 3), 1, 1, 1, 1),                 # one row: taps that read nothing
    ((1, 1, 2, 2), (1, 1, 3, 3), 1, 3, 1, 1),                 # padding wider than the image
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_matches_reference(xs, ws, stride, padding, dilation, groups, bias, dtype):
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[0]).astype(dtype)
    expected = conv_ref(x, w, b if bias else None, stride, padding, dilation, groups)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if bias:
        out = run(lambda v, k, c: F.conv2d(v, k, c, **args), x, w, b)
    else:
        out = run(lambda v, k: F.conv2d(v, k, **args), x, w)
    check(out, expected)


def test_conv2d_bias_layouts_and_grouped_weight():
    x = RNG.standard_normal((2, 4, 5, 5))
    w = RNG.standard_normal((6, 2, 3, 3))
    b = RNG.standard_normal(6)
    expected = conv_ref(x, w, b, 1, 1, 1, 2)
    check(run(lambda v, k, c: F.conv2d(v, k, c, padding=1, groups=2), x, w, b.reshape(1, 6, 1, 1)),
          expected)
    # MegEngine's grouped weight layout (groups, out/groups, in/groups, kh, kw)
    check(run(lambda v, k, c: F.conv2d(v, k, c, padding=1, groups=2), x, w.reshape(2, 3, 2, 3, 3),
              b), expected)


def _conv_plan(xs, ws, **kw):
    g = mg.Graph()
    y = F.conv2d(g.input("x", xs), g.input("w", ws), **kw)
    plan = mg.compile([y])
    (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
    return plan, ins


@pytest.mark.parametrize("xs,ws,kw,nbytes", [
    ((8, 3, 10, 10), (16, 3, 3, 3), {}, 3 * 3 * 3 * 8 * 8 * 4),           # one batch element
    ((8, 4, 10, 10), (8, 2, 3, 3), {"groups": 2, "padding": 1}, 2 * 9 * 100 * 4),  # one group
    ((2, 3, 9, 9), (4, 3, 1, 1), {"stride": 2}, 3 * 25 * 4),
])
def test_conv2d_workspace_is_one_im2col_matrix(xs, ws, kw, nbytes):
    plan, ins = _conv_plan(xs, ws, **kw)
    assert ins.workspace is not None
    slot = plan.slots[ins.workspace]
    assert slot.role == "workspace" and slot.nbytes == nbytes
    assert ins.buffers[-1] == ins.workspace


def test_conv2d_1x1_has_no_workspace():
    plan, ins = _conv_plan((4, 8, 7, 7), (16, 8, 1, 1))
    assert ins.workspace is None
    assert not any(s.role == "workspace" for s in plan.slots)


# -- the shifted-GEMM path (stride 1, no dilation) ----------------------------------------------
SHIFTED_CASES = [
    # x shape, weight shape, padding, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), 0, 1),
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1),
    ((1, 2, 9, 8), (3, 2, 5, 5), 2, 1),
    ((2, 4, 6, 9), (5, 4, 1, 3), (0, 1), 1),                  # 1x3: rows one tap wide
    ((2, 4, 9, 6), (5, 4, 3, 1), (1, 0), 1),                  # 3x1: no wrapped columns unpadded
    ((2, 3, 5, 7), (4, 3, 2, 2), 0, 1),                       # even kernel
    ((2, 3, 5, 7), (4, 3, 2, 2), 1, 1),
    ((2, 6, 5, 4), (4, 3, 3, 3), 1, 2),                       # groups
    ((2, 4, 6, 5), (4, 1, 3, 3), 1, 4),                       # depthwise: one-row GEMMs (gemv)
    ((2, 3, 3, 8), (2, 3, 3, 3), 0, 1),                       # oh == 1
    ((2, 3, 8, 3), (2, 3, 3, 3), 0, 1),                       # ow == 1
    ((1, 2, 3, 3), (3, 2, 3, 3), 0, 1),                       # one output pixel
    ((1, 2, 1, 1), (3, 2, 3, 3), 1, 1),                       # a 1x1 image, padded to 3x3
    ((1, 1, 2, 2), (1, 1, 3, 3), 3, 1),                       # padding wider than the image
    ((2, 3, 6, 5), (4, 3, 3, 5), (2, 1), 1),                  # padding wider than 'same'
]
CONV_PATH_FIELD = K.CONV_FIELDS.index("path")


def conv2d_node(x, w, b, padding, groups, relu):
    attrs = {"stride": (1, 1), "padding": pair(padding), "dilation": (1, 1), "groups": groups,
             "activation": "relu" if relu else "none"}
    return apply("conv2d", (x, w) if b is None else (x, w, b), **attrs)


CONV_THREADS_FIELD = K.CONV_FIELDS.index("threads")


def unit_slots(ins, batch, groups):
    """conv2d's scratch areas on the GEMM paths (conv_gemm.pxi): one per thread when its threads
    take whole (image, group) units, else one they share."""
    threads, units = ins.ints[CONV_THREADS_FIELD], batch * groups
    return threads if threads > 1 and (units >= 2 * threads or units % threads == 0) else 1


def shifted_workspace(xs, ws, padding, groups, itemsize, slots):
    """The bytes the shifted path's layout takes: weights per tap, then per slot the padded
    input and the result rows."""
    (ph, pw), (_, cg, kh, kw) = pair(padding), ws
    hp, wp = xs[2] + 2 * ph, xs[3] + 2 * pw
    oh, ow = hp - kh + 1, wp - kw + 1
    padded = cg * hp * wp if ph or pw else 0
    rows = ws[0] // groups * ((oh - 1) * wp + ow)
    return (ws[0] * cg * kh * kw + slots * (padded + rows)) * itemsize


@pytest.fixture
def always_shifted(monkeypatch):
    """Take the shifted path wherever it applies, however small the convolution."""
    monkeypatch.setattr(lowering, "_shifted_pays", lambda cg, ocg, col_bytes: True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias,relu", [(False, False), (True, False), (True, True),
                                       (False, True)])
@pytest.mark.parametrize("xs,ws,padding,groups", SHIFTED_CASES)
def test_conv2d_shifted_matches_reference(always_shifted, xs, ws, padding, groups, bias, relu,
                                          dtype):
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[0]).astype(dtype) if bias else None
    g = mg.Graph()
    ins = [g.input("x", xs, dtype), g.input("w", ws, dtype)] + (
        [g.input("b", b.shape, dtype)] if bias else [None])
    # memory="debug" refills the dead workspace with 0xFF bytes, NaN in both dtypes, after each
    # run: any cell read before it is written (a padding border, say) shows in the second run
    plan = mg.compile([conv2d_node(*ins, padding, groups, relu)], memory="debug")
    (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
    assert ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS["shifted"]
    assert plan.slots[ins.workspace].nbytes == shifted_workspace(
        xs, ws, padding, groups, np.dtype(dtype).itemsize, unit_slots(ins, xs[0], groups))
    feeds = {"x": x, "w": w, **({"b": b} if bias else {})}
    (first,) = plan.run(feeds)
    (second,) = plan.run(feeds)
    np.testing.assert_array_equal(first, second)
    expected = conv_ref(x, w, b, 1, padding, 1, groups)
    check(first, np.maximum(expected, 0) if relu else expected)


# -- the batched path: every image's im2col side by side, one GEMM -------------------------------
@pytest.fixture
def always_batched(monkeypatch):
    monkeypatch.setattr(lowering, "_batched_pays", lambda batch, plane, kdim: True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias,relu", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups",
                         [c for c in CONV_CASES if c[5] == 1])
def test_conv2d_batched_matches_reference(always_batched, xs, ws, stride, padding, dilation,
                                          groups, bias, relu, dtype):
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[0]).astype(dtype) if bias else None
    g = mg.Graph()
    ins = [g.input("x", xs, dtype), g.input("w", ws, dtype)] + (
        [g.input("b", b.shape, dtype)] if bias else [])
    attrs = {**conv_attrs(stride, padding, dilation, groups),
             "activation": "relu" if relu else "none"}
    plan = mg.compile([apply("conv2d", tuple(ins), **attrs)], memory="debug")  # NaN workspace
    (node,) = [i for i in plan.instructions if i.op == "conv2d"]
    direct = ws[1] == 0 or ws[2:] == (1, 1) and pair(stride) == (1, 1) and pair(padding) == (0, 0)
    assert (node.ints[CONV_PATH_FIELD] == K.CONV_PATHS["batched"]) == (not direct)
    if not direct:
        (oh, ow), kdim = conv_ref(x[:1], w, None, stride, padding, dilation, 1).shape[2:], \
            ws[1] * ws[2] * ws[3]
        # an image's im2col per thread, unless taps x cells fit the source table (conv_gemm.pxi:
        # TABLE_MAX 1024) and it goes straight into the batch's; the batch's; the GEMM's result
        slots = node.ints[CONV_THREADS_FIELD] if ws[2] * ws[3] * oh * ow > 1024 else 0
        want = (kdim * (slots + xs[0]) + ws[0] * xs[0]) * oh * ow * np.dtype(dtype).itemsize
        assert (0 if node.workspace is None else plan.slots[node.workspace].nbytes) == want
    feeds = {"x": x, "w": w, **({"b": b} if bias else {})}
    (first,), (second,) = plan.run(feeds), plan.run(feeds)
    np.testing.assert_array_equal(first, second)
    expected = conv_ref(x, w, b, stride, padding, dilation, groups)
    check(first, np.maximum(expected, 0) if relu else expected)


@pytest.mark.parametrize("xs,ws,kw,path", [
    ((8, 16, 32, 32), (16, 16, 3, 3), {"padding": 1}, "shifted"),      # the benchmark's
    ((8, 64, 32, 32), (64, 64, 3, 3), {"padding": 1}, "shifted"),      # im2col matrix > 2 MiB
    ((8, 64, 16, 16), (64, 64, 3, 3), {"padding": 1}, "im2col"),       # GEMM-bound: im2col
    ((8, 3, 32, 32), (16, 3, 3, 3), {"padding": 1}, "im2col"),         # few input channels
    ((8, 16, 32, 32), (64, 16, 3, 3), {"padding": 1}, "im2col"),       # many output channels
    ((8, 16, 8, 8), (16, 16, 3, 3), {"padding": 1}, "im2col"),         # a small matrix
    ((8, 16, 32, 32), (16, 16, 3, 3), {"padding": 1, "stride": 2}, "im2col"),
    ((8, 16, 32, 32), (16, 16, 3, 3), {"padding": 2, "dilation": 2}, "im2col"),
    ((8, 16, 32, 32), (16, 16, 1, 1), {"padding": 1}, "im2col"),       # one tap
    ((8, 16, 32, 32), (16, 16, 1, 1), {}, "pointwise"),   # float32 1x1: tiles on NCHW
])
def test_conv2d_path_choice_and_workspace(xs, ws, kw, path):
    plan, ins = _conv_plan(xs, ws, **kw)
    assert ins.ints[CONV_PATH_FIELD] == K.CONV_PATHS[path]
    nbytes = 0 if ins.workspace is None else plan.slots[ins.workspace].nbytes
    slots = unit_slots(ins, xs[0], 1)
    if path == "shifted":
        assert nbytes == shifted_workspace(xs, ws, kw["padding"], 1, 4, slots)
    if xs == (8, 16, 32, 32) and path == "shifted":  # im2col's matrix: 589824 bytes per slot
        assert nbytes == 9216 + 143488 * slots


@pytest.mark.parametrize("xs,ws,kw,reason", [
    ((1, 3, 5, 5), (4, 2, 3, 3), {}, "channel mismatch"),
    ((1, 4, 5, 5), (4, 4, 3, 3), {"groups": 2}, "channel mismatch"),
    ((1, 3, 5, 5), (4, 1, 3, 3), {"groups": 2}, "groups=2 must divide"),
    ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}, "groups=2 must divide"),
    ((1, 3, 2, 5), (4, 3, 3, 3), {}, "output size would be 0x3"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"dilation": 3}, "output size would be -1x-1"),
    ((3, 5, 5), (4, 3, 3, 3), {}, "must be 4-D"),
    ((1, 3, 5, 5), (4, 3, 3), {}, "weight must be 4-D"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"stride": 0}, "stride must be an int >= 1"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"padding": (1, 1, 1)}, "padding must be"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"groups": 0}, "groups must be a positive int"),
    ((1, 4, 5, 5), (3, 2, 2, 3, 3), {"groups": 2}, "groups=2 as its first dim"),
])
def test_conv2d_build_errors(xs, ws, kw, reason):
    g = mg.Graph()
    x, w = g.input("x", xs), g.input("w", ws)
    with pytest.raises(mg.OpError, match=f"conv2d.*{reason}"):
        F.conv2d(x, w, **kw)


def test_conv2d_bias_and_dtype_errors():
    g = mg.Graph()
    x, w = g.input("x", (1, 3, 5, 5)), g.input("w", (4, 3, 3, 3))
    with pytest.raises(mg.OpError, match="conv2d.*bias must have shape"):
        F.conv2d(x, w, g.input("b", (3,)))
    xi, wi = g.input("xi", (1, 3, 5, 5), "int32"), g.input("wi", (4, 3, 3, 3), "int32")
    with pytest.raises(mg.OpError, match="conv2d.*int32"):
        F.conv2d(xi, wi)


# -- pooling --------------------------------------------------------------------------------------
def pool_ref(x, kernel, stride, padding, kind):
    (kh, kw), (sh, sw), (ph, pw) = pair(kernel), pair(stride), pair(padding)
    n, c, h, w = x.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - ph, j * sw - pw
            win = x[:, :, max(h0, 0):h0 + kh, max(w0, 0):w0 + kw].astype(np.float64)
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            elif kind == "average":
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (kh * kw)
            else:
                out[:, :, i, j] = win.mean(axis=(2, 3))
    return out.astype(x.dtype)


def adaptive_ref(x, oshp, kind):
    oh, ow = pair(oshp)
    n, c, h, w = x.shape
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * h // oh:-(-(i + 1) * h // oh), j * w // ow:-(-(j + 1) * w // ow)]
            out[:, :, i, j] = getattr(win.astype(np.float64), kind)(axis=(2, 3))
    return out.astype(x.dtype)


POOL_CASES = [
    # x shape, kernel, stride, padding
    ((2, 3, 6, 6), 2, None, 0), ((2, 3, 7, 5), 3, 2, 1), ((1, 2, 8, 9), (3, 2), (2, 1), (1, 0)),
    ((1, 1, 5, 5), 5, 1, 2), ((1, 2, 4, 4), 1, 1, 0), ((3, 1, 1, 1), 1, None, 0),
    ((0, 2, 4, 4), 2, None, 0), ((2, 0, 4, 4), 2, None, 0), ((1, 2, 7, 7), (2, 4), 3, (1, 2)),
    # the kernels' literal window shapes (2x2/2, 3x3/3, 3x3/2, 3x3/1), with odd sizes that leave
    # rows and columns no window covers, padding that leaves border windows, and the general path
    ((2, 2, 7, 9), 2, None, 0), ((1, 2, 8, 7), 3, None, 0), ((1, 2, 6, 7), 3, 1, 1),
    ((2, 1, 5, 6), 2, 1, 1),
    ((1, 1, 3, 150), 2, None, 0), ((1, 1, 3, 140), 3, 2, 1),  # a row of more than 64 windows
    ((1, 1, 9, 17), (9, 8), 1, 0),                            # windows of more than 64 cells
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,kernel,stride,padding", POOL_CASES)
def test_max_pool2d(xs, kernel, stride, padding, dtype):
    x = RNG.standard_normal(xs).astype(dtype)
    out = run(lambda v: F.max_pool2d(v, kernel, stride, padding), x)
    check(out, pool_ref(x, kernel, kernel if stride is None else stride, padding, "max"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["average", "average_count_exclude_padding"])
@pytest.mark.parametrize("xs,kernel,stride,padding", POOL_CASES)
def test_avg_pool2d(xs, kernel, stride, padding, mode, dtype):
    x = RNG.standard_normal(xs).astype(dtype)
    out = run(lambda v: F.avg_pool2d(v, kernel, stride, padding, mode=mode), x)
    check(out, pool_ref(x, kernel, kernel if stride is None else stride, padding, mode))


def test_avg_pool2d_modes_differ_only_at_padding():
    x = np.ones((1, 1, 3, 3), np.float32)
    exclude = run(lambda v: F.avg_pool2d(v, 3, 1, 1), x)
    include = run(lambda v: F.avg_pool2d(v, 3, 1, 1, mode="average"), x)
    np.testing.assert_array_equal(exclude, np.ones((1, 1, 3, 3), np.float32))
    np.testing.assert_allclose(include[0, 0], [[4 / 9, 6 / 9, 4 / 9], [6 / 9, 1, 6 / 9],
                                               [4 / 9, 6 / 9, 4 / 9]], rtol=1e-6)


def test_max_pool2d_nan_and_negative_inputs():
    x = -np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)  # padding must not win
    x[0, 0, 0, 1] = np.nan
    out = run(lambda v: F.max_pool2d(v, 2, 2, 1), x)
    assert np.isnan(out[0, 0, 0, 1]) and not np.isnan(out[0, 0, 0, 0])
    np.testing.assert_array_equal(out[0, 0, 1:, :], [[-5, -6, -8], [-13, -14, -16]])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["mean", "max"])
@pytest.mark.parametrize("xs,oshp", [((2, 3, 7, 7), (1, 1)), ((2, 3, 7, 5), (3, 2)),
                                     ((1, 2, 4, 6), 4), ((1, 2, 3, 2), (5, 4)),
                                     ((1, 1, 1, 1), 1), ((0, 3, 4, 4), 2), ((2, 2, 56, 56), 1)])
def test_adaptive_pool2d(xs, oshp, kind, dtype):
    x = RNG.standard_normal(xs).astype(dtype)
    fn = F.adaptive_avg_pool2d if kind == "mean" else F.adaptive_max_pool2d
    check(run(lambda v: fn(v, oshp), x), adaptive_ref(x, oshp, kind))


@pytest.mark.parametrize("fn,xs,reason", [
    (lambda v: F.max_pool2d(v, 3, 1, 3), (1, 1, 5, 5), "padding .* must be smaller"),
    (lambda v: F.max_pool2d(v, 4), (1, 1, 3, 5), "output size would be 0x1"),
    (lambda v: F.max_pool2d(v, 2), (1, 5, 5), "must be 4-D"),
    (lambda v: F.max_pool2d(v, 0), (1, 1, 5, 5), "kernel_size must be an int >= 1"),
    (lambda v: F.max_pool2d(v, 2, stride=0), (1, 1, 5, 5), "stride must be an int >= 1"),
    (lambda v: F.avg_pool2d(v, 2, mode="sum"), (1, 1, 4, 4), "mode must be one of"),
    (lambda v: F.adaptive_avg_pool2d(v, 0), (1, 1, 4, 4), "oshp must be an int >= 1"),
    (lambda v: F.adaptive_max_pool2d(v, 2), (1, 1, 0, 4), "spatial size"),
])
def test_pool_build_errors(fn, xs, reason):
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=reason):
        fn(g.input("x", xs))


def test_pool_rejects_ints():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match="max_pool2d.*int32"):
        F.max_pool2d(g.input("x", (1, 1, 4, 4), "int32"), 2)


# -- convolution backward ops ---------------------------------------------------------------------
def taps(x_hw, w_shape, oshape, stride, padding, dilation):
    """(i, j, rows, cols): each kernel tap and the strided slice of the padded input it reads."""
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    oh, ow = oshape
    for i in range(w_shape[2]):
        for j in range(w_shape[3]):
            yield (i, j, slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
                   slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))


def backward_data_ref(w, dy, hw, stride, padding, dilation, groups):
    """Each tap's weights scatter the output gradient back onto the padded input."""
    (ph, pw), (h, wd) = pair(padding), hw
    n, oc = dy.shape[:2]
    cg, ocg = w.shape[1], oc // groups
    dxp = np.zeros((n, cg * groups, h + 2 * ph, wd + 2 * pw))
    for i, j, rows, cols in taps(hw, w.shape, dy.shape[2:], stride, padding, dilation):
        for g in range(groups):
            dxp[:, g * cg:(g + 1) * cg, rows, cols] += np.einsum(
                "nohw,oc->nchw", dy[:, g * ocg:(g + 1) * ocg], w[g * ocg:(g + 1) * ocg, :, i, j])
    return dxp[:, :, ph:ph + h, pw:pw + wd].astype(dy.dtype)


def backward_filter_ref(x, dy, kernel, stride, padding, dilation, groups):
    """Each tap's weight gradient: its input slice against the output gradient, batch summed."""
    (ph, pw), oc = pair(padding), dy.shape[1]
    cg, ocg = x.shape[1] // groups, oc // groups
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    dw = np.zeros((oc, cg, *kernel))
    for i, j, rows, cols in taps(x.shape[2:], dw.shape, dy.shape[2:], stride, padding, dilation):
        for g in range(groups):
            tap = xp[:, g * cg:(g + 1) * cg, rows, cols]
            dw[g * ocg:(g + 1) * ocg, :, i, j] = np.einsum("nchw,nohw->oc", tap,
                                                           dy[:, g * ocg:(g + 1) * ocg])
    return dw.astype(x.dtype)


def conv_attrs(stride, padding, dilation, groups):
    return dict(stride=pair(stride), padding=pair(padding), dilation=pair(dilation), groups=groups)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_backward_data_matches_reference(xs, ws, stride, padding, dilation, groups, dtype):
    conv = conv_attrs(stride, padding, dilation, groups)
    w = RNG.standard_normal(ws).astype(dtype)
    oshape = conv_ref(np.zeros(xs), w, None, stride, padding, dilation, groups).shape
    dy = RNG.standard_normal(oshape).astype(dtype)
    out = run(lambda k, d: C.conv2d_backward_data(k, d, xs[2:], **conv), w, dy)
    check(out, backward_data_ref(w, dy, xs[2:], stride, padding, dilation, groups))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_backward_filter_matches_reference(xs, ws, stride, padding, dilation, groups,
                                                  dtype):
    conv = conv_attrs(stride, padding, dilation, groups)
    x = RNG.standard_normal(xs).astype(dtype)
    oshape = conv_ref(x, np.zeros(ws), None, stride, padding, dilation, groups).shape
    dy = RNG.standard_normal(oshape).astype(dtype)
    out = run(lambda v, d: C.conv2d_backward_filter(v, d, ws[2:], **conv), x, dy)
    check(out, backward_filter_ref(x, dy, ws[2:], stride, padding, dilation, groups))


@pytest.mark.parametrize("stride,padding", [(1, 1), (1, 0), (2, 1)])
def test_conv2d_backward_data_zeros_are_positive(stride, padding):
    # -0 gradients, and cells no window reads, give +0 on every path, as a sum from +0 does
    w, dy = -np.ones((2, 3, 3, 3)), np.zeros((1, 2, 4, 4))
    dy[...] = -0.0
    conv = conv_attrs(stride, padding, 1, 1)
    hw = (4 * stride + 2 - 2 * padding,) * 2
    out = run(lambda k, d: C.conv2d_backward_data(k, d, hw, **conv), w, dy)
    assert out.shape == (1, 3, *hw) and not np.signbit(out).any()


def test_conv2d_backward_data_takes_the_grouped_weight():
    w, dy = RNG.standard_normal((6, 2, 3, 3)), RNG.standard_normal((2, 6, 5, 5))
    conv = conv_attrs(1, 1, 1, 2)
    out = run(lambda k, d: C.conv2d_backward_data(k, d, (5, 5), **conv), w.reshape(2, 3, 2, 3, 3),
              dy)
    check(out, backward_data_ref(w, dy, (5, 5), 1, 1, 1, 2))


@pytest.mark.parametrize("op", ["conv2d_backward_data", "conv2d_backward_filter"])
@pytest.mark.parametrize("xs,ws,kw,nbytes", [
    ((8, 3, 10, 10), (16, 3, 3, 3), {}, 3 * 3 * 3 * 8 * 8 * 4),
    ((8, 4, 10, 10), (8, 2, 3, 3), {"groups": 2, "padding": 1}, 2 * 9 * 100 * 4),
    ((4, 8, 7, 7), (16, 8, 1, 1), {}, 0),
])
def test_conv2d_backward_workspace_is_the_forwards(op, xs, ws, kw, nbytes):
    g = mg.Graph()
    x, w = g.input("x", xs), g.input("w", ws)
    y = F.conv2d(x, w, **kw)
    conv = {**conv_attrs(1, 0, 1, 1), **{k: pair(v) if k != "groups" else v
                                          for k, v in kw.items()}}
    dy = g.input("dy", y.shape)
    out = (C.conv2d_backward_data(w, dy, xs[2:], **conv) if op == "conv2d_backward_data"
           else C.conv2d_backward_filter(x, dy, ws[2:], **conv))
    plan = mg.compile([out])
    (ins,) = [i for i in plan.instructions if i.op == op]
    assert (0 if ins.workspace is None else plan.slots[ins.workspace].nbytes) == nbytes


def test_conv2d_backward_build_errors():
    g = mg.Graph()
    w, dy, x = g.input("w", (4, 3, 3, 3)), g.input("dy", (1, 4, 3, 3)), g.input("x", (1, 3, 5, 5))
    conv = conv_attrs(1, 0, 1, 1)
    with pytest.raises(mg.OpError, match=r"conv2d_backward_data.*output gradient has shape"):
        C.conv2d_backward_data(w, dy, (6, 5), **conv)
    with pytest.raises(mg.OpError, match=r"conv2d_backward_filter.*output gradient has shape"):
        C.conv2d_backward_filter(x, dy, (2, 3), **conv)
    with pytest.raises(mg.OpError, match=r"conv2d_backward_filter.*groups=2 must divide"):
        C.conv2d_backward_filter(x, dy, (3, 3), **{**conv, "groups": 2})


# -- pooling backward ops -------------------------------------------------------------------------
def pool_windows(hw, kernel=None, stride=None, padding=None, oshp=None):
    """(i, j, rows, cols, padded window size) of every output cell, padding cut off."""
    h, w = hw
    if oshp is not None:
        (oh, ow), area = pair(oshp), None
        rows = [slice(i * h // oh, -(-(i + 1) * h // oh)) for i in range(oh)]
        cols = [slice(j * w // ow, -(-(j + 1) * w // ow)) for j in range(ow)]
    else:
        (kh, kw), (sh, sw), (ph, pw) = pair(kernel), pair(stride), pair(padding)
        oh, ow, area = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1, kh * kw
        rows = [slice(max(i * sh - ph, 0), i * sh - ph + kh) for i in range(oh)]
        cols = [slice(max(j * sw - pw, 0), j * sw - pw + kw) for j in range(ow)]
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            yield i, j, r, c, area


def argmax_cells(x, windows):
    """(i, j, plane index, flat cell index) of each window's first maximum (np.argmax's)."""
    n, c, h, w = x.shape
    planes = x.reshape(n * c, h, w)
    for i, j, r, cl, _ in windows:
        for p in range(n * c):
            win = planes[p, r, cl]
            a, b = np.unravel_index(np.argmax(win), win.shape)
            yield i, j, p, (r.start + a) * w + cl.start + b


def max_backward_ref(x, dy, windows):
    dx = np.zeros(x.size)
    plane = x.shape[2] * x.shape[3]
    for i, j, p, cell in argmax_cells(x, windows):
        dx[p * plane + cell] += dy.reshape(-1, *dy.shape[2:])[p, i, j]
    return dx.reshape(x.shape).astype(x.dtype)


def select_ref(x, h, windows, oshape):
    y = np.zeros((x.shape[0] * x.shape[1], *oshape))
    for i, j, p, cell in argmax_cells(x, windows):
        y[p, i, j] = h.reshape(y.shape[0], -1)[p, cell]
    return y.reshape(x.shape[:2] + oshape).astype(x.dtype)


def avg_backward_ref(dy, hw, windows, mode):
    dx = np.zeros(dy.shape[:2] + tuple(hw))
    for i, j, r, c, area in windows:
        cells = dx[:, :, r, c]
        count = area if mode == "average" else cells.shape[2] * cells.shape[3]
        cells += dy[:, :, i, j, None, None].astype(np.float64) / count
    return dx.astype(dy.dtype)


def pool_input(xs, dtype, ties):
    # small integers make many ties, which must go to the first maximum of each window
    if ties:
        return RNG.integers(0, 3, xs).astype(dtype)
    return RNG.standard_normal(xs).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("xs,kernel,stride,padding", POOL_CASES)
def test_max_pool2d_backward_and_select(xs, kernel, stride, padding, ties, dtype):
    stride = kernel if stride is None else stride
    attrs = dict(kernel_size=pair(kernel), stride=pair(stride), padding=pair(padding))
    x, h = pool_input(xs, dtype, ties), RNG.standard_normal(xs).astype(dtype)
    oshape = pool_ref(x, kernel, stride, padding, "max").shape[2:]
    dy = RNG.standard_normal(xs[:2] + oshape).astype(dtype)
    windows = list(pool_windows(xs[2:], kernel, stride, padding))
    check(run(lambda v, d: apply("max_pool2d_backward", (v, d), **attrs), x, dy),
          max_backward_ref(x, dy, windows))
    check(run(lambda v, u: apply("max_pool2d_select", (v, u), **attrs), x, h),
          select_ref(x, h, windows, oshape))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["average", "average_count_exclude_padding"])
@pytest.mark.parametrize("xs,kernel,stride,padding", POOL_CASES)
def test_avg_pool2d_backward(xs, kernel, stride, padding, mode, dtype):
    stride = kernel if stride is None else stride
    attrs = dict(kernel_size=pair(kernel), stride=pair(stride), padding=pair(padding), mode=mode)
    oshape = pool_ref(np.zeros(xs), kernel, stride, padding, "max").shape[2:]
    dy = RNG.standard_normal(xs[:2] + oshape).astype(dtype)
    out = run(lambda d: apply("avg_pool2d_backward", (d,), input_hw=xs[2:], **attrs), dy)
    check(out, avg_backward_ref(dy, xs[2:], pool_windows(xs[2:], kernel, stride, padding), mode))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,oshp", [((2, 3, 7, 5), (3, 2)), ((1, 2, 4, 6), 4),
                                     ((1, 2, 3, 2), (5, 4)), ((1, 1, 1, 1), 1), ((0, 3, 4, 4), 2)])
def test_adaptive_pool2d_backward_ops(xs, oshp, dtype):
    oshape = pair(oshp)
    x, h = pool_input(xs, dtype, True), RNG.standard_normal(xs).astype(dtype)
    dy = RNG.standard_normal(xs[:2] + oshape).astype(dtype)
    windows = list(pool_windows(xs[2:], oshp=oshp))
    check(run(lambda v, d: apply("adaptive_max_pool2d_backward", (v, d), oshp=oshape), x, dy),
          max_backward_ref(x, dy, windows))
    check(run(lambda v, u: apply("adaptive_max_pool2d_select", (v, u), oshp=oshape), x, h),
          select_ref(x, h, windows, oshape))
    out = run(lambda d: apply("adaptive_avg_pool2d_backward", (d,), input_hw=xs[2:], oshp=oshape),
              dy)
    check(out, avg_backward_ref(dy, xs[2:], windows, "exclude"))


def test_max_pool2d_backward_sends_nan_windows_to_the_first_nan():
    x = np.zeros((1, 1, 2, 2), np.float32)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = np.nan
    attrs = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))
    out = run(lambda v, d: apply("max_pool2d_backward", (v, d), **attrs), x,
              np.ones((1, 1, 1, 1), np.float32))
    np.testing.assert_array_equal(out[0, 0], [[0, 1], [0, 0]])


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d_backward_of_tiling_windows_stores_positive_zeros(dtype):
    # tiling windows (2x2/2) zero dx's rows and add each gradient at its window's argmax: where
    # a gradient of -0.0 goes, 0 + -0.0 = +0.0; an odd last row and column stay 0
    x = RNG.standard_normal((2, 3, 7, 9)).astype(dtype)
    dy = np.full((2, 3, 3, 4), -0.0, dtype)
    dy[0, 0, 1, 2] = 5
    attrs = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))
    out = run(lambda v, d: apply("max_pool2d_backward", (v, d), **attrs), x, dy)
    assert not np.signbit(out).any()
    window = x[0, 0, 2:4, 4:6]
    r, c = np.unravel_index(np.argmax(window), (2, 2))
    want = np.zeros_like(out)
    want[0, 0, 2 + r, 4 + c] = 5
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("first", [0.0, -0.0])
def test_max_pool2d_3x3_stride_2_keeps_the_first_of_equal_zeros(dtype, first):
    # the window's row-major scan keeps its first maximum: +0.0 and -0.0 are equal, so which
    # one a window gives is the one met first (row 0's last cell before row 1's first)
    x = np.full((1, 1, 5, 9), -1, dtype)
    x[0, 0, 1, 5], x[0, 0, 2, 3] = first, -first  # window (1, 2): rows 1-3, columns 3-5
    out = run(lambda v: F.max_pool2d(v, 3, 2, 1), x)
    assert out[0, 0, 1, 2] == 0 and np.signbit(out[0, 0, 1, 2]) == np.signbit(first)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,kernel,stride,padding", [
    ((2, 2, 6, 8), 2, 2, 0), ((1, 2, 9, 9), 3, 3, 0), ((1, 2, 9, 8), 3, 2, 1),
    ((1, 2, 7, 7), 3, 1, 1), ((1, 1, 5, 130), 2, 1, 0), ((1, 1, 6, 6), 5, 1, 2)])
def test_max_pool2d_nan_inf_and_ties_on_every_path(xs, kernel, stride, padding, dtype):
    # NaN is a window's maximum and its first NaN takes the gradient (np.max, np.argmax);
    # -inf windows and ties send it to their first cell; an infinite gradient stays whole.
    x = RNG.integers(0, 3, xs).astype(dtype)
    cells = RNG.choice(x.size, x.size // 5, replace=False)
    x.reshape(-1)[cells[::2]], x.reshape(-1)[cells[1::2]] = np.nan, -np.inf
    attrs = dict(kernel_size=pair(kernel), stride=pair(stride), padding=pair(padding))
    y = pool_ref(x, kernel, stride, padding, "max")
    dy = RNG.standard_normal(y.shape).astype(dtype)
    dy.reshape(-1)[0] = np.inf
    windows = list(pool_windows(xs[2:], kernel, stride, padding))
    check(run(lambda v: F.max_pool2d(v, kernel, stride, padding), x), y)
    check(run(lambda v, d: apply("max_pool2d_backward", (v, d), **attrs), x, dy),
          max_backward_ref(x, dy, windows))
    h = RNG.standard_normal(xs).astype(dtype)
    check(run(lambda v, u: apply("max_pool2d_select", (v, u), **attrs), x, h),
          select_ref(x, h, windows, y.shape[2:]))


@pytest.mark.parametrize("op,inputs,attrs,reason", [
    ("max_pool2d_backward", [(1, 1, 4, 4), (1, 1, 3, 3)],
     {"kernel_size": (2, 2), "stride": (2, 2)}, "output gradient has shape"),
    ("max_pool2d_select", [(1, 1, 4, 4), (1, 1, 4, 3)],
     {"kernel_size": (2, 2), "stride": (2, 2)}, "must have the input's shape"),
    ("avg_pool2d_backward", [(1, 1, 2, 2)],
     {"kernel_size": (2, 2), "stride": (2, 2), "input_hw": (6, 6)}, "output gradient has shape"),
    ("adaptive_max_pool2d_backward", [(1, 1, 4, 4), (1, 2, 2, 2)], {"oshp": (2, 2)},
     "output gradient has shape"),
    ("avg_pool2d_backward", [(1, 1, 2, 2)],
     {"kernel_size": (2, 2), "stride": (2, 2), "input_hw": (4, 4), "mode": "sum"},
     "mode must be one of"),
])
def test_pool_backward_build_errors(op, inputs, attrs, reason):
    g = mg.Graph()
    xs = [g.input(f"x{i}", s) for i, s in enumerate(inputs)]
    with pytest.raises(mg.OpError, match=f"{op}.*{reason}"):
        apply(op, xs, **attrs)
