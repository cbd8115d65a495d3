"""Pooling of quantized int8 and uint8 values (ops/conv.py's rules, _kernels/pool_int.pxi): the
forward poolings keep their input's quantization; a max is the integers' max (padding never
wins), an average the integer mean rounded half to even, a counted padded cell holding the zero
point. Checked against a NumPy reference in exact integers, PyTorch, and the fake-quantized float
path (within one step; equal where the exact mean is no tie)."""
import io
from fractions import Fraction

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.errors import OpError
from mgegraph.ir.quant import per_tensor
from mgegraph.ops.builder import apply
from mgegraph.ops.quantize import as_quantized, dequantize, quantize

RANGES = {np.int8: (-128, 127), np.uint8: (0, 255)}
STORAGE = (np.int8, np.uint8)
WINDOWS = [  # kernel, stride, padding, dilation, ceil_mode: tiling, overlapping, padded, clamped
    ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((3, 3), (1, 1), (1, 1), (1, 1), False),
    ((3, 2), (2, 1), (1, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1), (1, 1), True),
    ((3, 3), (2, 3), (0, 1), (2, 1), True),
    ((5, 4), (3, 3), (2, 1), (1, 1), False),
]


def _q(shape, dtype, seed=0):
    lo, hi = RANGES[dtype]
    q = np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dtype)
    q.reshape(-1)[:3] = [lo, hi, lo]  # both ends of the range
    return q


def _zp(dtype):
    return -7 if dtype is np.int8 else 131


# -- the reference: every window's cells in exact integers -----------------------------------------
def _sliding(size, out, k, s, p, d):
    """(cells inside the input, cells inside the input or its padding) of each window."""
    for o in range(out):
        cells = [o * s - p + i * d for i in range(k)]
        yield [c for c in cells if 0 <= c < size], len([c for c in cells if c < size + p])


def _adaptive(size, out):
    for o in range(out):
        lo, hi = o * size // out, -(-(o + 1) * size // out)
        yield list(range(lo, hi)), hi - lo


def _reference(q, zp, out_hw, max_, include_pad, axes):
    """``axes``: per axis, a function (size, out) -> the windows along it."""
    n, c, h, w = q.shape
    y = np.zeros((n, c, *out_hw), q.dtype)
    for i, (rows, rpad) in enumerate(axes[0](h, out_hw[0])):
        for j, (cols, cpad) in enumerate(axes[1](w, out_hw[1])):
            cells = q[:, :, rows][:, :, :, cols].astype(np.int64)
            if max_:
                y[:, :, i, j] = cells.max(axis=(2, 3))
                continue
            div = rpad * cpad if include_pad else len(rows) * len(cols)
            total = cells.sum(axis=(2, 3)) + zp * (div - len(rows) * len(cols))
            # Python's round of a Fraction: exact, ties to even
            y[:, :, i, j] = np.vectorize(lambda t, div=div: round(Fraction(int(t), div)))(total)
    return y


def _sliding_axes(window):
    k, s, p, d, _ = window
    return [lambda size, out, i=i: _sliding(size, out, k[i], s[i], p[i], d[i]) for i in range(2)]


def _input(q, quant):
    return mg.Graph().input("q", q.shape, q.dtype, quant)


def _run(outputs, q):
    return mg.compile(outputs).run({"q": q})


# -- the kernels against the reference -------------------------------------------------------------
@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("window", WINDOWS)
def test_max_pool_is_the_integers_max(dtype, window):
    q = _q((2, 3, 11, 9), dtype)
    x = _input(q, per_tensor(0.05, _zp(dtype)))
    k, s, p, d, ceil = window
    y = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
    assert y.type.quant == x.type.quant and y.dtype == dtype
    (got,) = _run([y], q)
    np.testing.assert_array_equal(
        got, _reference(q, _zp(dtype), y.shape[2:], True, False, _sliding_axes(window)))


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("window", [w for w in WINDOWS if w[3] == (1, 1)])
@pytest.mark.parametrize("include_pad", (True, False))
def test_avg_pool_is_the_rounded_integer_mean(dtype, window, include_pad):
    q = _q((2, 3, 11, 9), dtype, seed=1)
    x = _input(q, per_tensor(0.05, _zp(dtype)))
    k, s, p, _, ceil = window
    y = F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=include_pad)
    assert y.type.quant == x.type.quant and y.dtype == dtype
    (got,) = _run([y], q)
    np.testing.assert_array_equal(
        got, _reference(q, _zp(dtype), y.shape[2:], False, include_pad, _sliding_axes(window)))


