"""Every variant of the int8/uint8 pooling kernels (_kernels/pool_int.pxi and pool_int.h: the
per-window loop, the row passes in portable C, AVX2 and AVX-512BW) gives the exact integers of
ops/conv.py's rule: a max of the cells inside the input, an average rounded half to even with
counted padding holding the zero point. Checked against an exact NumPy reference on odd sizes,
rows wider than one chunk of the row passes, windows past their limits, and 1 and 2 threads."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import parallel, pool
from mgegraph.ir.quant import per_tensor

ISAS = pool.int8_pool_isas()
STORAGE = (np.int8, np.uint8)
RANGES = {np.int8: (-128, 127), np.uint8: (0, 255)}
# kernel, stride, padding, dilation, ceil_mode
WINDOWS = [
    ((2, 2), (2, 2), (0, 0), (1, 1), False),  # tiling
    ((3, 3), (2, 2), (1, 1), (1, 1), False),  # ResNet's stem
    ((3, 3), (1, 1), (1, 1), (1, 1), False),
    ((3, 3), (3, 3), (0, 0), (1, 1), True),   # ceil mode: a clamped last window
    ((2, 5), (1, 3), (1, 2), (1, 1), True),
    ((3, 2), (2, 1), (1, 0), (2, 3), False),  # dilated
    ((1, 7), (4, 5), (0, 3), (1, 1), True),
]


@pytest.fixture(params=ISAS)
def isa(request):
    before = pool.set_int8_pool_isa(request.param)
    yield request.param
    pool.set_int8_pool_isa(before)


def _q(shape, dtype, seed):
    lo, hi = RANGES[dtype]
    q = np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dtype)
    q.reshape(-1)[:4] = [lo, hi, hi, lo]
    return q


def _zp(dtype):
    return -9 if dtype is np.int8 else 140


def _axis(size, out, k, s, p, d):
    """Per window along one axis: cell indices (k), inside the input, inside it or its padding."""
    cells = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
    return np.clip(cells, 0, size - 1), (cells >= 0) & (cells < size), cells < size + p


def _round_half_even(total, div):
    q, r = np.divmod(total, div)  # floor division: 0 <= r < div
    return q + ((2 * r > div) | ((2 * r == div) & (q % 2 == 1)))


def _reference(q, zp, out_hw, window, mode):
    k, s, p, d, _ = window
    (ri, rin, rpad), (ci, cin, cpad) = (_axis(q.shape[2 + a], out_hw[a], k[a], s[a], p[a], d[a])
                                       for a in range(2))
    cells = q.astype(np.int64)[:, :, ri[:, None, :, None], ci[None, :, None, :]]
    inside = rin[:, None, :, None] & cin[None, :, None, :]  # (oh, ow, kh, kw)
    if mode == "max":
        return np.where(inside, cells, -1 << 40).max(axis=(-1, -2)).astype(q.dtype)
    n_in = inside.sum(axis=(-1, -2))
    div = (rpad[:, None, :, None] & cpad[None, :, None, :]).sum(axis=(-1, -2)) \
        if mode == "include" else n_in
    total = np.where(inside, cells, 0).sum(axis=(-1, -2)) + zp * (div - n_in)
    return _round_half_even(total, div).astype(q.dtype)


def _pool(x, window, mode):
    k, s, p, d, ceil = window
    if mode == "max":
        return F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
    return F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=mode == "include")


def _check(q, window, modes, quant=True, threads=1):
    zp = _zp(q.dtype.type) if quant else 0
    x = mg.Graph().input("q", q.shape, q.dtype, per_tensor(0.05, zp) if quant else None)
    ys = [_pool(x, window, mode) for mode in modes]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parallel, "threads_for", lambda work, grain=0: threads)
        plan = mg.compile(ys, optimize=0)
    for got, y, mode in zip(plan.run({"q": q}), ys, modes):
        assert got.dtype == q.dtype
        np.testing.assert_array_equal(got, _reference(q, zp, y.shape[2:], window, mode),
                                      err_msg=f"{mode} {window}")


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("window", WINDOWS)
def test_every_variant_gives_the_exact_integers(isa, dtype, window):
    modes = ("max", "include", "exclude") if window[3] == (1, 1) else ("max",)
    _check(_q((2, 3, 13, 17), dtype, seed=len(window[0]) + window[1][1]), window, modes)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("window", [WINDOWS[1], WINDOWS[2], WINDOWS[4]])
def test_rows_wider_than_a_chunk_of_the_row_passes(isa, dtype, window):
    # 2500 columns: three chunks of pool_int.h's PI_COLS (1024), windows straddling the cuts
    modes = ("max", "include", "exclude")
    _check(_q((1, 2, 4, 2500), dtype, seed=3), window, modes)


# a max in 32-byte vectors (pool_int.h's pi_max_plan): border columns on 16-lane masks or, where
# a window's columns span 16 lanes or more, cell by cell; clamped right windows; dilation
VECTOR_MAX_WINDOWS = [
    ((5, 5), (1, 1), (2, 2), (1, 1), False),  # two border columns each side
    ((3, 3), (2, 2), (0, 0), (1, 1), True),   # ceil mode: a clamped right column
    ((2, 5), (2, 2), (1, 2), (1, 4), False),  # border columns 4 apart: within 16 lanes
    ((1, 5), (1, 1), (0, 6), (1, 6), False),  # border columns 6 apart: past 16 lanes
]


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("window", VECTOR_MAX_WINDOWS)
@pytest.mark.parametrize("shape", [(2, 3, 9, 41), (1, 2, 5, 70)])
def test_a_max_in_vectors_at_its_borders_and_the_input_end(isa, dtype, window, shape):
    # the last rows of the last plane read past no input; 70 columns: 32-output blocks cut
    _check(_q(shape, dtype, seed=shape[-1]), window, ("max",))


@pytest.mark.parametrize("dtype", STORAGE)
def test_windows_past_the_row_passes_limits_take_the_window_loop(isa, dtype):
    # an average of 18 x 16 = 288 cells (over PI_MAX_CELLS); a max 1100 columns wide
    q = _q((1, 2, 21, 1200), dtype, seed=4)
    _check(q, ((18, 16), (2, 7), (3, 2), (1, 1), False), ("max", "include", "exclude"))
    _check(q, ((2, 1100), (1, 33), (0, 0), (1, 1), True), ("max",))


@pytest.mark.parametrize("dtype", STORAGE)
def test_sums_at_the_top_of_the_uint16_range(isa, dtype):
    # every cell at its greatest value: 257 * 255 = 65535, the most a uint16 sum holds
    q = np.full((1, 1, 257, 9), RANGES[dtype][1], dtype)
    _check(q, ((257, 1), (1, 1), (0, 0), (1, 1), False), ("max", "include"))
    q = np.full((1, 2, 20, 30), RANGES[dtype][0], dtype)
    _check(q, ((16, 16), (1, 1), (0, 0), (1, 1), False), ("max", "include"))


@pytest.mark.parametrize("dtype", STORAGE)
def test_ties_round_to_even_in_every_variant(isa, dtype):
    # windows of 2 cells whose sums are every integer in range: half of them ties
    lo, hi = RANGES[dtype]
    pairs = np.array([(a, b) for a in range(lo, hi + 1, 5) for b in (a, a + 1) if b <= hi])
    q = pairs.astype(dtype).reshape(1, 1, 1, -1)
    _check(q, ((1, 2), (1, 2), (0, 0), (1, 1), False), ("max", "include"))


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("hw", [(1, 1), (7, 7), (56, 57), (300, 300)])
def test_global_pooling(isa, dtype, hw):
    q = _q((2, 5, *hw), dtype, seed=hw[1])
    zp = _zp(dtype)
    x = mg.Graph().input("q", q.shape, q.dtype, per_tensor(0.1, zp))
    avg, mx = mg.compile([F.global_avg_pool2d(x), F.global_max_pool2d(x)]).run({"q": q})
    total = q.astype(np.int64).sum(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(avg, _round_half_even(total, hw[0] * hw[1]).astype(dtype))
    np.testing.assert_array_equal(mx, q.max(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("dtype", STORAGE)
def test_adaptive_windows_that_divide_the_input_are_sliding_ones(isa, dtype):
    q = _q((2, 3, 12, 20), dtype, seed=9)
    zp = _zp(dtype)
    x = mg.Graph().input("q", q.shape, q.dtype, per_tensor(0.1, zp))
    got = mg.compile([F.adaptive_max_pool2d(x, (4, 5)), F.adaptive_avg_pool2d(x, (4, 5)),
                      F.adaptive_avg_pool2d(x, (5, 3))]).run({"q": q})
    tiling = ((3, 4), (3, 4), (0, 0), (1, 1), False)
    np.testing.assert_array_equal(got[0], _reference(q, zp, (4, 5), tiling, "max"))
    np.testing.assert_array_equal(got[1], _reference(q, zp, (4, 5), tiling, "include"))
    for i in range(5):  # PyTorch's uneven adaptive windows
        for j in range(3):
            r0, r1, c0, c1 = i * 12 // 5, -(-(i + 1) * 12 // 5), j * 20 // 3, -(-(j + 1) * 20 // 3)
            cells = q[:, :, r0:r1, c0:c1].astype(np.int64)
            want = _round_half_even(cells.sum(axis=(2, 3)), cells[0, 0].size)
            np.testing.assert_array_equal(got[2][:, :, i, j], want.astype(dtype))


@pytest.mark.parametrize("dtype", STORAGE)
def test_a_max_of_plain_integers(isa, dtype):
    _check(_q((1, 4, 11, 70), dtype, seed=5), WINDOWS[1], ("max",), quant=False)


@pytest.mark.parametrize("threads", (1, 2))
def test_threads_give_the_same_integers(isa, threads):
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads):
        for window in WINDOWS[1:3]:
            _check(_q((3, 5, 30, 41), np.int8, seed=6), window, ("max", "include", "exclude"),
                   threads=threads)


def test_the_variant_switch():
    assert ISAS[:2] == ("scalar", "portable")
    before = pool.set_int8_pool_isa("scalar")
    try:
        with pytest.raises(ValueError, match="unknown int8 pooling variant 'sse9'"):
            pool.set_int8_pool_isa("sse9")
        assert pool.set_int8_pool_isa(None) == "scalar"
    finally:
        pool.set_int8_pool_isa(before)


PORTABLE_MAIN = r"""
#include <stdio.h>
#include "pool_int.h"
int main(void) {  /* 3 rows of 150 int8 values: avg 3x3 stride 2 and max 3x3 stride 1 */
    uint8_t x[450], avg[74], mx[148];
    for (int i = 0; i < 450; i++) { int v; if (scanf("%d", &v) != 1) return 1; x[i] = (uint8_t)v; }
    pi_variant var = pi_variant_of(PI_AVX512);  /* the portable one where x86 is not built */
    pi_row a = {x, 150, 3, 3, 2, 1, 74, 450, 9, 0, 0x80, avg};
    var.row(&a);
    pi_row b = {x, 150, 3, 3, 1, 1, 148, 450, 0, 0, 0x80, mx};
    var.row(&b);
    for (int i = 0; i < 74; i++) printf("%d ", (int8_t)avg[i]);
    for (int i = 0; i < 148; i++) printf("%d ", (int8_t)mx[i]);
    return pi_isa_ok(PI_AVX2) || pi_isa_ok(PI_AVX512);
}
"""


def test_the_build_of_a_machine_without_x86_compiles_and_gives_the_integers(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "main.c").write_text(PORTABLE_MAIN)
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-Wno-unused-function", "-DPI_PORTABLE_ONLY",
                    f"-I{Path(pool.__file__).parent}", str(tmp_path / "main.c"), "-o",
                    str(tmp_path / "main")], check=True)
    q = _q((1, 1, 3, 150), np.int8, seed=11)
    run = subprocess.run([str(tmp_path / "main")], input=" ".join(map(str, q.ravel())),
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0  # the portable variant: the only one built
    got = np.array(run.stdout.split(), np.int64)
    avg = _reference(q, 0, (1, 74), ((3, 3), (2, 2), (0, 0), (1, 1), False), "include")
    mx = _reference(q, 0, (1, 148), ((3, 3), (1, 1), (0, 0), (1, 1), False), "max")
    np.testing.assert_array_equal(got, np.concatenate([avg.ravel(), mx.ravel()]))
