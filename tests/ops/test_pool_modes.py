"""max_pool2d and avg_pool2d with dilation, ceil_mode, padding that differs at the two ends and
count_include_pad, and their backward ops: against a direct NumPy reference of every window,
and against PyTorch on every combination of odd sizes, stride, dilation, ceil_mode, padding and
count_include_pad it allows."""
import itertools
import math

import numpy as np
import pytest
from test_parallel_kernels import check_all_threads

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(3)
FLOATS = [np.float32, np.float64]
INCLUDE, EXCLUDE = "average", "average_count_exclude_padding"


def run(fn, *arrays):
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    (out,) = mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})
    return out


def check(out, expected):
    assert out.dtype == expected.dtype and out.shape == expected.shape
    tol = 1e-5 if out.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


# -- a direct reference: each window's cells listed -----------------------------------------------
def out_size(size, k, s, begin, end, d, ceil_mode):
    total = size + begin + end - d * (k - 1) - 1
    if not ceil_mode:
        return total // s + 1
    out = math.ceil(total / s) + 1
    return out - 1 if (out - 1) * s >= size + begin else out


def axis_windows(size, k, s, begin, end, d, ceil_mode):
    """Per output index: (the input indices it reads, how many of its taps are in the input
    or its padding)."""
    n = out_size(size, k, s, begin, end, d, ceil_mode)
    for o in range(n):
        taps = [o * s - begin + i * d for i in range(k)]
        yield [t for t in taps if 0 <= t < size], sum(t < size + end for t in taps)


def windows(hw, g):
    """(oh, ow, rows, cols, padded count) of every window; g: kernel, stride, begin, end,
    dilation, ceil_mode, per axis."""
    axes = [list(axis_windows(hw[i], *(v[i] for v in g[:5]), g[5])) for i in range(2)]
    for (i, (rows, pr)), (j, (cols, pc)) in itertools.product(enumerate(axes[0]),
                                                              enumerate(axes[1])):
        yield i, j, rows, cols, pr * pc


def out_shape(xs, g):
    return tuple(out_size(xs[2 + i], *(v[i] for v in g[:5]), g[5]) for i in range(2))


def first_argmax(cells):
    flat = cells.reshape(cells.shape[0], cells.shape[1], -1)
    nan = np.isnan(flat)
    return np.where(nan.any(-1), nan.argmax(-1), np.nanargmax(np.where(nan, 0, flat), -1))


def pool_ref(x, g, mode):
    y = np.zeros(x.shape[:2] + out_shape(x.shape, g))
    for i, j, rows, cols, padded in windows(x.shape[2:], g):
        cells = x[:, :, rows][:, :, :, cols].astype(np.float64)
        if mode == "max":
            y[:, :, i, j] = cells.max(axis=(2, 3))
        else:
            count = padded if mode == INCLUDE else len(rows) * len(cols)
            y[:, :, i, j] = cells.sum(axis=(2, 3)) / count
    return y.astype(x.dtype)


def max_backward_ref(x, dy, g):
    dx = np.zeros(x.shape)
    for i, j, rows, cols, _ in windows(x.shape[2:], g):
        k = first_argmax(x[:, :, rows][:, :, :, cols])
        for n, c in np.ndindex(*x.shape[:2]):
            r, q = divmod(int(k[n, c]), len(cols))
            dx[n, c, rows[r], cols[q]] += dy[n, c, i, j]
    return dx.astype(x.dtype)


def select_ref(x, h, g):
    y = np.zeros(x.shape[:2] + out_shape(x.shape, g))
    for i, j, rows, cols, _ in windows(x.shape[2:], g):
        k = first_argmax(x[:, :, rows][:, :, :, cols])
        for n, c in np.ndindex(*x.shape[:2]):
            r, q = divmod(int(k[n, c]), len(cols))
            y[n, c, i, j] = h[n, c, rows[r], cols[q]]
    return y.astype(x.dtype)


def avg_backward_ref(dy, xs, g, mode):
    dx = np.zeros(xs)
    for i, j, rows, cols, padded in windows(xs[2:], g):
        count = padded if mode == INCLUDE else len(rows) * len(cols)
        dx[:, :, np.ix_(rows, cols)[0], np.ix_(rows, cols)[1]] += (
            dy[:, :, i, j, None, None].astype(np.float64) / count)
    return dx.astype(dy.dtype)


