"""The fast int8 kernels (_kernels/qgemm.pyx over qgemm.h, qgemm_amx.h and qconv.h): every
instruction-set variant this CPU runs (AMX where the CPU and the kernel grant the tiles) gives
tests/quant_reference.py's integers bitwise, on odd sizes (K not a multiple of 4 nor of an AMX
tile's 64, columns not of 16 nor 32, rows not of the 8-row tile nor the 32-row AMX block), every
geometry, both storage types, zero points, bias, relu and saturation, at 1 and 2 threads."""
import numpy as np
import pytest
from quant_reference import multipliers, quantized_conv2d, quantized_linear

from mgegraph._kernels import qgemm
from mgegraph.ir.quant import QuantParams

ISAS = qgemm.available_isas()
RANGE = {"int8": (-128, 128), "uint8": (0, 256)}


@pytest.fixture(params=ISAS)
def isa(request):
    before = qgemm.set_int8_isa(request.param)
    yield request.param
    qgemm.set_int8_isa(before)


def _ints(rng, shape, dtype):
    return rng.integers(*RANGE[dtype], shape).astype(dtype)


def _operands(rng, x_shape, w_shape, xd, wd, per_channel, zw_offset=2):
    """x, w and their parameters: zero points off the middle, weight zero points nonzero
    (zw_offset 0: all at the middle of the range, the fast case)"""
    oc = w_shape[0]
    middle = 128 if wd == "uint8" else 0
    if per_channel:
        zw = middle + rng.integers(-zw_offset, zw_offset + 1, oc)
        sw = rng.uniform(0.005, 0.02, oc)
    else:
        zw, sw = np.array([middle + zw_offset]), np.array([0.011])
    xp = QuantParams((0.03,), (7 if xd == "int8" else 131,), None)
    wp = QuantParams(tuple(map(float, sw)), tuple(map(int, zw)), 0 if per_channel else None)
    return _ints(rng, x_shape, xd), xp, _ints(rng, w_shape, wd), wp


def _attrs(out, relu, out_scale=0.4, **geometry):
    zy = {"int8": -5, "uint8": 121, "int32": 0}[out]
    return dict(geometry, out_dtype=out, out_scale=None if out == "int32" else out_scale,
                out_zero_point=zy, relu=relu)


def _mult(xp, wp, attrs):
    return None if attrs["out_scale"] is None else multipliers(xp.scale, wp.scales,
                                                               attrs["out_scale"])


def _conv(x, xp, w, wp, bias, attrs, threads):
    return qgemm.conv2d(x, xp.zero_point, w, np.array(wp.zero_points), bias,
                        _mult(xp, wp, attrs), attrs["stride"], attrs["padding"],
                        attrs["dilation"], attrs["groups"], attrs["out_dtype"],
                        attrs["out_zero_point"], attrs["relu"], threads)


def _check_conv(x, xp, w, wp, bias, attrs):
    expected = quantized_conv2d(x, xp, w, wp, bias, **attrs)
    for threads in (1, 2):
        got = _conv(x, xp, w, wp, bias, attrs, threads)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected, err_msg=f"{threads} threads")
    return expected


