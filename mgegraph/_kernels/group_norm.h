/* The float32 loops of group norm (norm.pyx): a group's shifted sums in double, forward and
 * backward, and the two elementwise passes. One source, built per instruction set through GCC's
 * target attribute and picked by cpu_isa.h (as gemv_row.h's); the module is built without FP
 * contraction (build_flags.py), and every sum keeps GN_LANES lanes in a fixed order whatever the
 * vector width, so the three builds give the same bits.
 *
 * Design: norm.pyx's loops are built for the baseline x86-64 (SSE2: two doubles a vector), where
 * widening each float to double for the sums took most of a training step: 8x64x56x56 in 32
 * groups, forward and backward, 3.5 ms of CPU time on one Zen 3 thread under load, against
 * PyTorch's 2.2 ms (AVX2, float sums). Here AVX2 widens and adds four at a time.
 */
#ifndef MG_GROUP_NORM_H
#define MG_GROUP_NORM_H

#include <math.h>
#include <stddef.h>

#include "activation.h"
#include "cpu_isa.h"

#define GN_LANES 8

/* lanes halved pairwise in place: acc[0] their total */
#define GN_TOTAL(acc)                                                                           \
    for (int half = GN_LANES / 2; half >= 1; half /= 2)                                         \
        for (int l = 0; l < half; ++l) acc[l] += acc[l + half];

#define GN_LOOPS(SUFFIX, ATTR)                                                                  \
    /* s[0], s[1] = the sums over x[:n] of x - shift and of its squares */                     \
    ATTR static void gn_sums_##SUFFIX(const float* x, ptrdiff_t n, double shift, double* s) {   \
        double a1[GN_LANES] = {0}, a2[GN_LANES] = {0};                                          \
        ptrdiff_t i = 0;                                                                        \
        for (; i + GN_LANES <= n; i += GN_LANES)                                                \
            for (int l = 0; l < GN_LANES; ++l) {                                                \
                const double d = (double)x[i + l] - shift;                                      \
                a1[l] += d, a2[l] += d * d;                                                     \
            }                                                                                   \
        for (int l = 0; i + l < n; ++l) {                                                       \
            const double d = (double)x[i + l] - shift;                                          \
            a1[l] += d, a2[l] += d * d;                                                         \
        }                                                                                       \
        GN_TOTAL(a1) GN_TOTAL(a2) s[0] = a1[0], s[1] = a2[0];                                  \
    }                                                                                           \
    /* s[0..3] = the sums over a run of g, g (x - shift), x - shift and (x - shift)^2 */        \
    ATTR static void gn_grad_sums_##SUFFIX(const float* x, const float* g, ptrdiff_t n,         \
                                           double shift, double* s) {                           \
        double ag[GN_LANES] = {0}, agd[GN_LANES] = {0}, ad[GN_LANES] = {0},                     \
               add[GN_LANES] = {0};                                                             \
        ptrdiff_t i = 0;                                                                        \
        for (; i + GN_LANES <= n; i += GN_LANES)                                                \
            for (int l = 0; l < GN_LANES; ++l) {                                                \
                const double d = (double)x[i + l] - shift, e = g[i + l];                        \
                ag[l] += e, agd[l] += e * d, ad[l] += d, add[l] += d * d;                       \
            }                                                                                   \
        for (int l = 0; i + l < n; ++l) {                                                       \
            const double d = (double)x[i + l] - shift, e = g[i + l];                            \
            ag[l] += e, agd[l] += e * d, ad[l] += d, add[l] += d * d;                           \
        }                                                                                       \
        GN_TOTAL(ag) GN_TOTAL(agd) GN_TOTAL(ad) GN_TOTAL(add)                                   \
        s[0] = ag[0], s[1] = agd[0], s[2] = ad[0], s[3] = add[0];                               \
    }                                                                                           \
    /* y = act((x - centre) scale + shift), act an epilogue activation (activation.h) */        \
    ATTR static void gn_affine_##SUFFIX(const float* x, ptrdiff_t n, float centre, float scale,  \
                                        float shift, int act, float* y) {                       \
        if (act == ACT_RELU)                                                                    \
            for (ptrdiff_t i = 0; i < n; ++i) {                                                 \
                const float v = (x[i] - centre) * scale + shift;                                \
                y[i] = v <= 0 ? 0 : v;                                                          \
            }                                                                                   \
        else if (act == ACT_RELU6)                                                              \
            for (ptrdiff_t i = 0; i < n; ++i)                                                   \
                y[i] = act_f32((x[i] - centre) * scale + shift, ACT_RELU6);                     \
        else                                                                                    \
            for (ptrdiff_t i = 0; i < n; ++i) y[i] = (x[i] - centre) * scale + shift;           \
    }                                                                                           \
    /* dx = g p + (x - centre) q + r */                                                         \
    ATTR static void gn_dx_##SUFFIX(const float* x, const float* g, ptrdiff_t n, float centre,  \
                                    float p, float q, float r, float* dx) {                     \
        for (ptrdiff_t i = 0; i < n; ++i) dx[i] = g[i] * p + (x[i] - centre) * q + r;           \
    }

