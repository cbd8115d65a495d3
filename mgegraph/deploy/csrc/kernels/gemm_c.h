/* The C runtime's side of the float32 GEMM (linear_f32.c, matmul_f32.c): the one GEMM of
 * mgegraph/_kernels/gemm_tile.h on this runtime's threads, the memory a per-call packing of
 * op(B) takes (MGR_KERNEL_OUT_OF_MEMORY where it is not had), the loader's check of a weight
 * the exporter packed, and a single row's GEMV (gemv_row.h, the Python executor's loops). */
#ifndef MGR_GEMM_C_H
#define MGR_GEMM_C_H

#include <stdint.h>
#include <stdlib.h>

#include "../mgr_kernel.h"
#include "activation.h"
#include "gemm_tile.h"
#include "gemv_row.h"
#include "grain.h"

/* The loader's check of packed panels for n columns over k: NULL with *floats the floats they
 * take, else what is wrong. Any multiple of 8 up to 64 runs (the tile taken is the widest whose
 * width divides it), so a blob packed on another CPU runs here with the same bits. */
static inline const char* mgr_gemm_panels_check(int64_t n, int64_t k, int64_t panel,
                                                int64_t* floats) {
    if (panel < 8 || panel > MG_GEMM_W_MAX || panel % 8 != 0)
        return "its panel width is not a multiple of 8 from 8 to 64";
    if (n < 0 || n > INT64_MAX - MG_GEMM_W_MAX ||
        !mgr_muladd(0, (n + panel - 1) / panel * panel, k, floats))
        return "m, n or k is negative or too large";
    return NULL;
}

/* `g` on this model's threads, as many as its FLOPs pay for (grain.h, the executor's rule),
 * op(B) packed first into panels where `b` is given (else g's panels are the exporter's), op(A)
 * where it pays (mg_gemm_packs_a), into memory had here: MGR_KERNEL_OK, or
 * MGR_KERNEL_OUT_OF_MEMORY where that memory is not had */
static inline int mgr_gemm_packed_run(mg_gemm_job* g, int tb, const float* b) {
    if (g->m == 0 || g->n == 0) return MGR_KERNEL_OK;
    g->pool = mgr_parallel_for_upto;
    g->threads = mg_gemm_threads(g->m, g->n, g->k, 4, mgr_run_threads());
    int64_t apack, ready;
    int64_t words = mg_gemm_scratch_floats(g->m, g->n, g->k, g->panel, b != NULL, &apack, &ready);
    float* memory = NULL;
    if (words > 0 && !(memory = (float*)malloc((size_t)words * sizeof(float))))
        return MGR_KERNEL_OUT_OF_MEMORY;
    mg_gemm_pack_run(g, tb, b, b ? memory : NULL, apack >= 0 ? memory + apack : NULL,
                     (int*)(memory + ready));
    free(memory);
    return MGR_KERNEL_OK;
}

/* A single row times op(B): gemv_row.h's loops, the Python executor's for a float32 row
 * (linalg.pyx), reading B where it lies, once, where the tiles would pack all of it first
 * (mlp-infer at batch 1: 7 MiB of weights copied per call). On the threads its bytes pay for
 * (grain.h: the executor's plan gives it the same count), split as linalg.pyx splits it: a
 * stored B (k, n) by parts of k where the plan gave the parts' sums a workspace (matmul's
 * gemv_split: each thread reads whole rows of B, contiguous bytes; each part of k taken by the
 * first thread free, mgr_parallel_for_each, so a worker woken late takes fewer and the caller
 * waits for none it could run itself), else the columns in blocks of MGR_GEMV_COLS
 * (linalg.pyx's BLOCK_COLUMNS). Each column's sum runs in the same order
 * whatever range or part holds it (gemv_row.h), so any split gives the bits of one call, and
 * those of the Python executor's. */
#define MGR_GEMV_COLS 16

