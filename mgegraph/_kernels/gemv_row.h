/* One row times a matrix (float32), for linalg.pyx's single-row products: mlp-infer at batch 1,
 * a deployment's usual call, is two of these.
 *
 * Why not the BLAS: a gemv reads its matrix once and does one multiply-add per element, so it
 * runs at the speed memory streams the matrix in. On the 2-core AMD EPYC (Zen 4) MKL's sgemv did
 * mlp-infer's two large ones (784 x 1024, 1024 x 1024: 7 MiB) in 132-224 us on one thread,
 * SciPy's OpenBLAS in 93-117 us; a loop that streams the rows reaches the latter.
 *
 * Two forms, for the two layouts of B (row-major):
 *   gemv_rows_*: B stored (k, n), y[j] = sum_p a[p] B[p, j]: each row of B added into the sums
 *     of a block of GEMV_BLOCK columns;
 *   gemv_dots_*: B stored (n, k), y[j] = dot(a, B[j, :]): GEMV_DOTS rows at a time, each a
 *     vector sum over p, reduced at the end.
 * Then y = alpha * sum + (beta ? y : 0) (beta 0 or 1: an addmm adds into y). The sums run in a
 * fixed order whatever the column range a call gets, so a product split by columns among threads
 * gives the bits of one call. One source, built per instruction set through GCC's target
 * attribute and picked by cpu_isa.h, as conv_tile.h's.
 */
#include <stddef.h>

#include "cpu_isa.h"

#define GEMV_BLOCK 1024 /* columns of y summed at once by gemv_rows (4 KiB on the stack, in L1) */
/* rows of B summed at once by gemv_dots: 8 independent sums cover the multiply-adds' latency.
 * mlp-infer's products as dots (B^T stored, an nn.Linear's weight), C loop, AMD EPYC Zen 4,
 * matrices in L3: 4 rows (with a run-time count) 148 us at 1 thread, 78 at 2; 6 rows 118 / 66;
 * 8 rows 110 / 57-64; 12 119 / 61; 16 130 / 70. The same bits: a row's steps are its own. */
#define GEMV_DOTS 8

/* Each row of B's block is read once, front to back (prefetchers follow it), and added into the
 * block's sums, which stay in L1; a column's sum runs over p in order, in a vector lane or in
 * the scalar tail alike, so where a block starts does not change it. */
#define GEMV_ROWS_BODY(VW)                                                                   \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    float acc[GEMV_BLOCK];                                                                   \
    for (ptrdiff_t jb = j0; jb < j1; jb += GEMV_BLOCK) {                                     \
        ptrdiff_t nb = j1 - jb < GEMV_BLOCK ? j1 - jb : GEMV_BLOCK, nv = nb / VW * VW, i;    \
        for (i = 0; i < nb; i++) acc[i] = 0;                                                 \
        for (ptrdiff_t p = 0; p < k; p++) {                                                  \
            float s = a[p];                                                                  \
            vec sv = s - (vec){0};                                                           \
            const float* row = b + p * ldb + jb;                                             \
            for (i = 0; i < nv; i += VW)                                                     \
                *(uvec*)(acc + i) += sv * *(const uvec*)(row + i);                           \
            for (; i < nb; i++) acc[i] += s * row[i];                                        \
        }                                                                                    \
        for (i = 0; i < nb; i++)                                                             \
            y[jb + i] = beta ? y[jb + i] + acc[i] * alpha : acc[i] * alpha;                  \
    }

#define GEMV_ROWS_ARGS                                                                       \
    const float* a, const float* b, ptrdiff_t ldb, ptrdiff_t k, ptrdiff_t j0, ptrdiff_t j1, \
    float alpha, int beta, float* y

typedef void (*gemv_fn)(GEMV_ROWS_ARGS);

/* dot products: GEMV_DOTS rows of B at a time (a compile-time count, so that their sums stay in
 * registers), each a vector of VW partial sums over p, reduced lane by lane at the end; the rows
 * past the last whole block one at a time, by the same steps (a row's sum does not depend on the
 * block it is in). */
#define GEMV_DOT_ROWS(VW, R, j)                                                              \
    {                                                                                        \
        vec acc[R];                                                                          \
        for (int r = 0; r < R; r++) acc[r] = (vec){0};                                       \
        for (ptrdiff_t p = 0; p < kv; p += VW) {                                             \
            vec av = *(const uvec*)(a + p);                                                  \
            for (int r = 0; r < R; r++)                                                      \
                acc[r] += av * *(const uvec*)(b + (j + r) * ldb + p);                        \
        }                                                                                    \
        for (int r = 0; r < R; r++) {                                                        \
            float s = 0;                                                                     \
            for (int v = 0; v < VW; v++) s += acc[r][v];                                     \
            for (ptrdiff_t p = kv; p < k; p++) s += a[p] * b[(j + r) * ldb + p];             \
            y[j + r] = beta ? y[j + r] + s * alpha : s * alpha;                              \
        }                                                                                    \
    }

#define GEMV_DOTS_BODY(VW)                                                                   \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    ptrdiff_t kv = k / VW * VW, j = j0;                                                      \
    for (; j + GEMV_DOTS <= j1; j += GEMV_DOTS) GEMV_DOT_ROWS(VW, GEMV_DOTS, j)              \
    for (; j < j1; j++) GEMV_DOT_ROWS(VW, 1, j)

static void gemv_rows_base(GEMV_ROWS_ARGS) { GEMV_ROWS_BODY(4) }
static void gemv_dots_base(GEMV_ROWS_ARGS) { GEMV_DOTS_BODY(4) }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void gemv_rows_avx2(GEMV_ROWS_ARGS)
{ GEMV_ROWS_BODY(8) }
__attribute__((target("avx2,fma"))) static void gemv_dots_avx2(GEMV_ROWS_ARGS)
{ GEMV_DOTS_BODY(8) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void gemv_rows_avx512(GEMV_ROWS_ARGS) { GEMV_ROWS_BODY(16) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void gemv_dots_avx512(GEMV_ROWS_ARGS) { GEMV_DOTS_BODY(16) }
#endif

/* the form for B stored (k, n) (rows) or (n, k) (dots), on the widest instruction set */
static gemv_fn gemv_of(int dots) {
    int isa = cpu_isa_widest(); /* a few loads per call; no cache for threads to race on */
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa == 2) return dots ? gemv_dots_avx512 : gemv_rows_avx512;
    if (isa == 1) return dots ? gemv_dots_avx2 : gemv_rows_avx2;
#endif
    return dots ? gemv_dots_base : gemv_rows_base;
}
