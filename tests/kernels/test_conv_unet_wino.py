"""Winograd's 16 GEMMs on AVX2's row tiles (wino_conv.h's wino_gemm_rows): the U-Net's
decoder layer (64 -> 32 channels, 3x3 at 128x128) and its data gradient, against NumPy in
float64, against the BLAS's GEMMs (the baseline plan's), and the same bits on 1, 2 and 3
threads (blocks of whole 24-column panels, taken by the threads as they come)."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as K
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.ops import conv as C

FIELD = {name: i for i, name in enumerate(K.CONV_FIELDS)}
RNG = np.random.default_rng(36)

pytestmark = pytest.mark.skipif("avx2" not in K.blocked_isas(),
                                reason="the row tiles are the AVX2 plans' GEMMs")


def conv_ref(x, w, padding):
    """conv2d at stride 1 in float64: each cell's window against the filters."""
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding,) * 2, (padding,) * 2))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64), optimize=True)


def winograd_plan(build, shapes, monkeypatch, threads, isa):
    """The plan of one conv op on ``threads`` threads and ``isa``'s tiles, on Winograd where the
    rules would take another path; memory="debug": a workspace cell read unwritten is NaN."""
    monkeypatch.setattr(lowering, "_winograd_pays", lambda *a: True)
    monkeypatch.setattr(lowering, "_threads", lambda batch, flops: threads)
    monkeypatch.setattr(lowering, "_isa", lambda: isa)
    g = mg.Graph()
    out = build(*(g.input(f"x{i}", s, "float32") for i, s in enumerate(shapes)))
    plan = mg.compile([out], memory="debug")
    (ins,) = [i for i in plan.instructions if i.op.startswith("conv2d")]
    assert ins.ints[FIELD["path"]] == K.CONV_PATHS["winograd"]
    assert ins.ints[FIELD["isa"]] == K.BLOCKED_ISAS[isa]
    return plan


def outputs(build, shapes, feeds, monkeypatch, threads, isa="avx2"):
    plan = winograd_plan(build, shapes, monkeypatch, threads, isa)
    named = {f"x{i}": a for i, a in enumerate(feeds)}
    (first,), (second,) = plan.run(named), plan.run(named)
    np.testing.assert_array_equal(first, second)  # nothing read from a workspace left unwritten
    return first


# the decoder layer, and planes whose tiles leave a partial panel, several blocks of a few,
# or output channels that fill no packed block of 8 (U's rows padded with zeros)
LAYERS = [((1, 64, 128, 128), 32), ((2, 32, 21, 19), 20), ((1, 40, 9, 70), 6),
          ((3, 33, 30, 30), 64)]


@pytest.mark.parametrize("xs,cout", LAYERS, ids=[f"{c}x{x}" for x, c in LAYERS])
def test_row_tiles_match_numpy_and_the_blas(monkeypatch, xs, cout):
    x = RNG.standard_normal(xs, dtype=np.float32)
    w = (RNG.standard_normal((cout, xs[1], 3, 3)) / np.sqrt(9 * xs[1])).astype(np.float32)
    b = RNG.standard_normal(cout, dtype=np.float32)

    def layer(a, k, bias):
        return F.relu(F.conv2d(a, k, bias, padding=1))
    shapes = [xs, w.shape, b.shape]
    got = {t: outputs(layer, shapes, (x, w, b), monkeypatch, t) for t in (1, 2, 3)}
    for t in (2, 3):  # the blocks differ with the plan's threads; each tile's sum does not
        np.testing.assert_array_equal(got[t], got[1])
    ref = np.maximum(conv_ref(x, w, 1) + b.reshape(1, -1, 1, 1), 0)
    scale = float(np.abs(x).max() * np.abs(w).max() * xs[1] * 9)
    np.testing.assert_allclose(got[1], ref, rtol=0, atol=1e-6 * scale)
    blas = outputs(layer, shapes, (x, w, b), monkeypatch, 1, isa="base")
    np.testing.assert_allclose(got[1], blas, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("threads", [1, 2])
def test_row_tiles_run_the_data_gradient(monkeypatch, threads):
    # the training step's dx of the decoder layer at 32x32: dy's 32 channels back to 64, the
    # filters turned and packed (and 20 channels back to 12: a part-filled packed block)
    for xs, cout in (((2, 64, 32, 32), 32), ((1, 12, 17, 15), 20)):
        w = RNG.standard_normal((cout, xs[1], 3, 3), dtype=np.float32)
        dy = RNG.standard_normal((xs[0], cout, *xs[2:]), dtype=np.float32)
        dx = outputs(lambda k, d, xs=xs: C.conv2d_backward_data(
            k, d, xs[2:], stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1),
            [w.shape, dy.shape], (w, dy), monkeypatch, threads)
        # dx is dy convolved by the filters with in and out swapped, turned by 180 degrees
        ref = conv_ref(dy, np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]), 1)
        scale = float(np.abs(dy).max() * np.abs(w).max() * cout * 9)
        np.testing.assert_allclose(dx, ref, rtol=0, atol=1e-6 * scale)
