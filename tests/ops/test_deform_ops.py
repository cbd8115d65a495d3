"""The deform family (deformable_conv2d over deform_im2col, correlation) on the CPU kernels
against NumPy references written from their definitions here, deformable_conv2d and its
gradients against a PyTorch composition over grid_sample; bad input gives errors naming the op,
shapes and dtypes; threads, read-only inputs, eager mode, the module and the model file."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.module as M
from mgegraph import nn, runtime
from mgegraph._kernels import parallel
from mgegraph.ir.errors import OpError

RNG = np.random.default_rng(0)
FLOATS = (np.float32, np.float64)


def run(fn, *arrays):
    """fn on graph inputs, compiled and run: the CPU plan's result."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})[0]


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-11}


# -- NumPy references ---------------------------------------------------------------------------
def bilinear(img, y, x):
    """torchvision's read: 0 unless -1 < y < H and -1 < x < W, each corner only inside."""
    h, w = img.shape
    if not (-1 < y < h and -1 < x < w):
        return 0.0
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    ly, lx = y - y0, x - x0
    total = 0.0
    for cy, cx, wt in ((y0, x0, (1 - ly) * (1 - lx)), (y0, x0 + 1, (1 - ly) * lx),
                       (y0 + 1, x0, ly * (1 - lx)), (y0 + 1, x0 + 1, ly * lx)):
        if 0 <= cy < h and 0 <= cx < w:
            total += wt * img[cy, cx]
    return total


def deform_conv_ref(x, w, offset, mask, bias=None, stride=(1, 1), padding=(0, 0),
                    dilation=(1, 1), groups=1):
    n, c, _, _ = x.shape
    oc, cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    taps = kh * kw
    dg = offset.shape[1] // (2 * taps)
    cols = np.zeros((n, c, kh, kw, oh, ow))
    for b, ch, i, j, r, q in np.ndindex(n, c, kh, kw, oh, ow):
        g, k = ch // (c // dg), i * kw + j
        y = r * stride[0] - padding[0] + i * dilation[0] + offset[b, (g * taps + k) * 2, r, q]
        xx = q * stride[1] - padding[1] + j * dilation[1] + offset[b, (g * taps + k) * 2 + 1, r, q]
        cols[b, ch, i, j, r, q] = mask[b, g * taps + k, r, q] * bilinear(x[b, ch], y, xx)
    out = np.zeros((n, oc, oh, ow))
    per = oc // groups
    for o in range(oc):
        g = o // per
        out[:, o] = np.einsum("ncijrq,cij->nrq", cols[:, g * cg:(g + 1) * cg], w[o])
    return out if bias is None else out + bias.reshape(1, oc, 1, 1)


