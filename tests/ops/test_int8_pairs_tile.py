"""The AVX2 vpmaddubsw tile on weights proven in range (qgemm.h's qg_pairs_fit,
qg_tile_avx2_pairs). The proof is read from the packed bytes: every k pair (2i, 2i + 1) of every
packed weight row (int8 as stored, uint8 shifted by -128, k's zero padding included) has
positive parts summing to at most 128 and negative parts to at least -128. Where it holds, the
new tile gives bitwise the widening tile's, the portable tile's and the int64 reference's
integers (tests/quant_reference.py), at the activations' ends too."""
import numpy as np
import pytest
from quant_reference import multipliers, quantized_conv2d, quantized_linear

from mgegraph._kernels import qgemm
from mgegraph.ir.quant import QuantParams
from mgegraph.ops.quantized_pack import pack_weight_array, pairs_fit


def _fits(w, groups=1) -> bool:
    oc = w.shape[0]
    packed = qgemm.packed_weights(w, np.zeros(oc, np.int32) + (128 if w.dtype == np.uint8
                                                                 else 0), None, groups)
    return qgemm.packed_pairs_fit(packed)


@pytest.mark.parametrize("pair, fits", [
    ((64, 64), True), ((64, 65), False),          # positive parts: 128, then one past
    ((-64, -64), True), ((-64, -65), False),      # negative parts: -128, then one past
    ((127, 1), True), ((127, 2), False),
    ((-128, 0), True), ((-128, -1), False),
    ((127, -128), True),                          # 127 and -128: each side in range
    ((1, 127), True), ((2, 127), False),
])
def test_a_pair_fits_up_to_128_on_each_side(pair, fits):
    w = np.zeros((3, 10), np.int8)
    w[1, 4:6] = pair  # k 4 and 5: one pair of the packed layout
    assert _fits(w) is fits


def test_the_pairs_are_the_layouts_not_any_two_neighbours():
    w = np.zeros((2, 8), np.int8)
    w[0, 1:3] = 127  # k 1 and 2: two pairs, 127 in each
    w[1, 5:7] = -128
    assert _fits(w)
    w[0, 2:4] = 127  # now k 2 and 3, one pair: 254
    assert not _fits(w)


@pytest.mark.parametrize("k", [1, 5, 63, 64, 65, 66])
def test_the_zero_padding_of_k_pairs_with_the_last_weight(k):
    w = np.zeros((4, k), np.int8)
    w[:, -1] = -128  # its pair partner is padding (k odd) or a zero
    assert _fits(w)
    if k > 1:
        w[2, -2] = -1 if k % 2 == 0 else 0  # k even: the partner is a real weight
        assert _fits(w) is (k % 2 == 1)


def test_uint8_weights_are_judged_shifted():
    w = np.full((2, 4), 128, np.uint8)  # shifted: all zero
    w[0, :2] = (255, 129)  # 127 + 1
    assert _fits(w)
    w[0, :2] = (255, 130)
    assert not _fits(w)
    w[1, 2:] = (0, 128)  # -128 + 0
    w[0, :2] = 128
    assert _fits(w)


def test_one_failing_row_or_group_turns_the_proof_off():
    rng = np.random.default_rng(0)
    w = rng.integers(-64, 64, (24, 37)).astype(np.int8)
    assert _fits(w) and _fits(w, groups=3)
    w[17, 10:12] = (100, 29)
    assert not _fits(w) and not _fits(w, groups=3)
    full = rng.integers(-128, 128, (64, 576)).astype(np.int8)
    assert not _fits(full)  # full-range weights: a pair past 128 is all but certain


def test_the_flags_keep_the_zero_point_bit():
    w = np.zeros((2, 4), np.int8)
    packed = qgemm.packed_weights(w, np.array([0, 3], np.int32), None)
    assert qgemm.packed_pairs_fit(packed)
    assert not qgemm.packed_pairs_fit(qgemm.without_pairs_fit(packed))
    assert qgemm.packed_pairs_fit(packed)  # without_pairs_fit copies


@pytest.mark.parametrize("wd, groups, k, fits", [("int8", 1, 37, True), ("uint8", 3, 70, True),
                                                 ("int8", 2, 9, False), ("uint8", 1, 130, False)])
def test_the_numpy_pack_writes_the_kernels_flags(wd, groups, k, fits):
    # the prepack pass packs constant weights in NumPy: the same bytes, the proof included
    rng = np.random.default_rng(k)
    w = _in_range(rng, (6 * groups, k), wd)
    if not fits:
        w.reshape(6 * groups, -1)[4, 6:8] = (200, 200) if wd == "uint8" else (70, 70)
    zw = (128 if wd == "uint8" else 0) + rng.integers(-2, 3, 6 * groups)
    for x_dtype in ("int8", "uint8"):
        ours = pack_weight_array(w, zw, None, groups, 5, x_dtype).view(np.uint8)
        kernels = qgemm.packed_weights(w, zw.astype(np.int32), None, groups, x_dtype == "int8",
                                       5)
        np.testing.assert_array_equal(ours, kernels)
        assert qgemm.packed_pairs_fit(kernels) is fits
    assert pairs_fit(np.array([[64, 64, -128, 0]], np.int8))
    assert not pairs_fit(np.array([[64, 65, 0, 0]], np.int8))


