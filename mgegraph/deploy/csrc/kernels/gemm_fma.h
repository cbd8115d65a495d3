/* C = op(A) op(B) in float32 with the arithmetic of mgegraph's gather tiles (conv_tile.h, which
 * linalg.pyx's tile GEMM runs): each element of C is summed over k in order by fused
 * multiply-adds from zero. So an exported plan's GEMM gives bitwise what the Python executor's
 * gives on the tiles, on any CPU with an FMA, and on any thread count (no element's sum is
 * split). The loops keep that order per element and vectorise across the columns.
 *
 * One source built three times on x86-64 (baseline, where fmaf is the C library's; AVX2 + FMA;
 * AVX-512F + FMA: the widest the CPU has runs, every one giving the same bits), once elsewhere
 * (aarch64 has the FMA in its baseline). */
#ifndef MGR_GEMM_FMA_H
#define MGR_GEMM_FMA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MGR_GEMM_COLS 64 /* columns of C summed at once: a block's sums stay in L1 */
#define MGR_GEMM_ROWS 4  /* rows of C sharing each row of B read */
#define MGR_GEMM_DEPTH 16 /* steps of k of a stored B^T transposed at a time */

/* Rows i0.. i0 + rows of C, columns j0.. j0 + w: acc[r][j] = sum over p in order of
 * fmaf(op(A)[i0 + r, p], op(B)[p, j0 + j], acc[r][j]) from zero. A stored B^T is read
 * MGR_GEMM_DEPTH steps of k at a time into bt (transposed), so every inner loop runs along
 * contiguous columns. */
#define MGR_GEMM_BODY                                                                         \
    float acc[MGR_GEMM_ROWS][MGR_GEMM_COLS];                                                  \
    float bt[MGR_GEMM_DEPTH][MGR_GEMM_COLS];                                                  \
    for (int64_t i0 = 0; i0 < m; i0 += MGR_GEMM_ROWS) {                                       \
        int64_t rows = m - i0 < MGR_GEMM_ROWS ? m - i0 : MGR_GEMM_ROWS;                       \
        for (int64_t j0 = 0; j0 < n; j0 += MGR_GEMM_COLS) {                                   \
            int64_t w = n - j0 < MGR_GEMM_COLS ? n - j0 : MGR_GEMM_COLS;                      \
            memset(acc, 0, sizeof acc);                                                       \
            for (int64_t p0 = 0; p0 < k; p0 += MGR_GEMM_DEPTH) {                              \
                int64_t depth = k - p0 < MGR_GEMM_DEPTH ? k - p0 : MGR_GEMM_DEPTH;            \
                if (tb)                                                                       \
                    for (int64_t j = 0; j < w; j++)                                           \
                        for (int64_t q = 0; q < depth; q++)                                   \
                            bt[q][j] = b[(j0 + j) * k + p0 + q];                              \
                if (rows == MGR_GEMM_ROWS && w == MGR_GEMM_COLS) { /* whole: constant bounds */ \
                    for (int64_t q = 0; q < depth; q++) {                                     \
                        int64_t p = p0 + q;                                                   \
                        const float* restrict bp = tb ? bt[q] : b + p * n + j0;               \
                        for (int r = 0; r < MGR_GEMM_ROWS; r++) {                             \
                            float av = ta ? a[p * m + i0 + r] : a[(i0 + r) * k + p];          \
                            for (int j = 0; j < MGR_GEMM_COLS; j++)                           \
                                acc[r][j] = fmaf(av, bp[j], acc[r][j]);                       \
                        }                                                                     \
                    }                                                                         \
                    continue;                                                                 \
                }                                                                             \
                for (int64_t q = 0; q < depth; q++) {                                         \
                    int64_t p = p0 + q;                                                       \
                    const float* restrict bp = tb ? bt[q] : b + p * n + j0;                   \
                    for (int64_t r = 0; r < rows; r++) {                                      \
                        float av = ta ? a[p * m + i0 + r] : a[(i0 + r) * k + p];              \
                        float* restrict cr = acc[r];                                          \
                        for (int64_t j = 0; j < w; j++) cr[j] = fmaf(av, bp[j], cr[j]);       \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            for (int64_t r = 0; r < rows; r++)                                                \
                memcpy(c + (i0 + r) * n + j0, acc[r], (size_t)w * sizeof(float));            \
        }                                                                                     \
    }

#define MGR_GEMM_ARGS                                                                         \
    int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c

static void mgr_gemm_base(MGR_GEMM_ARGS) { MGR_GEMM_BODY }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void mgr_gemm_avx2(MGR_GEMM_ARGS) { MGR_GEMM_BODY }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void mgr_gemm_avx512(MGR_GEMM_ARGS) { MGR_GEMM_BODY }
#endif

static inline void mgr_gemm(MGR_GEMM_ARGS) {
#if defined(__GNUC__) && defined(__x86_64__)
    static int isa = -1; /* cpu_isa.h's codes: 0 baseline, 1 AVX2 + FMA, 2 AVX-512F + FMA */
    if (isa < 0) {
        __builtin_cpu_init();
        int fma = __builtin_cpu_supports("fma");
        isa = fma && __builtin_cpu_supports("avx512f") ? 2 : fma && __builtin_cpu_supports("avx2");
    }
    if (isa == 2) {
        mgr_gemm_avx512(ta, tb, m, n, k, a, b, c);
        return;
    }
    if (isa == 1) {
        mgr_gemm_avx2(ta, tb, m, n, k, a, b, c);
        return;
    }
#endif
    mgr_gemm_base(ta, tb, m, n, k, a, b, c);
}

#endif
