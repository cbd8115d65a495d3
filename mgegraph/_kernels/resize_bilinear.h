/* float32 bilinear resize over the last two axes (resize.pyx's fast path: one tap on the first
 * resized axis, two on each of the last two), separable:
 *   h[o2]  = fmaf(cw1[o2], x[row][cj1[o2]], cw0[o2] * x[row][cj0[o2]])   (a horizontal row)
 *   y[o2]  = fmaf(rw1[o1], hb[o2], rw0[o1] * ha[o2])                     (two rows blended)
 * with ha, hb the horizontal rows of input rows rj0[o1] and rj1[o1]; or, with fewer output rows
 * than input rows (bilinear_vertical_first), the two input rows blended first and the horizontal
 * pass run over the blend. Every weight is the tap
 * table's double rounded to float, every product rounded to float and every sum fused, so the
 * scalar, AVX2 and AVX-512 builds (and csrc_cuda/resize.cu, which computes each output so) give
 * the same bits; the order does not depend on how the rows are split among threads.
 *
 * Design: the double sum of four products per output (the general loop) took 9.8 ms for
 * 1x64x128x128 -> 256x256 on one thread of an AMD EPYC Zen 3 and gained nothing from a second.
 * Here a horizontal row is computed once per input row a thread needs (kept in two slots:
 * upsampling's consecutive output rows share their source rows), then each output row is one
 * vector multiply and one fused multiply-add per 8 (16) outputs. One source, built per
 * instruction set through GCC's target attribute and picked by cpu_isa.h, as gemv_row.h's.
 */
#ifndef MG_RESIZE_BILINEAR_H
#define MG_RESIZE_BILINEAR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_isa.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define MG_BILINEAR_X86 1
#endif

/* one axis's two taps per output index, as float32 weights */
typedef struct {
    const int32_t* j0;
    const int32_t* j1;
    const float* w0;
    const float* w1;
} BilinearAxis;

typedef struct {
    const float* x;      /* IN  (planes, in_h, in_w) */
    float* y;            /* OUT (planes, out_h, out_w) */
    BilinearAxis rows;   /* out_h entries: the source rows and their weights */
    BilinearAxis cols;   /* out_w entries */
    ptrdiff_t in_h, in_w, out_h, out_w;
} Bilinear;

/* h[o] for o in [from, n): the scalar tail of every build */
#define MG_BILINEAR_HTAIL(from)                                                                 \
    for (ptrdiff_t o = (from); o < n; ++o)                                                      \
        h[o] = fmaf(c->w1[o], x[c->j1[o]], c->w0[o] * x[c->j0[o]]);

#define MG_BILINEAR_BLEND(name)                                                                 \
    static void name(const float* ha, const float* hb, float v0, float v1, ptrdiff_t n,         \
                     float* y) {                                                                \
        for (ptrdiff_t o = 0; o < n; ++o) y[o] = fmaf(v1, hb[o], v0 * ha[o]);                   \
    }

#define MG_BILINEAR_HROW_PLAIN(name)                                                            \
    static void name(const float* x, const BilinearAxis* c, ptrdiff_t n, float* h) {            \
        MG_BILINEAR_HTAIL(0)                                                                    \
    }

/* a thread's output bytes from which its rows are stored past the caches */
#define MG_BILINEAR_STREAM_BYTES (4 << 20)

typedef void (*bilinear_hrow_fn)(const float* x, const BilinearAxis* c, ptrdiff_t n, float* h);
typedef void (*bilinear_blend_fn)(const float* ha, const float* hb, float v0, float v1,
                                  ptrdiff_t n, float* y);

MG_BILINEAR_HROW_PLAIN(bilinear_hrow_plain)
MG_BILINEAR_BLEND(bilinear_blend_plain)

#ifdef MG_BILINEAR_X86
/* AVX2: the horizontal row's 16 reads per 8 outputs as two gathers (GCC 12 does not vectorise
 * the indexed loads itself) */
__attribute__((target("avx2,fma"))) static void bilinear_hrow_avx2(
    const float* x, const BilinearAxis* c, ptrdiff_t n, float* h) {
    ptrdiff_t o = 0;
    for (; o + 8 <= n; o += 8) {
        const __m256 a = _mm256_i32gather_ps(
            x, _mm256_loadu_si256((const __m256i*)(c->j0 + o)), 4);
        const __m256 b = _mm256_i32gather_ps(
            x, _mm256_loadu_si256((const __m256i*)(c->j1 + o)), 4);
        _mm256_storeu_ps(h + o, _mm256_fmadd_ps(_mm256_loadu_ps(c->w1 + o), b,
                                                _mm256_mul_ps(_mm256_loadu_ps(c->w0 + o), a)));
    }
    MG_BILINEAR_HTAIL(o)
}
__attribute__((target("avx2,fma"))) MG_BILINEAR_BLEND(bilinear_blend_avx2)
/* the blend stored past the caches, for outputs too large to stay in them: no line of y is read
 * before it is written (y 32-byte aligned, n a multiple of 8) */