def attrs_of(g):
    kernel, stride, begin, end, dilation, ceil_mode = g
    return {"kernel_size": kernel, "stride": stride, "padding": begin, "padding_end": end,
            "dilation": dilation, "ceil_mode": ceil_mode}


# (input shape, kernel, stride, padding before, padding after, dilation, ceil_mode)
CASES = [
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),
    ((1, 2, 8, 7), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), True),   # tiling windows, overhang
    ((1, 2, 9, 9), (3, 3), (3, 3), (0, 0), (0, 0), (1, 1), True),
    ((1, 2, 7, 8), (3, 2), (2, 3), (1, 0), (2, 1), (1, 1), False),  # asymmetric padding
    ((2, 1, 6, 5), (3, 3), (1, 2), (0, 2), (2, 0), (1, 1), True),
    ((1, 2, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), (2, 2), False),  # dilated
    ((1, 2, 10, 9), (3, 2), (2, 3), (2, 1), (0, 1), (2, 3), True),
    ((1, 1, 5, 13), (2, 3), (3, 2), (1, 2), (1, 2), (3, 2), True),
    ((1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), True),
    ((1, 1, 3, 150), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),  # > 64 windows in a row
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CASES)
def test_max_ops_against_windows(case, dtype):
    xs, g = case[0], case[1:]
    attrs = attrs_of(g)
    x = RNG.integers(0, 4, xs).astype(dtype)  # ties: the first maximum must win
    h = RNG.standard_normal(xs).astype(dtype)
    dy = RNG.standard_normal(xs[:2] + out_shape(xs, g)).astype(dtype)
    check(run(lambda v: apply("max_pool2d", (v,), **attrs), x), pool_ref(x, g, "max"))
    check(run(lambda v, d: apply("max_pool2d_backward", (v, d), **attrs), x, dy),
          max_backward_ref(x, dy, g))
    check(run(lambda v, u: apply("max_pool2d_select", (v, u), **attrs), x, h),
          select_ref(x, h, g))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", [INCLUDE, EXCLUDE])
@pytest.mark.parametrize("case", CASES)
def test_avg_ops_against_windows(case, mode, dtype):
    xs, g = case[0], case[1:]
    attrs = {**attrs_of(g), "mode": mode}
    x = RNG.standard_normal(xs).astype(dtype)
    dy = RNG.standard_normal(xs[:2] + out_shape(xs, g)).astype(dtype)
    check(run(lambda v: apply("avg_pool2d", (v,), **attrs), x), pool_ref(x, g, mode))
    check(run(lambda d: apply("avg_pool2d_backward", (d,), input_hw=xs[2:], **attrs), dy),
          avg_backward_ref(dy, xs, g, mode))


def test_defaults_keep_the_old_meaning():
    x = RNG.standard_normal((1, 2, 7, 7)).astype(np.float32)
    g = mg.Graph()
    y = F.max_pool2d(g.input("x", x.shape), 3, 2, 1)
    assert y.node.attr["padding_end"] is None and y.node.attr["ceil_mode"] is False
    assert y.node.attr["dilation"] == (1, 1) and y.shape == (1, 2, 4, 4)


# -- against PyTorch ------------------------------------------------------------------------------
def _torch_cases():
    for size, k, s, p, d, ceil in itertools.product((5, 6, 7, 10), (1, 2, 3), (1, 2, 3),
                                                    (0, 1), (1, 2), (False, True)):
        if 2 * p <= k and size + 2 * p >= d * (k - 1) + 1:
            yield size, k, s, p, d, ceil


TORCH_CASES = list(_torch_cases())


@pytest.mark.parametrize("size,k,s,p,d,ceil", TORCH_CASES)
def test_max_pool2d_against_torch(size, k, s, p, d, ceil):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 2, size, size + 2))
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p, dilation=d,
                                          ceil_mode=ceil).numpy()
    check(run(lambda v: F.max_pool2d(v, k, s, p, dilation=d, ceil_mode=ceil), x), want)


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("size,k,s,p,ceil", sorted({(n, k, s, p, c)
                                                    for n, k, s, p, d, c in TORCH_CASES}))
def test_avg_pool2d_against_torch(size, k, s, p, ceil, include):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 2, size + 1, size))
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil,
                                          count_include_pad=include).numpy()
    check(run(lambda v: F.avg_pool2d(v, k, s, p, ceil_mode=ceil, count_include_pad=include), x),
          want)


