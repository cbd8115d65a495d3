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
 *     of a block of GEMV_BLOCK columns, k cut into fixed parts (below);
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

/* The rows form sums k in parts that depend on k alone: y[j] = ((P_0 + P_1) + P_2) + ..., P_c the
 * sum over part c's rows of B in order. So a call split among threads by columns and one split
 * by parts (each thread the sums of its parts for every column, into a workspace, added up in
 * order after: gemv_parts_*, gemv_finish_*, called by linalg.pyx) give the same bits. A thread's
 * parts are contiguous bytes of B, where a split by columns has each thread read half of every
 * row: a C loop over mlp-infer's two products at 2 threads took 69 us split by columns, 53 by
 * parts (AMD EPYC Zen 4, matrices in L3). Parts come in fours (2 or 4 threads share them
 * evenly) of about GEMV_PART_ROWS rows, from GEMV_MIN_SPLIT rows on: at one thread each part
 * adds one pass over the block's sums, a fraction of a percent. */
#define GEMV_PART_ROWS 256
#define GEMV_MIN_SPLIT 512

static inline ptrdiff_t gemv_parts(ptrdiff_t k) {
    if (k < GEMV_MIN_SPLIT) return 1;
    return ((k + GEMV_PART_ROWS - 1) / GEMV_PART_ROWS + 3) / 4 * 4;
}

static inline ptrdiff_t gemv_part_start(ptrdiff_t k, ptrdiff_t parts, ptrdiff_t c) {
    return k * c / parts;
}

/* sums[0:nb] = sum over p in [p0, p1), in order, of a[p] B[p, jb:jb + nb]. Each row of B's block
 * is read once, front to back (prefetchers follow it), and added into the sums, which stay in L1;
 * a column's sum is the same in a vector lane or in the scalar tail, so where a block starts does
 * not change it. Four rows per pass over the sums: each vector of sums is loaded once, takes the
 * four rows' multiply-adds in row order in a register and is stored once, so an element's steps
 * are the one-row loop's (the same bits, checked against it on odd k and n) with a fifth of its
 * loads and stores of the sums; the one-row loop was bound by them (a load, a store and the
 * row's load per multiply-add): mlp-infer's 1024 x 1024 and 784 x 1024 took 0.70 and 0.67 of
 * the one-row loop's time (C harness, AVX2 build at -O2, AMD EPYC Zen 3, 1 thread, best of 5). */
#define GEMV_ROWS_SUM(VW, sums, p0, p1, jb, nb)                                              \
    {                                                                                        \
        ptrdiff_t nv_ = (nb) / VW * VW, i_, p = (p0);                                        \
        for (i_ = 0; i_ < (nb); i_++) sums[i_] = 0;                                          \
        for (; p + 4 <= (p1); p += 4) {                                                      \
            float s0 = a[p], s1 = a[p + 1], s2 = a[p + 2], s3 = a[p + 3];                    \
            vec v0 = s0 - (vec){0}, v1 = s1 - (vec){0}, v2 = s2 - (vec){0},                  \
                v3 = s3 - (vec){0};                                                          \
            const float* r0 = b + p * ldb + (jb);                                            \
            const float *r1 = r0 + ldb, *r2 = r1 + ldb, *r3 = r2 + ldb;                      \
            for (i_ = 0; i_ < nv_; i_ += VW) {                                               \
                vec t = *(uvec*)(sums + i_);                                                 \
                t += v0 * *(const uvec*)(r0 + i_);                                           \
                t += v1 * *(const uvec*)(r1 + i_);                                           \
                t += v2 * *(const uvec*)(r2 + i_);                                           \
                t += v3 * *(const uvec*)(r3 + i_);                                           \
                *(uvec*)(sums + i_) = t;                                                     \
            }                                                                                \
            for (; i_ < (nb); i_++) {                                                        \
                float t = sums[i_];                                                          \
                t += s0 * r0[i_];                                                            \
                t += s1 * r1[i_];                                                            \
                t += s2 * r2[i_];                                                            \
                t += s3 * r3[i_];                                                            \
                sums[i_] = t;                                                                \
            }                                                                                \
        }                                                                                    \
        for (; p < (p1); p++) {                                                              \
            float s = a[p];                                                                  \
            vec sv = s - (vec){0};                                                           \
            const float* row = b + p * ldb + (jb);                                           \
            for (i_ = 0; i_ < nv_; i_ += VW)                                                 \
                *(uvec*)(sums + i_) += sv * *(const uvec*)(row + i_);                        \
            for (; i_ < (nb); i_++) sums[i_] += s * row[i_];                                 \
        }                                                                                    \
    }