# ---- the tile, bitwise -----------------------------------------------------------------------

ISAS = qgemm.available_isas()
ZY = {"int8": -5, "uint8": 121, "int32": 0}


def _in_range(rng, shape, wd):
    """weights that fit: 7-bit, with some pairs at the bounds (127, 1) and (-128, 0)"""
    w = rng.integers(-64, 64, shape).astype(np.int16)
    flat = w.reshape(shape[0], -1)
    if flat.shape[1] >= 4:
        flat[::3, 0:2] = (127, 1)
        flat[1::3, 2:4] = (-128, 0)
    return (w + 128).astype(np.uint8) if wd == "uint8" else w.astype(np.int8)


def _runs(make, packed):
    """(isa, proof, threads, result) for every variant, with and without the proof"""
    out = []
    for isa in ISAS:
        before = qgemm.set_int8_isa(isa)
        try:
            for proof, p in (("proof", packed), ("no proof", qgemm.without_pairs_fit(packed))):
                for threads in (1, 2):
                    out.append((isa, proof, threads, make(p, threads)))
        finally:
            qgemm.set_int8_isa(before)
    return out


@pytest.mark.parametrize("rows, k, oc", [(9, 1, 1), (13, 7, 3), (49, 33, 17), (50, 63, 9),
                                         (17, 257, 19), (97, 515, 37), (33, 1029, 8)])
@pytest.mark.parametrize("xd, wd, out, relu, zw_offset", [
    ("uint8", "int8", "uint8", True, 0),
    ("int8", "uint8", "int8", False, 2),
    ("uint8", "int8", "int32", False, 3),
    ("int8", "int8", "int8", True, 1),
])
def test_the_linear_tiles_give_the_same_integers(rows, k, oc, xd, wd, out, relu, zw_offset):
    rng = np.random.default_rng(rows * 1000 + k)
    x = rng.integers(*((-128, 128) if xd == "int8" else (0, 256)), (rows, k)).astype(xd)
    x[0] = 127 if xd == "int8" else 255  # the activations' top: the largest pair sums
    w = _in_range(rng, (oc, k), wd)
    zw = (128 if wd == "uint8" else 0) + rng.integers(-zw_offset, zw_offset + 1, oc)
    xp = QuantParams((0.03,), (7 if xd == "int8" else 131,), None)
    wp = QuantParams(tuple(rng.uniform(0.005, 0.02, oc)), tuple(map(int, zw)), 0)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    mult = None if out == "int32" else multipliers(xp.scale, wp.scales, 0.4)
    expected = quantized_linear(x, xp, w, wp, bias, out_dtype=out,
                                out_scale=None if out == "int32" else 0.4,
                                out_zero_point=ZY[out], relu=relu)
    packed = qgemm.packed_weights(w, zw.astype(np.int32), bias, 1, xd == "int8", xp.zero_point)
    assert qgemm.packed_pairs_fit(packed)
    for isa, proof, threads, y in _runs(
            lambda p, t: qgemm.linear(x, xp.zero_point, w, zw.astype(np.int32), bias, mult, out,
                                      ZY[out], relu, t, "tiles", p), packed):
        np.testing.assert_array_equal(y, expected, err_msg=f"{isa}, {proof}, {threads} threads")


def test_the_pair_bounds_at_the_activations_ends():
    # every pair exactly at a bound against 255 (or int8 127) everywhere: the int16 pair sums
    # reach +-32640, one step from saturating
    k, oc = 130, 20
    w = np.zeros((oc, k), np.int8)
    w[0::4, 0::2], w[0::4, 1::2] = 127, 1
    w[1::4, 0::2], w[1::4, 1::2] = -128, 0
    w[2::4, 0::2], w[2::4, 1::2] = 64, 64
    w[3::4, 0::2], w[3::4, 1::2] = -64, -64
    for xd, top in (("uint8", 255), ("int8", 127)):
        x = np.full((40, k), top, xd)
        xp = QuantParams((0.03,), (0,), None)
        wp = QuantParams((0.01,) * oc, (0,) * oc, 0)
        expected = quantized_linear(x, xp, w, wp, None, out_dtype="int32")
        packed = qgemm.packed_weights(w, np.zeros(oc, np.int32), None, 1, xd == "int8", 0)
        assert qgemm.packed_pairs_fit(packed)
        for isa, proof, threads, y in _runs(
                lambda p, t: qgemm.linear(x, 0, w, np.zeros(oc, np.int32), None, None, "int32",
                                          0, False, t, "tiles", p), packed):
            np.testing.assert_array_equal(y, expected, err_msg=f"{xd} {isa} {proof} {threads}")


