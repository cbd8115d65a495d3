/* 2-D pooling of float32 and float64 planes (max, the two averages, adaptive windows) and the
 * passes its gradients use: the one source of pool.pyx's float kernels and of the C runtime's
 * (mgegraph/deploy/csrc/kernels/pool2d_f32.c, pool2d_backward_f32.c), so the two give the same
 * bits; pool_int.h pools int8 and uint8 on the same windows. The parameter block (pool_block),
 * the threads and, in C, the checks of a block are each caller's.
 *
 * Design: every pass walks one output row at a time. The columns whose windows lie wholly inside
 * the image (all of them when there is no padding) go through pool_row_interior: loops over
 * windows with no clamping whose per-window work is branch-free (maxss, compares and selects).
 * Given a literal window shape (the common 2x2/2, 3x3/3, 3x3/2, 3x3/1) the compiler unrolls the
 * window and vectorises across windows. The argmax passes (max backward, select) run in chunks
 * of three passes: maxima, first-hit indices, then the scatter or gather. Border columns,
 * dilated and adaptive windows take pool_cell, which clamps each window. NaN semantics are
 * np.max's: a NaN in a window is its maximum, and the argmax passes use the first maximum in
 * row-major order, or the first NaN. A max folds its cells in row-major order with
 * `v > m ? v : m` (the first of equal maxima kept: -0.0 or 0.0 as they come), NaN flagged
 * beside it; an average sums its cells row-major in double and rounds once. Windows that tile
 * the input (stride == kernel, no padding) let the backward passes store rather than zero all
 * of dx and then add; adaptive windows that divide the input are such windows
 * (pool_as_sliding), and the global average of a plane, a chain of dependent adds when summed
 * alone, sums 8 planes at once (global_sums).
 * Each body is written once for both float types (POOL_FLOAT, a macro: one body, so a fix lands
 * in float64 too; the C runtime, float32 only, gets no code of the float64 bodies it never
 * calls) and inlined into entry points the includer makes (POOL_PARTS) for the baseline and
 * for AVX2 (no FMA: nothing contracts), the
 * widest this CPU runs picked; each window computes the scalar loop's value in any of them, so
 * every build gives the same numbers (across windows the compiler may put a cell before the sum
 * it adds to: a NaN's payload may then differ, never a number). Threads: planes are
 * independent; each part pools a contiguous run of them, so the bits do not depend on the
 * thread count, and no two parts write one cell of dx.
 * A hostile block (the C runtime's loader bounds its sizes, not its geometry) may put windows
 * wholly in the padding: they read nothing, and no pointer is made of their far-off start. */
#ifndef MG_POOL_H
#define MG_POOL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The parameter block: kernel_abi/pool.py's FIELDS, in order (ph, pw: padding before the image,
 * eh, ew: after it; dh, dw: dilation; planes: the N * C images) */
typedef struct {
    int64_t mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, eh, ew, threads;
} pool_block;

enum { POOL_MAX, POOL_AVG_INCLUDE, POOL_AVG_EXCLUDE, POOL_ADAPTIVE_MAX, POOL_ADAPTIVE_AVG,
       POOL_MODES };

/* what a pass does per window */
enum { POOL_R_MAX, POOL_R_AVG, POOL_R_MAX_BACKWARD, POOL_R_SELECT, POOL_R_AVG_BACKWARD };

/* The cells one window reads along one axis: lo, lo + step, ... (n of them, padding cut off),
 * and how many of its cells lie inside the input or its padding (the divisor of "average": a
 * ceil-mode overhang past the padding is not counted). */
typedef struct {
    int64_t lo, n, padded;
} pool_span;

#define POOL_INLINE static inline __attribute__((always_inline))
/* Design: two loops run faster out of line, compiled for the baseline, than inlined into either
 * build: max 3x3/2 (0.85x the time) and the argmax passes' chunks (0.64-0.75x), on the 2-core
 * AMD EPYC (Zen 3) under load, medians of 41 interleaved runs on 8x64x112x112 (GCC 12). 3x3/3
 * windows are out of line for their size: their stride-3 loads took 5 KB of AVX2 code. max 2x2
 * inlined takes half the time it takes out of line, the clamped windows (pool_cell: all of an
 * adaptive pooling's) 0.4x; the other loops are inlined too. */
#define POOL_OUTLINE static __attribute__((noinline, unused))