typedef struct {
    gemv_fn fn;
    const float *a, *b;
    float* c;
    int64_t n, k, ldb;
} mgr_gemv_call;

static void mgr_gemv_cols(void* ctx, int64_t lo, int64_t hi) {
    const mgr_gemv_call* g = (const mgr_gemv_call*)ctx;
    int64_t j1 = hi * MGR_GEMV_COLS < g->n ? hi * MGR_GEMV_COLS : g->n;
    g->fn(g->a, g->b, g->ldb, g->k, lo * MGR_GEMV_COLS, j1, 1.0f, 0, g->c);
}

typedef struct {
    gemv_parts_fn sums;
    const float *a, *b;
    float* partials;
    int64_t n, k;
} mgr_gemv_split_call;

/* parts [lo, hi) of k: their sums for every column (gemv_row.h's gemv_parts_*) */
static void mgr_gemv_parts(void* ctx, int64_t lo, int64_t hi) {
    const mgr_gemv_split_call* g = (const mgr_gemv_split_call*)ctx;
    g->sums(g->a, g->b, g->n, g->k, g->n, lo, hi, g->partials);
}

/* c (n) = a (k) op(B); `partials` (gemv_parts(k) x n floats) or NULL. Inlined, as
 * mgr_gemm_epilogue is, so that a caller's constant tb and NULL partials leave out the loops it
 * never runs (linear_f32.c: the dots alone, 12 KB less code at -O3). */
#define MGR_GEMM_INLINE static inline __attribute__((always_inline))

MGR_GEMM_INLINE void mgr_gemv(int tb, int64_t n, int64_t k, const float* a, const float* b,
                              float* c, float* partials) {
    int64_t threads = mg_gemm_threads(1, n, k, 4, mgr_run_threads());
    if (threads > 1 && !tb && partials && gemv_parts(k) > 1) {
        mgr_gemv_split_call g = {NULL, a, b, partials, n, k};
        gemv_finish_fn finish;
        gemv_split_of(&g.sums, &finish);
        mgr_parallel_for_each(gemv_parts(k), threads, mgr_gemv_parts, &g);
        finish(partials, gemv_parts(k), n, 0, n, 1.0f, 0, c);
        return;
    }
    mgr_gemv_call v = {gemv_of(tb), a, b, c, n, k, tb ? k : n};
    mgr_parallel_for_upto((n + MGR_GEMV_COLS - 1) / MGR_GEMV_COLS, threads, mgr_gemv_cols, &v);
}

/* C = op(A) op(B), then act(C + bias) where bias or act: MGR_KERNEL_OK, or
 * MGR_KERNEL_OUT_OF_MEMORY where op(B)'s panels (k x n rounded up to the panel) and op(A)'s
 * packing are not had.
 * A single row runs the GEMV instead (then the epilogue over its row), split by parts of k
 * where `partials` is given (mgr_gemv). */
MGR_GEMM_INLINE int mgr_gemm_epilogue(int ta, int tb, int64_t m, int64_t n, int64_t k,
                                      const float* a, const float* b, float* c,
                                      const float* bias, int act, float* partials) {
    if (m == 0 || n == 0) return MGR_KERNEL_OK;
    if (m == 1) { /* op(A)'s one row is contiguous either way */
        mgr_gemv(tb, n, k, a, b, c, partials);
        if (bias)
            for (int64_t j = 0; j < n; j++) c[j] = act_f32(c[j] + bias[j], act);
        else if (act)
            for (int64_t j = 0; j < n; j++) c[j] = act_f32(c[j], act);
        return MGR_KERNEL_OK;
    }
    mg_gemm_job g = {ta, m, n, k, mg_gemm_panel(), a, NULL, c, bias, act};
    return mgr_gemm_packed_run(&g, tb, b);
}

static inline int mgr_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a,
                           const float* b, float* c, float* partials) {
    return mgr_gemm_epilogue(ta, tb, m, n, k, a, b, c, NULL, 0, partials);
}

#endif