def test_megengine_mode_and_torch_keyword_agree():
    x = RNG.standard_normal((1, 1, 5, 5)).astype(np.float32)
    by_mode = run(lambda v: F.avg_pool2d(v, 3, 2, 1, "average"), x)
    by_keyword = run(lambda v: F.avg_pool2d(v, 3, 2, 1, count_include_pad=True), x)
    np.testing.assert_array_equal(by_mode, by_keyword)


def test_asymmetric_padding_by_pairs():
    x = RNG.standard_normal((1, 1, 6, 7))
    out = run(lambda v: F.max_pool2d(v, 3, 2, ((0, 2), (1, 0))), x)
    g = ((3, 3), (2, 2), (0, 1), (2, 0), (1, 1), False)
    check(out, pool_ref(x, g, "max"))


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,xs,reason", [
    (lambda v: F.max_pool2d(v, 2, 1, 0, dilation=0), (1, 1, 5, 5), "dilation must be an int"),
    (lambda v: F.max_pool2d(v, 2, 1, 2, dilation=1), (1, 1, 5, 5), r"padding .* must be smaller"),
    (lambda v: F.max_pool2d(v, 2, 1, ((0, 2), (0, 0))), (1, 1, 5, 5), r"end \(2, 0\)"),
    (lambda v: F.max_pool2d(v, 2, 1, 0, dilation=5), (1, 1, 4, 9), "output size would be -1x4"),
    (lambda v: F.max_pool2d(v, 2, 1, 2, dilation=3), (1, 1, 1, 4), "reads padding only"),
    (lambda v: F.avg_pool2d(v, 2, mode="average", count_include_pad=False), (1, 1, 4, 4),
     "contradicts"),
    (lambda v: apply("max_pool2d", (v,), kernel_size=(2, 2), stride=(2, 2), ceil_mode=1),
     (1, 1, 4, 4), "ceil_mode must be a bool"),
])
def test_build_errors(fn, xs, reason):
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=reason):
        fn(g.input("x", xs))


def test_errors_name_the_op_and_shape():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=r"max_pool2d\(f32\[1,1,1,4\]\).*reads padding only"):
        F.max_pool2d(g.input("x", (1, 1, 1, 4)), 2, 1, 2, dilation=3)


# -- named image sizes ----------------------------------------------------------------------------
def test_ceil_mode_over_a_named_size_where_every_size_keeps_the_last_window():
    g = mg.Graph()
    x = g.input("x", (1, 2, "h", 9))
    y = F.max_pool2d(x, 3, 2, 1, ceil_mode=True)
    z = F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=True)
    plan = mg.compile([y, z])
    for h in (5, 6, 7, 8):
        data = RNG.standard_normal((1, 2, h, 9)).astype(np.float32)
        got = plan.run({"x": data})
        check(got[0], pool_ref(data, ((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True), "max"))
        check(got[1], pool_ref(data, ((2, 2), (2, 2), (0, 0), (0, 0), (1, 1), True), INCLUDE))


def test_ceil_mode_over_a_named_size_where_the_size_decides_is_refused():
    g = mg.Graph()
    x = g.input("x", (1, 2, "h", 9))
    with pytest.raises(mg.OpError, match="whether a last window is kept would depend"):
        F.max_pool2d(x, 2, 3, ceil_mode=True)


# -- return_indices -------------------------------------------------------------------------------
@pytest.mark.parametrize("size,k,s,p,d,ceil", TORCH_CASES[::7])
def test_max_pool2d_indices_against_torch(size, k, s, p, d, ceil):
    torch = pytest.importorskip("torch")
    x = RNG.integers(0, 5, (2, 2, size, size + 2)).astype(np.float64)  # ties: the first wins
    y, where = F.max_pool2d(mg.tensor(x), k, s, p, d, ceil, return_indices=True)
    want_y, want_where = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p, d, ceil,
                                                        return_indices=True)
    np.testing.assert_array_equal(y.numpy(), want_y.numpy())
    assert where.numpy().dtype == np.int64
    np.testing.assert_array_equal(where.numpy(), want_where.numpy())


def test_max_pool2d_indices_refuse_planes_a_float_cannot_count():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=r"float32 holds cell indices exactly up to 2\^24"):
        F.max_pool2d(g.input("x", (1, 1, 4097, 4097)), 2, return_indices=True)
    _, where = F.max_pool2d(g.input("y", (1, 1, 4097, 4097), "float64"), 2, return_indices=True)
    assert where.dtype == np.int64 and where.shape == (1, 1, 2048, 2048)
    with pytest.raises(mg.OpError, match="return_indices over a named image size"):
        F.max_pool2d(g.input("z", (1, 1, "h", 8)), 2, return_indices=True)