#define GEMV_VECTORS(VW)                                                                     \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));

#define GEMV_ROWS_BODY(VW)                                                                   \
    GEMV_VECTORS(VW)                                                                         \
    float acc[GEMV_BLOCK], total[GEMV_BLOCK];                                                \
    ptrdiff_t parts = gemv_parts(k);                                                         \
    for (ptrdiff_t jb = j0; jb < j1; jb += GEMV_BLOCK) {                                     \
        ptrdiff_t nb = j1 - jb < GEMV_BLOCK ? j1 - jb : GEMV_BLOCK, i;                       \
        GEMV_ROWS_SUM(VW, total, 0, gemv_part_start(k, parts, 1), jb, nb)                    \
        for (ptrdiff_t c = 1; c < parts; c++) {                                              \
            GEMV_ROWS_SUM(VW, acc, gemv_part_start(k, parts, c),                             \
                          gemv_part_start(k, parts, c + 1), jb, nb)                          \
            for (i = 0; i < nb; i++) total[i] = total[i] + acc[i];                           \
        }                                                                                    \
        for (i = 0; i < nb; i++)                                                             \
            y[jb + i] = beta ? y[jb + i] + total[i] * alpha : total[i] * alpha;              \
    }

/* partials[c * n + j] = P_c of column j, for the parts c in [c0, c1) and every column */
#define GEMV_PARTS_BODY(VW)                                                                  \
    GEMV_VECTORS(VW)                                                                         \
    ptrdiff_t parts = gemv_parts(k);                                                         \
    for (ptrdiff_t c = c0; c < c1; c++)                                                      \
        for (ptrdiff_t jb = 0; jb < n; jb += GEMV_BLOCK) {                                   \
            ptrdiff_t nb = n - jb < GEMV_BLOCK ? n - jb : GEMV_BLOCK;                        \
            float* sums = partials + c * n + jb;                                             \
            GEMV_ROWS_SUM(VW, sums, gemv_part_start(k, parts, c),                            \
                          gemv_part_start(k, parts, c + 1), jb, nb)                          \
        }

/* y[j] for j in [j0, j1) from the parts' sums, added as GEMV_ROWS_BODY adds them */
#define GEMV_FINISH_BODY                                                                     \
    for (ptrdiff_t j = j0; j < j1; j++) {                                                    \
        float t = partials[j];                                                               \
        for (ptrdiff_t c = 1; c < parts; c++) t = t + partials[c * n + j];                   \
        y[j] = beta ? y[j] + t * alpha : t * alpha;                                          \
    }

#define GEMV_PARTS_ARGS                                                                      \
    const float* a, const float* b, ptrdiff_t ldb, ptrdiff_t k, ptrdiff_t n, ptrdiff_t c0,   \
    ptrdiff_t c1, float* partials
#define GEMV_FINISH_ARGS                                                                     \
    const float* partials, ptrdiff_t parts, ptrdiff_t n, ptrdiff_t j0, ptrdiff_t j1,         \
    float alpha, int beta, float* y

typedef void (*gemv_parts_fn)(GEMV_PARTS_ARGS);
typedef void (*gemv_finish_fn)(GEMV_FINISH_ARGS);

#define GEMV_ROWS_ARGS                                                                       \
    const float* a, const float* b, ptrdiff_t ldb, ptrdiff_t k, ptrdiff_t j0, ptrdiff_t j1, \
    float alpha, int beta, float* y

typedef void (*gemv_fn)(GEMV_ROWS_ARGS);

/* Loop heads on 32-byte boundaries. The rows form's inner loop is 25 bytes (a load, a fused
 * multiply-add into the sums, a store, the count): where the linker happened to place it across
 * a 32-byte boundary it ran 1.2-1.5x slower on the AMD EPYC (Zen 3) for the same instructions
 * (mlp-infer's 784 x 1024 product, a C harness alternating two builds of this file: the C
 * runtime's build had its parts' loop across one, the package's did not). GCC's default
 * alignment of a loop is 16 bytes, so the speed was the luck of what came before it in the
 * file; aligned here, both builds get the same speed from the same instructions (the bits do not
 * change: alignment is padding before the loop). Clang aligns otherwise and takes no such
 * attribute. */