def correlation_ref(a, b, kernel_size=1, max_displacement=1, stride1=1, stride2=1, pad_size=0,
                    is_multiply=True):
    """MegEngine's naive kernel, written again: data1's cell (y1, x1) against data2's displaced
    one, over a patch and the channels, zeros outside."""
    n, c, h, w = a.shape
    r, grid = kernel_size // 2, max_displacement // stride2
    border = max_displacement + r
    oh = -(-(h + 2 * pad_size - 2 * border) // stride1)
    ow = -(-(w + 2 * pad_size - 2 * border) // stride1)
    pad = max_displacement + r + pad_size + 1
    pa = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    pb = np.pad(b, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, (2 * grid + 1) ** 2, oh, ow))
    for o, oy, ox in np.ndindex(out.shape[1:]):
        dy = (o // (2 * grid + 1) - grid) * stride2
        dx = (o % (2 * grid + 1) - grid) * stride2
        y1 = oy * stride1 + r + max_displacement - pad_size + pad
        x1 = ox * stride1 + r + max_displacement - pad_size + pad
        p1 = pa[:, :, y1 - r:y1 + r + 1, x1 - r:x1 + r + 1]
        p2 = pb[:, :, y1 + dy - r:y1 + dy + r + 1, x1 + dx - r:x1 + dx + r + 1]
        terms = p1 * p2 if is_multiply else np.abs(p1 - p2)
        out[:, o, oy, ox] = terms.sum(axis=(1, 2, 3)) / (kernel_size ** 2 * c)
    return out


def deform_inputs(n, c, h, w, oc, k, groups=1, dg=1, stride=(1, 1), padding=(0, 0),
                  dilation=(1, 1), spread=2.0, dtype=np.float64):
    kh, kw = k
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    arrays = (RNG.standard_normal((n, c, h, w)), RNG.standard_normal((oc, c // groups, kh, kw)),
              RNG.uniform(-spread, spread, (n, 2 * dg * kh * kw, oh, ow)),
              RNG.uniform(0, 1, (n, dg * kh * kw, oh, ow)), RNG.standard_normal(oc))
    return tuple(a.astype(dtype) for a in arrays)


# -- deformable_conv2d ----------------------------------------------------------------------------
CASES = [  # (n, c, h, w, oc, kernel, groups, deformable groups, stride, padding, dilation)
    (1, 1, 5, 5, 1, (3, 3), 1, 1, (1, 1), (0, 0), (1, 1)),
    (2, 4, 7, 6, 6, (3, 3), 2, 2, (1, 1), (1, 1), (1, 1)),
    (1, 3, 9, 8, 2, (3, 2), 1, 3, (2, 1), (1, 0), (1, 2)),
    (2, 6, 6, 5, 4, (1, 1), 2, 3, (1, 2), (0, 1), (1, 1)),
    (1, 2, 4, 4, 3, (2, 3), 1, 2, (1, 1), (2, 2), (2, 1)),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_deformable_conv2d_matches_numpy(case, dtype):
    n, c, h, w, oc, k, groups, dg, stride, padding, dilation = case
    x, wt, off, mask, bias = deform_inputs(n, c, h, w, oc, k, groups, dg, stride, padding,
                                           dilation, dtype=dtype)
    got = run(lambda *a: F.vision.deformable_conv2d(*a, stride=stride, padding=padding,
                                                    dilation=dilation, groups=groups),
              x, wt, off, mask, bias)
    want = deform_conv_ref(x, wt, off, mask, bias, stride, padding, dilation, groups)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, **tol(dtype))


def test_zero_offsets_and_unit_mask_are_conv2d():
    x, wt, off, mask, bias = deform_inputs(2, 4, 8, 7, 6, (3, 3), 2, 1, padding=(1, 1))
    got = run(lambda *a: F.vision.deformable_conv2d(*a, padding=1, groups=2), x, wt,
              np.zeros_like(off), np.ones_like(mask), bias)
    want = run(lambda a, b, c: F.conv2d(a, b, c, padding=1, groups=2), x, wt, bias)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_points_on_and_past_the_image_edges_read_zeros():
    """A point at exactly -1 or H (W) reads nothing; between -1 and 0, or past W - 1, only its
    corners inside count; otherwise the bilinear mix."""
    x = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    off = np.zeros((1, 2, 3, 3))
    off[0, 0, 0] = [-1.0, 3.0, -0.5]          # dy of the first row's cells
    off[0, :, 1, 0] = (0.0, -1.0)             # (dy, dx) of the cells of the second row
    off[0, :, 1, 1] = (0.25, 0.5)
    off[0, :, 1, 2] = (0.0, 0.7)
    got = run(lambda a, b, c, d: F.vision.deformable_conv2d(a, b, c, d), x,
              np.ones((1, 1, 1, 1)), off, np.ones((1, 1, 3, 3)))
    want = [[0.0, 0.0, 0.5 * 3], [0.0, 0.75 * 5.5 + 0.25 * 8.5, 0.3 * 6], [7.0, 8.0, 9.0]]
    np.testing.assert_allclose(got[0, 0], want, rtol=1e-12)


def test_points_that_are_not_finite_read_zeros():
    """A NaN or infinite offset moves its point off the image: it reads 0 (never an index
    made from a NaN), as grid_sample's zero padding reads such a point."""
    x = RNG.standard_normal((1, 1, 3, 3))
    off = np.zeros((1, 2, 3, 3))
    off[0, 0, 0, :] = (np.nan, np.inf, -np.inf)
    got = run(lambda a, b, c, d: F.vision.deformable_conv2d(a, b, c, d), x,
              np.ones((1, 1, 1, 1)), off, np.ones((1, 1, 3, 3)))
    np.testing.assert_array_equal(got[0, 0, 0], 0.0)
    np.testing.assert_array_equal(got[0, 0, 1:], x[0, 0, 1:])


def test_a_named_batch_compiles_once_for_every_size():
    g = mg.Graph()
    shapes = {"x": ("batch", 4, 6, 5), "w": (6, 2, 3, 3), "off": ("batch", 36, 6, 5),
              "mask": ("batch", 18, 6, 5), "a": ("batch", 3, 7, 7)}
    x, w, off, mask, a = (g.input(k, s, "float64") for k, s in shapes.items())
    y = F.vision.deformable_conv2d(x, w, off, mask, padding=1, groups=2)
    corr = F.vision.correlation(a, a * 2.0, 3, 2, 1, 1, 2)
    assert str(y.type) == "f64[batch, 6, 6, 5]" and str(corr.type) == "f64[batch, 25, 5, 5]"
    plan = mg.compile([y, corr])
    for n in (1, 3):
        xs, ws, offs, masks, _ = deform_inputs(n, 4, 6, 5, 6, (3, 3), 2, 2, padding=(1, 1))
        feeds = {"x": xs, "w": ws, "off": offs, "mask": masks,
                 "a": RNG.standard_normal((n, 3, 7, 7))}
        got_y, got_corr = plan.run(feeds)
        np.testing.assert_allclose(got_y, deform_conv_ref(xs, ws, offs, masks, padding=(1, 1),
                                                          groups=2), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(got_corr, correlation_ref(feeds["a"], feeds["a"] * 2.0, 3, 2,
                                                             1, 1, 2), rtol=1e-11, atol=1e-11)


def test_deformable_conv2d_takes_megengine_grouped_weights():
    x, wt, off, mask, _ = deform_inputs(1, 4, 5, 5, 6, (3, 3), 2, 1, padding=(1, 1))
    grouped = wt.reshape(2, 3, 2, 3, 3)
    got = run(lambda *a: F.vision.deformable_conv2d(*a, padding=1, groups=2), x, grouped, off,
              mask)
    np.testing.assert_allclose(got, deform_conv_ref(x, wt, off, mask, padding=(1, 1), groups=2),
                               rtol=1e-12, atol=1e-12)


def torch_deform_conv(x, w, off, mask, bias, stride, padding, dilation, groups):
    """deformable_conv2d composed in PyTorch: each tap's points read by grid_sample (zeros
    outside; align_corners maps pixel p to 2p / (side - 1) - 1), scaled by the mask."""
    torch = pytest.importorskip("torch")
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    oh, ow = off.shape[2:]
    dg = off.shape[1] // (2 * kh * kw)
    base_y = torch.arange(oh, dtype=x.dtype)[:, None] * stride[0] - padding[0]
    base_x = torch.arange(ow, dtype=x.dtype)[None, :] * stride[1] - padding[1]
    cols = []
    for k in range(kh * kw):
        i, j = divmod(k, kw)
        taps = []
        for g in range(dg):
            y = base_y + i * dilation[0] + off[:, (g * kh * kw + k) * 2]
            xx = base_x + j * dilation[1] + off[:, (g * kh * kw + k) * 2 + 1]
            grid = torch.stack([2 * xx / (wd - 1) - 1, 2 * y / (h - 1) - 1], dim=-1)
            part = x[:, g * (c // dg):(g + 1) * (c // dg)]
            sampled = torch.nn.functional.grid_sample(part, grid, align_corners=True)
            taps.append(sampled * mask[:, g * kh * kw + k][:, None])
        cols.append(torch.cat(taps, dim=1))
    cols = torch.stack(cols, dim=2).reshape(n, groups, cg * kh * kw, oh * ow)
    y = torch.matmul(w.reshape(groups, oc // groups, cg * kh * kw), cols)
    return y.reshape(n, oc, oh, ow) + bias.reshape(1, oc, 1, 1)


@pytest.mark.parametrize("case", CASES[1:])
def test_deformable_conv2d_and_its_gradients_match_pytorch(case):
    torch = pytest.importorskip("torch")
    n, c, h, w, oc, k, groups, dg, stride, padding, dilation = case
    arrays = deform_inputs(n, c, h, w, oc, k, groups, dg, stride, padding, dilation)
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    y = F.vision.deformable_conv2d(*xs, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups)
    seed = RNG.standard_normal(y.shape)
    loss = F.sum(y * g.const(seed))
    got = mg.compile([y, *mg.grad(loss, xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch_deform_conv(*ts, stride, padding, dilation, groups)
    (ty * torch.tensor(seed)).sum().backward()
    for name, mine, theirs in zip(("y", "x", "weight", "offset", "mask", "bias"), got,
                                  [ty.detach(), *(t.grad for t in ts)]):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-9, atol=1e-9, err_msg=name)


# -- correlation --------------------------------------------------------------------------------
CORRELATIONS = [  # kernel_size, max_displacement, stride1, stride2, pad_size, is_multiply
    (1, 1, 1, 1, 0, True), (3, 2, 1, 1, 2, True), (3, 4, 2, 2, 4, False),
    (1, 3, 1, 2, 3, True), (5, 1, 3, 1, 1, False), (3, 0, 1, 1, 0, True),
]


@pytest.mark.parametrize("params", CORRELATIONS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_correlation_matches_numpy(params, dtype):
    a = RNG.standard_normal((2, 3, 9, 8)).astype(dtype)
    b = RNG.standard_normal((2, 3, 9, 8)).astype(dtype)
    names = ("kernel_size", "max_displacement", "stride1", "stride2", "pad_size", "is_multiply")
    attrs = dict(zip(names, params))
    got = run(lambda p, q: F.vision.correlation(p, q, **attrs), a, b)
    np.testing.assert_allclose(got, correlation_ref(a, b, **attrs), **tol(dtype))


def test_correlation_of_an_image_with_itself_peaks_at_no_displacement():
    a = RNG.uniform(1, 2, (1, 4, 6, 6))
    got = run(lambda p, q: F.vision.correlation(p, q, max_displacement=1, pad_size=1), a, a)
    assert got.shape == (1, 9, 6, 6)
    np.testing.assert_allclose(got[0, 4], (a[0] ** 2).mean(axis=0))


def test_megengine_correlation_cases():
    """MegEngine's own test_correlation: the gradient's shape; ones against ones give 1
    (products) and 0 (differences); 2 against 1 differ by 1 everywhere."""
    legacy = np.random.RandomState(0)
    a, b = legacy.randn(2, 1, 160, 160), legacy.randn(2, 1, 160, 160)
    g = mg.Graph()
    x1, x2 = g.input("a", a.shape, a.dtype), g.input("b", b.shape, b.dtype)
    y = F.vision.correlation(x1, x2, kernel_size=5, max_displacement=4, stride1=2, stride2=2,
                             pad_size=2, is_multiply=True)
    (grad,) = mg.compile(mg.grad(F.sum(y), [x1])).run({"a": a, "b": b})
    assert grad.shape == a.shape
    ones = mg.tensor(np.ones((1, 1, 3, 3)))
    same = {"kernel_size": 3, "max_displacement": 0, "stride1": 1, "stride2": 1, "pad_size": 0}
    assert abs(F.vision.correlation(ones, ones, **same).numpy().sum() - 1) < 1e-9
    assert F.vision.correlation(ones, ones, **same, is_multiply=False).numpy().sum() < 1e-9
    twos, ones = mg.tensor(np.full((1, 1, 220, 220), 2.0)), mg.tensor(np.ones((1, 1, 220, 220)))
    out = F.vision.correlation(twos, ones, kernel_size=3, max_displacement=2, stride1=1,
                               stride2=2, pad_size=0, is_multiply=False)
    assert abs(out.numpy().mean() - 1) < 1e-9


def test_megengine_names():
    """deformable_conv2d is also MegEngine's F.nn.deformable_conv2d and F.deformable_conv2d,
    and DeformableConv2d is mgegraph.module's too."""
    assert F.nn.deformable_conv2d is F.deformable_conv2d is F.vision.deformable_conv2d
    assert M.DeformableConv2d is nn.DeformableConv2d


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 17, 3, 3), "float32"),
                                          g.input("m", (1, 9, 3, 3), "float32")),
     r"deform_im2col.*offset has 17 channels: it needs 2 \* groups \* 9"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 18, 4, 3), "float32"),
                                          g.input("m", (1, 9, 3, 3), "float32")),
     r"deform_im2col.*offset must be \(N, 18, 3, 3\).*got \(1, 18, 4, 3\)"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 54, 3, 3), "float32"),
                                          g.input("m", (1, 27, 3, 3), "float32")),
     r"deform_im2col.*groups dividing the input's 4 channels"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 18, 3, 3), "float32"),
                                          g.input("m", (2, 9, 3, 3), "float32")),
     r"deform_im2col.*mask has batch 2, the input 1"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 3, 3, 3), "float32"),
                                          g.input("o", (1, 18, 3, 3), "float32"),
                                          g.input("m", (1, 9, 3, 3), "float32")),
     r"deformable_conv2d.*needs 3 input channels.*the input is \(1, 4, 5, 5\)"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 2, 2), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 18, 1, 1), "float32"),
                                          g.input("m", (1, 9, 1, 1), "float32")),
     r"deform_im2col.*output size would be 0x0"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "int32"),
                                          g.input("w", (2, 4, 3, 3), "int32"),
                                          g.input("o", (1, 18, 3, 3), "int32"),
                                          g.input("m", (1, 9, 3, 3), "int32")),
     r"deform_im2col.*input dtype int32 is not supported"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 18, 3, 3), "float32"),
                                          g.input("m", (1, 9, 3, 3), "float32"),
                                          g.input("b", (3,), "float32")),
     r"deformable_conv2d.*bias must have shape \(2,\) or \(1, 2, 1, 1\), got \(3,\)"),
    (lambda g: F.vision.deformable_conv2d(g.input("x", (1, 4, 5, 5), "float32"),
                                          g.input("w", (2, 4, 3, 3), "float32"),
                                          g.input("o", (1, 18, 3, 3), "float32"),
                                          g.input("m", (1, 9, 3, 3), "float32"),
                                          conv_mode="convolution"),
     r"deformable_conv2d.*conv_mode='cross_correlation'"),
    (lambda g: F.vision.correlation(g.input("a", (1, 2, 6, 6), "float32"),
                                    g.input("b", (1, 2, 6, 5), "float32")),
     r"correlation.*data1 \(1, 2, 6, 6\) and data2 \(1, 2, 6, 5\) must have one shape"),
    (lambda g: F.vision.correlation(g.input("a", (1, 2, 6, 6), "float32"),
                                    g.input("b", (1, 2, 6, 6), "float32"), kernel_size=2),
     r"correlation.*kernel_size must be odd"),
    (lambda g: F.vision.correlation(g.input("a", (1, 2, 4, 4), "float32"),
                                    g.input("b", (1, 2, 4, 4), "float32"), max_displacement=2),
     r"correlation.*output size would be 0x0"),
    (lambda g: F.vision.correlation(g.input("a", (1, 2, 6, 6), "float32"),
                                    g.input("b", (1, 2, 6, 6), "float32"), stride2=0),
     r"correlation.*stride2 must be an int >= 1, got 0"),
    (lambda g: F.vision.correlation(g.input("a", (1, 2, 6, 6), "int64"),
                                    g.input("b", (1, 2, 6, 6), "int64")),
     r"correlation.*data1 dtype int64 is not supported"),
])
def test_bad_input_names_the_op_and_types(make, message):
    with pytest.raises(OpError, match=message) as caught:
        make(mg.Graph())
    assert "test_deform_ops.py" in str(caught.value)  # the user's line