# -- max_unpool2d ---------------------------------------------------------------------------------
@pytest.mark.parametrize("xs,k,s,p,size", [((2, 3, 9, 8), 2, 2, 0, (9, 8)),
                                           ((1, 2, 7, 7), 3, 3, 1, None),
                                           ((1, 1, 6, 9), (2, 3), (3, 3), 0, None)])
def test_max_unpool2d_and_its_gradient_against_torch(xs, k, s, p, size):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(xs)
    tx = torch.from_numpy(x)
    ty, tw = torch.nn.functional.max_pool2d(tx, k, s, p, return_indices=True)
    tu = torch.from_numpy(ty.numpy()).requires_grad_()
    want = torch.nn.functional.max_unpool2d(tu, tw, k, s, p, output_size=size)
    weights = RNG.standard_normal(tuple(want.shape))
    want.backward(torch.from_numpy(weights))
    g = mg.Graph()
    y = g.input("y", tuple(ty.shape), "float64")
    where = g.input("w", tuple(tw.shape), "int64")
    out = F.max_unpool2d(y, where, k, s, p, output_size=size)
    (dy,) = mg.grad(F.sum(out * g.const(weights)), [y])
    got, grad = mg.compile([out, dy]).run({"y": ty.numpy(), "w": tw.numpy()})
    np.testing.assert_array_equal(got, want.detach().numpy())
    np.testing.assert_allclose(grad, tu.grad.numpy(), rtol=1e-12)


def test_max_unpool2d_index_outside_the_plane_fails_at_run_time():
    g = mg.Graph()
    out = F.max_unpool2d(g.input("y", (1, 1, 2, 2)), g.input("w", (1, 1, 2, 2), "int64"), 2)
    plan = mg.compile([out])
    with pytest.raises(mg.KernelError, match="out of range"):
        plan.run({"y": np.ones((1, 1, 2, 2), np.float32),
                  "w": np.array([[[[0, 1], [4, 16]]]], np.int64)})


@pytest.mark.parametrize("args,kwargs,reason", [
    (((1, 1, 2, 2), (1, 1, 2, 2)), {"kernel_size": 3, "stride": 2}, "overlap"),
    (((1, 1, 2, 2), (1, 1, 2, 3)), {"kernel_size": 2}, "indices of its shape"),
    (((1, 1, 2, 2), (1, 1, 2, 2), "float32"), {"kernel_size": 2}, "indices must be integers"),
    (((1, 1, 2, 2), (1, 1, 2, 2)), {"kernel_size": 2, "output_size": (6, 4)},
     r"output_size \(6, 4\) must be within a stride"),
    (((1, 1, 2, 2), (1, 1, 2, 2)), {"kernel_size": 0}, "kernel_size must be an int >= 1"),
])
def test_max_unpool2d_errors(args, kwargs, reason):
    g = mg.Graph()
    y = g.input("y", args[0])
    where = g.input("w", args[1], args[2] if len(args) > 2 else "int64")
    with pytest.raises(mg.OpError, match=rf"max_unpool2d.*{reason}"):
        F.max_unpool2d(y, where, **kwargs)


# -- threads and read-only inputs -----------------------------------------------------------------
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[6]])
def test_every_op_gives_the_same_bits_on_1_2_3_threads(case, monkeypatch):
    xs, g = (4, 3) + case[0][2:], case[1:]
    attrs = attrs_of(g)
    x = RNG.integers(0, 4, xs).astype(np.float32)
    x.flags.writeable = False  # kernels only read their inputs
    dy = RNG.standard_normal(xs[:2] + out_shape(xs, g)).astype(np.float32)
    check_all_threads(lambda v: apply("max_pool2d", (v,), **attrs), [x], pool_ref(x, g, "max"),
                      monkeypatch)
    check_all_threads(lambda v, d: apply("max_pool2d_backward", (v, d), **attrs), [x, dy],
                      max_backward_ref(x, dy, g), monkeypatch)
    check_all_threads(lambda d: apply("avg_pool2d_backward", (d,), mode=INCLUDE,
                                      input_hw=xs[2:], **attrs), [dy],
                      avg_backward_ref(dy, xs, g, INCLUDE), monkeypatch)