static inline int64_t pool_ceil_div(int64_t a, int64_t d) {
    return a > 0 ? (a + d - 1) / d : -((-a) / d); /* d > 0; C's division truncates */
}

static inline int64_t pool_clamp(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static inline int pool_is_adaptive(const pool_block* s) {
    return s->mode == POOL_ADAPTIVE_MAX || s->mode == POOL_ADAPTIVE_AVG;
}

static inline int pool_is_max(const pool_block* s) {
    return s->mode == POOL_MAX || s->mode == POOL_ADAPTIVE_MAX;
}

/* Window o along the rows (or columns). Adaptive windows are PyTorch's:
 * [floor(o * size / osize), ceil((o + 1) * size / osize)). The shape rules keep every window of
 * a plan at least one cell inside the input. */
static inline pool_span pool_window(const pool_block* s, int rows, int64_t o) {
    int64_t size = rows ? s->h : s->w, osize = rows ? s->oh : s->ow;
    int64_t k = rows ? s->kh : s->kw, d = rows ? s->dh : s->dw;
    pool_span r;
    if (pool_is_adaptive(s)) {
        r.lo = o * size / osize;
        r.n = r.padded = ((o + 1) * size + osize - 1) / osize - r.lo;
        return r;
    }
    int64_t start = o * (rows ? s->sh : s->sw) - (rows ? s->ph : s->pw);
    int64_t first = start < 0 ? pool_ceil_div(-start, d) : 0;
    int64_t stop = pool_clamp(pool_ceil_div(size - start, d), 0, k);
    r.lo = start + first * d;
    r.n = stop > first ? stop - first : 0;
    r.padded = pool_clamp(pool_ceil_div(size + (rows ? s->eh : s->ew) - start, d), 0, k);
    return r;
}

static inline int64_t pool_divisor(const pool_block* s, pool_span r, pool_span c) {
    return s->mode == POOL_AVG_INCLUDE ? r.padded * c.padded : r.n * c.n;
}

static inline int pool_dilated(const pool_block* s) { return s->dh != 1 || s->dw != 1; }

/* The output columns [lo, hi) whose windows need no clamping; none for adaptive windows (they
 * vary in width) or dilated ones (rare: pool_cell steps through them). */
static inline void pool_interior(const pool_block* s, int64_t* lo, int64_t* hi) {
    *lo = *hi = 0;
    if (pool_is_adaptive(s) || pool_dilated(s) || s->w + s->pw < s->kw) return;
    *lo = pool_clamp(pool_ceil_div(s->pw, s->sw), 0, s->ow);
    *hi = pool_clamp((s->w + s->pw - s->kw) / s->sw + 1, *lo, s->ow);
}

/* Windows that are disjoint, unclamped and adjacent: a backward pass can store, not add.
 * (A ceil-mode window past the image's end is clamped: then they do not.) */
static inline int pool_tiles(const pool_block* s) {
    return !pool_is_adaptive(s) && !pool_dilated(s) && s->ph == 0 && s->pw == 0 && s->eh == 0 &&
           s->ew == 0 && s->sh == s->kh && s->sw == s->kw && s->oh * s->kh <= s->h &&
           s->ow * s->kw <= s->w;
}

/* Adaptive windows over sizes the output divides are sliding windows of the quotient: the same
 * cells, divisors (no padding: include == exclude) and argmax order; they tile the input. */
static inline void pool_as_sliding(pool_block* s) {
    if (!pool_is_adaptive(s) || s->oh <= 0 || s->ow <= 0 || s->h % s->oh != 0 ||
        s->w % s->ow != 0)
        return;
    s->mode = s->mode == POOL_ADAPTIVE_MAX ? POOL_MAX : POOL_AVG_INCLUDE;
    s->kh = s->sh = s->h / s->oh;
    s->kw = s->sw = s->w / s->ow;
    s->ph = s->pw = s->eh = s->ew = 0;
    s->dh = s->dw = 1;
}

/* One pooling instruction, for the parts that pool planes [lo, hi) of it. The full-size side
 * (offset like x): x, h, dx; the pooled side (offset like y): pin (dy), pout (y). A pass's
 * unused pointers are set to used ones of the same layout, and are never read. */
typedef struct {
    int op;            /* POOL_R_* */
    pool_block s;      /* the windows, adaptive ones made sliding where they can be */
    const void* x;
    const void* h;
    void* dx;
    const void* pin;
    void* pout;
} pool_run;

/* The pass of op over block s (as_sliding applied) on those buffers */
static inline pool_run pool_run_of(int op, const pool_block* s, const void* x, const void* h,
                                   void* dx, const void* pin, void* pout) {
    pool_run r = {op, *s, x, h, dx, pin, pout};
    pool_as_sliding(&r.s);
    return r;
}

/* windows per pass of pool_row_argmax (its scratch lives on the stack) */
#define POOL_CHUNK 64

/* The bodies for one float type T (suffix S). A window's cells are nr rows w apart by nc
 * columns cs apart (w: dilation x row length), clamping done. */
#define POOL_FLOAT(S, T)                                                                        \
    /* v is a cell the maximum m came from: equal to it, or NaN (then m is NaN too) */          \
    POOL_INLINE int pool_is_hit_##S(T v, T m) { return (v == m) | (v != v); }                   \
                                                                                                \
    /* `v > m ? v : m` is exactly maxss/maxsd (vector or scalar): no branch either way. NaNs,   \
     * which it skips, are counted beside it, so the maximum of a window with one is NaN. */    \
    POOL_INLINE T pool_window_max_##S(const T* x, int64_t w, int64_t cs, int64_t nr,            \
                                      int64_t nc) {                                             \
        T m = -INFINITY;                                                                        \
        int nan = 0;                                                                            \
        for (int64_t r = 0; r < nr; r++)                                                        \
            for (int64_t j = 0; j < nc; j++) {                                                  \
                T v = x[r * w + j * cs];                                                        \
                m = v > m ? v : m;                                                              \
                nan |= v != v;                                                                  \
            }                                                                                   \
        return nan ? (T)NAN : m;                                                                \
    }                                                                                           \
                                                                                                \
    /* The row-major index r * nc + j of the first cell holding the window's maximum m (or the  \
     * first NaN). Scanning backwards, the last hit is the first; an int select over float      \
     * compares vectorises across windows, or is a cmov in scalar code, where a float one would \
     * branch. */                                                                               \
    POOL_INLINE int pool_first_hit_##S(const T* x, int64_t w, int64_t cs, int64_t nr,           \
                                       int64_t nc, T m) {                                       \
        int best = 0;                                                                           \
        for (int64_t r = nr - 1; r >= 0; r--)                                                   \
            for (int64_t j = nc - 1; j >= 0; j--)                                               \
                best = pool_is_hit_##S(x[r * w + j * cs], m) ? (int)(r * nc + j) : best;        \
        return best;                                                                            \
    }                                                                                           \
                                                                                                \
    /* the offset of the cell window_max's value comes from (a window with cells) */            \
    POOL_INLINE int64_t pool_first_max_##S(const T* x, int64_t w, int64_t cs, int64_t nr,       \
                                           int64_t nc) {                                        \
        int k = pool_first_hit_##S(x, w, cs, nr, nc, pool_window_max_##S(x, w, cs, nr, nc));    \
        return (k / nc) * w + (k % nc) * cs;                                                    \
    }                                                                                           \
                                                                                                \
    /* Accumulates in double: a global pool sums thousands of float32 values. */                \
    POOL_INLINE double pool_window_sum_##S(const T* x, int64_t w, int64_t cs, int64_t nr,       \
                                           int64_t nc) {                                        \
        double acc = 0;                                                                         \
        if (nc == w && cs == 1) { /* whole rows are one contiguous run (global pooling) */      \
            for (int64_t i = 0; i < nr * w; i++) acc += x[i];                                   \
            return acc;                                                                         \
        }                                                                                       \
        for (int64_t r = 0; r < nr; r++)                                                        \
            for (int64_t j = 0; j < nc; j++) acc += x[r * w + j * cs];                          \
        return acc;                                                                             \
    }                                                                                           \
                                                                                                \
    POOL_INLINE void pool_window_spread_##S(T* dx, int64_t w, int64_t cs, int64_t nr,           \
                                            int64_t nc, T share, int overwrite) {               \
        for (int64_t r = 0; r < nr; r++)                                                        \
            for (int64_t j = 0; j < nc; j++) {                                                  \
                if (overwrite)                                                                  \
                    dx[r * w + j * cs] = share;                                                 \
                else                                                                            \
                    dx[r * w + j * cs] += share;                                                \
            }                                                                                   \
    }                                                                                           \
                                                                                                \
    /* One window of op (pool_run's pointers, at the window). A max's gradient goes to its      \
     * argmax, select reads h there (the adjoint in the gradient argument), an average's        \
     * spreads dy / divisor over the cells it read. A window without cells routes nothing and   \
     * selects 0 (never in a plan). */                                                          \
    POOL_INLINE void pool_window_op_##S(int op, const T* x, const T* h, T* dx, const T* pin,    \
                                        T* pout, int64_t w, int64_t cs, int64_t nr, int64_t nc, \
                                        double div, int overwrite) {                            \
        if (op == POOL_R_MAX)                                                                   \
            pout[0] = pool_window_max_##S(x, w, cs, nr, nc);                                    \
        else if (op == POOL_R_AVG)                                                              \
            pout[0] = (T)(pool_window_sum_##S(x, w, cs, nr, nc) / div);                         \
        else if (op == POOL_R_MAX_BACKWARD) {                                                   \
            if (nr > 0 && nc > 0) dx[pool_first_max_##S(x, w, cs, nr, nc)] += pin[0];           \
        } else if (op == POOL_R_SELECT)                                                         \
            pout[0] = nr > 0 && nc > 0 ? h[pool_first_max_##S(x, w, cs, nr, nc)] : (T)0;        \
        else                                                                                    \
            pool_window_spread_##S(dx, w, cs, nr, nc, pin[0] / (T)div, overwrite);              \
    }                                                                                           \
                                                                                                \
    /* -- 2x2 windows, stride 2 (the commonest max pooling): a loop vectorised across windows, \
     * bitwise what window_max gives: a left-leaning tree of `b > a ? b : a` over the cells in  \
     * row-major order keeps the first maximum as the sequential scan does, NaN flagged beside  \
     * it. */                                                                                   \
    POOL_INLINE T pool_max2_##S(T a, T b) { return b > a ? b : a; }                             \
    POOL_INLINE T pool_max4_##S(T a, T b, T c, T d) {                                           \
        T m = pool_max2_##S(pool_max2_##S(a, b), pool_max2_##S(c, d));                         \
        return (a != a) | (b != b) | (c != c) | (d != d) ? (T)NAN : m;                          \
    }                                                                                           \
    POOL_INLINE void pool_max_2x2_##S(const T* restrict x, int64_t w, T* restrict y,            \
                                      int64_t n) {                                              \
        const T* restrict x1 = x + w;                                                           \
        for (int64_t o = 0; o < n; o++)                                                         \
            y[o] = pool_max4_##S(x[2 * o], x[2 * o + 1], x1[2 * o], x1[2 * o + 1]);             \
    }                                                                                           \
                                                                                                \
    /* -- 3x3 windows, stride 2 (ResNet's stem pooling): each row's three cells folded in      \
     * order, then the rows in order. `b > a ? b : a` keeps the first of equal values, and that \
     * fold is associative, so this is window_max's row-major scan, bitwise. */                 \
    POOL_INLINE T pool_max3_##S(T a, T b, T c) {                                                \
        return pool_max2_##S(pool_max2_##S(a, b), c);                                           \
    }                                                                                           \
    POOL_INLINE int pool_nan3_##S(T a, T b, T c) { return (a != a) | (b != b) | (c != c); }     \
    POOL_OUTLINE void pool_max_3x3_s2_##S(const T* restrict x, int64_t w, T* restrict y,       \
                                          int64_t n) {                                          \
        const T* restrict x1 = x + w;                                                           \
        const T* restrict x2 = x + 2 * w;                                                       \
        for (int64_t o = 0; o < n; o++) {                                                       \
            T a = pool_max3_##S(x[2 * o], x[2 * o + 1], x[2 * o + 2]);                          \
            T b = pool_max3_##S(x1[2 * o], x1[2 * o + 1], x1[2 * o + 2]);                       \
            T c = pool_max3_##S(x2[2 * o], x2[2 * o + 1], x2[2 * o + 2]);                       \
            T m = pool_max2_##S(pool_max2_##S(a, b), c);                                        \
            int nan = pool_nan3_##S(x[2 * o], x[2 * o + 1], x[2 * o + 2]) |                     \
                      pool_nan3_##S(x1[2 * o], x1[2 * o + 1], x1[2 * o + 2]) |                  \
                      pool_nan3_##S(x2[2 * o], x2[2 * o + 1], x2[2 * o + 2]);                   \
            y[o] = nan ? (T)NAN : m;                                                            \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* m[o], k[o]: the maximum of window o and the index of its first cell holding it */        \
    POOL_INLINE void pool_chunk_hits_##S(const T* x, T* m, int* k, int64_t cnt, int64_t w,      \
                                         int64_t nr, int64_t nc, int64_t stride) {              \
        for (int64_t o = 0; o < cnt; o++)                                                       \
            m[o] = pool_window_max_##S(x + o * stride, w, 1, nr, nc);                           \
        for (int64_t o = 0; o < cnt; o++)                                                       \
            k[o] = pool_first_hit_##S(x + o * stride, w, 1, nr, nc, m[o]);                      \
    }                                                                                           \
                                                                                                \
    /* pool_row_interior's literal cases, applied per chunk */                                  \
    POOL_OUTLINE void pool_chunk_argmax_##S(const T* x, T* m, int* k, int64_t cnt, int64_t w,  \
                                            int64_t nr, int64_t nc, int64_t stride) {           \
        if (nr == 2 && nc == 2 && stride == 2) {                                                \
            for (int64_t o = 0; o < cnt; o++)                                                   \
                m[o] = pool_max4_##S(x[2 * o], x[2 * o + 1], x[w + 2 * o], x[w + 2 * o + 1]);   \
            for (int64_t o = 0; o < cnt; o++)                                                   \
                k[o] = pool_first_hit_##S(x + 2 * o, w, 1, 2, 2, m[o]);                         \
        } else if (nr == 3 && nc == 3 && stride == 3)                                           \
            pool_chunk_hits_##S(x, m, k, cnt, w, 3, 3, 3);                                      \
        else if (nr == 3 && nc == 3 && stride == 2)                                             \
            pool_chunk_hits_##S(x, m, k, cnt, w, 3, 3, 2);                                      \
        else if (nr == 3 && nc == 3 && stride == 1)                                             \
            pool_chunk_hits_##S(x, m, k, cnt, w, 3, 3, 1);                                      \
        else                                                                                    \
            pool_chunk_hits_##S(x, m, k, cnt, w, nr, nc, stride);                               \
    }                                                                                           \
                                                                                                \
    /* max backward (dx += dy at each window's argmax) or select (y = h there), in three passes \
     * per chunk so the first two, maxima and then argmax indices, vectorise across windows;    \
     * the third reads or scatters. overwrite: the windows tile these nr rows, so they are      \
     * zeroed here rather than by a memset of all of dx. */                                     \
    POOL_INLINE void pool_row_argmax_##S(int select, const T* x, const T* h, T* dx,             \
                                         const T* pin, T* pout, int64_t w, int64_t n,           \
                                         int64_t nr, int64_t nc, int64_t stride,                \
                                         int overwrite) {                                       \
        T m[POOL_CHUNK];                                                                        \
        int k[POOL_CHUNK];                                                                      \
        int64_t offset[POOL_CHUNK]; /* of each window index k, where a window has so few */     \
        int table = nr * nc <= POOL_CHUNK;                                                      \
        if (table)                                                                              \
            for (int64_t r = 0; r < nr * nc; r++) offset[r] = (r / nc) * w + r % nc;            \
        if (overwrite)                                                                          \
            for (int64_t r = 0; r < nr; r++)                                                    \
                memset(dx + r * w, 0, (size_t)(n * stride) * sizeof(T));                        \
        for (int64_t base = 0; base < n; base += POOL_CHUNK) {                                  \
            int64_t cnt = n - base < POOL_CHUNK ? n - base : POOL_CHUNK;                        \
            pool_chunk_argmax_##S(x + base * stride, m, k, cnt, w, nr, nc, stride);             \
            for (int64_t o = 0; o < cnt; o++) {                                                 \
                int64_t at = table ? offset[k[o]] : (k[o] / nc) * w + k[o] % nc;                \
                at += (base + o) * stride;                                                      \
                if (select)                                                                     \
                    pout[base + o] = h[at];                                                     \
                else                                                                            \
                    dx[at] += pin[base + o];                                                    \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* n windows of nr x nc cells, `stride` columns apart; pooled-side pointers step by one */  \
    POOL_INLINE void pool_row_windows_##S(int op, const T* x, const T* h, T* dx, const T* pin,  \
                                          T* pout, int64_t w, int64_t n, int64_t nr,            \
                                          int64_t nc, int64_t stride, double div,               \
                                          int overwrite) {                                      \
        for (int64_t o = 0; o < n; o++)                                                         \
            pool_window_op_##S(op, x + o * stride, h + o * stride, dx + o * stride, pin + o,    \
                               pout + o, w, 1, nr, nc, div, overwrite);                         \
    }                                                                                           \
                                                                                                \
    /* 3x3/3 windows, out of line (POOL_OUTLINE) */                                             \
    POOL_OUTLINE void pool_row_3x3_s3_##S(int op, const T* x, const T* h, T* dx, const T* pin,  \
                                          T* pout, int64_t w, int64_t n, double div,            \
                                          int overwrite) {                                      \
        pool_row_windows_##S(op, x, h, dx, pin, pout, w, n, 3, 3, 3, div, overwrite);           \
    }                                                                                           \
    /* n interior windows of one row. Literal window shapes for the common layers, so each     \
     * call below compiles to its own loop */                                                   \
    POOL_INLINE void pool_row_interior_##S(int op, const T* x, const T* h, T* dx, const T* pin, \
                                           T* pout, int64_t w, int64_t n, int64_t nr,           \
                                           int64_t nc, int64_t stride, double div,              \
                                           int overwrite) {                                     \
        if (op == POOL_R_MAX && nr == 2 && nc == 2 && stride == 2)                              \
            pool_max_2x2_##S(x, w, pout, n);                                                    \
        else if (op == POOL_R_MAX && nr == 3 && nc == 3 && stride == 2)                         \
            pool_max_3x3_s2_##S(x, w, pout, n);                                                 \
        else if (op == POOL_R_MAX_BACKWARD || op == POOL_R_SELECT) /* per chunk instead */      \
            pool_row_argmax_##S(op == POOL_R_SELECT, x, h, dx, pin, pout, w, n, nr, nc, stride, \
                                overwrite);                                                     \
        else if (nr == 2 && nc == 2 && stride == 2)                                             \
            pool_row_windows_##S(op, x, h, dx, pin, pout, w, n, 2, 2, 2, div, overwrite);       \
        else if (nr == 3 && nc == 3 && stride == 3)                                             \
            pool_row_3x3_s3_##S(op, x, h, dx, pin, pout, w, n, div, overwrite);                 \
        else if (nr == 3 && nc == 3 && stride == 2)                                             \
            pool_row_windows_##S(op, x, h, dx, pin, pout, w, n, 3, 3, 2, div, overwrite);       \
        else if (nr == 3 && nc == 3 && stride == 1)                                             \
            pool_row_windows_##S(op, x, h, dx, pin, pout, w, n, 3, 3, 1, div, overwrite);       \
        else                                                                                    \
            pool_row_windows_##S(op, x, h, dx, pin, pout, w, n, nr, nc, stride, div,           \
                                 overwrite);                                                    \
    }                                                                                           \
                                                                                                \
    /* Output cell ow of the row of windows `rows`, clamped (border, adaptive or dilated);      \
     * accumulates into dx, never overwrites. A window with no cell makes no pointer of its lo */ \
    POOL_INLINE void pool_cell_##S(int op, const pool_block* s, int64_t ow, pool_span rows,     \
                                   const T* x, const T* h, T* dx, const T* pin, T* pout) {      \
        pool_span cols = pool_window(s, 0, ow);                                                 \
        int64_t dh = pool_is_adaptive(s) ? 1 : s->dh, dw = pool_is_adaptive(s) ? 1 : s->dw;     \
        int64_t at = rows.n > 0 && cols.n > 0 ? rows.lo * s->w + cols.lo : 0;                   \
        pool_window_op_##S(op, x + at, h + at, dx + at, pin + ow, pout + ow, dh * s->w, dw,     \
                           rows.n, cols.n, (double)pool_divisor(s, rows, cols), 0);            \
    }                                                                                           \
                                                                                                \
    /* One plane. A backward pass adds the windows in this order: per output row the interior  \
     * ones left to right, then the clamped ones before them, then those after. */              \
    POOL_INLINE void pool_plane_##S(int op, const pool_block* s, const T* x, const T* h, T* dx, \
                                    const T* pin, T* pout, int overwrite) {                     \
        int64_t lo, hi;                                                                         \
        pool_span full = {0, s->kw, s->kw}; /* an interior window's columns */                  \
        pool_interior(s, &lo, &hi);                                                             \
        for (int64_t oh = 0; oh < s->oh; oh++, pin += s->ow, pout += s->ow) {                   \
            pool_span rows = pool_window(s, 1, oh);                                             \
            if (rows.n <= 0) { /* a row of windows wholly in the padding: no interior */        \
                for (int64_t ow = 0; ow < s->ow; ow++)                                          \
                    pool_cell_##S(op, s, ow, rows, x, h, dx, pin, pout);                        \
                continue;                                                                       \
            }                                                                                   \
            int64_t at = rows.lo * s->w + lo * s->sw - s->pw;                                   \
            double div = (double)pool_divisor(s, rows, full);                                   \
            if (overwrite) /* a literal, so the stores compile without a test */                \
                pool_row_interior_##S(op, x + at, h + at, dx + at, pin + lo, pout + lo, s->w,   \
                                      hi - lo, rows.n, s->kw, s->sw, div, 1);                   \
            else if (hi > lo)                                                                   \
                pool_row_interior_##S(op, x + at, h + at, dx + at, pin + lo, pout + lo, s->w,   \
                                      hi - lo, rows.n, s->kw, s->sw, div, 0);                   \
            for (int64_t ow = 0; ow < lo; ow++)                                                 \
                pool_cell_##S(op, s, ow, rows, x, h, dx, pin, pout);                            \
            for (int64_t ow = hi; ow < s->ow; ow++)                                             \
                pool_cell_##S(op, s, ow, rows, x, h, dx, pin, pout);                            \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* Zero the cells of one plane that no tiling window covers: the last rows and columns */   \
    POOL_INLINE void pool_clear_untiled_##S(T* dx, const pool_block* s) {                       \
        int64_t used_h = s->oh * s->kh, used_w = s->ow * s->kw;                                 \
        if (used_w < s->w)                                                                      \
            for (int64_t r = 0; r < used_h; r++)                                                \
                memset(dx + r * s->w + used_w, 0, (size_t)(s->w - used_w) * sizeof(T));        \
        memset(dx + used_h * s->w, 0, (size_t)((s->h - used_h) * s->w) * sizeof(T));            \
    }                                                                                           \
                                                                                                \
    /* y[p] = sum of plane p / div, each plane summed in order as window_sum does (so bitwise   \
     * its result), 8 planes at a time: one plane's adds wait on each other, 8 chains overlap. */ \
    POOL_INLINE void pool_global_sums_##S(const T* x, T* y, int64_t planes, int64_t full,       \
                                          double div) {                                         \
        int64_t p = 0;                                                                          \
        for (; p + 8 <= planes; p += 8, x += 8 * full) {                                        \
            double acc[8] = {0};                                                                \
            for (int64_t i = 0; i < full; i++)                                                  \
                for (int k = 0; k < 8; k++) acc[k] += x[k * full + i];                          \
            for (int k = 0; k < 8; k++) y[p + k] = (T)(acc[k] / div);                           \
        }                                                                                       \
        for (; p < planes; p++, x += full)                                                      \
            y[p] = (T)(pool_window_sum_##S(x, full, 1, 1, full) / div);                         \
    }                                                                                           \
                                                                                                \
    /* Planes [lo, hi) of r through op (a constant where it is inlined: each op its loops) */   \
    POOL_INLINE void pool_planes_##S(const pool_run* r, int op, int64_t lo, int64_t hi) {       \
        const pool_block* s = &r->s;                                                            \
        int64_t full = s->h * s->w, pooled = s->oh * s->ow;                                     \
        int backward = op == POOL_R_MAX_BACKWARD || op == POOL_R_AVG_BACKWARD;                  \
        int overwrite = backward && pool_tiles(s);                                              \
        const T* x = (const T*)r->x + lo * full;                                                \
        const T* h = (const T*)r->h + lo * full;                                                \
        T* dx = (T*)r->dx + lo * full;                                                          \
        const T* pin = (const T*)r->pin + lo * pooled;                                          \
        T* pout = (T*)r->pout + lo * pooled;                                                    \
        if (op == POOL_R_AVG && s->oh == 1 && s->ow == 1 && s->kh == s->h && s->kw == s->w &&   \
            pool_tiles(s)) { /* a global average */                                             \
            pool_global_sums_##S(x, pout, hi - lo, full, (double)full);                         \
            return;                                                                             \
        }                                                                                       \
        if (backward && !overwrite) memset(dx, 0, (size_t)((hi - lo) * full) * sizeof(T));      \
        for (int64_t p = 0; p < hi - lo; p++) {                                                 \
            if (overwrite) pool_clear_untiled_##S(dx + p * full, s);                            \
            pool_plane_##S(op, s, x + p * full, h + p * full, dx + p * full, pin + p * pooled,  \
                           pout + p * pooled, overwrite);                                       \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* a part of the max pass (ctx a pool_run), of the average, or of a backward one */          \
    POOL_INLINE void pool_max_##S(void* ctx, int64_t lo, int64_t hi) {                          \
        pool_planes_##S((const pool_run*)ctx, POOL_R_MAX, lo, hi);                              \
    }                                                                                           \
    POOL_INLINE void pool_avg_##S(void* ctx, int64_t lo, int64_t hi) {                          \
        pool_planes_##S((const pool_run*)ctx, POOL_R_AVG, lo, hi);                              \
    }                                                                                           \
    POOL_INLINE void pool_backward_##S(void* ctx, int64_t lo, int64_t hi) {                     \
        const pool_run* r = (const pool_run*)ctx;                                               \
        if (r->op == POOL_R_MAX_BACKWARD)                                                       \
            pool_planes_##S(r, POOL_R_MAX_BACKWARD, lo, hi);                                    \
        else if (r->op == POOL_R_SELECT)                                                        \
            pool_planes_##S(r, POOL_R_SELECT, lo, hi);                                          \
        else                                                                                    \
            pool_planes_##S(r, POOL_R_AVG_BACKWARD, lo, hi);                                    \
    }

