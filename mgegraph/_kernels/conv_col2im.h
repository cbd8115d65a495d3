/* col2im row by row: the adjoint of im2col for the data gradient's GEMM path (conv_gemm.pxi's
 * data_pairs at a stride, and conv_data_gemm.h's GEMM path, which the executor's "tiles" way and
 * the C runtime's conv2d_backward_data_f32 run: one source for both), in float32 and float64
 * (conv_col2im_rows_f32, _f64).
 *
 * col holds, per input channel c of [c0, c1), kh * kw rows of oh * ow cells (tap (i, j)'s row:
 * the output cells' products W_g^T dy_g); x's planes of those channels are written whole, no
 * zeroing beforehand: row by row, each zeroed and summed while in L1 from every (tap, col row)
 * that lands on it. A cell takes its terms in the order (i, j), as conv.pyx's col2im_range's,
 * so the two give the same bits; but col2im_range passes over x once per tap, after the
 * zeroing pass, where at a stride the taps' adds land a stride apart (cache lines read and
 * written back kh * kw / (sh * sw) + 1 times instead of once). bias (the channels', from c0;
 * or NULL) is added to each row once its sums are complete: the bits of a separate add.
 *
 * At stride 2 undilated, two or three neighbouring taps of a kernel row fill the even and odd
 * columns: one loop of interleaved pairs, which the compiler vectorises, where all are inside
 * the image (add_pair, add_triple), the ends one by one, each cell's adds in the order (j) as
 * before: the same bits. */
#ifndef MG_CONV_COL2IM_H
#define MG_CONV_COL2IM_H

#include <stddef.h>
#include <string.h>

/* the convolution's geometry: the input plane (h, w) col2im writes, the output (oh, ow) */
typedef struct {
    ptrdiff_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
} conv_col2im_geometry;