def test_an_avg_of_two_rounds_its_ties_to_even():
    # windows of two cells: sums 1, 3, -1, -3, 5 halve to ties 0.5, 1.5, -0.5, -1.5, 2.5
    q = np.array([[[[0, 1, 1, 2, 0, -1, -1, -2, 2, 3]]]], np.int8)
    x = _input(q, per_tensor(0.1))
    (got,) = _run([F.avg_pool2d(x, (1, 2), (1, 2))], q)
    np.testing.assert_array_equal(got.reshape(-1), [0, 2, -0, -2, 2])


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("oshp", [(1, 1), (4, 3), (5, 7), (11, 2)])
def test_adaptive_and_global_pools(dtype, oshp):
    q = _q((2, 5, 11, 7), dtype, seed=2)
    x = _input(q, per_tensor(0.2, _zp(dtype)))
    ys = [F.adaptive_max_pool2d(x, oshp), F.adaptive_avg_pool2d(x, oshp)]
    axes = [_adaptive, _adaptive]
    for got, y, max_ in zip(_run(ys, q), ys, (True, False)):
        assert y.type.quant == x.type.quant
        np.testing.assert_array_equal(got, _reference(q, _zp(dtype), oshp, max_, False, axes))


def test_global_pooling_functions_keep_the_quantization():
    q = _q((3, 4, 33, 31), np.uint8, seed=3)
    x = _input(q, per_tensor(0.02, 128))
    avg, mx = F.global_avg_pool2d(x), F.global_max_pool2d(x)
    assert str(avg.type) == "qu8(0.02,128)[3,4,1,1]"
    got_avg, got_max = _run([avg, mx], q)
    wide = q.astype(np.int64).sum(axis=(2, 3), keepdims=True)
    want = np.vectorize(lambda t: round(Fraction(int(t), 33 * 31)))(wide)
    np.testing.assert_array_equal(got_avg, want)
    np.testing.assert_array_equal(got_max, q.max(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("threads", (2, 3))
def test_threads_give_the_same_integers(threads, monkeypatch):
    from threadpoolctl import threadpool_limits

    from mgegraph._kernels import parallel
    q = _q((3, 5, 12, 9), np.int8, seed=7)

    def plan_at(n):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0: n)
        x = _input(q, per_tensor(0.1, 5))
        plan = mg.compile([F.max_pool2d(x, 3, 2, 1),
                           F.avg_pool2d(x, 3, 2, 1, count_include_pad=True)], optimize=0)
        monkeypatch.undo()
        return plan

    one = plan_at(1).run({"q": q})
    with threadpool_limits(limits=threads):
        for got, want in zip(plan_at(threads).run({"q": q}), one):
            np.testing.assert_array_equal(got, want)


# -- against PyTorch and the fake-quantized float path ---------------------------------------------
@pytest.mark.parametrize("window", [w for w in WINDOWS if w[3] == (1, 1)])
def test_pools_are_pytorchs_on_the_integers(window):
    torch = pytest.importorskip("torch")
    q = _q((2, 3, 11, 9), np.uint8, seed=4)
    zp = 100
    x = _input(q, per_tensor(0.05, zp))
    k, s, p, _, ceil = window
    ys = [F.max_pool2d(x, k, s, p, ceil_mode=ceil),
          F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=True)]
    got_max, got_avg = _run(ys, q)
    t = torch.from_numpy(q.astype(np.float64))
    want_max = torch.nn.functional.max_pool2d(t, k, s, p, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(got_max, want_max.astype(np.uint8))
    # centred, padding is the real 0; float64 sums of integers are exact and the quotient's
    # rounding cannot cross a tie, so rint gives the exact rounded mean
    mean = torch.nn.functional.avg_pool2d(t - zp, k, s, p, ceil_mode=ceil,
                                          count_include_pad=True).numpy()
    np.testing.assert_array_equal(got_avg, (np.rint(mean) + zp).astype(np.uint8))


@pytest.mark.parametrize("dtype", STORAGE)
def test_the_fake_quantized_float_path_is_within_one_step(dtype):
    q = _q((2, 4, 13, 10), dtype, seed=5)
    scale, zp = 0.0371, _zp(dtype)
    x = _input(q, per_tensor(scale, zp))
    real = dequantize(x)
    pairs = [(F.avg_pool2d(x, 3, 2, 1, count_include_pad=True),
              F.avg_pool2d(real, 3, 2, 1, count_include_pad=True)),
             (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(real, 3, 2, 1)),
             (F.adaptive_avg_pool2d(x, (3, 4)), F.adaptive_avg_pool2d(real, (3, 4))),
             (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(real, 3, 2, 1))]
    outs = [y for int_y, float_y in pairs for y in (int_y, quantize(float_y, scale, zp, dtype))]
    got = _run(outs, q)
    for int_y, fake in zip(got[::2], got[1::2]):
        diff = np.abs(int_y.astype(np.int64) - fake)
        assert diff.max() <= 1
    # where the exact mean is no tie, the two agree
    avg, fake = got[0].astype(np.int64), got[1].astype(np.int64)
    padded = np.pad(q.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=zp)
    sums = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[
        :, :, ::2, ::2].sum(axis=(-1, -2))
    no_tie = (2 * sums) % 18 != 9
    np.testing.assert_array_equal(avg[no_tie], fake[no_tie])
    np.testing.assert_array_equal(got[6], got[7])  # a max commutes with the dequantization


# -- what the rules take and refuse ----------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda g: g.input("y", (1, 2, 4, 4), np.int32), "int32 is not supported by max_pool2d"),
    (lambda g: g.input("y", (1, 2, 4, 4), np.int32, per_tensor(0.1)),
     r"per-tensor quantized int8 or uint8 values, got qs32\(0.1\)\[1,2,4,4\]"),
    (lambda g: as_quantized(g.input("y", (1, 2, 4, 4), np.int8), [0.1, 0.2], 0, axis=1),
     r"max_pool2d pools per-tensor quantized .* got qs8\(axis 1, 2\)"),
])
def test_what_quantized_pooling_refuses(make, message):
    g = mg.Graph()
    with pytest.raises(OpError, match=message):
        F.max_pool2d(make(g), 2)