__attribute__((target("avx2,fma"))) static void bilinear_blend_stream_avx2(
    const float* ha, const float* hb, float v0, float v1, ptrdiff_t n, float* y) {
    const __m256 a = _mm256_set1_ps(v0), b = _mm256_set1_ps(v1);
    for (ptrdiff_t o = 0; o < n; o += 8)
        _mm256_stream_ps(y + o, _mm256_fmadd_ps(b, _mm256_loadu_ps(hb + o),
                                                _mm256_mul_ps(a, _mm256_loadu_ps(ha + o))));
}

__attribute__((target("avx512f,fma,prefer-vector-width=512"))) static void bilinear_hrow_avx512(
    const float* x, const BilinearAxis* c, ptrdiff_t n, float* h) {
    ptrdiff_t o = 0;
    for (; o + 16 <= n; o += 16) {
        const __m512 a = _mm512_i32gather_ps(_mm512_loadu_si512(c->j0 + o), x, 4);
        const __m512 b = _mm512_i32gather_ps(_mm512_loadu_si512(c->j1 + o), x, 4);
        _mm512_storeu_ps(h + o, _mm512_fmadd_ps(_mm512_loadu_ps(c->w1 + o), b,
                                                _mm512_mul_ps(_mm512_loadu_ps(c->w0 + o), a)));
    }
    MG_BILINEAR_HTAIL(o)
}
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
MG_BILINEAR_BLEND(bilinear_blend_avx512)
#endif

/* the widest build this CPU runs (0 baseline, 1 AVX2, 2 AVX-512) */
static inline int bilinear_isa(void) {
#ifdef MG_BILINEAR_X86
    return cpu_isa_widest();
#else
    return 0;
#endif
}

/* Whether b blends rows before the horizontal pass: when it has fewer output rows than input
 * rows, each input row serves about one output row, and blending the two input rows first
 * leaves one gathered row per output row instead of two (2x downsampling 8x3x224x224 on one
 * thread, AMD EPYC Zen 3 under load: 1.56 ms horizontal first, against 1.15 for the double
 * sums). The CUDA kernel applies the same rule, so the order is the same. */
static inline int bilinear_vertical_first(const Bilinear* b) { return b->out_h < b->in_h; }

/* Output rows [lo, hi) of b (counted over planes x out_h); `slots` holds two rows of
 * `stride` >= max(in_w, out_w) floats, the thread's own. */
static void bilinear_rows(const Bilinear* b, ptrdiff_t lo, ptrdiff_t hi, float* slots,
                          ptrdiff_t stride, int isa) {
    bilinear_hrow_fn hrow = bilinear_hrow_plain;
    bilinear_blend_fn blend = bilinear_blend_plain;
#ifdef MG_BILINEAR_X86
    if (isa == 2) hrow = bilinear_hrow_avx512, blend = bilinear_blend_avx512;
    if (isa == 1) hrow = bilinear_hrow_avx2, blend = bilinear_blend_avx2;
#endif
    if (bilinear_vertical_first(b)) {
        /* v = fmaf(rw1, x[rj1], rw0 * x[rj0]) over the input width, then y = hrow(v) */
        for (ptrdiff_t r = lo; r < hi; ++r) {
            const ptrdiff_t p = r / b->out_h, o = r % b->out_h;
            const float* x = b->x + p * b->in_h * b->in_w;
            blend(x + b->rows.j0[o] * b->in_w, x + b->rows.j1[o] * b->in_w, b->rows.w0[o],
                  b->rows.w1[o], b->in_w, slots);
            hrow(slots, &b->cols, b->out_w, b->y + r * b->out_w);
        }
        return;
    }
#ifdef MG_BILINEAR_X86
    if (isa == 1 && b->out_w % 8 == 0 && (uintptr_t)b->y % 32 == 0 &&
        (hi - lo) * b->out_w * 4 > MG_BILINEAR_STREAM_BYTES)
        blend = bilinear_blend_stream_avx2;
#endif
    ptrdiff_t held[2] = {-1, -1}; /* the input row (plane * in_h + row) each slot holds */
    for (ptrdiff_t r = lo; r < hi; ++r) {
        const ptrdiff_t p = r / b->out_h, o = r % b->out_h;
        const ptrdiff_t want[2] = {p * b->in_h + b->rows.j0[o], p * b->in_h + b->rows.j1[o]};
        float* h[2];
        for (int k = 0; k < 2; ++k) {
            int s = held[0] == want[k] ? 0 : held[1] == want[k] ? 1 : -1;
            if (s < 0) { /* fill the slot the other row does not need */
                s = k == 1 ? (held[0] == want[0] ? 1 : 0) : (held[1] == want[1] ? 0 : 1);
                hrow(b->x + want[k] * b->in_w, &b->cols, b->out_w, slots + s * stride);
                held[s] = want[k];
            }
            h[k] = slots + s * stride;
        }
        blend(h[0], h[1], b->rows.w0[o], b->rows.w1[o], b->out_w, b->y + r * b->out_w);
    }
#ifdef MG_BILINEAR_X86
    if (blend == bilinear_blend_stream_avx2) _mm_sfence();
#endif
}

#endif
