"""The int8 GEMV of few columns (qgemm.h's qg_gemv_*): a linear layer of up to QG_GEMV_MAX rows
runs it on the AVX2 and portable variants, in passes of up to 4 columns. Its integers equal the
tiles' and the int64 reference's (tests/quant_reference.py) bitwise: odd sizes (K not a multiple
of 2, 16, 32 or 64; 1 to 5, 8 and 9 columns; odd output channels, fewer and more than a 16-row
block), every epilogue (int32, int8 and uint8 storage, relu, weight zero points, bias,
saturation), 1 and 2 threads."""
import numpy as np
import pytest
from quant_reference import multipliers, quantized_conv2d, quantized_linear

from mgegraph._kernels import qgemm
from mgegraph.ir.quant import QuantParams

ISAS = qgemm.available_isas()
RANGE = {"int8": (-128, 128), "uint8": (0, 256)}
ZY = {"int8": -5, "uint8": 121, "int32": 0}


@pytest.fixture(params=ISAS)
def isa(request):
    before = qgemm.set_int8_isa(request.param)
    yield request.param
    qgemm.set_int8_isa(before)


def _case(rng, rows, k, oc, xd, wd, zw_offset):
    middle = 128 if wd == "uint8" else 0
    x = rng.integers(*RANGE[xd], (rows, k)).astype(xd)
    w = rng.integers(*RANGE[wd], (oc, k)).astype(wd)
    zw = middle + rng.integers(-zw_offset, zw_offset + 1, oc)
    xp = QuantParams((0.03,), (7 if xd == "int8" else 131,), None)
    wp = QuantParams(tuple(rng.uniform(0.005, 0.02, oc)), tuple(map(int, zw)), 0)
    return x, xp, w, wp


def _every_way(x, xp, w, wp, bias, out, relu, out_scale=0.4):
    """the reference, then (way, threads, result) of the tiles and the GEMV"""
    attrs = dict(out_dtype=out, out_scale=None if out == "int32" else out_scale,
                 out_zero_point=ZY[out], relu=relu)
    mult = None if out == "int32" else multipliers(xp.scale, wp.scales, out_scale)
    expected = quantized_linear(x, xp, w, wp, bias, **attrs)
    got = [(way, threads, qgemm.linear(x, xp.zero_point, w, np.array(wp.zero_points), bias,
                                       mult, out, ZY[out], relu, threads, way))
           for way in ("gemv", "tiles", "rule") for threads in (1, 2)]
    return expected, got


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("k, oc", [(1, 1), (7, 3), (33, 17), (63, 9), (257, 19), (515, 37),
                                   (1029, 5)])
@pytest.mark.parametrize("xd, wd, out, relu, zw_offset", [
    ("uint8", "int8", "uint8", True, 0),
    ("int8", "uint8", "int8", False, 2),
    ("uint8", "int8", "int32", False, 3),
    ("int8", "int8", "int8", True, 1),
])
def test_the_gemv_gives_the_tiles_and_the_reference_integers(isa, rows, k, oc, xd, wd, out,
                                                             relu, zw_offset):
    rng = np.random.default_rng(rows * 1000 + k)
    x, xp, w, wp = _case(rng, rows, k, oc, xd, wd, zw_offset)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    expected, got = _every_way(x, xp, w, wp, bias, out, relu)
    for way, threads, y in got:
        assert y.dtype == expected.dtype
        np.testing.assert_array_equal(y, expected, err_msg=f"{way}, {threads} threads")


@pytest.mark.parametrize("rows, k", [(1, 255), (3, 256), (4, 2049)])
def test_extreme_operands_never_saturate_the_int16_sums(isa, rows, k):
    # every k at the ends: x' 255 (both nibbles 15) against weights -128, the largest int16
    # partial sums the GEMV keeps (8 steps of 32 k: 30720); K 2049 spans many such chunks
    x = np.full((rows, k), 255, np.uint8)
    x[1:, ::3] = 0
    w = np.full((21, k), -128, np.int8)
    w[1] = 127
    w[2, ::2] = 127
    xp = QuantParams((0.03,), (0,), None)
    wp = QuantParams((0.01,) * 21, (0,) * 21, 0)
    expected, got = _every_way(x, xp, w, wp, None, "int32", False)
    assert abs(int(expected[0, 0])) == 255 * 128 * k  # the sums reach the ends
    for way, threads, y in got:
        np.testing.assert_array_equal(y, expected, err_msg=f"{way}, {threads} threads")


