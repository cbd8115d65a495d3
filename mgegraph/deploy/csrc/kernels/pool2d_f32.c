/* pool2d_f32, max mode: each output the largest of its window's cells inside the image (the
 * padding takes no part), NaN when a cell is NaN, as pool.pyx's window_max scans them: row-major,
 * `v > m ? v : m` from -inf, so the first of equal maxima (-0.0 or 0.0) is kept: its bits.
 * The parameter block of kernel_abi/pool.py's FIELDS; bufs x, y. The averages are not here. */
#include <math.h>

#include "../mgr_kernel.h"

enum { MODE, PLANES, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, EH, EW, THREADS, FIELDS };

/* [t0, t1): the taps t < k of a window starting at `start` (step `dilation`) that land inside
 * [0, size), so a window reaching far into the padding costs nothing */
static void taps_inside(int64_t start, int64_t dilation, int64_t k, int64_t size, int64_t* t0,
                        int64_t* t1) {
    int64_t first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    int64_t last = size - 1 - start < 0 ? -1 : (size - 1 - start) / dilation;
    *t0 = first < k ? first : k;
    *t1 = last + 1 < k ? last + 1 : k;
    if (*t1 < *t0) *t1 = *t0;
}

int mgr_pool2d_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    const float* x = (const float*)call->bufs[0];
    float* y = (float*)call->bufs[1];
    for (int64_t p = 0; p < s[PLANES]; p++, x += s[H] * s[W])
        for (int64_t oy = 0; oy < s[OH]; oy++)
            for (int64_t ox = 0; ox < s[OW]; ox++) {
                float m = -INFINITY;
                int nan = 0;
                int64_t i0, i1, j0, j1;  /* the taps inside the image, in order */
                taps_inside(oy * s[SH] - s[PH], s[DH], s[KH], s[H], &i0, &i1);
                taps_inside(ox * s[SW] - s[PW], s[DW], s[KW], s[W], &j0, &j1);
                for (int64_t i = i0; i < i1; i++) {
                    int64_t iy = oy * s[SH] - s[PH] + i * s[DH];
                    for (int64_t j = j0; j < j1; j++) {
                        int64_t ix = ox * s[SW] - s[PW] + j * s[DW];
                        float v = x[iy * s[W] + ix];
                        m = v > m ? v : m;
                        nan |= v != v;
                    }
                }
                *y++ = nan ? NAN : m;
            }
    return MGR_KERNEL_OK;
}

const char* mgr_pool2d_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t xe, ye;
    if (x->n_bufs != 2 || x->n_ints != FIELDS || x->n_floats != 0)
        return "wants buffers x, y, 17 ints and no floats";
    if (x->buf_dtypes[0] != 0 || x->buf_dtypes[1] != 0) return "reads and writes float32 only";
    for (int f = 0; f < FIELDS; f++)
        if (s[f] < 0) return "a field is negative";
    if (s[MODE] != 0) return "runs max pooling only (not the averages or the adaptive modes)";
    if (s[PH] > MGR_EMPTY_DIM || s[PW] > MGR_EMPTY_DIM || s[EH] > MGR_EMPTY_DIM ||
        s[EW] > MGR_EMPTY_DIM)
        return "a padding is past any window";
    if (s[DH] > MGR_EMPTY_DIM || s[DW] > MGR_EMPTY_DIM) return "a dilation is past any window";
    if (s[SH] < 1 || s[SW] < 1 || s[DH] < 1 || s[DW] < 1)
        return "strides and dilations must be positive";
    if (!mgr_muladd(0, s[PLANES], s[H], &xe) || !mgr_muladd(0, xe, s[W], &xe) ||
        xe > x->buf_bytes[0] / 4)
        return "planes * h * w reaches past x's bytes";
    if (!mgr_muladd(0, s[PLANES], s[OH], &ye) || !mgr_muladd(0, ye, s[OW], &ye) ||
        ye > x->buf_bytes[1] / 4)
        return "planes * oh * ow reaches past y's bytes";
    int64_t loops[5] = {s[PLANES], s[OH], s[OW], s[KH], s[KW]};
    if (!mgr_counts_ok(loops, 5)) return "its sizes make no loop this runtime bounds";
    int64_t reach;  /* the window's extent stays an int64_t for any output cell */
    if (!mgr_muladd(0, s[OH], s[SH], &reach) || !mgr_muladd(reach, s[KH], s[DH], &reach) ||
        !mgr_muladd(0, s[OW], s[SW], &reach) || !mgr_muladd(reach, s[KW], s[DW], &reach))
        return "the windows reach past any index";
    return NULL;
}
