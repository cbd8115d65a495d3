/* pool2d_f32: max, the two averages and the adaptive windows over planes, as pool.pyx pools
 * them. A window's cells are those inside the image (the padding takes no part), visited
 * row-major. Max: `v > m ? v : m` from -inf, NaN when a cell is NaN, as window_max (so the first
 * of equal maxima, -0.0 or 0.0, is kept: its bits). Average: the cells summed in order in double,
 * divided by the window's cells inside the image and its padding (mode 1, "average": a
 * ceil-mode overhang past the padding is not counted) or inside the image alone (mode 2), and
 * rounded once to float32, as window_sum: bitwise. Adaptive windows (modes 3 max, 4 average) are
 * PyTorch's, [floor(o * size / osize), ceil((o + 1) * size / osize)).
 * The parameter block of kernel_abi/pool.py's FIELDS; bufs x, y. */
#include <math.h>

#include "../mgr_kernel.h"

enum { MODE, PLANES, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, EH, EW, THREADS, FIELDS };
enum { P_MAX, P_AVG_INCLUDE, P_AVG_EXCLUDE, P_ADAPTIVE_MAX, P_ADAPTIVE_AVG, P_MODES };

/* the cells window o reads along one axis: lo, lo + step, ... (n of them), and how many lie
 * inside the input or its padding (pool.pyx's Span) */
typedef struct {
    int64_t lo, n, padded;
} span;

static int64_t ceil_div(int64_t a, int64_t d) { return a > 0 ? (a + d - 1) / d : -((-a) / d); }

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* axis: 0 rows, 1 columns */
static span window(const int64_t* s, int axis, int64_t o) {
    int64_t size = s[H + axis], osize = s[OH + axis], k = s[KH + axis], d = s[DH + axis];
    span r;
    if (s[MODE] >= P_ADAPTIVE_MAX) {
        r.lo = o * size / osize;
        r.n = r.padded = ((o + 1) * size + osize - 1) / osize - r.lo;
        return r;
    }
    int64_t start = o * s[SH + axis] - s[PH + axis];
    int64_t first = start < 0 ? ceil_div(-start, d) : 0;
    int64_t stop = clamp(ceil_div(size - start, d), 0, k);
    r.lo = start + first * d;
    r.n = stop > first ? stop - first : 0;
    r.padded = clamp(ceil_div(size + s[EH + axis] - start, d), 0, k);
    return r;
}

int mgr_pool2d_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    const float* x = (const float*)call->bufs[0];
    float* y = (float*)call->bufs[1];
    int64_t mode = s[MODE];
    int is_max = mode == P_MAX || mode == P_ADAPTIVE_MAX;
    int64_t dh = mode >= P_ADAPTIVE_MAX ? 1 : s[DH], dw = mode >= P_ADAPTIVE_MAX ? 1 : s[DW];
    for (int64_t p = 0; p < s[PLANES]; p++, x += s[H] * s[W])
        for (int64_t oy = 0; oy < s[OH]; oy++) {
            span r = window(s, 0, oy);
            for (int64_t ox = 0; ox < s[OW]; ox++) {
                span c = window(s, 1, ox);
                /* a window wholly in the padding reads nothing, and its lo may lie far past the
                 * image (the fuzzer's find): no pointer is made of it */
                const float* cell = r.n > 0 && c.n > 0 ? x + r.lo * s[W] + c.lo : x;
                if (is_max) {
                    float m = -INFINITY;
                    int nan = 0;
                    for (int64_t i = 0; i < r.n; i++)
                        for (int64_t j = 0; j < c.n; j++) {
                            float v = cell[i * dh * s[W] + j * dw];
                            m = v > m ? v : m;
                            nan |= v != v;
                        }
                    *y++ = nan ? NAN : m;
                } else {
                    double acc = 0;
                    for (int64_t i = 0; i < r.n; i++)
                        for (int64_t j = 0; j < c.n; j++) acc += cell[i * dh * s[W] + j * dw];
                    double div = mode == P_AVG_INCLUDE ? (double)(r.padded * c.padded)
                                                       : (double)(r.n * c.n);
                    *y++ = (float)(acc / div);
                }
            }
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
    if (s[MODE] >= P_MODES) return "a mode past the adaptive average";
    int64_t ends;  /* adaptive: (o + 1) * size stays an int64_t */
    if (s[MODE] >= P_ADAPTIVE_MAX &&
        (s[OH] < 1 || s[OW] < 1 || s[OH] > s[H] || s[OW] > s[W] ||
         !mgr_muladd(0, s[OH], s[H], &ends) || !mgr_muladd(0, s[OW], s[W], &ends)))
        return "adaptive windows want 1 <= output size <= input size";
    if (s[MODE] < P_ADAPTIVE_MAX && (s[KH] < 1 || s[KW] < 1 || s[SH] < 1 || s[SW] < 1))
        return "a window must have cells and positive strides";
    if (s[PH] > MGR_EMPTY_DIM || s[PW] > MGR_EMPTY_DIM || s[EH] > MGR_EMPTY_DIM ||
        s[EW] > MGR_EMPTY_DIM)
        return "a padding is past any window";
    if (s[DH] > MGR_EMPTY_DIM || s[DW] > MGR_EMPTY_DIM) return "a dilation is past any window";
    if (s[DH] < 1 || s[DW] < 1) return "dilations must be positive";
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