def test_requantisation_saturates_and_ties_go_to_even(isa):
    rng = np.random.default_rng(5)
    x, xp, w, wp = _case(rng, 2, 40, 13, "uint8", "int8", 0)
    for out_scale in (0.05, 1000.0, 1 / 3):  # saturating, near zero, ties among the halves
        for out in ("int8", "uint8"):
            expected, got = _every_way(x, xp, w, wp, None, out, False, out_scale)
            for way, threads, y in got:
                np.testing.assert_array_equal(y, expected, err_msg=f"{way} {out} {out_scale}")


def test_the_rule_runs_few_columns_as_a_gemv_where_the_variant_has_one():
    # equal integers cannot tell the ways apart; a wrong pick shows as time only, so the rule
    # is read from the variant table the kernels use
    assert qgemm.gemv_columns("portable") == qgemm.gemv_columns("avx2") == 8
    for isa in ("avxvnni", "avx512vnni", "amx"):
        assert qgemm.gemv_columns(isa) == 0
    with pytest.raises(ValueError, match="unknown int8 variant"):
        qgemm.gemv_columns("sse2")


CONVS = [  # (n, c, h, w), (oc, kh, kw), stride, padding, groups: 1 to 8 output cells
    ((1, 13, 1, 1), (19, 1, 1), 1, 0, 1),    # one cell, K 13
    ((2, 37, 2, 2), (21, 1, 1), 1, 0, 1),    # 1x1 on 2x2
    ((3, 9, 2, 2), (17, 3, 3), 1, 1, 1),     # 3x3 padded on 2x2, K 81, 3 images
    ((1, 70, 4, 3), (11, 1, 1), 2, 0, 1),    # 1x1 stride 2: 2x2 cells from 4x3
    ((2, 6, 3, 2), (9, 3, 3), 1, 1, 3),      # groups, 6 cells
    ((1, 5, 2, 4), (33, 3, 3), 1, 1, 1),     # 8 cells, 33 channels: 3 row blocks
]


@pytest.mark.parametrize("x_shape, w_dims, stride, padding, groups", CONVS)
@pytest.mark.parametrize("xd, wd, out, relu, zw_offset", [
    ("uint8", "int8", "uint8", True, 0),
    ("int8", "uint8", "int32", False, 2),
    ("int8", "int8", "int8", False, 1),
])
def test_a_convolution_of_few_cells_as_a_gemv(isa, x_shape, w_dims, stride, padding, groups,
                                              xd, wd, out, relu, zw_offset):
    rng = np.random.default_rng(sum(x_shape) * 7 + w_dims[0])
    oc, kh, kw = w_dims
    x, xp, _, wp = _case(rng, 1, 1, oc, xd, wd, zw_offset)
    x = rng.integers(*RANGE[xd], x_shape).astype(xd)
    w = rng.integers(*RANGE[wd], (oc, x_shape[1] // groups, kh, kw)).astype(wd)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    geometry = dict(stride=(stride,) * 2, padding=(padding,) * 2, dilation=(1, 1), groups=groups)
    attrs = dict(out_dtype=out, out_scale=None if out == "int32" else 0.4,
                 out_zero_point=ZY[out], relu=relu)
    mult = None if out == "int32" else multipliers(xp.scale, wp.scales, 0.4)
    expected = quantized_conv2d(x, xp, w, wp, bias, **geometry, **attrs)
    for way in ("gemv", "tiles", "rule"):
        for threads in (1, 2):
            got = qgemm.conv2d(x, xp.zero_point, w, np.array(wp.zero_points), bias, mult,
                               geometry["stride"], geometry["padding"], (1, 1), groups, out,
                               ZY[out], relu, threads, way)
            np.testing.assert_array_equal(got, expected, err_msg=f"{way}, {threads} threads")


def test_a_gemv_of_too_many_cells_is_refused():
    x = np.zeros((1, 2, 3, 3), np.uint8)
    w = np.zeros((2, 2, 1, 1), np.int8)
    with pytest.raises(ValueError, match="a GEMV takes at most 8 output cells; this "
                                         "convolution has 9"):
        qgemm.conv2d(x, 0, w, 0, None, None, way="gemv")


def test_an_unknown_way_is_refused():
    x = np.zeros((1, 4), np.uint8)
    w = np.zeros((2, 4), np.int8)
    with pytest.raises(ValueError, match="quantized_linear: unknown way 'fast'"):
        qgemm.linear(x, 0, w, np.zeros(1, np.int32), None, None, "int32", way="fast")


def test_packed_weights_of_another_shape_are_refused():
    x = np.zeros((1, 4), np.uint8)
    w = np.zeros((2, 4), np.int8)
    packed = qgemm.packed_weights(np.zeros((3, 4), np.int8), 0, None)
    with pytest.raises(ValueError, match=r"quantized_linear: packed weights of \d+ bytes"):
        qgemm.linear(x, 0, w, np.zeros(1, np.int32), None, None, "int32", packed=packed)