#if defined(__GNUC__) && !defined(__clang__)
#define GEMV_ALIGNED __attribute__((optimize("align-loops=32")))
#else
#define GEMV_ALIGNED
#endif

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
    GEMV_VECTORS(VW)                                                                         \
    ptrdiff_t kv = k / VW * VW, j = j0;                                                      \
    for (; j + GEMV_DOTS <= j1; j += GEMV_DOTS) GEMV_DOT_ROWS(VW, GEMV_DOTS, j)              \
    for (; j < j1; j++) GEMV_DOT_ROWS(VW, 1, j)

GEMV_ALIGNED static void gemv_rows_base(GEMV_ROWS_ARGS) { GEMV_ROWS_BODY(4) }
GEMV_ALIGNED static void gemv_dots_base(GEMV_ROWS_ARGS) { GEMV_DOTS_BODY(4) }
GEMV_ALIGNED static void gemv_parts_base(GEMV_PARTS_ARGS) { GEMV_PARTS_BODY(4) }
GEMV_ALIGNED static void gemv_finish_base(GEMV_FINISH_ARGS) { GEMV_FINISH_BODY }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) GEMV_ALIGNED static void gemv_rows_avx2(GEMV_ROWS_ARGS)
{ GEMV_ROWS_BODY(8) }
__attribute__((target("avx2,fma"))) GEMV_ALIGNED static void gemv_dots_avx2(GEMV_ROWS_ARGS)
{ GEMV_DOTS_BODY(8) }
__attribute__((target("avx2,fma"))) GEMV_ALIGNED static void gemv_parts_avx2(GEMV_PARTS_ARGS)
{ GEMV_PARTS_BODY(8) }
__attribute__((target("avx2,fma"))) GEMV_ALIGNED static void gemv_finish_avx2(GEMV_FINISH_ARGS)
{ GEMV_FINISH_BODY }
__attribute__((target("avx512f,fma,prefer-vector-width=512"))) GEMV_ALIGNED
static void gemv_rows_avx512(GEMV_ROWS_ARGS) { GEMV_ROWS_BODY(16) }
__attribute__((target("avx512f,fma,prefer-vector-width=512"))) GEMV_ALIGNED
static void gemv_dots_avx512(GEMV_ROWS_ARGS) { GEMV_DOTS_BODY(16) }
__attribute__((target("avx512f,fma,prefer-vector-width=512"))) GEMV_ALIGNED
static void gemv_parts_avx512(GEMV_PARTS_ARGS) { GEMV_PARTS_BODY(16) }
/* (the finishing adds on each instruction set: y + t * alpha contracts as the rows form's does) */
__attribute__((target("avx512f,fma,prefer-vector-width=512"))) GEMV_ALIGNED
static void gemv_finish_avx512(GEMV_FINISH_ARGS) { GEMV_FINISH_BODY }
#endif

/* aarch64: the dots form with AVX2's 8 lanes (two NEON vectors each; the build contracts the
 * steps to FMAs), so a dot sums in AVX2's order and gives its bits; the rows form's lanes are
 * independent, so the baseline's 4 already give every isa's bits. */
#if defined(__GNUC__) && defined(__aarch64__)
GEMV_ALIGNED static void gemv_dots_neon(GEMV_ROWS_ARGS) { GEMV_DOTS_BODY(8) }
#endif

/* the form for B stored (k, n) (rows) or (n, k) (dots), on the widest instruction set */
static gemv_fn gemv_of(int dots) {
    int isa = cpu_isa_widest(); /* a few loads per call; no cache for threads to race on */
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa == 2) return dots ? gemv_dots_avx512 : gemv_rows_avx512;
    if (isa == 1) return dots ? gemv_dots_avx2 : gemv_rows_avx2;
#elif defined(__GNUC__) && defined(__aarch64__)
    (void)isa;
    if (dots) return gemv_dots_neon;
#endif
    return dots ? gemv_dots_base : gemv_rows_base;
}

/* the rows form split by parts: the parts' sums and the finishing adds, on the widest set */
static void gemv_split_of(gemv_parts_fn* parts, gemv_finish_fn* finish) {
    int isa = cpu_isa_widest();
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa == 2) { *parts = gemv_parts_avx512; *finish = gemv_finish_avx512; return; }
    if (isa == 1) { *parts = gemv_parts_avx2; *finish = gemv_finish_avx2; return; }
#endif
    (void)isa;
    *parts = gemv_parts_base;
    *finish = gemv_finish_base;
}
