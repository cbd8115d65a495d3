/* pool2d_f32: max, the two averages and the adaptive windows over planes, as pool.pyx pools
 * them. A window's cells are those inside the image (the padding takes no part), visited
 * row-major. Max: `v > m ? v : m` from -inf, NaN when a cell is NaN, as window_max (so the first
 * of equal maxima, -0.0 or 0.0, is kept: its bits). Average: the cells summed in order in double,
 * divided by the window's cells inside the image and its padding (mode 1, "average": a
 * ceil-mode overhang past the padding is not counted) or inside the image alone (mode 2), and
 * rounded once to float32, as window_sum: bitwise. Adaptive windows (modes 3 max, 4 average) are
 * PyTorch's, [floor(o * size / osize), ceil((o + 1) * size / osize)).
 * pool2d_i8 and pool2d_u8 pool quantized integers as pool_int.pxi's per-window loop: a max of
 * the cells inside the input, an average the window's exact int64 sum (each counted padding cell
 * holding the zero point, floats[0]) divided by the divisor with rounding half to even in
 * integer arithmetic: the integers of pool_int.h's vectorised rows, which are exact too.
 * The parameter block of kernel_abi/pool.py's FIELDS; bufs x, y. */
#include <math.h>

#include "../mgr_kernel.h"
#include "grain.h"

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

/* Adaptive windows over sizes the output divides are sliding windows of the quotient (the same
 * cells and divisors), as pool.pyx's as_sliding makes them before pooling integers or
 * passing gradients back (whose order of adds it decides). */
static void as_sliding(int64_t* s) {
    if (s[MODE] < P_ADAPTIVE_MAX || s[H] % s[OH] != 0 || s[W] % s[OW] != 0) return;
    s[MODE] = s[MODE] == P_ADAPTIVE_MAX ? P_MAX : P_AVG_INCLUDE;
    s[KH] = s[SH] = s[H] / s[OH];
    s[KW] = s[SW] = s[W] / s[OW];
    s[PH] = s[PW] = s[EH] = s[EW] = 0;
    s[DH] = s[DW] = 1;
}

/* ---- pool2d_f32's forward: pool.pyx's row kernels, split over planes ---------------------
 * Each output row's interior columns (windows wholly inside the image, undilated, not
 * adaptive) run as one loop over windows, with literal loops for the common windows (2x2 and
 * 3x3 at stride 2: max_2x2, max_3x3_s2) that the compiler vectorises across windows; the
 * border columns, and windows of rows a hostile block puts wholly in the padding, take
 * pool_cell's clamped window. Each window computes exactly the scalar loop's value: a max folds
 * its cells in row-major order with `v > m ? v : m` (first of equal maxima kept) with NaN
 * flagged beside it (max4 and max3 are that fold, regrouped where it is associative); an
 * average sums its cells row-major in double. So any vector width gives the same bits. A
 * global average (one window a plane) sums 8 planes at once (global_sums: 8 chains of adds).
 * The passes are compiled for the baseline and for AVX2 (their always-inline bodies take each
 * entry point's target; the widest this CPU runs is picked), aarch64's baseline being NEON.
 * Planes are split over threads in contiguous runs (mgr_parallel_for): the same bits on any
 * thread count. */
#define POOL_INLINE static inline __attribute__((always_inline))

/* the first-hit fold of window_max, of 2, 3 and 4 cells (NaNs flagged by the caller) */
POOL_INLINE float max2(float a, float b) { return b > a ? b : a; }
POOL_INLINE float max3(float a, float b, float c) { return max2(max2(a, b), c); }
POOL_INLINE int nan3(float a, float b, float c) { return (a != a) | (b != b) | (c != c); }

/* cells nr rows of w floats apart by nc columns cs apart, clamping done */
POOL_INLINE float window_max(const float* x, int64_t w, int64_t cs, int64_t nr, int64_t nc) {
    float m = -INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
            float v = x[i * w + j * cs];
            m = v > m ? v : m;
            nan |= v != v;
        }
    return nan ? NAN : m;
}