CONVS = [  # (n, c, h, w), (oc, k), stride, padding, dilation, groups
    ((2, 13, 9, 7), (19, 1), 1, 0, 1, 1),    # 1x1 in place, K 13
    ((1, 64, 11, 13), (24, 1), 1, 0, 1, 1),  # 1x1, 143 columns
    ((1, 9, 20, 21), (10, 1), 1, 0, 1, 1),   # 420 columns: 9 panels, split panel-major
    ((1, 8, 6, 6), (16, 1), 2, 0, 1, 1),     # 1x1 stride 2 (patches)
    ((2, 5, 10, 9), (11, 3), 1, 1, 1, 1),    # 3x3, K 45
    ((1, 7, 12, 11), (9, 3), 2, 1, 1, 1),    # stride 2
    ((1, 6, 13, 12), (10, 5), 1, 2, 1, 1),   # 5x5
    ((1, 4, 12, 12), (8, 3), 1, 2, 2, 1),    # dilation
    ((1, 6, 9, 10), (9, 3), (1, 2), (2, 0), (2, 1), 3),  # groups, uneven geometry
    ((2, 6, 9, 8), (6, 3), 1, 1, 1, 6),      # depthwise
    ((1, 5, 11, 10), (5, 5), 2, 2, 1, 5),    # depthwise 5x5 stride 2
    ((1, 70, 9, 11), (37, 3), 1, 1, 1, 1),   # K 630, 37 outputs: AMX blocks of 32 and of 5
    ((2, 64, 6, 5), (33, 1), 1, 0, 1, 1),    # K 64: one AMX tile deep; 30 columns
    # small images side by side in one GEMM (qconv.h's qg_images_per_gemm)
    ((7, 9, 3, 5), (11, 3), 1, 1, 1, 1),     # 15 cells: 7 images, blocks cut images
    ((8, 20, 4, 4), (12, 3), 2, 1, 1, 1),    # 2 x 2 cells, stride 2: 8 images, 32 columns
    ((2, 20, 2, 2), (12, 3), 1, 1, 1, 1),    # 2 images of 4 cells: a GEMV of 8 columns
    ((40, 3, 5, 5), (5, 1), 1, 0, 1, 1),     # 1x1 in place across images; 4 GEMMs of 10
    ((6, 6, 3, 4), (9, 3), 1, 1, 1, 3),      # groups, 12 cells
    # the unfold's runs (qconv.h's qg_copy_run): vectors at strides 1 and 2, bytes at 3
    ((1, 3, 9, 70), (5, 7), 2, 3, 1, 1),     # ResNet's 7x7 stride 2: runs of 35
    ((1, 5, 5, 37), (7, 3), 1, 1, 1, 1),     # runs of 37 at stride 1
    ((1, 4, 10, 23), (6, 3), 3, 1, 1, 1),    # stride 3
]


def _pair(v):
    return (v, v) if isinstance(v, int) else v


@pytest.mark.parametrize("x_shape, w_dims, stride, padding, dilation, groups", CONVS)
@pytest.mark.parametrize("xd, wd, out, relu, per_channel", [
    ("uint8", "int8", "uint8", True, False),
    ("int8", "int8", "int8", False, True),
    ("int8", "uint8", "int32", False, True),
    ("uint8", "uint8", "int8", True, True),
])
def test_conv_is_the_reference(isa, x_shape, w_dims, stride, padding, dilation, groups, xd, wd,
                               out, relu, per_channel):
    rng = np.random.default_rng(len(isa) + x_shape[1])
    oc, k = w_dims
    x, xp, w, wp = _operands(rng, x_shape, (oc, x_shape[1] // groups, k, k), xd, wd,
                             per_channel)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    attrs = _attrs(out, relu, stride=_pair(stride), padding=_pair(padding),
                   dilation=_pair(dilation), groups=groups)
    _check_conv(x, xp, w, wp, bias, attrs)


@pytest.mark.parametrize("zw_offset", (0, 3))
def test_conv_without_bias_and_with_weight_zero_points(isa, zw_offset):
    rng = np.random.default_rng(3)
    x, xp, w, wp = _operands(rng, (1, 9, 7, 8), (13, 9, 3, 3), "uint8", "int8", False, zw_offset)
    _check_conv(x, xp, w, wp, None, _attrs("int8", False, stride=(1, 1), padding=(1, 1),
                                           dilation=(1, 1), groups=1))


@pytest.mark.parametrize("out", ("int8", "uint8"))
def test_requantisation_saturates_at_both_ends(isa, out):
    rng = np.random.default_rng(5)
    x, xp, w, wp = _operands(rng, (1, 16, 6, 6), (17, 16, 3, 3), "int8", "int8", True)
    attrs = _attrs(out, False, out_scale=0.01, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                   groups=1)
    y = _check_conv(x, xp, w, wp, None, attrs)
    lo, hi = RANGE[out]
    assert (y == lo).any() and (y == hi - 1).any()


def test_rounding_ties_go_to_even(isa):
    # one input channel, weight 1: acc = x - zx, multiplier 0.5 makes every odd acc a tie
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 16, 16)
    xp = QuantParams((0.5,), (0,), None)
    w = np.ones((1, 1, 1, 1), np.int8)
    wp = QuantParams((1.0,), (0,), None)
    attrs = _attrs("int8", False, out_scale=1.0, stride=(1, 1), padding=(0, 0),
                   dilation=(1, 1), groups=1)
    attrs["out_zero_point"] = 0
    y = _check_conv(x, xp, w, wp, None, attrs)
    assert y.ravel()[128 + 3] == 2 and y.ravel()[128 + 5] == 2  # 1.5 -> 2, 2.5 -> 2


