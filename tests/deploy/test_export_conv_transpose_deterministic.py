"""The transposed convolution's "tiles" way (conv_data_gemm.h: the GEMM on gemm_tile.h's panels,
then col2im), which compile(tune="deterministic") takes wherever the rules' way is the BLAS's:
its outputs against a float64 reference, the same bits on one and two threads of the executor,
and the C runtime's (which runs the same header at every stride) bit for bit on 1 and 2
threads: strides 2 and (2, 3), padding and output padding, 2x2/2, groups, dilation, odd
channels, 1x1 kernels at stride 1 and 2, the bias the epilogue pass folds in, batch 1 and 3."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel
from mgegraph._kernels.lowering import conv as lowering
from mgegraph.deploy import export_c

from .cbuild import cc, make, model_run

# name -> (x's shape, the weight's (in, out / groups, kh, kw), the options, a bias)
CASES = {
    "3x3/2 padded, output padding": ((1, 13, 9, 10), (13, 7, 3, 3),
                                     dict(stride=2, padding=1, output_padding=1), True),
    "2x2/2, batch 3": ((3, 9, 7, 11), (9, 5, 2, 2), dict(stride=2), True),
    "grouped dilated 3x3/2": ((3, 12, 5, 6), (12, 7, 3, 3),
                              dict(stride=2, padding=1, groups=3, dilation=2, output_padding=1),
                              True),
    "stride (2, 3), unbiased": ((1, 8, 5, 6), (8, 3, 2, 4), dict(stride=(2, 3), groups=2), False),
    "1x1/2": ((3, 11, 5, 7), (11, 9, 1, 1), dict(stride=2), True),
    "1x1 at stride 1": ((1, 12, 5, 7), (12, 9, 1, 1), {}, True),
}


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def reference(x, w, bias, stride=1, padding=0, dilation=1, groups=1, output_padding=0):
    """conv_transpose2d in float64: each input cell's product with a tap added where the tap
    lands, then the padding cropped off."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    oph, opw = _pair(output_padding)
    n, c, h, wd = x.shape
    cg, og, kh, kw = w.shape[0] // groups, w.shape[1], w.shape[2], w.shape[3]
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((n, og * groups, oh + 2 * ph, ow + 2 * pw))
    for g in range(groups):
        xg, wg = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + (h - 1) * sh + 1, sh)
                cols = slice(j * dw, j * dw + (wd - 1) * sw + 1, sw)
                full[:, g * og:(g + 1) * og, rows, cols] += np.einsum(
                    "nchw,co->nohw", xg, wg[:, :, i, j])
    y = full[:, :, ph:ph + oh, pw:pw + ow]
    return y if bias is None else y + bias[None, :, None, None]


def _graph(case, seed=0):
    x_shape, w_shape, options, has_bias = CASES[case]
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    bias = rng.standard_normal(w_shape[1] * options.get("groups", 1),
                               dtype=np.float32) if has_bias else None
    g = mg.Graph()
    y = F.conv_transpose2d(g.input("x", x_shape, "float32"), g.param("w", w),
                           None if bias is None else g.param("b", bias), **options)
    feeds = {"x": rng.standard_normal(x_shape, dtype=np.float32)}
    return y, feeds, reference(feeds["x"], w, bias, **options)


def data_ways(plan) -> list:
    return [ins.choice.path for ins in plan.instructions if ins.op == "conv2d_backward_data"]


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_deterministic_mode_takes_the_tiles_and_c_gives_their_bits(tmp_path, monkeypatch,
                                                                       case):
    if "tiles" not in lowering.applicable_paths("conv2d_backward_data", "float32", (3, 3),
                                                (2, 2), (0, 0), (1, 1), 1, 1, 0):
        pytest.skip("this CPU has no FMA: no tiles way")
    cc()
    y, feeds, want = _graph(case)
    plans = {}
    for threads in (1, 2) if parallel.max_threads() > 1 else (1,):
        # the rules' threads, which the deterministic mode keeps for the tiles way
        monkeypatch.setattr(lowering, "_threads", lambda batch, flops, n=threads: n)
        plans[threads] = mg.compile([y], tune="deterministic")
        assert data_ways(plans[threads]) == [f"tiles, {threads} thread{'s' * (threads > 1)}"]
    (one,), (two,) = plans[1].run(feeds), plans[max(plans)].run(feeds)
    np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert np.array_equal(_bits(one), _bits(two))
    exported = export_c(plans[max(plans)], tmp_path)
    make(exported.directory)
    for threads in (1, 2):
        done, (got,) = model_run(exported.directory, feeds, exported.input_names,
                                 options=["--threads", str(threads)])
        assert done.returncode == 0, done.stderr
        assert np.array_equal(_bits(got), _bits(one)), threads


def test_the_rules_keep_the_blas_at_a_stride():
    # the measured rule (conv_gemm.pxi's note above data_tiles): OpenBLAS's GEMM, faster there
    y, _, _ = _graph("3x3/2 padded, output padding")
    assert [w.split(",")[0] for w in data_ways(mg.compile([y], tune="rules"))] == ["im2col"]
