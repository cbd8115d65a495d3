/* conv2d_f32's Winograd F(2x2, 3x3) where the plan chose it (its `path`): conv_winograd.pxi's
 * steps written again in C, on wino_tile.h's transforms (included: one source for both
 * executors) and the gather tiles for its 16 GEMMs.
 *
 * U = G g G^T per (output, input channel), stored as 16 matrices U[xi] (cin, cout), output
 * channels contiguous; then per block of tiles (every image's 2x2 output tiles numbered
 * together, so small planes make wide GEMMs), on one thread with its own V and M:
 * V = B^T d B per (input channel, tile), M[xi] (cout, nb) = U[xi]^T V[xi] (cin, nb) for the 16
 * positions xi on the widest gather tile (V's rows read in place, a tile's channels wide; U's
 * rows for PIX output channels are PIX neighbouring floats, broadcast; each sum over cin in
 * order from zero), then y = A^T M A with the bias and activation. No output's sum depends on
 * the blocks or on which output channels a part takes, so any thread count gives the same
 * bits. The Python executor runs its GEMMs through the BLAS here (on AVX-512, the 64-column
 * tile): within float32 rounding of it.
 *
 * conv2d_winograd_f32 reads U from the blob (the export transformed the filters, the same
 * arithmetic: deploy/prepack.py); conv2d_f32 on a Winograd path transforms them on each call.
 *
 * Design: a block's tiles are a whole number of the gather tile's columns, so every tile of M
 * is written in place (M has rows for a whole last tile of output channels; V's columns past
 * the block's tiles are zeros, their sums dropped), with V and M of a block in the L2 cache.
 * Blocks go to the threads whole; where there are fewer blocks than threads, a block's output
 * channels are split too (each part transforms the block's input again: cheaper than a second
 * pass over the threads). */
#ifndef MGR_CONV_WINO_C_H
#define MGR_CONV_WINO_C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_gather_c.h"
#include "wino_tile.h"

#define MGR_WINO_PATH 6            /* conv.pyx's C_WINOGRAD */
#define MGR_WINO_BLOCK_FLOATS (1 << 17) /* V and M of one block: 512 KiB (Zen 3's L2) */
#define MGR_WINO_SKEW 16           /* the 16 matrices a cache line apart more (conv_winograd.pxi) */
#define MGR_WINO_MIN_TILES 32      /* the fewest tiles a block is cut to for the threads */

typedef struct {
    const float *x, *bias;
    float* y;
    const float* u; /* U[xi] (cout, cin): u[xi * uld + o * cin + c] */
    int64_t uld;
    mgr_gather_tile t;
    wino_transforms f;
    int act;
    int64_t cin, cout, h, w_, oh, ow, ph, pw, th, tw, ntiles;
    int64_t block;          /* tiles per block: whole tiles of t.ch columns */
    int64_t nblocks, splits; /* the work items: each block's output channels in `splits` */
    int64_t rows;           /* M's rows: cout up to a whole tile of t.pix */
    int64_t slot;           /* one part's V and M, in floats */
    int failed;
} mgr_wino;

/* floats between two of V's or M's 16 matrices of `rows` rows of a block */
static inline int64_t mgr_wino_ld(const mgr_wino* k, int64_t rows) {
    return rows * k->block + MGR_WINO_SKEW;
}

/* u[xi * ld + o * cin + c] = (G g G^T)[xi] of the filters g = w[o, c] of output channels
 * [lo, hi) */
