/* softmax and log_softmax over the middle axis of x read as (outer, n, inner): the one source of
 * nn.pyx's softmax kernels and the C runtime's (mgegraph/deploy), so both give the same bits.
 *
 * Design: up to SOFTMAX_CHUNK neighbouring columns of the inner dims at once, so every step reads
 * a contiguous run instead of striding by inner. The sum of exponentials accumulates in double,
 * each result is computed in double and rounded once. A NaN never wins the maximum; it still
 * reaches every output of its column through exp(). Safe in place (y == x): every element is
 * read before it is written. */
#ifndef MG_SOFTMAX_H
#define MG_SOFTMAX_H

#include <math.h>
#include <stddef.h>

#define SOFTMAX_CHUNK 256

#define MG_SOFTMAX_DEFINE(T, SUFFIX, EXP)                                                     \
    static inline void softmax_column_max_##SUFFIX(const T* x, ptrdiff_t n, ptrdiff_t M,      \
                                                   ptrdiff_t cnt, T* mx) {                     \
        for (ptrdiff_t b = 0; b < cnt; b++) mx[b] = -INFINITY;                                \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            const T* px = x + i * M;                                                          \
            for (ptrdiff_t b = 0; b < cnt; b++)                                               \
                if (px[b] > mx[b]) mx[b] = px[b];                                             \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* lse[b] = log(sum over i of exp(x[i, b])) of each column, mx its maximum (cross entropy's  \
     * too) */                                                                                \
    static inline void softmax_column_logsumexp_##SUFFIX(const T* x, ptrdiff_t n, ptrdiff_t M, \
                                                         ptrdiff_t cnt, T* mx, double* lse) {  \
        softmax_column_max_##SUFFIX(x, n, M, cnt, mx);                                        \
        for (ptrdiff_t b = 0; b < cnt; b++) lse[b] = 0;                                       \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            const T* px = x + i * M;                                                          \
            for (ptrdiff_t b = 0; b < cnt; b++) lse[b] += EXP(px[b] - mx[b]);                 \
        }                                                                                     \
        for (ptrdiff_t b = 0; b < cnt; b++) lse[b] = mx[b] + log(lse[b]);                     \
    }                                                                                         \
                                                                                              \
    static inline void softmax_chunk_##SUFFIX(const T* x, T* y, ptrdiff_t n, ptrdiff_t M,     \
                                              ptrdiff_t cnt, int take_log) {                  \
        T mx[SOFTMAX_CHUNK];                                                                  \
        double s[SOFTMAX_CHUNK];                                                              \
        if (take_log) {                                                                       \
            softmax_column_logsumexp_##SUFFIX(x, n, M, cnt, mx, s);                           \
            for (ptrdiff_t i = 0; i < n; i++)                                                 \
                for (ptrdiff_t b = 0; b < cnt; b++)                                           \
                    y[i * M + b] = (T)((double)x[i * M + b] - s[b]);                          \
            return;                                                                           \
        }                                                                                     \
        softmax_column_max_##SUFFIX(x, n, M, cnt, mx);                                        \
        for (ptrdiff_t b = 0; b < cnt; b++) s[b] = 0;                                         \
        for (ptrdiff_t i = 0; i < n; i++)                                                     \
            for (ptrdiff_t b = 0; b < cnt; b++) {                                             \
                T e = EXP(x[i * M + b] - mx[b]);                                              \
                s[b] += e;                                                                    \
                y[i * M + b] = e;                                                             \
            }                                                                                 \
        for (ptrdiff_t b = 0; b < cnt; b++) s[b] = 1 / s[b];                                  \
        for (ptrdiff_t i = 0; i < n; i++)                                                     \
            for (ptrdiff_t b = 0; b < cnt; b++) y[i * M + b] = (T)(y[i * M + b] * s[b]);      \
    }                                                                                         \
                                                                                              \
    /* the whole tensor: outer blocks of (n, inner), each in chunks of the inner columns */   \
    static inline void softmax_rows_##SUFFIX(const T* x, T* y, ptrdiff_t outer, ptrdiff_t n,       \
                                        ptrdiff_t inner, int take_log) {                      \
        for (ptrdiff_t o = 0; o < outer; o++)                                                 \
            for (ptrdiff_t m0 = 0; m0 < inner; m0 += SOFTMAX_CHUNK) {                         \
                ptrdiff_t cnt = inner - m0 < SOFTMAX_CHUNK ? inner - m0 : SOFTMAX_CHUNK;      \
                ptrdiff_t base = o * n * inner + m0;                                          \
                softmax_chunk_##SUFFIX(x + base, y + base, n, inner, cnt, take_log);          \
            }                                                                                 \
    }

MG_SOFTMAX_DEFINE(float, f32, expf)
MG_SOFTMAX_DEFINE(double, f64, exp)

#endif
