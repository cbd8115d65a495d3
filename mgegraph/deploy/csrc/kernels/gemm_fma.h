/* C = op(A) op(B) in float32 with the arithmetic of mgegraph's gather tiles (conv_tile.h, which
 * linalg.pyx's tile GEMM runs): each element of C is summed over k in order by fused
 * multiply-adds from zero. So an exported plan's GEMM gives bitwise what the Python executor's
 * gives on the tiles, on any CPU with an FMA, and on any thread count (no element's sum is
 * split). The loops keep that order per element and vectorise across the columns.
 *
 * One source built twice on x86-64 (baseline, where fmaf is the C library's, and AVX2 + FMA,
 * taken when the CPU has it), once elsewhere (aarch64 has the FMA in its baseline). */
#ifndef MGR_GEMM_FMA_H
#define MGR_GEMM_FMA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MGR_GEMM_COLS 64 /* columns of C summed at once when B is stored transposed */

/* lda, ldb: row strides of A and B as stored; ta, tb: whether each is stored transposed */
#define MGR_GEMM_BODY                                                                         \
    for (int64_t i = 0; i < m; i++) {                                                         \
        float* ci = c + i * n;                                                                \
        if (!tb) {                                                                            \
            for (int64_t j = 0; j < n; j++) ci[j] = 0;                                        \
            for (int64_t p = 0; p < k; p++) {                                                 \
                float av = ta ? a[p * m + i] : a[i * k + p];                                  \
                const float* bp = b + p * n;                                                  \
                for (int64_t j = 0; j < n; j++) ci[j] = fmaf(av, bp[j], ci[j]);               \
            }                                                                                 \
            continue;                                                                         \
        }                                                                                     \
        for (int64_t j0 = 0; j0 < n; j0 += MGR_GEMM_COLS) {                                   \
            int64_t w = n - j0 < MGR_GEMM_COLS ? n - j0 : MGR_GEMM_COLS;                      \
            float acc[MGR_GEMM_COLS] = {0};                                                   \
            for (int64_t p = 0; p < k; p++) {                                                 \
                float av = ta ? a[p * m + i] : a[i * k + p];                                  \
                for (int64_t j = 0; j < w; j++) acc[j] = fmaf(av, b[(j0 + j) * k + p], acc[j]); \
            }                                                                                 \
            memcpy(ci + j0, acc, (size_t)w * sizeof(float));                                  \
        }                                                                                     \
    }

#define MGR_GEMM_ARGS                                                                         \
    int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c

static void mgr_gemm_base(MGR_GEMM_ARGS) { MGR_GEMM_BODY }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void mgr_gemm_fma(MGR_GEMM_ARGS) { MGR_GEMM_BODY }
#endif

static inline void mgr_gemm(MGR_GEMM_ARGS) {
#if defined(__GNUC__) && defined(__x86_64__)
    static int has_fma = -1;
    if (has_fma < 0) {
        __builtin_cpu_init();
        has_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    if (has_fma) {
        mgr_gemm_fma(ta, tb, m, n, k, a, b, c);
        return;
    }
#endif
    mgr_gemm_base(ta, tb, m, n, k, a, b, c);
}

#endif