@pytest.mark.parametrize("rows, k, oc", [(1, 1, 1), (7, 13, 19), (33, 64, 8), (3, 130, 17),
                                         (100, 200, 50), (17, 128, 33), (64, 1000, 16)])
@pytest.mark.parametrize("xd, wd, out, relu, per_channel", [
    ("uint8", "int8", "uint8", True, True),
    ("int8", "uint8", "int8", False, False),
    ("int8", "int8", "int32", False, True),
])
def test_linear_is_the_reference(isa, rows, k, oc, xd, wd, out, relu, per_channel):
    rng = np.random.default_rng(rows + k)
    x, xp, w, wp = _operands(rng, (rows, k), (oc, k), xd, wd, per_channel)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    attrs = _attrs(out, relu)
    expected = quantized_linear(x, xp, w, wp, bias, **attrs)
    for threads in (1, 2):
        got = qgemm.linear(x, xp.zero_point, w, np.array(wp.zero_points), bias,
                           _mult(xp, wp, attrs), out, attrs["out_zero_point"], relu, threads)
        np.testing.assert_array_equal(got, expected, err_msg=f"{threads} threads")


def test_linear_keeps_leading_axes():
    rng = np.random.default_rng(8)
    x, xp, w, wp = _operands(rng, (2, 3, 10), (5, 10), "uint8", "int8", False)
    attrs = _attrs("int32", False)
    got = qgemm.linear(x, xp.zero_point, w, np.array(wp.zero_points), None, None, "int32")
    np.testing.assert_array_equal(got, quantized_linear(x, xp, w, wp, None, **attrs))


