"""conv_transpose2d, conv_transpose1d, conv1d and conv3d (ops/conv_api.py, compositions over conv2d and
its data gradient) against a NumPy scatter reference and PyTorch: odd sizes, stride, dilation,
groups, output_padding, asymmetric padding, bias, and the errors of bad input."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.conv_api import transposed

RNG = np.random.default_rng(0)
FLOATS = [np.float32, np.float64]


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def check(out, expected):
    assert out.dtype == expected.dtype and out.shape == expected.shape
    tol = 2e-5 if out.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def transpose_ref(x, w, b, stride, pads, out_hw, dilation, groups):
    """Every input cell scatters its weighted kernel into the full output, which is then cut to
    rows [top, top + out_h) and columns [left, left + out_w), zeros past its end."""
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    cg = c // groups
    full = np.zeros((n, ocg * groups, (h - 1) * sh + dh * (kh - 1) + 1 + out_hw[0] + pads[0][0],
                     (wd - 1) * sw + dw * (kw - 1) + 1 + out_hw[1] + pads[1][0]))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (h - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (wd - 1) + 1, sw)
            for g in range(groups):
                full[:, g * ocg:(g + 1) * ocg, rows, cols] += np.einsum(
                    "nchw,co->nohw", x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg, :, i, j])
    out = full[:, :, pads[0][0]:pads[0][0] + out_hw[0], pads[1][0]:pads[1][0] + out_hw[1]]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


def out_size(n, k, s, p, op, d):
    return (n - 1) * s - 2 * p + d * (k - 1) + 1 + op


CASES = [
    # x shape, weight shape (C_in, C_out/groups, kh, kw), stride, padding, output_padding,
    # dilation, groups
    ((1, 4, 5, 7), (4, 3, 3, 3), 2, 1, 1, 1, 1),               # the usual 2x upsampling
    ((2, 4, 5, 6), (4, 2, 3, 2), 2, (1, 0), (1, 0), (1, 2), 2),  # groups, dilation, odd sizes
    ((1, 3, 4, 4), (3, 2, 3, 3), 1, 2, 0, 2, 1),               # stride 1, dilated (tiled paths)
    ((1, 2, 3, 3), (2, 1, 3, 3), 1, 1, 1, 2, 2),               # output_padding >= stride
    ((1, 6, 5, 5), (6, 1, 3, 3), 3, 2, 2, 1, 6),               # depthwise, stride 3
    ((1, 2, 4, 3), (2, 3, 1, 1), 2, 0, 1, 1, 1),               # 1x1 strided
    ((2, 3, 1, 1), (3, 4, 4, 4), 1, 0, 0, 1, 1),               # one pixel: the kernel itself
    ((1, 2, 3, 5), (2, 2, 5, 3), (3, 2), (2, 1), (2, 1), (1, 2), 1),
    ((1, 8, 6, 6), (8, 16, 3, 3), 1, 1, 0, 1, 1),              # 'same' at stride 1
    ((1, 2, 2, 2), (2, 2, 2, 2), 1, 1, 0, 1, 1),               # padding crops all but 1x1
    # col2im by rows at a stride, its neighbouring taps of stride 2 added as pairs
    ((2, 5, 6, 7), (5, 3, 2, 2), 2, 0, 0, 1, 1),               # the U-Net's 2x2/2: no overlap
    ((1, 3, 5, 6), (3, 2, 4, 5), 2, (1, 3), (0, 1), 1, 1),     # two pairs and one tap alone
    ((1, 2, 3, 1), (2, 3, 3, 4), (1, 2), (0, 1), 0, 1, 1),     # a tap of each pair outside
    ((1, 2, 4, 5), (2, 2, 3, 3), (2, 1), 1, (1, 0), 1, 1),     # a stride along rows only
]


def _case(xs, ws, stride, padding, output_padding, dilation, groups, dtype):
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[1] * groups).astype(dtype)
    hw = tuple(out_size(xs[2 + i], ws[2 + i], pair(stride)[i], pair(padding)[i],
                        pair(output_padding)[i], pair(dilation)[i]) for i in range(2))
    pads = tuple((p, p) for p in pair(padding))
    args = {"stride": stride, "padding": padding, "output_padding": output_padding,
                "dilation": dilation, "groups": groups}
    return x, w, b, hw, pads, args


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation,groups", CASES)
def test_conv_transpose2d_matches_reference(xs, ws, stride, padding, output_padding, dilation,
                                            groups, bias, dtype):
    x, w, b, hw, pads, args = _case(xs, ws, stride, padding, output_padding, dilation, groups,
                                    dtype)
    expected = transpose_ref(x, w, b if bias else None, stride, pads, hw, dilation, groups)
    if bias:
        out = run(lambda v, k, c: F.conv_transpose2d(v, k, c, **args), x, w, b)
    else:
        out = run(lambda v, k: F.conv_transpose2d(v, k, **args), x, w)
    check(out, expected)


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation,groups", CASES)
def test_conv_transpose2d_matches_torch(xs, ws, stride, padding, output_padding, dilation, groups):
    torch = pytest.importorskip("torch")
    x, w, b, _, _, args = _case(xs, ws, stride, padding, output_padding, dilation, groups,
                                np.float32)
    expected = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **args).numpy()
    check(run(lambda v, k, c: F.conv_transpose2d(v, k, c, **args), x, w, b), expected)


@pytest.mark.parametrize("pads,out_hw", [
    (((0, 1), (2, 0)), (8, 9)),      # asymmetric, as ONNX's pads or auto_pad give
    (((1, 0), (0, 0)), (8, 12)),     # output past the full result on one side: zeros
    (((3, 0), (0, 2)), (10, 13)),    # a crop of 3 rows, then zeros past the end
    (((0, 0), (0, 0)), (9, 11)),     # the full result
])
def test_asymmetric_padding_and_output_size(pads, out_hw):
    x, w = RNG.standard_normal((2, 4, 4, 5)), RNG.standard_normal((4, 3, 3, 3))
    b = RNG.standard_normal(3)
    expected = transpose_ref(x, w, b, 2, pads, out_hw, 1, 1)
    check(run(lambda v, k, c: transposed(v, k, c, (2, 2), pads, out_hw, (1, 1), 1), x, w, b),
          expected)


def test_symmetric_case_is_one_data_gradient_node():
    g = mg.Graph()
    y = F.conv_transpose2d(g.input("x", (1, 64, 32, 32)), g.input("w", (64, 32, 3, 3)),
                           stride=2, padding=1, output_padding=1)
    assert y.shape == (1, 32, 64, 64)
    assert [n.op.name for n in g.nodes if n.op.name not in ("input",)] == ["conv2d_backward_data"]


def test_conv_transpose_is_conv2d_adjoint():
    # <conv2d(x, w), y> = <x, conv_transpose2d(y, w)> for the same stride, padding, groups
    x, w = RNG.standard_normal((2, 4, 7, 6)), RNG.standard_normal((6, 2, 3, 3))
    args = {"stride": 2, "padding": 1, "dilation": 1, "groups": 2}
    y = run(lambda v, k: F.conv2d(v, k, **args), x, w)
    dy = RNG.standard_normal(y.shape)
    back = run(lambda v, k: F.conv_transpose2d(v, k, output_padding=(0, 1), **args), dy, w)
    assert back.shape == x.shape
    np.testing.assert_allclose(np.vdot(y, dy), np.vdot(x, back), rtol=1e-12)


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 2), (3, 2, 1, 2, 1), (1, 1, 1, 2, 1)])
def test_conv_transpose1d_matches_torch(stride, padding, output_padding, dilation, groups):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 4, 9)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(3 * groups).astype(np.float32)
    args = {"stride": stride, "padding": padding, "output_padding": output_padding,
                "dilation": dilation, "groups": groups}
    expected = torch.nn.functional.conv_transpose1d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **args).numpy()
    check(run(lambda v, k, c: F.conv_transpose1d(v, k, c, **args), x, w, b), expected)


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 0, 1, 1), (2, 1, 1, 2), (3, 2, 2, 1), (1, 2, 1, 4)])
def test_conv1d_matches_torch(stride, padding, dilation, groups):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 4, 11)).astype(np.float32)
    w = RNG.standard_normal((8, 4 // groups, 3)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    args = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    expected = torch.nn.functional.conv1d(torch.from_numpy(x), torch.from_numpy(w),
                                          torch.from_numpy(b), **args).numpy()
    check(run(lambda v, k, c: F.conv1d(v, k, c, **args), x, w, b), expected)


@pytest.mark.parametrize("xs,ws,kw", [
    ((2, 4, 6, 7, 5), (6, 2, 3, 2, 3), {"stride": (2, 1, 2), "padding": (1, 0, 1),
                                        "dilation": (1, 2, 1), "groups": 2}),
    ((1, 3, 5, 5, 5), (4, 3, 1, 3, 3), {"padding": 1}),
    ((1, 2, 3, 4, 4), (2, 2, 3, 3, 3), {"stride": 3, "padding": 2}),
])
def test_conv3d_matches_torch(xs, ws, kw):
    torch = pytest.importorskip("torch")
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    expected = torch.nn.functional.conv3d(torch.from_numpy(x), torch.from_numpy(w),
                                          torch.from_numpy(b), **kw).numpy()
    check(run(lambda v, k, c: F.conv3d(v, k, c, **kw), x, w, b), expected)


def test_conv3d_bad_input():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=r"conv3d.*input must be 5-D"):
        F.conv3d(g.input("x", (1, 2, 3, 3)), g.input("w", (2, 2, 1, 1, 1)))
    with pytest.raises(mg.OpError, match=r"conv3d.*output depth would be 0"):
        F.conv3d(g.input("x5", (1, 2, 2, 3, 3)), g.input("w5", (2, 2, 3, 1, 1)))


def test_megengine_names():
    assert F.nn.conv_transpose2d is F.conv_transpose2d
    assert F.nn.conv1d is F.conv1d and F.nn.conv_transpose1d is F.conv_transpose1d
    assert F.nn.conv3d is F.conv3d


@pytest.mark.parametrize("xs,ws,kw,reason", [
    ((1, 4, 5, 5), (3, 2, 3, 3), {}, r"weight's first dim \(3\) must equal the input's 4"),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"groups": 3}, "groups=3 must divide"),
    ((1, 4, 5, 5), (4, 2, 3), {}, "weight 4-D"),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"stride": 0}, "stride must be an int >= 1"),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"padding": (1, 2, 3)}, "padding must be"),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"stride": 2, "output_padding": 2},
     "output_padding .* must be smaller than the stride"),
    ((1, 4, 1, 1), (4, 2, 1, 1), {"padding": 1}, "output size would be -1"),
])
def test_bad_input_names_op_and_shapes(xs, ws, kw, reason):
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=f"conv_transpose2d.*{reason}"):
        F.conv_transpose2d(g.input("x", xs), g.input("w", ws), **kw)


def test_bad_bias_and_dtype():
    g = mg.Graph()
    x, w = g.input("x", (1, 4, 5, 5)), g.input("w", (4, 2, 3, 3))
    with pytest.raises(mg.OpError, match=r"conv_transpose2d.*bias must have shape \(2,\)"):
        F.conv_transpose2d(x, w, g.input("b", (4,)))
    with pytest.raises(mg.OpError, match="conv_transpose2d.*int32"):
        F.conv_transpose2d(g.input("xi", (1, 4, 5, 5), "int32"), g.input("wi", (4, 2, 3, 3),
                                                                         "int32"))
    with pytest.raises(mg.OpError, match=r"conv1d.*input must be 3-D"):
        F.conv1d(x, w)
    with pytest.raises(ValueError, match="conv_mode"):
        F.conv_transpose2d(x, w, conv_mode="convolution")


def test_eager_tensors():
    x, w = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32), \
        RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
    out = F.conv_transpose2d(mg.tensor(x), mg.tensor(w), stride=2).numpy()
    check(out, transpose_ref(x, w, None, 2, ((0, 0), (0, 0)), (6, 6), 1, 1))


def test_model_file_round_trip(tmp_path):
    # the ops a transposed convolution is made of (data gradient, slice, pad, add) all have
    # model-file versions, so a saved plan loads and runs bitwise like the original
    g = mg.Graph()
    x = g.input("x", (2, 4, 5, 4))
    w1 = g.param("w1", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b1 = g.param("b1", RNG.standard_normal(3).astype(np.float32))
    w2 = g.param("w2", RNG.standard_normal((3, 2, 3)).astype(np.float32))
    h = transposed(x, w1, b1, (2, 2), ((0, 2), (1, 0)), (11, 10), (1, 1), 1)
    y = F.conv_transpose1d(F.flatten(h, 2), w2, stride=2, padding=1, output_padding=1)
    plan = mg.compile([y])
    data = RNG.standard_normal((2, 4, 5, 4)).astype(np.float32)
    mg.save(plan, tmp_path / "m.mgm")
    (got,) = mg.load(tmp_path / "m.mgm").run([data])
    (want,) = plan.run({"x": data})
    assert got.shape == (2, 2, 220) and np.array_equal(got, want)
