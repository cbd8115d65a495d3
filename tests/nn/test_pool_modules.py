"""The pooling modules (nn/pooling.py, and MaxPool2d/AvgPool2d's new keywords) against
PyTorch's, run eagerly, and the 1-D, Lp and global functions behind them: odd sizes, padding,
ceil_mode, bad input."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

RNG = np.random.default_rng(7)


def _same_as_torch(ours, theirs, x, rtol=1e-12):
    torch = pytest.importorskip("torch")
    got = ours(mg.tensor(x, dtype="float64")).numpy()
    want = theirs(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)


def _tnn():
    return pytest.importorskip("torch").nn


@pytest.mark.parametrize("args,kwargs", [
    ((3, 2, 1), {"dilation": 2, "ceil_mode": True}), ((2,), {"ceil_mode": True}),
    ((3, 1, 1), {}), (((2, 3), (2, 1), (1, 0)), {"ceil_mode": True})])
def test_max_pool2d_module(args, kwargs):
    x = RNG.standard_normal((2, 3, 9, 8))
    _same_as_torch(nn.MaxPool2d(*args, **kwargs), _tnn().MaxPool2d(*args, **kwargs), x)


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("args,ceil", [((3, 2, 1), True), ((2,), True), ((3, 1, 1), False)])
def test_avg_pool2d_module(args, ceil, include):
    x = RNG.standard_normal((2, 3, 9, 8))
    ours = nn.AvgPool2d(*args, ceil_mode=ceil, count_include_pad=include)
    _same_as_torch(ours, _tnn().AvgPool2d(*args, ceil_mode=ceil, count_include_pad=include), x)


@pytest.mark.parametrize("oshp", [(3, 2), 4, (1, 1)])
def test_adaptive_max_pool2d_module(oshp):
    x = RNG.standard_normal((2, 3, 9, 7))
    _same_as_torch(nn.AdaptiveMaxPool2d(oshp), _tnn().AdaptiveMaxPool2d(oshp), x)


def test_global_pool_modules():
    x = RNG.standard_normal((2, 3, 5, 6))
    _same_as_torch(nn.GlobalAvgPool2d(), _tnn().AdaptiveAvgPool2d(1), x)
    _same_as_torch(nn.GlobalMaxPool2d(), _tnn().AdaptiveMaxPool2d(1), x)


@pytest.mark.parametrize("p", [1, 2, 3, 1.5])
@pytest.mark.parametrize("args", [(3, 2), (2,), ((2, 3), (1, 2)), (3, 3, True)])
def test_lp_pool2d_module(p, args):
    # non-negative input: PyTorch raises x, not |x|, to the p-th power
    x = RNG.uniform(0.1, 2.0, (2, 3, 9, 9))
    _same_as_torch(nn.LPPool2d(p, *args), _tnn().LPPool2d(p, *args), x, rtol=1e-11)


def test_lp_pool2d_ceil_mode_agrees_with_torch_on_whole_windows():
    # PyTorch scales an overhanging window's mean by the whole window; the others agree
    torch = pytest.importorskip("torch")
    x = RNG.uniform(0.1, 2.0, (2, 3, 9, 8))
    got = nn.LPPool2d(2, 3, 3, True)(mg.tensor(x, dtype="float64")).numpy()
    want = _tnn().LPPool2d(2, 3, 3, True)(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape == (2, 3, 3, 3)
    np.testing.assert_allclose(got[..., :2], want[..., :2], rtol=1e-12)
    assert not np.allclose(got[..., 2], want[..., 2])


def test_lp_pool2d_sums_absolute_values_over_whole_windows():
    x = -RNG.uniform(0.1, 2.0, (1, 2, 6, 6))
    g = mg.Graph()
    v = g.input("x", x.shape, "float64")
    (got,) = mg.compile([F.lp_pool2d(v, 3, 3, 2, True, padding=1)]).run({"x": x})
    padded = np.pad(np.abs(x), ((0, 0), (0, 0), (1, 2), (1, 2))) ** 3
    want = np.array([[[[padded[n, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3].sum() ** (1 / 3)
                        for j in range(got.shape[3])] for i in range(got.shape[2])]
                      for c in range(2)] for n in range(1)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.shape == (1, 2, 4, 4)  # the last window starts in the input: kept


@pytest.mark.parametrize("args,kwargs", [((3, 2, 1), {"dilation": 2, "ceil_mode": True}),
                                         ((2,), {}), ((4, 3, 2), {"ceil_mode": True})])
def test_1d_modules(args, kwargs):
    tnn = _tnn()
    x = RNG.standard_normal((2, 3, 13))
    _same_as_torch(nn.MaxPool1d(*args, **kwargs), tnn.MaxPool1d(*args, **kwargs), x)
    ceil = kwargs.get("ceil_mode", False)
    _same_as_torch(nn.AvgPool1d(*args, ceil_mode=ceil, count_include_pad=True),
                   tnn.AvgPool1d(*args, ceil_mode=ceil), x)
    _same_as_torch(nn.AvgPool1d(*args, ceil_mode=ceil),
                   tnn.AvgPool1d(*args, ceil_mode=ceil, count_include_pad=False), x)
    _same_as_torch(nn.LPPool1d(2, *args[:2]), tnn.LPPool1d(2, *args[:2]), np.abs(x))


def test_1d_padding_can_differ_at_the_ends():
    x = RNG.standard_normal((1, 2, 7))
    got = F.max_pool1d(mg.tensor(x, dtype="float64"), 3, 2, (2, 0)).numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (2, 0)), constant_values=-np.inf)
    want = np.stack([padded[..., 2 * i:2 * i + 3].max(-1) for i in range(4)], -1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn,shape,reason", [
    (lambda v: F.max_pool1d(v, 2), (1, 2, 3, 4), r"max_pool1d.*must be 3-D"),
    (lambda v: F.avg_pool1d(v, (2, 2)), (1, 2, 6), r"avg_pool1d.*kernel_size must be an int"),
    (lambda v: F.max_pool1d(v, 2, 0), (1, 2, 6), r"stride must be an int >= 1"),
    (lambda v: F.lp_pool2d(v, 0, 2), (1, 2, 6, 6), r"lp_pool2d.*norm_type must be"),
    (lambda v: F.lp_pool2d(v, float("inf"), 2), (1, 2, 6, 6), r"norm_type must be"),
    (lambda v: F.lp_pool1d(v, 2, 9), (1, 2, 6), r"output size would be 1x0"),
])
def test_bad_input_names_the_function(fn, shape, reason):
    g = mg.Graph()
    with pytest.raises(mg.OpError, match=reason):
        fn(g.input("x", shape))


def test_module_reprs_and_no_parameters():
    for module in (nn.LPPool2d(2, 3), nn.MaxPool1d(2), nn.AvgPool1d(2), nn.GlobalAvgPool2d(),
                   nn.GlobalMaxPool2d(), nn.AdaptiveMaxPool2d(2)):
        assert list(module.named_parameters()) == []
        assert type(module).__name__ in repr(module)


def test_max_unpool2d_module():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 8, 7))
    y, where = F.max_pool2d(mg.tensor(x, dtype="float64"), 2, return_indices=True)
    got = nn.MaxUnpool2d(2)(y, where, output_size=(8, 7)).numpy()
    ty, tw = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, return_indices=True)
    want = torch.nn.MaxUnpool2d(2)(ty, tw, output_size=(8, 7)).numpy()
    np.testing.assert_array_equal(got, want)
