/* C = op(A) op(B) in float32 on the package's gather tiles (conv_tile.h, included: the tiles
 * linalg.pyx's tile GEMM runs, one source for both executors). A tile keeps PIX rows x CH columns
 * of C in registers and sums each element over k in order from zero, by fused multiply-adds
 * where the tile's isa has them; rows of op(A) are read where they lie (down a column of A when
 * transposed), op(B) packed per block of CH columns (zeros past n). So an exported plan's GEMM
 * gives bitwise what the Python executor's gives on the tiles (its AVX-512 64-column tile), on
 * any thread count (no element's sum is split).
 *
 * The widest tile the CPU runs is taken, each summing every element in the same order: x86-64's
 * AVX-512 7 x 64 tile, AVX2's 6 x 16, the baseline's 4 x 8 (a multiply and an add: x86-64's
 * baseline has no FMA); aarch64's baseline tile has the FMA, so its bits are the x86 FMA tiles'.
 * The files that include this one build with -ffp-contract=fast (kernels.CONTRACTED), as the
 * package builds the tiles: the export's -ffp-contract=off would split each FMA in two. */
#ifndef MGR_GEMM_FMA_H
#define MGR_GEMM_FMA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../mgr_kernel.h"
#include "conv_tile.h"
#include "gemv_row.h"

#define MGR_GEMM_CH_MAX 64 /* the widest tile's columns */

typedef struct { conv_gather_fn fn; int64_t pix, ch; } mgr_gemm_tile;

static inline mgr_gemm_tile mgr_gemm_tile_of(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    int isa = cpu_isa_widest(); /* conv_packed_tiles' widest of each isa */
    if (isa == 2) return (mgr_gemm_tile){conv_gather_avx512_64, 7, 64};
    if (isa == 1) return (mgr_gemm_tile){conv_gather_avx2, 6, 16};
    return (mgr_gemm_tile){conv_gather_base, 4, 8};
#else
    return (mgr_gemm_tile){conv_gather_base, 4, 8};
#endif
}

/* one column block of C: its packed op(B) and where it goes */
typedef struct {
    mgr_gemm_tile t;
    int ta;
    int64_t m, n, k, j0, w;
    const float* a;
    const float* blk;
    float* c;
} mgr_gemm_block;

/* row tiles [lo, hi) of a column block: a part of mgr_parallel_for (no two write one row) */
static void mgr_gemm_rows(void* ctx, int64_t lo, int64_t hi) {
    const mgr_gemm_block* g = (const mgr_gemm_block*)ctx;
    const float* px[CONV_PIX_MAX];
    float part[CONV_PIX_MAX * MGR_GEMM_CH_MAX];
    ptrdiff_t zero = 0;
    int64_t pix = g->t.pix, ch = g->t.ch;
    for (int64_t r0 = lo * pix; r0 < hi * pix && r0 < g->m; r0 += pix) {
        int64_t rows = g->m - r0 < pix ? g->m - r0 : pix;
        for (int64_t p = 0; p < pix; p++) { /* a short last tile reads its last row again */
            int64_t row = r0 + p < g->m ? r0 + p : g->m - 1;
            px[p] = g->a + (g->ta ? row : row * g->k);
        }
        g->t.fn(px, g->ta ? g->m : 1, &zero, 1, g->k, g->blk, ch, part, ch, 0);
        for (int64_t r = 0; r < rows; r++)
            memcpy(g->c + (r0 + r) * g->n + g->j0, part + r * ch, (size_t)g->w * sizeof(float));
    }
}

/* A single row times op(B): gemv_row.h's loops, the Python executor's for a float32 row (linalg.pyx),
 * reading B where it lies, once, where the tiles would pack all of it first (mlp-infer at batch 1:
 * 7 MiB of weights copied per call). Threads split the columns in blocks of MGR_GEMV_COLS: each
 * column's sum runs in the same order whatever range holds it, so any split gives the bits of
 * one call, and those of the Python executor's gemv. */
#define MGR_GEMV_COLS 256

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

/* MGR_KERNEL_OK, or MGR_KERNEL_OUT_OF_MEMORY where op(B)'s packed block (k x CH) is not had.
 * Each column block is packed once, then its row tiles are split among the threads; a single
 * row runs the GEMV instead. */
static inline int mgr_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a,
                           const float* b, float* c) {
    mgr_gemm_block g = {mgr_gemm_tile_of(), ta, m, n, k, 0, 0, a, NULL, c};
    int64_t ch = g.t.ch;
    if (m == 0 || n == 0) return MGR_KERNEL_OK;
    if (m == 1) { /* op(A)'s one row is contiguous either way */
        mgr_gemv_call v = {gemv_of(tb), a, b, c, n, k, tb ? k : n};
        mgr_parallel_for((n + MGR_GEMV_COLS - 1) / MGR_GEMV_COLS, mgr_gemv_cols, &v);
        return MGR_KERNEL_OK;
    }
    float* blk = (float*)malloc((size_t)(k > 0 ? k : 1) * (size_t)ch * sizeof(float));
    if (!blk) return MGR_KERNEL_OUT_OF_MEMORY;
    g.blk = blk;
    for (g.j0 = 0; g.j0 < n; g.j0 += ch) {
        g.w = n - g.j0 < ch ? n - g.j0 : ch;
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < ch; j++)
                blk[p * ch + j] = j >= g.w ? 0.0f
                                  : tb ? b[(g.j0 + j) * k + p] : b[p * n + g.j0 + j];
        mgr_parallel_for((m + g.t.pix - 1) / g.t.pix, mgr_gemm_rows, &g);
    }
    free(blk);
    return MGR_KERNEL_OK;
}

#endif