POOL_INLINE double window_sum(const float* x, int64_t w, int64_t cs, int64_t nr, int64_t nc) {
    double acc = 0;
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) acc += x[i * w + j * cs];
    return acc;
}

/* n windows of 2x2 cells, 2 columns apart: rows x and x + w */
POOL_INLINE void max_2x2(const float* restrict x, int64_t w, float* restrict y, int64_t n) {
    const float* restrict x1 = x + w;
    for (int64_t o = 0; o < n; o++) {
        float a = x[2 * o], b = x[2 * o + 1], c = x1[2 * o], d = x1[2 * o + 1];
        float m = max2(max2(a, b), max2(c, d));
        y[o] = (a != a) | (b != b) | (c != c) | (d != d) ? NAN : m;
    }
}

/* n windows of 3x3 cells, 2 columns apart */
POOL_INLINE void max_3x3_s2(const float* restrict x, int64_t w, float* restrict y, int64_t n) {
    const float* restrict x1 = x + w;
    const float* restrict x2 = x + 2 * w;
    for (int64_t o = 0; o < n; o++) {
        float m = max2(max2(max3(x[2 * o], x[2 * o + 1], x[2 * o + 2]),
                            max3(x1[2 * o], x1[2 * o + 1], x1[2 * o + 2])),
                       max3(x2[2 * o], x2[2 * o + 1], x2[2 * o + 2]));
        int nan = nan3(x[2 * o], x[2 * o + 1], x[2 * o + 2]) |
                  nan3(x1[2 * o], x1[2 * o + 1], x1[2 * o + 2]) |
                  nan3(x2[2 * o], x2[2 * o + 1], x2[2 * o + 2]);
        y[o] = nan ? NAN : m;
    }
}

/* n windows of nr x nc cells, `stride` columns apart (an average's divisor div) */
POOL_INLINE void row_windows(int is_max, const float* x, float* restrict y, int64_t w, int64_t n,
                             int64_t nr, int64_t nc, int64_t stride, double div) {
    for (int64_t o = 0; o < n; o++)
        y[o] = is_max ? window_max(x + o * stride, w, 1, nr, nc)
                      : (float)(window_sum(x + o * stride, w, 1, nr, nc) / div);
}

/* literal window shapes, so that each call compiles to its own loop (pool.pyx's row_interior).
 * Across windows the compiler may put a cell before the sum it adds to (the add commutes): a
 * NaN's payload may then differ (the sum's inf + -inf or the cell's NaN), never a number. */
POOL_INLINE void row_interior(int is_max, const float* x, float* y, int64_t w, int64_t n,
                              int64_t nr, int64_t nc, int64_t stride, double div) {
    if (is_max && nr == 2 && nc == 2 && stride == 2) max_2x2(x, w, y, n);
    else if (is_max && nr == 3 && nc == 3 && stride == 2) max_3x3_s2(x, w, y, n);
    else if (nr == 2 && nc == 2 && stride == 2) row_windows(is_max, x, y, w, n, 2, 2, 2, div);
    else if (nr == 3 && nc == 3 && stride == 2) row_windows(is_max, x, y, w, n, 3, 3, 2, div);
    else if (nr == 3 && nc == 3 && stride == 3) row_windows(is_max, x, y, w, n, 3, 3, 3, div);
    else if (nr == 3 && nc == 3 && stride == 1) row_windows(is_max, x, y, w, n, 3, 3, 1, div);
    else row_windows(is_max, x, y, w, n, nr, nc, stride, div);
}

/* output cell (r, ox) of one plane through its clamped window */
POOL_INLINE float pool_cell(const int64_t* s, const float* x, span r, int64_t ox) {
    span c = window(s, 1, ox);
    int adaptive = s[MODE] >= P_ADAPTIVE_MAX;
    int64_t dh = adaptive ? 1 : s[DH], dw = adaptive ? 1 : s[DW];
    /* a window wholly in the padding reads nothing, and its lo may lie far past the image (the
     * fuzzer's find): no pointer is made of it */
    const float* cell = r.n > 0 && c.n > 0 ? x + r.lo * s[W] + c.lo : x;
    if (s[MODE] == P_MAX || s[MODE] == P_ADAPTIVE_MAX)
        return window_max(cell, dh * s[W], dw, r.n, c.n);
    double div = s[MODE] == P_AVG_INCLUDE ? (double)(r.padded * c.padded) : (double)(r.n * c.n);
    return (float)(window_sum(cell, dh * s[W], dw, r.n, c.n) / div);
}