# -- eager mode, the module, threads, the model file --------------------------------------------
def test_deformable_conv2d_module_in_eager_mode_matches_numpy():
    dcn = nn.DeformableConv2d(4, 6, 3, padding=1, groups=2)
    assert dcn.weight.shape == (6, 2, 3, 3) and dcn.bias.shape == (6,)
    x, _, off, mask, _ = deform_inputs(2, 4, 5, 5, 6, (3, 3), 2, 2, padding=(1, 1),
                                       dtype=np.float32)
    got = dcn(mg.tensor(x), mg.tensor(off), mg.tensor(mask)).numpy()
    want = deform_conv_ref(x, dcn.weight.numpy(), off, mask, dcn.bias.numpy(), padding=(1, 1),
                           groups=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_module_gradients_in_eager_mode_match_the_compiled_ones():
    dcn = nn.DeformableConv2d(4, 6, 3, padding=1, groups=2)
    x, _, off, mask, _ = deform_inputs(2, 4, 5, 5, 6, (3, 3), 2, 1, padding=(1, 1),
                                       dtype=np.float32)
    gm = mg.GradManager().attach(dcn.parameters())
    with gm:
        y = dcn(mg.tensor(x), mg.tensor(off), mg.tensor(mask))
        gm.backward(F.sum(y * y))
    g = mg.Graph()
    xs = [g.input(k, a.shape, a.dtype) for k, a in (("x", x), ("o", off), ("m", mask))]
    w, b = (g.input(k, p.shape, p.dtype) for k, p in (("w", dcn.weight), ("b", dcn.bias)))
    y = F.vision.deformable_conv2d(*xs[:1], w, *xs[1:], b, padding=1, groups=2)
    want = mg.compile(mg.grad(F.sum(y * y), [w, b])).run(
        {"x": x, "o": off, "m": mask, "w": dcn.weight.numpy(), "b": dcn.bias.numpy()})
    np.testing.assert_allclose(dcn.weight.grad.numpy(), want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dcn.bias.grad.numpy(), want[1], rtol=1e-5, atol=1e-5)


def test_correlation_in_eager_mode():
    a, b = (RNG.standard_normal((1, 2, 7, 7)).astype(np.float32) for _ in range(2))
    got = F.vision.correlation(mg.tensor(a), mg.tensor(b), 3, 2, 1, 2, 2, False).numpy()
    np.testing.assert_allclose(got, correlation_ref(a, b, 3, 2, 1, 2, 2, False), rtol=1e-5,
                               atol=1e-6)


def deform_step(g, feeds, groups=2):
    x, w, off, mask, bias, a, b = (g.input(k, v.shape, v.dtype) for k, v in feeds.items())
    y = F.vision.deformable_conv2d(x, w, off, mask, bias, padding=1, groups=groups)
    products = F.vision.correlation(a, b, 3, 2, 1, 1, 2, True)
    differences = F.vision.correlation(a, b, 1, 2, 2, 2, 2, False)
    loss = F.sum(y * y) + F.sum(products * products) + F.sum(differences * differences)
    return [loss, *mg.grad(loss, [x, w, off, mask, bias, a, b])]


def step_feeds(dtype):
    x, w, off, mask, bias = deform_inputs(2, 4, 6, 5, 4, (3, 3), 2, 2, padding=(1, 1),
                                          dtype=dtype)
    a, b = (RNG.standard_normal((2, 3, 7, 6)).astype(dtype) for _ in range(2))
    return {"x": x, "w": w, "off": off, "mask": mask, "bias": bias, "a": a, "b": b}


@pytest.mark.parametrize("dtype", FLOATS)
def test_one_two_and_three_threads_give_the_same_bits(dtype, monkeypatch):
    """Every deform kernel (forwards and gradients) planned on 1, 2 and 3 threads, fed
    read-only arrays: the same bits, and the inputs untouched."""
    feeds = step_feeds(dtype)
    for a in feeds.values():
        a.flags.writeable = False
    kept = {k: a.copy() for k, a in feeds.items()}
    outs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        plan = mg.compile(deform_step(mg.Graph(), feeds), optimize=0)
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append([a.tobytes() for a in plan.run(feeds)])
    assert outs[0] == outs[1] == outs[2]
    for k, a in feeds.items():
        assert a.tobytes() == kept[k].tobytes()


def test_every_deform_op_round_trips_through_the_model_file(tmp_path):
    """A training step's plan (deform_im2col, correlation and their backward ops) saved and
    loaded gives the same bits."""
    feeds = step_feeds(np.float32)
    plan = mg.compile(deform_step(mg.Graph(), feeds))
    ops = {ins.op for ins in plan.instructions}
    assert {"deform_im2col", "deform_im2col_backward", "correlation",
            "correlation_backward"} <= ops
    mg.save(plan, tmp_path / "deform.mgm")
    for got, want in zip(runtime.load(tmp_path / "deform.mgm").run(feeds), plan.run(feeds)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