CONVS = [  # (n, c, h, w), (oc, kh, kw), stride, padding, groups
    ((2, 13, 9, 7), (19, 3, 3), 1, 1, 1),    # K 117
    ((1, 64, 8, 8), (64, 3, 3), 1, 1, 1),    # ResNet-18's stage 1, small
    ((3, 6, 7, 5), (9, 3, 3), 2, 1, 3),      # groups, stride 2
    ((1, 70, 10, 6), (11, 1, 1), 1, 0, 1),   # 1x1, K 70
]


@pytest.mark.parametrize("x_shape, w_dims, stride, padding, groups", CONVS)
@pytest.mark.parametrize("xd, wd, out", [("uint8", "int8", "uint8"), ("int8", "uint8", "int8")])
def test_the_convolution_tiles_give_the_same_integers(x_shape, w_dims, stride, padding, groups,
                                                      xd, wd, out):
    rng = np.random.default_rng(sum(x_shape) + w_dims[0])
    oc, kh, kw = w_dims
    x = rng.integers(*((-128, 128) if xd == "int8" else (0, 256)), x_shape).astype(xd)
    w = _in_range(rng, (oc, x_shape[1] // groups, kh, kw), wd)
    zw = (128 if wd == "uint8" else 0) + rng.integers(-1, 2, oc)
    xp = QuantParams((0.03,), (9 if xd == "int8" else 140,), None)
    wp = QuantParams(tuple(rng.uniform(0.005, 0.02, oc)), tuple(map(int, zw)), 0)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    geometry = dict(stride=(stride,) * 2, padding=(padding,) * 2, dilation=(1, 1), groups=groups)
    mult = multipliers(xp.scale, wp.scales, 0.4)
    expected = quantized_conv2d(x, xp, w, wp, bias, **geometry, out_dtype=out, out_scale=0.4,
                                out_zero_point=ZY[out], relu=False)
    packed = qgemm.packed_weights(w, zw.astype(np.int32), bias, groups, xd == "int8",
                                  xp.zero_point)
    assert qgemm.packed_pairs_fit(packed)
    for isa, proof, threads, y in _runs(
            lambda p, t: qgemm.conv2d(x, xp.zero_point, w, zw.astype(np.int32), bias, mult,
                                      geometry["stride"], geometry["padding"], (1, 1), groups,
                                      out, ZY[out], False, t, "tiles", p), packed):
        np.testing.assert_array_equal(y, expected, err_msg=f"{isa}, {proof}, {threads} threads")


def test_full_range_weights_keep_the_widening_tile_and_its_integers():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (40, 300)).astype(np.uint8)
    w = rng.integers(-128, 128, (24, 300)).astype(np.int8)
    w[:, 0:2] = 127  # a pair vpmaddubsw would saturate on: 255 * 254
    x[:, 0:2] = 255
    xp = QuantParams((0.03,), (0,), None)
    wp = QuantParams((0.01,) * 24, (0,) * 24, 0)
    expected = quantized_linear(x, xp, w, wp, None, out_dtype="int32")
    packed = qgemm.packed_weights(w, np.zeros(24, np.int32), None)
    assert not qgemm.packed_pairs_fit(packed)
    for isa in ISAS:
        before = qgemm.set_int8_isa(isa)
        try:
            y = qgemm.linear(x, 0, w, np.zeros(24, np.int32), None, None, "int32", 0, False, 1,
                             "tiles", packed)
        finally:
            qgemm.set_int8_isa(before)
        np.testing.assert_array_equal(y, expected, err_msg=isa)


@pytest.mark.skipif("avx2" not in ISAS, reason="the vpmaddubsw tile is AVX2's")
def test_a_forged_proof_saturates_which_is_why_it_is_read_from_the_bytes():
    # shows the AVX2 variant runs the vpmaddubsw tile where the flag says so: on weights that do
    # not fit, the int16 pair sums saturate (255 * 254 > 32767)
    w = np.full((8, 64), 127, np.int8)
    x = np.full((16, 64), 255, np.uint8)
    packed = qgemm.packed_weights(w, np.zeros(8, np.int32), None)
    forged = packed.copy()
    forged[-4:].view(np.int32)[0] |= 2  # qgemm.h's QG_PAIRS_FIT
    assert not qgemm.packed_pairs_fit(packed) and qgemm.packed_pairs_fit(forged)
    before = qgemm.set_int8_isa("avx2")
    try:
        run = [qgemm.linear(x, 0, w, np.zeros(8, np.int32), None, None, "int32", 0, False, 1,
                            "tiles", p) for p in (packed, forged)]
    finally:
        qgemm.set_int8_isa(before)
    assert (run[0] == 255 * 127 * 64).all()
    assert (run[1] == 2 * 32767 * 16).all()  # 16 k groups of two saturated pair sums