/* the output columns [lo, hi) whose windows need no clamping (pool.pyx's interior) */
static void interior(const int64_t* s, int64_t* lo, int64_t* hi);

POOL_INLINE void pool_plane(const int64_t* s, const float* x, float* y) {
    int is_max = s[MODE] == P_MAX || s[MODE] == P_ADAPTIVE_MAX;
    int64_t lo, hi;
    interior(s, &lo, &hi);
    for (int64_t oy = 0; oy < s[OH]; oy++, y += s[OW]) {
        span r = window(s, 0, oy);
        int64_t first = r.n > 0 ? lo : s[OW]; /* a row of windows in the padding: all clamped */
        if (hi > first) {
            double div = s[MODE] == P_AVG_INCLUDE ? (double)(r.padded * s[KW])
                                                  : (double)(r.n * s[KW]);
            row_interior(is_max, x + r.lo * s[W] + lo * s[SW] - s[PW], y + lo, s[W], hi - lo,
                         r.n, s[KW], s[SW], div);
        }
        for (int64_t ox = 0; ox < s[OW]; ox++)
            if (ox < first || ox >= hi) y[ox] = pool_cell(s, x, r, ox);
    }
}

/* y[p] = the sum of plane p (full cells) in order / div, 8 planes at a time: one plane's adds
 * wait on each other, 8 chains overlap (pool.pyx's global_sums) */
POOL_INLINE void global_sums(const float* x, float* y, int64_t planes, int64_t full,
                             double div) {
    int64_t p = 0;
    for (; p + 8 <= planes; p += 8, x += 8 * full) {
        double acc[8] = {0};
        for (int64_t i = 0; i < full; i++)
            for (int k = 0; k < 8; k++) acc[k] += x[k * full + i];
        for (int k = 0; k < 8; k++) y[p + k] = (float)(acc[k] / div);
    }
    for (; p < planes; p++, x += full) y[p] = (float)(window_sum(x, 0, 1, 1, full) / div);
}

typedef struct {
    int64_t s[FIELDS]; /* the block, adaptive windows made sliding where they can be */
    const float* x;
    float* y;
} pool_run;

static int tiles(const int64_t* s);

POOL_INLINE void pool_planes(const pool_run* k, int64_t lo, int64_t hi) {
    const int64_t* s = k->s;
    int64_t full = s[H] * s[W], pooled = s[OH] * s[OW];
    int is_max = s[MODE] == P_MAX || s[MODE] == P_ADAPTIVE_MAX;
    if (!is_max && s[OH] == 1 && s[OW] == 1 && s[KH] == s[H] && s[KW] == s[W] && tiles(s)) {
        global_sums(k->x + lo * full, k->y + lo, hi - lo, full, (double)full);
        return;
    }
    for (int64_t p = lo; p < hi; p++) pool_plane(s, k->x + p * full, k->y + p * pooled);
}

static void planes_base(void* ctx, int64_t lo, int64_t hi) { pool_planes(ctx, lo, hi); }
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2"))) static void planes_avx2(void* ctx, int64_t lo, int64_t hi) {
    pool_planes(ctx, lo, hi);
}
#endif


int mgr_pool2d_f32(const mgr_call* call) {
    pool_run k = {{0}, (const float*)call->bufs[0], (float*)call->bufs[1]};
    for (int f = 0; f < FIELDS; f++) k.s[f] = call->ints[f];
    as_sliding(k.s);
    mgr_part_fn part = planes_base;
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) part = planes_avx2;
#endif
    /* threads only where they pay for waking: one per MiB moved (grain.h, the executor's) */
    double moved = 4.0 * (double)(k.s[H] * k.s[W] + k.s[OH] * k.s[OW]) * (double)k.s[PLANES];
    mgr_parallel_for_upto(k.s[PLANES], mg_threads_for(moved, MG_GRAIN_BYTES, mgr_run_threads()),
                          part, &k);
    return MGR_KERNEL_OK;
}