def test_sums_past_int32_wrap_as_every_int32_accumulation_does(isa):
    # outside the ops' contract (the reference saturates there): the sums are the true ones
    # modulo 2^32, as the portable loops of quantized.pyx give them
    rng = np.random.default_rng(9)
    x, xp, w, wp = _operands(rng, (1, 16, 5, 5), (3, 16, 3, 3), "uint8", "int8", False)
    bias = np.array([2 ** 31 - 10, -(2 ** 31) + 10, 5], np.int32)
    attrs = _attrs("int32", False, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    sums = quantized_conv2d(x, xp, w, wp, None, **attrs).astype(np.int64)
    wrapped = (sums + bias.reshape(1, 3, 1, 1)).astype(np.uint32).view(np.int32)
    assert (wrapped[0, :2] != np.clip(sums + bias.reshape(1, 3, 1, 1), -2 ** 31,
                                      2 ** 31 - 1)[0, :2]).any()
    np.testing.assert_array_equal(_conv(x, xp, w, wp, bias, attrs, 1), wrapped)


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return {w for line in f if line.startswith("flags") for w in line.split()}
    except OSError:
        return set()


def test_the_amx_variant_is_offered_where_the_cpu_and_kernel_allow():
    if "amx_int8" not in _cpu_flags():
        pytest.skip("this CPU has no AMX-INT8: the int8 kernels run on VNNI or narrower")
    if "amx" not in ISAS:
        pytest.skip("the kernel refused this process the AMX tile state "
                    "(arch_prctl ARCH_REQ_XCOMP_PERM): the int8 kernels run on VNNI")
    assert ISAS[-1] == "amx"
    assert qgemm.amx_peak_loop(10) == 0


def test_the_variant_can_be_chosen_and_an_unknown_one_is_refused():
    before = qgemm.set_int8_isa("portable")
    try:
        assert qgemm.int8_isa() == "portable"
        with pytest.raises(ValueError, match="unknown int8 variant"):
            qgemm.set_int8_isa("sse9")
    finally:
        qgemm.set_int8_isa(before)
    assert qgemm.int8_isa() == before


# ---- through the ops: quantized.pyx's kernels take the fast way wherever it applies ----------

def _compiled(build, feeds):
    import mgegraph as mg
    g = mg.Graph()
    return mg.compile([build(g)]).run(feeds)[0]


@pytest.mark.parametrize("x_shape, w_dims, stride, padding, dilation, groups", [
    ((2, 19, 9, 7), (21, 3), 1, 1, 1, 1),
    ((1, 8, 10, 10), (12, 1), 2, 0, 1, 2),
    ((2, 6, 9, 8), (6, 3), 2, 1, 1, 6),
])
def test_the_conv_op_runs_the_fast_kernels(isa, x_shape, w_dims, stride, padding, dilation,
                                           groups):
    from threadpoolctl import threadpool_limits

    from mgegraph.ops import quantized as Q
    rng = np.random.default_rng(11)
    oc, k = w_dims
    x, xp, w, wp = _operands(rng, x_shape, (oc, x_shape[1] // groups, k, k), "int8", "int8",
                             True)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    attrs = _attrs("uint8", True, stride=_pair(stride), padding=_pair(padding),
                   dilation=_pair(dilation), groups=groups)

    def build(g):
        return Q.quantized_conv2d(g.input("x", x.shape, "int8", quant=xp), g.const(w, quant=wp),
                                  g.const(bias), **attrs)
    want = quantized_conv2d(x, xp, w, wp, bias, **attrs)
    np.testing.assert_array_equal(_compiled(build, {"x": x}), want)
    with threadpool_limits(1, user_api="openmp"):
        np.testing.assert_array_equal(_compiled(build, {"x": x}), want)


@pytest.mark.parametrize("x_shape", [(5, 7), (2, 3, 33), (40, 130)])
def test_the_linear_op_runs_one_gemm_over_its_rows(isa, x_shape):
    from mgegraph.ops import quantized as Q
    rng = np.random.default_rng(x_shape[-1])
    x, xp, w, wp = _operands(rng, x_shape, (11, x_shape[-1]), "uint8", "uint8", True)
    attrs = _attrs("int32", False)

    def build(g):
        return Q.quantized_linear(g.input("x", x.shape, "uint8", quant=xp),
                                  g.const(w, quant=wp), **attrs)
    np.testing.assert_array_equal(_compiled(build, {"x": x}),
                                  quantized_linear(x, xp, w, wp, None, **attrs))


PORTABLE_MAIN = r"""
#include <stdio.h>
#include "qconv.h"
/* a 3x3 convolution, padding 1, of x (C, H, W) uint8 zero point 3 by w (M, C, 3, 3) int8 zero
 * point 0, int32 sums, on the variant a non-x86 machine builds; read from stdin, printed */
int main(void) {
    enum { C = 5, H = 6, W = 7, M = 9, K = C * 9 };
    static uint8_t x[C * H * W], w[M * K], b[16 * 12 * 64];
    static int32_t zw[M], rc[M], y[M * H * W];
    static int8_t a[16 * 12 * 32];
    for (int i = 0; i < C * H * W; i++) scanf("%hhu", &x[i]);
    for (int i = 0; i < M * K; i++) scanf("%hhu", &w[i]);
    qg_conv g = {C, H, W, 3, 3, 1, 1, 1, 1, 1, 1, H, W};
    uint8_t* scratch = malloc((size_t)qg_pack_b_scratch(&g, 0, H * W));
    qg_pack_a(w, 0, M, K, K, zw, 3, NULL, a, rc);
    qg_pack_b_conv(x, 0, &g, 0, H * W, 3, 0, scratch, b);
    qg_variant var = qg_variant_of(qg_widest());
    qg_operands op = {a, b, M, H * W, qg_groups(K)};
    qg_epilogue e = {rc, NULL, NULL, NULL, 0, 0, 0, QG_OUT_INT32, y, H * W, 1};
    qg_gemm_tiles(&var, &op, &e, 0, qg_tiles(M, H * W));
    for (int i = 0; i < M * H * W; i++) printf("%d\n", y[i]);
    free(scratch);
    return var.isa;
}
"""


def test_the_build_of_a_machine_without_x86_compiles_and_gives_the_integers(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    kernels = Path(qgemm.__file__).parent
    (tmp_path / "main.c").write_text(PORTABLE_MAIN)
    subprocess.run([cc, "-O1", "-Wall", "-Werror", "-Wno-unused-function", "-DQG_PORTABLE_ONLY",
                    f"-I{kernels}", str(tmp_path / "main.c"), "-o", str(tmp_path / "main")],
                   check=True)
    rng = np.random.default_rng(13)
    x, w = _ints(rng, (1, 5, 6, 7), "uint8"), _ints(rng, (9, 5, 3, 3), "int8")
    feed = " ".join(map(str, [*x.ravel(), *w.view(np.uint8).ravel()]))
    run = subprocess.run([str(tmp_path / "main")], input=feed, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0  # the portable variant: the only one built
    got = np.array(run.stdout.split(), np.int32).reshape(1, 9, 6, 7)
    xp, wp = QuantParams((0.1,), (3,), None), QuantParams((0.1,), (0,), None)
    attrs = _attrs("int32", False, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    np.testing.assert_array_equal(got, quantized_conv2d(x, xp, w, wp, None, **attrs))


@pytest.mark.parametrize("rows, k, oc", [(1, 3, 1), (7, 515, 13), (37, 1029, 37), (53, 130, 9)])
@pytest.mark.parametrize("xd, wd, zw_offset", [("uint8", "int8", 0), ("int8", "uint8", 0),
                                               ("uint8", "int8", 1)])
def test_extreme_values_give_the_reference_integers(isa, rows, k, oc, xd, wd, zw_offset):
    # operands only at the ends of their ranges (after the shift to u8 x s8: 0/255 x -128/127),
    # first row and column all at the top: two products 255 x 127 overflow int16, where a
    # vpmaddubsw tile would saturate. K 515 and 1029 cross the AVX2 tile's 512-k chunks of A;
    # odd rows and columns leave partial register blocks.
    rng = np.random.default_rng(k)
    ends = {d: np.array(RANGE[d]) - [0, 1] for d in RANGE}
    x = rng.choice(ends[xd], (rows, k)).astype(xd)
    w = rng.choice(ends[wd], (oc, k)).astype(wd)
    x[0], w[0] = ends[xd][1], ends[wd][1]
    w[-1, : k // 2] = ends[wd][0]
    middle = 128 if wd == "uint8" else 0
    xp = QuantParams((0.03,), (-128 if xd == "int8" else 0,), None)
    wp = QuantParams((0.01,), (middle + zw_offset,), None)
    attrs = _attrs("int32", False)
    expected = quantized_linear(x, xp, w, wp, None, **attrs)
    for threads in (1, 2):
        got = qgemm.linear(x, xp.zero_point, w, np.array(wp.zero_points), None, None, "int32",
                           0, False, threads)
        np.testing.assert_array_equal(got, expected, err_msg=f"{threads} threads")


def test_the_widest_variant_this_cpu_runs_is_the_default():
    flags = _cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo: the CPU's instruction sets are unknown here")
    wanted = ("amx" if {"amx_int8", "amx_tile"} <= flags and "amx" in ISAS
              else "avx512vnni" if {"avx512f", "avx512bw", "avx512_vnni"} <= flags
              else "avxvnni" if {"avx2", "avx_vnni"} <= flags
              else "avx2" if "avx2" in flags else "portable")
    before = qgemm.set_int8_isa(None)
    try:
        assert qgemm.int8_isa() == wanted
    finally:
        qgemm.set_int8_isa(before)


@pytest.mark.parametrize("x_shape, k, stride, padding, dilation", [
    ((1, 3, 7, 37), (3, 3), (1, 1), (1, 1), (1, 1)),  # rows of 37: two full 16-output runs
    ((2, 4, 12, 35), (3, 5), (3, 2), (2, 1), (1, 1)),  # strides 3 and 2: three and two phases
    ((1, 2, 13, 19), (3, 3), (1, 2), (2, 3), (2, 3)),  # dilation past the stride
    ((1, 3, 6, 5), (1, 1), (1, 1), (0, 0), (1, 1)),    # one tap: paired with a zero weight
    ((1, 2, 12, 12), (9, 9), (1, 1), (4, 4), (1, 1)),  # 81 taps: the per-tap loop
])
@pytest.mark.parametrize("xd, wd", [("uint8", "int8"), ("int8", "uint8")])
def test_depthwise_geometries_and_extreme_values(isa, x_shape, k, stride, padding, dilation,
                                                 xd, wd):
    rng = np.random.default_rng(sum(x_shape))
    c = x_shape[1]
    ends = {d: np.array(RANGE[d]) - [0, 1] for d in RANGE}
    x = rng.choice(ends[xd], x_shape).astype(xd)  # |x - zx| and |w - zw| up to 255
    w = rng.choice(ends[wd], (c, 1) + k).astype(wd)
    xp = QuantParams((0.03,), (127 if xd == "int8" else 0,), None)
    step = rng.integers(0, 2, c)
    zw = 255 - step if wd == "uint8" else -128 + step
    wp = QuantParams(tuple([0.01] * c), tuple(map(int, zw)), 0)
    attrs = _attrs("int32", False, stride=stride, padding=padding, dilation=dilation, groups=c)
    _check_conv(x, xp, w, wp, rng.integers(-9, 9, c).astype(np.int32), attrs)