GN_LOOPS(plain, )
#if defined(__GNUC__) && defined(__x86_64__)
GN_LOOPS(avx2, __attribute__((target("avx2,fma"))))
GN_LOOPS(avx512, __attribute__((target("avx512f,fma,prefer-vector-width=512"))))
#endif

typedef struct {
    void (*sums)(const float* x, ptrdiff_t n, double shift, double* s);
    void (*grad_sums)(const float* x, const float* g, ptrdiff_t n, double shift, double* s);
    void (*affine)(const float* x, ptrdiff_t n, float centre, float scale, float shift, int act,
                   float* y);
    void (*dx)(const float* x, const float* g, ptrdiff_t n, float centre, float p, float q,
               float r, float* dx);
} GroupNormLoops;

/* group norm's forward over the groups [lo, hi) of x (batch, channels, inner), each a contiguous
 * run of (channels / groups) * inner values: a group's mean and 1 / sqrt(variance + eps) from
 * its sums shifted by its first value (no cancellation where |mean| >> std; a variance below 0
 * or NaN taken as 0), then y = act((x - mean) (rstd w) + b) per channel in float32. The float32
 * body of both executors (norm.pyx's and the C runtime's group_norm_f32): the same bits. */
static inline void gn_forward_f32(const GroupNormLoops* k, const float* x, const float* w,
                                  const float* b, float* y, ptrdiff_t channels, ptrdiff_t inner,
                                  ptrdiff_t groups, int act, double eps, ptrdiff_t lo,
                                  ptrdiff_t hi) {
    const ptrdiff_t per = channels / groups, n = per * inner;
    if (n == 0) return;  /* empty groups: nothing to write */
    for (ptrdiff_t unit = lo; unit < hi; ++unit) {
        const float* px = x + unit * n;
        float* py = y + unit * n;
        const double shift = px[0];
        double s[2], variance;
        k->sums(px, n, shift, s);
        variance = (s[1] - s[0] * (s[0] / n)) / n;
        const double rstd = 1 / sqrt((variance > 0 ? variance : 0) + eps);
        const float centre = (float)(shift + s[0] / n);
        for (ptrdiff_t c = 0; c < per; ++c) {
            const ptrdiff_t ch = (unit % groups) * per + c;
            k->affine(px + c * inner, inner, centre, (float)(rstd * w[ch]), b[ch], act,
                      py + c * inner);
        }
    }
}

/* the loops of the widest build this CPU runs */
static inline GroupNormLoops group_norm_loops(void) {
    GroupNormLoops k = {gn_sums_plain, gn_grad_sums_plain, gn_affine_plain, gn_dx_plain};
#if defined(__GNUC__) && defined(__x86_64__)
    const int isa = cpu_isa_widest();
    if (isa == 1) k = (GroupNormLoops){gn_sums_avx2, gn_grad_sums_avx2, gn_affine_avx2, gn_dx_avx2};
    if (isa == 2)
        k = (GroupNormLoops){gn_sums_avx512, gn_grad_sums_avx512, gn_affine_avx512, gn_dx_avx512};
#endif
    return k;
}

#endif