static void mgr_wino_filter(const float* w, float* u, int64_t cin, int64_t ld, int64_t lo,
                            int64_t hi) {
    for (int64_t o = lo; o < hi; o++)
        for (int64_t c = 0; c < cin; c++) {
            const float* g = w + (o * cin + c) * 9;
            float t[4][3];
            float* dst = u + o * cin + c;
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

typedef struct {
    const float* w;
    float* u;
    int64_t cin, ld;
} mgr_wino_filters;

static void mgr_wino_filter_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_wino_filters* f = (const mgr_wino_filters*)ctx;
    mgr_wino_filter(f->w, f->u, f->cin, f->ld, lo, hi);
}

/* tiles from `tile` to the end of its row of tiles, of the `left` of its block */
static inline int64_t mgr_wino_run(const mgr_wino* k, int64_t tile, int64_t left) {
    int64_t rest = k->tw - tile % k->tw;
    return rest < left ? rest : left;
}

/* tiles from `tile` to the end of its row of tiles and of its panel (column j of the block),
 * of the `left` of its block */
static inline int64_t mgr_wino_panel_run(const mgr_wino* k, int64_t tile, int64_t j,
                                         int64_t left) {
    int64_t run = mgr_wino_run(k, tile, left), rest = k->t.ch - j % k->t.ch;
    return rest < run ? rest : run;
}

/* V[xi] = (B^T d B)[xi] of tile first + j's window d in input channel c, in panels of the
 * tile's columns: v[xi][j / ch][c][j % ch]; zeros in the columns [nb, the block's whole tiles) */
static void mgr_wino_input(const mgr_wino* k, float* v, int64_t first, int64_t nb) {
    int64_t ld = mgr_wino_ld(k, k->cin), ch = k->t.ch, cols = mgr_round_up(nb, ch);
    for (int64_t c = 0; c < k->cin; c++) {
        for (int64_t j = 0; j < nb;) {
            int64_t tile = first + j, count = mgr_wino_panel_run(k, tile, j, nb - j);
            const float* plane = k->x + (tile / (k->th * k->tw) * k->cin + c) * k->h * k->w_;
            const float* rows[4];
            for (int64_t i = 0; i < 4; i++) { /* window rows 2a - ph + i, NULL off the plane */
                int64_t r = 2 * (tile / k->tw % k->th) - k->ph + i;
                rows[i] = r >= 0 && r < k->h ? plane + r * k->w_ : NULL;
            }
            k->f.in(rows, 2 * (tile % k->tw) - k->pw, k->w_, count,
                    v + (j / ch * k->cin + c) * ch + j % ch, ld);
            j += count;
        }
        for (int xi = 0; nb < cols && xi < 16; xi++)
            memset(v + xi * ld + (nb / ch * k->cin + c) * ch + nb % ch, 0,
                   (size_t)(cols - nb) * sizeof(float));
    }
}

/* M[xi] = U[xi]^T V[xi] for output channels [o0, o1) (o0 a whole number of tiles), by blocks of
 * the tile's columns, each read by every tile of rows while it is in L1 */
static void mgr_wino_gemm(const mgr_wino* k, const float* v, float* m, int64_t nb, int xi,
                          int64_t o0, int64_t o1) {
    const float* u = k->u + xi * k->uld;
    const float* px[CONV_PIX_MAX];
    ptrdiff_t zero = 0;
    int64_t pix = k->t.pix, ch = k->t.ch;
    v += xi * mgr_wino_ld(k, k->cin);
    m += xi * mgr_wino_ld(k, k->rows);
    for (int64_t b = 0; b < nb; b += ch)
        for (int64_t r0 = o0; r0 < o1; r0 += pix) {
            for (int64_t p = 0; p < pix; p++) /* past the last channel: its sums again */
                px[p] = u + (r0 + p < k->cout ? r0 + p : k->cout - 1) * k->cin;
            k->t.fn(px, 1, &zero, 1, k->cin, v + b * k->cin, ch, m + r0 * k->block + b,
                    k->block, 0);
        }
}

/* y's cells of tiles [first, first + nb) in output channels [o0, o1) = A^T M A, with the bias
 * and activation */
static void mgr_wino_output(const mgr_wino* k, const float* m, int64_t first, int64_t nb,
                            int64_t o0, int64_t o1) {
    int64_t ld = mgr_wino_ld(k, k->rows);
    for (int64_t o = o0; o < o1; o++)
        for (int64_t j = 0; j < nb;) {
            int64_t tile = first + j, count = mgr_wino_run(k, tile, nb - j);
            int64_t a = tile / k->tw % k->th, b = tile % k->tw;
            float* out = k->y + (tile / (k->th * k->tw) * k->cout + o) * k->oh * k->ow +
                         2 * a * k->ow + 2 * b;
            int64_t end = 2 * count < k->ow - 2 * b ? 2 * count : k->ow - 2 * b;
            k->f.out(m + o * k->block + j, ld, count, out, 2 * a + 1 < k->oh ? out + k->ow : NULL,
                     end, k->bias ? k->bias[o] : 0.0f, k->act);
            j += count;
        }
}

/* parts of the work items (block, split of its output channels), with their own V and M */
static void mgr_wino_items(void* ctx, int64_t lo, int64_t hi) {
    mgr_wino* k = (mgr_wino*)ctx;
    float* v = (float*)malloc((size_t)k->slot * sizeof(float));
    if (!v) {
        __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float* m = v + 16 * mgr_wino_ld(k, k->cin);
    int64_t row_tiles = k->rows / k->t.pix;
    for (int64_t item = lo; item < hi; item++) {
        int64_t blk = item / k->splits, split = item % k->splits;
        int64_t first = blk * k->block;
        int64_t nb = k->ntiles - first < k->block ? k->ntiles - first : k->block;
        int64_t o0 = mgr_cut(row_tiles, k->splits, split) * k->t.pix;
        int64_t o1 = mgr_cut(row_tiles, k->splits, split + 1) * k->t.pix;
        if (o1 > k->cout) o1 = k->cout;
        mgr_wino_input(k, v, first, nb);
        for (int xi = 0; xi < 16; xi++) mgr_wino_gemm(k, v, m, nb, xi, o0, o1);
        mgr_wino_output(k, m, first, nb, o0, o1);
    }
    free(v);
}

/* Tiles per block: whole tiles of `ch` columns, V and M within `fit` tiles (or
 * MGR_WINO_MIN_TILES), so that the busiest of `threads` parts (mgr_parallel_for's contiguous runs
 * of blocks) computes the fewest columns; a narrower block only where it saves that part an
 * eighth of its columns, as each block reads all of U again (8 images of 4x4 tiles, 256
 * channels, on 2 threads: 2 blocks of 16 tiles, where one of 32 left a thread idle). */
static int64_t mgr_wino_block(int64_t ntiles, int64_t fit, int64_t ch, int64_t threads) {
    int64_t widest = (fit < MGR_WINO_MIN_TILES ? MGR_WINO_MIN_TILES : fit) / ch * ch;
    int64_t best = 0, best_cols = 0;
    if (widest > mgr_round_up(ntiles, ch)) widest = mgr_round_up(ntiles, ch);
    if (widest < ch) widest = ch;
    for (int64_t block = widest; block >= ch; block -= ch) {
        int64_t n = (ntiles + block - 1) / block, parts = n < threads ? n : threads;
        int64_t cols = (n + parts - 1) / parts * block;
        if (!best || cols * 8 < best_cols * 7) best = block, best_cols = cols;
    }
    return best;
}

/* Whether Winograd runs this block (float32 3x3, stride 1, undilated, one group, weights not
 * packed, a gather tile on this CPU), and its geometry in k; 0 where the sizes overflow */
static int mgr_wino_of(const int64_t* s, mgr_wino* k) {
    int isa = cpu_isa_widest();
    int64_t threads = mgr_run_threads(), fit, vn, mn;
    memset(k, 0, sizeof *k);
    if (s[GROUPS] != 1 || s[PACKED] || s[KH] != 3 || s[KW] != 3 || s[SH] != 1 || s[SW] != 1 ||
        s[DH] != 1 || s[DW] != 1 || s[BATCH] * s[COUT] == 0 || s[OH] == 0 || s[OW] == 0 ||
        !mgr_gather_tile_for(isa, 0, s[COUT], &k->t))
        return 0;
    k->f = wino_of(isa);
    k->act = (int)s[ACT];
    k->cin = s[CIN], k->cout = s[COUT], k->h = s[H], k->w_ = s[W], k->oh = s[OH], k->ow = s[OW];
    k->ph = s[PH], k->pw = s[PW], k->th = (s[OH] + 1) / 2, k->tw = (s[OW] + 1) / 2;
    k->ntiles = s[BATCH] * k->th * k->tw;
    k->rows = mgr_round_up(k->cout, k->t.pix);
    fit = MGR_WINO_BLOCK_FLOATS / (16 * (k->cin + k->cout) + 1);
    k->block = mgr_wino_block(k->ntiles, fit, k->t.ch, threads);
    k->nblocks = (k->ntiles + k->block - 1) / k->block;
    k->splits = k->nblocks >= threads ? 1 : (threads + k->nblocks - 1) / k->nblocks;
    if (k->splits > k->rows / k->t.pix) k->splits = k->rows / k->t.pix;
    if (!mgr_muladd(MGR_WINO_SKEW, k->cin, k->block, &vn) ||
        !mgr_muladd(MGR_WINO_SKEW, k->rows, k->block, &mn) ||
        !mgr_muladd(0, vn + mn, 16, &k->slot))
        return 0;
    return 1;
}

/* conv2d_f32 by Winograd on U (mgr_wino_filter's layout, its 16 matrices uld floats apart):
 * status */
static int mgr_wino_run_on(const mgr_call* call, mgr_wino* k, const float* u, int64_t uld) {
    const int64_t* s = call->ints;
    k->u = u;
    k->uld = uld;
    k->x = (const float*)call->bufs[0];
    k->bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    k->y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    mgr_parallel_for(k->nblocks * k->splits, mgr_wino_items, k);
    return k->failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

/* conv2d_f32 by Winograd where the plan's path is it, the filters transformed on this call:
 * MGR_KERNEL_OK or MGR_KERNEL_OUT_OF_MEMORY; else MGR_KERNEL_UNSUPPORTED, for the caller's
 * other ways */
static int mgr_conv2d_winograd(const mgr_call* call) {
    const int64_t* s = call->ints;
    mgr_wino k;
    int64_t uld, un; /* the 16 matrices a cache line apart more: written 16 at a time */
    if (s[PATH] != MGR_WINO_PATH || !mgr_wino_of(s, &k)) return MGR_KERNEL_UNSUPPORTED;
    if (!mgr_muladd(MGR_WINO_SKEW, k.cin, k.cout, &uld) || !mgr_muladd(0, uld, 16, &un))
        return MGR_KERNEL_OUT_OF_MEMORY;
    float* u = (float*)malloc((size_t)un * sizeof(float));
    if (!u) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_wino_filters f = {(const float*)call->bufs[1], u, k.cin, uld};
    mgr_parallel_for(k.cout, mgr_wino_filter_part, &f);
    int status = mgr_wino_run_on(call, &k, u, uld);
    free(u);
    return status;
}

#endif