def test_other_pooling_ops_refuse_quantized_values():
    x = _input(np.zeros((1, 1, 4, 4), np.int8), per_tensor(0.1))
    with pytest.raises(OpError, match="return_indices of int8 values"):
        F.max_pool2d(x, 2, return_indices=True)
    with pytest.raises(OpError, match="max_pool2d_backward has no kernels for quantized"):
        apply("max_pool2d_backward", (x, x), kernel_size=(2, 2), stride=(2, 2))


@pytest.mark.parametrize("dtype", STORAGE)
def test_a_max_pools_plain_integers_and_an_average_refuses_them(dtype):
    q = _q((2, 3, 9, 7), dtype, seed=8)
    x = mg.Graph().input("q", q.shape, q.dtype)
    ys = [F.max_pool2d(x, 3, 2, 1), F.adaptive_max_pool2d(x, (2, 3))]
    assert all(y.type.quant is None and y.dtype == dtype for y in ys)
    got = _run(ys, q)
    np.testing.assert_array_equal(got[0], _reference(q, 0, ys[0].shape[2:], True, False,
                                                     _sliding_axes(WINDOWS[3][:4] + (False,))))
    np.testing.assert_array_equal(got[1], _reference(q, 0, (2, 3), True, False,
                                                     [_adaptive, _adaptive]))
    with pytest.raises(OpError, match=f"{np.dtype(dtype)} is not supported by avg_pool2d"):
        F.avg_pool2d(x, 2)


def test_a_quantized_pooling_graph_saves_and_loads():
    q = _q((2, 3, 9, 8), np.int8, seed=6)
    x = _input(q, per_tensor(0.05, -3))
    y = F.adaptive_avg_pool2d(F.avg_pool2d(F.max_pool2d(x, 3, 1, 1), 2, 2, 1,
                                           count_include_pad=True), (1, 1))
    plan = mg.compile([y])
    f = io.BytesIO()
    mg.save(plan, f)
    loaded = mg.load(io.BytesIO(f.getvalue()))
    assert [str(t) for t in loaded.output_types] == ["qs8(0.05,-3)[2,3,1,1]"]
    np.testing.assert_array_equal(loaded.run({"q": q})[0], plan.run({"q": q})[0])