/* the checks of a pooling block over values of `item` bytes of blob dtype `dtype` */
static const char* pool_check(const mgr_check_args* x, int64_t dtype, int64_t item) {
    const int64_t* s = x->ints;
    int64_t xe, ye;
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[1] != dtype)
        return "reads and writes its own dtype only";
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
        xe > x->buf_bytes[0] / item)
        return "planes * h * w reaches past x's bytes";
    if (!mgr_muladd(0, s[PLANES], s[OH], &ye) || !mgr_muladd(0, ye, s[OW], &ye) ||
        ye > x->buf_bytes[1] / item)
        return "planes * oh * ow reaches past y's bytes";
    int64_t loops[5] = {s[PLANES], s[OH], s[OW], s[KH], s[KW]};
    if (!mgr_counts_ok(loops, 5)) return "its sizes make no loop this runtime bounds";
    int64_t reach;  /* the window's extent stays an int64_t for any output cell */
    if (!mgr_muladd(0, s[OH], s[SH], &reach) || !mgr_muladd(reach, s[KH], s[DH], &reach) ||
        !mgr_muladd(0, s[OW], s[SW], &reach) || !mgr_muladd(reach, s[KW], s[DW], &reach))
        return "the windows reach past any index";
    return NULL;
}

const char* mgr_pool2d_f32_check(const mgr_check_args* x) {
    if (x->n_bufs != 2 || x->n_ints != FIELDS || x->n_floats != 0)
        return "wants buffers x, y, 17 ints and no floats";
    return pool_check(x, 0, 4);
}

/* ---- max_pool2d_backward_f32 and avg_pool2d_backward_f32 -------------------------------------
 * Each window sends dy to its first maximum (the first cell equal to window_max's value, or the
 * first NaN) or spreads dy / float32(divisor) over its cells; overlapping windows add up, in
 * pool.pyx's order, so the sums round as there: per output row, the interior windows (no
 * clamping: pool.pyx's `interior`) left to right, then the clamped ones before them, then those
 * after. Windows that tile the plane (disjoint, unclamped, adjacent: pool.pyx's `tiles`) store
 * their shares instead (a -0.0 share stays -0.0), the cells no window covers zeroed; otherwise
 * dx is zeroed and added to. Bufs x, dy, dx (max) or dy, dx (average). */
static int tiles(const int64_t* s) {
    return s[MODE] < P_ADAPTIVE_MAX && s[DH] == 1 && s[DW] == 1 && s[PH] == 0 && s[PW] == 0 &&
           s[EH] == 0 && s[EW] == 0 && s[SH] == s[KH] && s[SW] == s[KW] &&
           s[OH] * s[KH] <= s[H] && s[OW] * s[KW] <= s[W];
}

/* the output columns [lo, hi) whose windows need no clamping (pool.pyx's interior) */
static void interior(const int64_t* s, int64_t* lo, int64_t* hi) {
    *lo = *hi = 0;
    if (s[MODE] >= P_ADAPTIVE_MAX || s[DH] != 1 || s[DW] != 1 || s[W] + s[PW] < s[KW]) return;
    *lo = clamp(ceil_div(s[PW], s[SW]), 0, s[OW]);
    *hi = clamp((s[W] + s[PW] - s[KW]) / s[SW] + 1, *lo, s[OW]);
}

