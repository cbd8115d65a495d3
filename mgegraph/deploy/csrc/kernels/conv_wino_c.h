/* conv2d_f32's Winograd F(2x2, 3x3) where the plan chose it (its `path`): conv_winograd.pxi's
 * steps written again in C, on wino_tile.h's transforms (included: one source for both
 * executors) and the gather tiles for its 16 GEMMs.
 *
 * Per call, U = G g G^T per (output, input channel); then per block of tiles (every image's
 * 2x2 output tiles numbered together, so small planes make wide GEMMs), on one thread with its
 * own V and M: V = B^T d B per (input channel, tile), M[xi] (cout, nb) = U[xi] (cout, cin)
 * V[xi] (cin, nb) for the 16 positions xi on the widest gather tile (V's columns read in
 * place, U's rows broadcast, each sum over cin in order from zero), then y = A^T M A with the
 * bias and activation. No output's sum depends on the blocks, so any thread count gives the
 * same bits. The Python executor runs its GEMMs through the BLAS here (on AVX-512, the 64-column
 * tile): within float32 rounding of it. */
#ifndef MGR_CONV_WINO_C_H
#define MGR_CONV_WINO_C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_gather_c.h"
#include "wino_tile.h"

#define MGR_WINO_PATH 6            /* conv.pyx's C_WINOGRAD */
#define MGR_WINO_BLOCK_FLOATS (1 << 19) /* V and M of one block: 2 MiB, the L2 and some */
#define MGR_WINO_SKEW 16           /* the 16 matrices a cache line apart more (conv_winograd.pxi) */
#define MGR_WINO_MIN_TILES 16      /* the fewest tiles a block is cut to for the threads */
#define MGR_WINO_COLS_MAX 64       /* the widest gather tile's columns */

typedef struct {
    const float *x, *w, *bias;
    float* y;
    float* u;
    mgr_gather_tile t;
    wino_transforms f;
    int act;
    int64_t cin, cout, h, w_, oh, ow, ph, pw, th, tw, ntiles, block;
    int64_t slot; /* one part's V and M, and the slack the tiles read past V's end */
    int failed;
} mgr_wino;

static inline int64_t mgr_wino_ld(int64_t rows, int64_t cols) {
    return rows * cols + MGR_WINO_SKEW;
}

/* parts of [0, cout): u[xi, o, c] = (G g G^T)[xi] of the filters g = w[o, c] */
static void mgr_wino_filter(void* ctx, int64_t lo, int64_t hi) {
    const mgr_wino* k = (const mgr_wino*)ctx;
    int64_t ld = mgr_wino_ld(k->cout, k->cin);
    for (int64_t o = lo; o < hi; o++)
        for (int64_t c = 0; c < k->cin; c++) {
            const float* g = k->w + (o * k->cin + c) * 9;
            float t[4][3];
            float* dst = k->u + o * k->cin + c;
            for (int i = 0; i < 3; i++) { /* G g: g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 */
                t[0][i] = g[i];
                t[1][i] = (g[i] + g[3 + i] + g[6 + i]) * 0.5f;
                t[2][i] = (g[i] - g[3 + i] + g[6 + i]) * 0.5f;
                t[3][i] = g[6 + i];
            }
            for (int i = 0; i < 4; i++) { /* (G g) G^T, row by row */
                dst[(4 * i) * ld] = t[i][0];
                dst[(4 * i + 1) * ld] = (t[i][0] + t[i][1] + t[i][2]) * 0.5f;
                dst[(4 * i + 2) * ld] = (t[i][0] - t[i][1] + t[i][2]) * 0.5f;
                dst[(4 * i + 3) * ld] = t[i][2];
            }
        }
}

/* tiles from `tile` to the end of its row of tiles, of the `left` of its block */
static inline int64_t mgr_wino_run(const mgr_wino* k, int64_t tile, int64_t left) {
    int64_t rest = k->tw - tile % k->tw;
    return rest < left ? rest : left;
}

/* v[xi, c, j] = (B^T d B)[xi] of tile first + j's window d in input channel c */
static void mgr_wino_input(const mgr_wino* k, float* v, int64_t first, int64_t nb) {
    int64_t ld = mgr_wino_ld(k->cin, nb);
    for (int64_t c = 0; c < k->cin; c++)
        for (int64_t j = 0; j < nb;) {
            int64_t tile = first + j, count = mgr_wino_run(k, tile, nb - j);
            const float* plane = k->x + (tile / (k->th * k->tw) * k->cin + c) * k->h * k->w_;
            const float* rows[4];
            for (int64_t i = 0; i < 4; i++) { /* window rows 2a - ph + i, NULL off the plane */
                int64_t r = 2 * (tile / k->tw % k->th) - k->ph + i;
                rows[i] = r >= 0 && r < k->h ? plane + r * k->w_ : NULL;
            }
            k->f.in(rows, 2 * (tile % k->tw) - k->pw, k->w_, count, v + c * nb + j, ld);
            j += count;
        }
}

/* M[xi] = U[xi] V[xi] on the gather tile, by blocks of its columns; a tile reading past V's
 * last column reads M's memory after it, into columns that are dropped */
