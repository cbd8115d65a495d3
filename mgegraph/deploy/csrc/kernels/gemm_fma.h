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

/* MGR_KERNEL_OK, or MGR_KERNEL_OUT_OF_MEMORY where op(B)'s packed block (k x CH) is not had */
static inline int mgr_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a,
                           const float* b, float* c) {
    mgr_gemm_tile t = mgr_gemm_tile_of();
    const float* px[CONV_PIX_MAX];
    float part[CONV_PIX_MAX * MGR_GEMM_CH_MAX];
    ptrdiff_t zero = 0;
    if (m == 0 || n == 0) return MGR_KERNEL_OK;
    float* blk = (float*)malloc((size_t)(k > 0 ? k : 1) * (size_t)t.ch * sizeof(float));
    if (!blk) return MGR_KERNEL_OUT_OF_MEMORY;
    for (int64_t j0 = 0; j0 < n; j0 += t.ch) {
        int64_t w = n - j0 < t.ch ? n - j0 : t.ch;
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < t.ch; j++)
                blk[p * t.ch + j] = j >= w ? 0.0f : tb ? b[(j0 + j) * k + p] : b[p * n + j0 + j];
        for (int64_t r0 = 0; r0 < m; r0 += t.pix) {
            int64_t rows = m - r0 < t.pix ? m - r0 : t.pix;
            for (int64_t p = 0; p < t.pix; p++) { /* a short last tile reads its last row again */
                int64_t row = r0 + p < m ? r0 + p : m - 1;
                px[p] = a + (ta ? row : row * k);
            }
            t.fn(px, ta ? m : 1, &zero, 1, k, blk, t.ch, part, t.ch, 0);
            for (int64_t r = 0; r < rows; r++)
                memcpy(c + (r0 + r) * n + j0, part + r * t.ch, (size_t)w * sizeof(float));
        }
    }
    free(blk);
    return MGR_KERNEL_OK;
}

#endif