/* one window's gradient: r rows by c columns of the plane from cell at (row stride s[W]) */
static void window_back(const int64_t* s, const float* x, float* dx, span r, span c, float g,
                        int overwrite) {
    int64_t dh = s[MODE] >= P_ADAPTIVE_MAX ? 1 : s[DH], dw = s[MODE] >= P_ADAPTIVE_MAX ? 1 : s[DW];
    if (r.n <= 0 || c.n <= 0) return;
    int64_t at = r.lo * s[W] + c.lo, best = -1;
    if (x) { /* max: the first cell equal to the window's max, or the first NaN */
        float m = -INFINITY;
        int nan = 0;
        for (int64_t i = 0; i < r.n; i++)
            for (int64_t j = 0; j < c.n; j++) {
                float v = x[at + i * dh * s[W] + j * dw];
                m = v > m ? v : m;
                nan |= v != v;
            }
        m = nan ? NAN : m;
        for (int64_t i = 0; i < r.n && best < 0; i++)
            for (int64_t j = 0; j < c.n && best < 0; j++) {
                float v = x[at + i * dh * s[W] + j * dw];
                if (v == m || v != v) best = at + i * dh * s[W] + j * dw;
            }
        dx[best] += g;
        return;
    }
    double div = s[MODE] == P_AVG_INCLUDE ? (double)(r.padded * c.padded) : (double)(r.n * c.n);
    float share = g / (float)div;
    for (int64_t i = 0; i < r.n; i++)
        for (int64_t j = 0; j < c.n; j++) {
            float* cell = dx + at + i * dh * s[W] + j * dw;
            *cell = overwrite ? share : *cell + share;
        }
}

/* x NULL: the average's backward pass */
static int pool_backward(const int64_t* block, const float* x, const float* dy, float* dx) {
    int64_t s[FIELDS], lo, hi;
    for (int f = 0; f < FIELDS; f++) s[f] = block[f];
    as_sliding(s);
    int overwrite = tiles(s);
    interior(s, &lo, &hi);
    for (int64_t p = 0; p < s[PLANES]; p++) {
        float* plane = dx + p * s[H] * s[W];
        const float* xp = x ? x + p * s[H] * s[W] : NULL;
        for (int64_t i = 0; i < s[H] * s[W]; i++) plane[i] = 0.0f;
        for (int64_t oy = 0; oy < s[OH]; oy++, dy += s[OW]) {
            span r = window(s, 0, oy);
            for (int64_t ox = lo; ox < hi; ox++) {
                span c = {ox * s[SW] - s[PW], s[KW], s[KW]};
                window_back(s, xp, plane, r, c, dy[ox], overwrite);
            }
            for (int64_t ox = 0; ox < s[OW]; ox++)
                if (ox < lo || ox >= hi) window_back(s, xp, plane, r, window(s, 1, ox), dy[ox], 0);
        }
    }
    return MGR_KERNEL_OK;
}

int mgr_max_pool2d_backward_f32(const mgr_call* call) {
    return pool_backward(call->ints, (const float*)call->bufs[0], (const float*)call->bufs[1],
                         (float*)call->bufs[2]);
}

int mgr_avg_pool2d_backward_f32(const mgr_call* call) {
    return pool_backward(call->ints, NULL, (const float*)call->bufs[0], (float*)call->bufs[1]);
}

/* the forward's checks with x the full side and y the pooled one: a view of the block's
 * buffers (x, dy, dx: x and dx full, dy pooled; dy, dx: dy pooled, dx full) */
static const char* backward_check(const mgr_check_args* x, int with_x) {
    size_t n = with_x ? 3 : 2;
    if (x->n_bufs != n || x->n_ints != FIELDS || x->n_floats != 0)
        return with_x ? "wants buffers x, dy, dx, 17 ints and no floats"
                      : "wants buffers dy, dx, 17 ints and no floats";
    int64_t full = x->buf_bytes[n - 1];  /* dx, and x where it is read: the smaller */
    if (with_x && x->buf_bytes[0] < full) full = x->buf_bytes[0];
    int64_t bytes[2] = {full, x->buf_bytes[n - 2]}, dtypes[2] = {0, 0};
    for (size_t b = 0; b < n; b++)
        if (x->buf_dtypes[b] != 0) return "reads and writes float32 only";
    mgr_check_args view = *x;
    view.n_bufs = 2, view.buf_bytes = bytes, view.buf_dtypes = dtypes;
    return pool_check(&view, 0, 4);
}

const char* mgr_max_pool2d_backward_f32_check(const mgr_check_args* x) {
    return backward_check(x, 1);
}
const char* mgr_avg_pool2d_backward_f32_check(const mgr_check_args* x) {
    return backward_check(x, 0);
}

/* ---- int8 and uint8 ---------------------------------------------------------------------- */