static inline ptrdiff_t conv_col2im_clamp(ptrdiff_t v, ptrdiff_t lo, ptrdiff_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* The output columns [*lo, *hi) whose input column ow * sw + off lies inside the image */
static inline void conv_col2im_inside(ptrdiff_t off, const conv_col2im_geometry* s,
                                      ptrdiff_t* lo, ptrdiff_t* hi) {
    ptrdiff_t first = -off > 0 ? (-off + s->sw - 1) / s->sw : -(off / s->sw); /* ceil(-off/sw) */
    ptrdiff_t end = s->w - off > 0 ? (s->w - off + s->sw - 1) / s->sw : -((off - s->w) / s->sw);
    *lo = conv_col2im_clamp(first, 0, s->ow);
    *hi = conv_col2im_clamp(end, *lo, s->ow);
}

#define CONV_COL2IM_FUNCTIONS(T, S)                                                          \
    /* xrow[ow * sw + off] += crow[ow] where that column is inside the image */              \
    static inline void conv_add_strided_##S(T* xrow, const T* crow, ptrdiff_t off,            \
                                           const conv_col2im_geometry* s) {                 \
        ptrdiff_t lo, hi;                                                                    \
        conv_col2im_inside(off, s, &lo, &hi);                                                \
        for (ptrdiff_t k = lo; k < hi; k++) xrow[k * s->sw + off] += crow[k];                 \
    }                                                                                        \
    /* two neighbouring taps at stride 2 (offsets off and off + 1) */                        \
    static inline void conv_add_pair_##S(T* xrow, const T* a, const T* b, ptrdiff_t off,      \
                                        const conv_col2im_geometry* s) {                    \
        ptrdiff_t lo_a, hi_a, lo_b, hi_b, k;                                                 \
        conv_col2im_inside(off, s, &lo_a, &hi_a);                                            \
        conv_col2im_inside(off + 1, s, &lo_b, &hi_b);                                        \
        ptrdiff_t lo = lo_a > lo_b ? lo_a : lo_b, hi = hi_a < hi_b ? hi_a : hi_b;            \
        if (hi <= lo) lo = hi = hi_a; /* no column in common */                              \
        for (k = lo_a; k < lo; k++) xrow[2 * k + off] += a[k];                               \
        for (k = lo_b; k < (lo < hi_b ? lo : hi_b); k++) xrow[2 * k + off + 1] += b[k];      \
        for (k = lo; k < hi; k++) {                                                          \
            xrow[2 * k + off] += a[k];                                                       \
            xrow[2 * k + off + 1] += b[k];                                                   \
        }                                                                                    \
        for (k = hi; k < hi_a; k++) xrow[2 * k + off] += a[k];                               \
        for (k = hi > lo_b ? hi : lo_b; k < hi_b; k++) xrow[2 * k + off + 1] += b[k];        \
    }                                                                                        \
    /* three neighbouring taps at stride 2 (a 3-wide kernel row): cell 2k + off takes a[k]   \
     * then c[k - 1], cell 2k + off + 1 takes b[k] */                                        \
    static inline void conv_add_triple_##S(T* xrow, const T* a, const T* b, const T* c,       \
                                          ptrdiff_t off, const conv_col2im_geometry* s) {   \
        ptrdiff_t lo_a, hi_a, lo_b, hi_b, lo_c, hi_c, k;                                     \
        conv_col2im_inside(off, s, &lo_a, &hi_a);                                            \
        conv_col2im_inside(off + 1, s, &lo_b, &hi_b);                                        \
        conv_col2im_inside(off + 2, s, &lo_c, &hi_c);                                        \
        ptrdiff_t lo = lo_a > lo_b ? lo_a : lo_b, hi = hi_a < hi_b ? hi_a : hi_b;            \
        if (lo_c + 1 > lo) lo = lo_c + 1;                                                    \
        if (hi_c + 1 < hi) hi = hi_c + 1;                                                    \
        if (hi <= lo) { /* no column in common: two taps, then the third */                  \
            conv_add_pair_##S(xrow, a, b, off, s);                                           \
            conv_add_strided_##S(xrow, c, off + 2, s);                                       \
            return;                                                                          \
        }                                                                                    \
        for (k = lo_a; k < lo; k++) xrow[2 * k + off] += a[k];                               \
        for (k = lo_b; k < lo; k++) xrow[2 * k + off + 1] += b[k];                           \
        for (k = lo_c; k < lo - 1; k++) xrow[2 * k + off + 2] += c[k];                       \
        for (k = lo; k < hi; k++) {                                                          \
            xrow[2 * k + off] = xrow[2 * k + off] + a[k] + c[k - 1];                         \
            xrow[2 * k + off + 1] += b[k];                                                   \
        }                                                                                    \
        for (k = hi; k < hi_a; k++) xrow[2 * k + off] += a[k];                               \
        for (k = hi; k < hi_b; k++) xrow[2 * k + off + 1] += b[k];                           \
        for (k = hi - 1; k < hi_c; k++) xrow[2 * k + off + 2] += c[k];                       \
    }                                                                                        \
    /* the planes of x's channels [c0, c1) from col (see above) */                           \
    static inline void conv_col2im_rows_##S(const T* col, T* x, const T* bias, ptrdiff_t c0,  \
                                           ptrdiff_t c1, const conv_col2im_geometry* s) {   \
        ptrdiff_t npix = s->oh * s->ow, taps = s->kh * s->kw;                                \
        int pairs = s->sw == 2 && s->dw == 1;                                                \
        for (ptrdiff_t ci = c0; ci < c1; ci++)                                               \
            for (ptrdiff_t ih = 0; ih < s->h; ih++) {                                        \
                T* xrow = x + (ci * s->h + ih) * s->w;                                       \
                memset(xrow, 0, (size_t)s->w * sizeof(T));                                   \
                for (ptrdiff_t i = 0; i < s->kh; i++) {                                      \
                    ptrdiff_t t = ih + s->ph - i * s->dh; /* the col row's oh * sh */        \
                    if (t < 0 || t % s->sh || t / s->sh >= s->oh) continue;                  \
                    const T* crow = col + ((ci - c0) * taps + i * s->kw) * npix +            \
                                    t / s->sh * s->ow;                                       \
                    for (ptrdiff_t j = 0; j < s->kw;) {                                      \
                        if (pairs && j + 2 < s->kw) {                                        \
                            conv_add_triple_##S(xrow, crow + j * npix, crow + (j + 1) * npix, \
                                                crow + (j + 2) * npix, j - s->pw, s);        \
                            j += 3;                                                          \
                        } else if (pairs && j + 1 < s->kw) {                                 \
                            conv_add_pair_##S(xrow, crow + j * npix, crow + (j + 1) * npix,  \
                                              j - s->pw, s);                                 \
                            j += 2;                                                          \
                        } else {                                                             \
                            conv_add_strided_##S(xrow, crow + j * npix, j * s->dw - s->pw, s); \
                            j += 1;                                                          \
                        }                                                                    \
                    }                                                                        \
                }                                                                            \
                if (bias)                                                                    \
                    for (ptrdiff_t k = 0; k < s->w; k++) xrow[k] += bias[ci];                \
            }                                                                                \
    }

CONV_COL2IM_FUNCTIONS(float, f32)
CONV_COL2IM_FUNCTIONS(double, f64)

#endif