static void mgr_wino_gemm(const mgr_wino* k, const float* v, float* m, int64_t nb, int xi) {
    const float* u = k->u + xi * mgr_wino_ld(k->cout, k->cin);
    const float* px[CONV_PIX_MAX];
    float part[CONV_PIX_MAX * MGR_WINO_COLS_MAX];
    ptrdiff_t zero = 0;
    int64_t pix = k->t.pix, ch = k->t.ch;
    v += xi * mgr_wino_ld(k->cin, nb);
    m += xi * mgr_wino_ld(k->cout, nb);
    for (int64_t b = 0; b < nb; b += ch) {
        int64_t cols = nb - b < ch ? nb - b : ch;
        for (int64_t r0 = 0; r0 < k->cout; r0 += pix) {
            int64_t rows = k->cout - r0 < pix ? k->cout - r0 : pix;
            for (int64_t p = 0; p < pix; p++) /* a short last tile reads its last row again */
                px[p] = u + (r0 + p < k->cout ? r0 + p : k->cout - 1) * k->cin;
            k->t.fn(px, 1, &zero, 1, k->cin, v + b, nb, part, ch, 0);
            for (int64_t r = 0; r < rows; r++)
                memcpy(m + (r0 + r) * nb + b, part + r * ch, (size_t)cols * sizeof(float));
        }
    }
}

/* y's cells of tiles [first, first + nb) = A^T M A, with the bias and activation */
static void mgr_wino_output(const mgr_wino* k, const float* m, int64_t first, int64_t nb) {
    int64_t ld = mgr_wino_ld(k->cout, nb);
    for (int64_t o = 0; o < k->cout; o++)
        for (int64_t j = 0; j < nb;) {
            int64_t tile = first + j, count = mgr_wino_run(k, tile, nb - j);
            int64_t a = tile / k->tw % k->th, b = tile % k->tw;
            float* out = k->y + (tile / (k->th * k->tw) * k->cout + o) * k->oh * k->ow +
                         2 * a * k->ow + 2 * b;
            int64_t end = 2 * count < k->ow - 2 * b ? 2 * count : k->ow - 2 * b;
            k->f.out(m + o * nb + j, ld, count, out, 2 * a + 1 < k->oh ? out + k->ow : NULL,
                     end, k->bias ? k->bias[o] : 0.0f, k->act);
            j += count;
        }
}

/* parts of the blocks of tiles, each with its own V and M (and slack for the tiles' reads) */
static void mgr_wino_blocks(void* ctx, int64_t lo, int64_t hi) {
    mgr_wino* k = (mgr_wino*)ctx;
    float* v = (float*)malloc((size_t)k->slot * sizeof(float));
    if (!v) {
        __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t blk = lo; blk < hi; blk++) {
        int64_t first = blk * k->block;
        int64_t nb = k->ntiles - first < k->block ? k->ntiles - first : k->block;
        float* m = v + 16 * mgr_wino_ld(k->cin, nb);
        mgr_wino_input(k, v, first, nb);
        for (int xi = 0; xi < 16; xi++) mgr_wino_gemm(k, v, m, nb, xi);
        mgr_wino_output(k, m, first, nb);
    }
    free(v);
}

/* conv2d_f32 by Winograd where the plan's path is it (float32 3x3, stride 1, undilated, one
 * group, weights not packed): MGR_KERNEL_OK or MGR_KERNEL_OUT_OF_MEMORY; else
 * MGR_KERNEL_UNSUPPORTED, for the caller's other ways */
static int mgr_conv2d_winograd(const mgr_call* call) {
    const int64_t* s = call->ints;
    int isa = cpu_isa_widest();
    mgr_wino k;
    int64_t un, vn, mn;
    if (s[PATH] != MGR_WINO_PATH || s[GROUPS] != 1 || s[PACKED] || s[KH] != 3 || s[KW] != 3 ||
        s[SH] != 1 || s[SW] != 1 || s[DH] != 1 || s[DW] != 1 || s[BATCH] * s[COUT] == 0 ||
        s[OH] == 0 || s[OW] == 0)
        return MGR_KERNEL_UNSUPPORTED;
    memset(&k, 0, sizeof k);
    if (!mgr_gather_tile_for(isa, 0, s[COUT], &k.t)) return MGR_KERNEL_UNSUPPORTED;
    k.f = wino_of(isa);
    k.x = (const float*)call->bufs[0];
    k.w = (const float*)call->bufs[1];
    k.bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    k.y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    k.act = (int)s[ACT];
    k.cin = s[CIN], k.cout = s[COUT], k.h = s[H], k.w_ = s[W], k.oh = s[OH], k.ow = s[OW];
    k.ph = s[PH], k.pw = s[PW], k.th = (s[OH] + 1) / 2, k.tw = (s[OW] + 1) / 2;
    k.ntiles = s[BATCH] * k.th * k.tw;
    k.block = MGR_WINO_BLOCK_FLOATS / (16 * (k.cin + k.cout) + 1);
    if (k.block < 32) k.block = 32;
    if (k.block * 4 > k.ntiles) /* a few blocks for the threads, if the tiles make them */
        k.block = (k.ntiles + 3) / 4 > MGR_WINO_MIN_TILES ? (k.ntiles + 3) / 4
                                                         : MGR_WINO_MIN_TILES;
    if (!mgr_muladd(MGR_WINO_SKEW, k.cout, k.cin, &un) || !mgr_muladd(0, un, 16, &un) ||
        !mgr_muladd(MGR_WINO_SKEW, k.cin, k.block, &vn) ||
        !mgr_muladd(MGR_WINO_SKEW, k.cout, k.block, &mn) || !mgr_muladd(0, vn + mn, 16, &k.slot) ||
        !mgr_muladd(k.slot, 1, MGR_WINO_COLS_MAX, &k.slot))
        return MGR_KERNEL_OUT_OF_MEMORY;
    k.u = (float*)malloc((size_t)un * sizeof(float));
    if (!k.u) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_parallel_for(k.cout, mgr_wino_filter, &k);
    mgr_parallel_for((k.ntiles + k.block - 1) / k.block, mgr_wino_blocks, &k);
    free(k.u);
    return k.failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

#endif