/* total / div (div > 0) rounded to nearest, ties to even (pool_int.pxi's rounded_quotient) */
static int64_t rounded_quotient(int64_t total, int64_t div) {
    int64_t q = total / div, r = total - q * div;
    if (r < 0) q -= 1, r += div;
    if (2 * r > div || (2 * r == div && (q & 1))) q += 1;
    return q;
}

#define POOL_INT(T)                                                                          \
    static int pool_##T(const mgr_call* call) {                                             \
        int64_t s[FIELDS];                                                                  \
        for (int f = 0; f < FIELDS; f++) s[f] = call->ints[f];                               \
        as_sliding(s);                                                                      \
        const T* x = (const T*)call->bufs[0];                                               \
        T* y = (T*)call->bufs[1];                                                           \
        int64_t zero = (int64_t)call->floats[0];                                            \
        int is_max = s[MODE] == P_MAX || s[MODE] == P_ADAPTIVE_MAX;                          \
        int64_t dh = s[MODE] >= P_ADAPTIVE_MAX ? 1 : s[DH];                                 \
        int64_t dw = s[MODE] >= P_ADAPTIVE_MAX ? 1 : s[DW];                                 \
        for (int64_t p = 0; p < s[PLANES]; p++, x += s[H] * s[W])                           \
            for (int64_t oy = 0; oy < s[OH]; oy++) {                                        \
                span r = window(s, 0, oy);                                                  \
                for (int64_t ox = 0; ox < s[OW]; ox++) {                                    \
                    span c = window(s, 1, ox);                                              \
                    int64_t cells = r.n * c.n;                                              \
                    /* no cell inside (never in a plan: its shape rule refuses such windows): \
                     * the zero point, and no pointer made of lo */                         \
                    const T* cell = cells > 0 ? x + r.lo * s[W] + c.lo : x;                 \
                    int64_t acc = !is_max ? 0 : cells > 0 ? cell[0] : zero;                 \
                    for (int64_t i = 0; i < r.n; i++)                                       \
                        for (int64_t j = 0; j < c.n; j++) {                                 \
                            int64_t v = cell[i * dh * s[W] + j * dw];                       \
                            acc = is_max ? (v > acc ? v : acc) : acc + v;                   \
                        }                                                                   \
                    int64_t div = s[MODE] == P_AVG_INCLUDE ? r.padded * c.padded : cells;   \
                    if (!is_max)                                                            \
                        acc = div > 0 ? rounded_quotient(acc + zero * (div - cells), div)   \
                                      : zero;                                               \
                    *y++ = (T)acc;                                                          \
                }                                                                           \
            }                                                                               \
        return MGR_KERNEL_OK;                                                               \
    }

POOL_INT(int8_t)
POOL_INT(uint8_t)

int mgr_pool2d_i8(const mgr_call* call) { return pool_int8_t(call); }
int mgr_pool2d_u8(const mgr_call* call) { return pool_uint8_t(call); }

/* floats[0], the zero point: an integer of the dtype's range (the counted padding's value) */
static const char* pool_int_check(const mgr_check_args* x, int64_t dtype, double lo, double hi) {
    if (x->n_bufs != 2 || x->n_ints != FIELDS || x->n_floats != 1)
        return "wants buffers x, y, 17 ints and one float (the zero point)";
    double z = x->floats[0];
    if (!(z >= lo && z <= hi) || z != (double)(int64_t)z)
        return "the zero point is not an integer of the dtype's range";
    const char* why = pool_check(x, dtype, 1);
    if (why) return why;
    int64_t window; /* an average's padding times the zero point stays an int64: 2^40 cells */
    if (x->ints[MODE] < P_ADAPTIVE_MAX &&
        (!mgr_muladd(0, x->ints[KH], x->ints[KW], &window) || window > ((int64_t)1 << 40)))
        return "a window of more cells than an average sums";
    return NULL;
}

const char* mgr_pool2d_i8_check(const mgr_check_args* x) {
    return pool_int_check(x, 5, -128, 127);
}
const char* mgr_pool2d_u8_check(const mgr_check_args* x) { return pool_int_check(x, 4, 0, 255); }