POOL_FLOAT(f32, float)
POOL_FLOAT(f64, double)

/* a part over planes [lo, hi) of the pool_run at ctx */
typedef void (*pool_part_fn)(void* ctx, int64_t lo, int64_t hi);

#if defined(__GNUC__) && defined(__x86_64__)
#define POOL_X86 1
#else
#define POOL_X86 0
#endif

/* Entry points NAME_base and (x86-64) NAME_avx2 of the part BODY (pool_avg_f32, ...), whose
 * inlined passes take each one's target, and NAME(r), the build for pool_run r: the widest this
 * CPU runs, but the baseline for adaptive windows (made no sliding ones: every window clamped).
 * POOL_BASE_PART: the baseline's alone.
 * Design: AVX2 builds only the averages, where it pays: 0.68-0.77x the baseline's time (avg 3x3/1
 * of 8x64x56x56, the global average of 8x512x7x7); the max passes and the gradients take
 * 0.94-1.04x (max 2x2 and 3x3/2, the max gradient of 8x64x112x112), adaptive windows 1.0x, or
 * 1.2x in the package's build (-finline-limit=5000; Zen 3, GCC 12, medians of 31 interleaved
 * runs), and each build of a pass adds 10-20 KB to an export. */
#define POOL_BASE_PART(NAME, BODY)                                                              \
    static void NAME##_base(void* ctx, int64_t lo, int64_t hi) { BODY(ctx, lo, hi); }           \
    static inline pool_part_fn NAME(const pool_run* r) { return (void)r, NAME##_base; }
#if POOL_X86
#define POOL_PARTS(NAME, BODY)                                                                  \
    static void NAME##_base(void* ctx, int64_t lo, int64_t hi) { BODY(ctx, lo, hi); }           \
    __attribute__((target("avx2"))) static void NAME##_avx2(void* ctx, int64_t lo,             \
                                                            int64_t hi) {                       \
        BODY(ctx, lo, hi);                                                                      \
    }                                                                                           \
    static inline pool_part_fn NAME(const pool_run* r) {                                        \
        __builtin_cpu_init();                                                                   \
        return __builtin_cpu_supports("avx2") && !pool_is_adaptive(&r->s) ? NAME##_avx2         \
                                                                          : NAME##_base;        \
    }
#else
#define POOL_PARTS(NAME, BODY) POOL_BASE_PART(NAME, BODY)
#endif

/* the bytes a pass over block s moves, `full` full-size buffers and one pooled of `item`-byte
 * values: its threads' work (grain.h's rule, the Python lowering's moved_bytes) */
static inline double pool_moved_bytes(const pool_block* s, int full, int64_t item) {
    return (double)item * (double)s->planes *
           ((double)full * (double)s->h * (double)s->w + (double)s->oh * (double)s->ow);
}

#endif
