/* conv2d_f32's Winograd F(2x2, 3x3) where the plan chose it (its `path`): conv_winograd.pxi's
 * steps written again in C, on wino_tile.h's transforms and conv_tile.h's row tiles for its 16
 * GEMMs (both included: one source for both executors).
 *
 * U = G g G^T per (output, input channel), stored as 16 matrices packed as the row tiles read
 * their weights: blocks of CONV_PACK output channels, U[xi][o / 8][c][o % 8], zeros past cout
 * (conv_winograd.pxi's layout on AVX2). Then per block of tiles (every image's 2x2 output tiles
 * numbered together, so small planes make wide GEMMs), on one thread with its own V and M:
 * V = B^T d B per (input channel, tile), M[xi] (cout, nb) = U[xi] (cout, cin) V[xi] (cin, nb)
 * for the 16 positions xi on the widest row tile (AVX-512 8 x 48, AVX2 4 x 24, the baseline
 * 4 x 8: ROWS output channels by COLS tiles in registers, each sum over cin in order from zero,
 * U's ROWS neighbouring floats broadcast, V's COLS read as vectors), then y = A^T M A with the
 * bias and activation. No output's sum depends on the blocks or on which output channels a
 * part takes, so any thread count gives the same bits; and they are the Python executor's on
 * AVX2 plans, whose 16 GEMMs run these tiles in this order of sums (on AVX-512 it runs the
 * gather tile and the BLAS for a block's last few columns: within float32 rounding; a plan's
 * isa 0 runs the baseline tile here, the BLAS there).
 *
 * conv2d_winograd_packed_f32 reads U from the blob (the export transformed and packed the
 * filters, the same arithmetic: deploy/conv_prepack.py); conv2d_winograd_f32 (older blobs) reads
 * U unpacked, U[xi][o][c], and packs it on each call; conv2d_f32 on a Winograd path transforms
 * the filters on each call.
 *
 * Design: a block's tiles are a whole number of the row tile's columns, so every tile of M is
 * written in place (V's columns past the block's tiles are zeros, their sums dropped), and V is
 * stored in panels of those columns, v[xi][j / COLS][c][j % COLS], so a tile's operand is one
 * contiguous run (cin x COLS floats, in L1 while every row tile of U passes it). V and M of a
 * block fit MGR_WINO_BLOCK_FLOATS. Blocks go to the threads whole, each thread taking the next
 * from a shared counter (a thread started late leaves its blocks to the others); where there
 * are fewer blocks than threads, a block's output channels are split too
 * (each part transforms the block's input again: cheaper than a second pass over the
 * threads). */
#ifndef MGR_CONV_WINO_C_H
#define MGR_CONV_WINO_C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_gather_c.h" /* the Conv block's fields, conv_tile.h */
#include "wino_tile.h"

#define MGR_WINO_PATH 6            /* conv.pyx's C_WINOGRAD */
#ifndef MGR_WINO_BLOCK_FLOATS
#define MGR_WINO_BLOCK_FLOATS (1 << 17) /* V and M of one block: 512 KiB (Zen 3's L2) */
#endif
#define MGR_WINO_SKEW 16           /* the 16 matrices a cache line apart more (conv_winograd.pxi) */
#define MGR_WINO_MIN_TILES 32      /* the fewest tiles a block is cut to for the threads */

typedef struct {
    const float *x, *bias;
    float* y;
    const float* u; /* U[xi] packed: u[xi * uld + (o / CONV_PACK * cin + c) * CONV_PACK + o % 8] */
    int64_t uld;
    conv_tile_fn tile;  /* the row tile: trows output channels x tcols tiles */
    int64_t trows, tcols;
    wino_transforms f;
    int act;
    int64_t cin, cout, h, w_, oh, ow, ph, pw, th, tw, ntiles;
    int64_t urows;           /* U's rows: cout rounded up to whole packed blocks */
    int64_t block;           /* tiles per block: whole tiles of tcols columns */
    int64_t nblocks, splits; /* the work items: each block's output channels in `splits` */
    int64_t slot;            /* one part's V and M, in floats */
    int64_t next;            /* the next work item a part takes */
    int failed;
} mgr_wino;

/* floats between two of V's or M's 16 matrices of `rows` rows of a block */
static inline int64_t mgr_wino_ld(const mgr_wino* k, int64_t rows) {
    return rows * k->block + MGR_WINO_SKEW;
}

/* where U[xi]'s row o, column c lies in the packed layout, from U[xi] */
static inline int64_t mgr_wino_at(int64_t o, int64_t c, int64_t cin) {
    return (o / CONV_PACK * cin + c) * CONV_PACK + o % CONV_PACK;
}

/* u[xi * ld + mgr_wino_at(o, c)] = (G g G^T)[xi] of the filters g = w[o, c] of output channels
 * [lo, hi) (with flip, the data gradient's of the forward filters w: w[c, o] turned, as
 * conv_data.h lays it out), zeros for o >= cout */
static void mgr_wino_filter(const float* w, float* u, int64_t cin, int64_t cout, int64_t ld,
                            int flip, int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; o++)
        for (int64_t c = 0; c < cin; c++) {
            float g[9] = {0}, t[4][3];
            float* dst = u + mgr_wino_at(o, c, cin);
            for (int i = 0; o < cout && i < 9; i++)
                g[i] = w[flip ? conv_data_weight(0, o, c, i, cin, cout, 9) : (o * cin + c) * 9 + i];
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

/* U made on a call: from the filters w (transformed; flip: the data gradient's) or from an
 * older blob's unpacked U (16, cout, cin) (moved into the packed layout); parts of [0, urows) */
typedef struct {
    const float* w;
    const float* unpacked;
    float* u;
    int64_t cin, cout, ld;
    int flip;
} mgr_wino_filters;

static void mgr_wino_filter_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_wino_filters* f = (const mgr_wino_filters*)ctx;
    if (f->w) {
        mgr_wino_filter(f->w, f->u, f->cin, f->cout, f->ld, f->flip, lo, hi);
        return;
    }
    for (int xi = 0; xi < 16; xi++)
        for (int64_t o = lo; o < hi; o++)
            for (int64_t c = 0; c < f->cin; c++)
                f->u[xi * f->ld + mgr_wino_at(o, c, f->cin)] =
                    o < f->cout ? f->unpacked[(xi * f->cout + o) * f->cin + c] : 0.0f;
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
    int64_t run = mgr_wino_run(k, tile, left), rest = k->tcols - j % k->tcols;
    return rest < run ? rest : run;
}

/* V[xi] = (B^T d B)[xi] of tile first + j's window d in input channel c, in panels of the
 * tile's columns: v[xi][j / cols][c][j % cols]; zeros in the columns [nb, the block's whole
 * tiles) */
static void mgr_wino_input(const mgr_wino* k, float* v, int64_t first, int64_t nb) {
    int64_t ld = mgr_wino_ld(k, k->cin), cols = k->tcols, whole = mgr_round_up(nb, cols);
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
                    v + (j / cols * k->cin + c) * cols + j % cols, ld);
            j += count;
        }
        for (int xi = 0; nb < whole && xi < 16; xi++)
            memset(v + xi * ld + (nb / cols * k->cin + c) * cols + nb % cols, 0,
                   (size_t)(whole - nb) * sizeof(float));
    }
}

/* M[xi] = U[xi] V[xi] for output channels [o0, o1) (o0 a whole number of packed blocks): per
 * panel of V (cin x cols floats, in L1), every row tile of U, as conv_winograd.pxi's
 * wino_gemm_rows */
static void mgr_wino_gemm(const mgr_wino* k, const float* v, float* m, int64_t nb, int xi,
                          int64_t o0, int64_t o1) {
    const float* u = k->u + xi * k->uld;
    ptrdiff_t zero = 0;
    int64_t rows = k->trows, cols = k->tcols;
    v += xi * mgr_wino_ld(k, k->cin);
    m += xi * mgr_wino_ld(k, k->cout);
    for (int64_t b = 0; b < nb; b += cols)
        for (int64_t r0 = o0; r0 < o1; r0 += rows)
            k->tile(v + b * k->cin, cols, &zero, 1, k->cin, u + mgr_wino_at(r0, 0, k->cin),
                    m + r0 * k->block + b, k->block, o1 - r0 < rows ? o1 - r0 : rows, 0);
}

/* y's cells of tiles [first, first + nb) in output channels [o0, o1) = A^T M A, with the bias
 * and activation */
static void mgr_wino_output(const mgr_wino* k, const float* m, int64_t first, int64_t nb,
                            int64_t o0, int64_t o1) {
    int64_t ld = mgr_wino_ld(k, k->cout);
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

/* work item `item` (a block, a split of its output channels) on V and M at v */
static void mgr_wino_item(const mgr_wino* k, float* v, int64_t item) {
    float* m = v + 16 * mgr_wino_ld(k, k->cin);
    int64_t packs = k->urows / CONV_PACK, blk = item / k->splits, split = item % k->splits;
    int64_t first = blk * k->block;
    int64_t nb = k->ntiles - first < k->block ? k->ntiles - first : k->block;
    int64_t o0 = mgr_cut(packs, k->splits, split) * CONV_PACK;
    int64_t o1 = mgr_cut(packs, k->splits, split + 1) * CONV_PACK;
    if (o1 > k->cout) o1 = k->cout;
    mgr_wino_input(k, v, first, nb);
    for (int xi = 0; xi < 16; xi++) mgr_wino_gemm(k, v, m, nb, xi, o0, o1);
    mgr_wino_output(k, m, first, nb, o0, o1);
}

/* a thread's part: work items taken from the shared counter as it comes (a thread the system
 * starts late leaves its items to the others, as the executor's dynamic schedule), on its own
 * V and M; [lo, hi) only says how many parts there are */
static void mgr_wino_items(void* ctx, int64_t lo, int64_t hi) {
    mgr_wino* k = (mgr_wino*)ctx;
    int64_t items = k->nblocks * k->splits, item;
    float* v = (float*)malloc((size_t)k->slot * sizeof(float));
    (void)lo, (void)hi;
    if (!v) {
        __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    while ((item = __atomic_fetch_add(&k->next, 1, __ATOMIC_RELAXED)) < items)
        mgr_wino_item(k, v, item);
    free(v);
}

/* Tiles per block: whole tiles of `cols` columns, V and M within `fit` tiles (or
 * MGR_WINO_MIN_TILES), so that the busiest of `threads` threads (each taking whole blocks)
 * computes the fewest columns; a narrower block only where it saves that part an
 * eighth of its columns, as each block reads all of U again (8 images of 4x4 tiles, 256
 * channels, on 2 threads: 2 blocks of 16 tiles, where one of 32 left a thread idle). */
static int64_t mgr_wino_block(int64_t ntiles, int64_t fit, int64_t cols, int64_t threads) {
    int64_t widest = (fit < MGR_WINO_MIN_TILES ? MGR_WINO_MIN_TILES : fit) / cols * cols;
    int64_t best = 0, best_cols = 0;
    if (widest > mgr_round_up(ntiles, cols)) widest = mgr_round_up(ntiles, cols);
    if (widest < cols) widest = cols;
    for (int64_t block = widest; block >= cols; block -= cols) {
        int64_t n = (ntiles + block - 1) / block, parts = n < threads ? n : threads;
        int64_t busiest = (n + parts - 1) / parts * block;
        if (!best || busiest * 8 < best_cols * 7) best = block, best_cols = busiest;
    }
    return best;
}

/* The row tile that runs a plan of instruction set `plan_isa` here: its arithmetic (0: the
 * baseline tile's multiply and add; else the FMA, on this CPU's widest tile, or the baseline
 * tile where the CPU has none, as conv_winograd.pxi falls back) */
static conv_tile mgr_wino_tile(int plan_isa) {
    return conv_tile_of(plan_isa == 0 ? 0 : cpu_isa_widest());
}

/* Whether Winograd runs this block (float32 3x3, stride 1, undilated, one group), and its
 * geometry in k; 0 where the sizes overflow */
static int mgr_wino_of(const int64_t* s, mgr_wino* k) {
    conv_tile t = mgr_wino_tile((int)s[ISA]);
    int64_t threads = mgr_run_threads(), fit, vn, mn;
    memset(k, 0, sizeof *k);
    if (s[GROUPS] != 1 || s[KH] != 3 || s[KW] != 3 || s[SH] != 1 || s[SW] != 1 || s[DH] != 1 ||
        s[DW] != 1 || s[BATCH] * s[COUT] == 0 || s[OH] == 0 || s[OW] == 0)
        return 0;
    k->tile = t.fn, k->trows = t.rows, k->tcols = t.cols;
    k->f = wino_of(cpu_isa_widest());
    k->act = (int)s[ACT];
    k->cin = s[CIN], k->cout = s[COUT], k->h = s[H], k->w_ = s[W], k->oh = s[OH], k->ow = s[OW];
    k->ph = s[PH], k->pw = s[PW], k->th = (s[OH] + 1) / 2, k->tw = (s[OW] + 1) / 2;
    k->ntiles = s[BATCH] * k->th * k->tw;
    k->urows = mgr_round_up(k->cout, CONV_PACK);
    fit = MGR_WINO_BLOCK_FLOATS / (16 * (k->cin + k->cout) + 1);
    k->block = mgr_wino_block(k->ntiles, fit, k->tcols, threads);
    k->nblocks = (k->ntiles + k->block - 1) / k->block;
    k->splits = k->nblocks >= threads ? 1 : (threads + k->nblocks - 1) / k->nblocks;
    if (k->splits > k->urows / CONV_PACK) k->splits = k->urows / CONV_PACK;
    if (!mgr_muladd(MGR_WINO_SKEW, k->cin, k->block, &vn) ||
        !mgr_muladd(MGR_WINO_SKEW, k->cout, k->block, &mn) ||
        !mgr_muladd(0, vn + mn, 16, &k->slot))
        return 0;
    return 1;
}

/* k's x, bias and y: conv2d_f32's buffers x, [bias,] y */
static void mgr_wino_conv_buffers(mgr_wino* k, const mgr_call* call) {
    const int64_t* s = call->ints;
    k->x = (const float*)call->bufs[0];
    k->bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    k->y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
}

/* Winograd on U (the packed layout, its 16 matrices uld floats apart), k's x, bias and y set:
 * status */
static int mgr_wino_run_on(mgr_wino* k, const float* u, int64_t uld) {
    k->u = u;
    k->uld = uld;
    int64_t items = k->nblocks * k->splits, threads = mgr_run_threads();
    mgr_parallel_for(items < threads ? items : threads, mgr_wino_items, k);
    return k->failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

/* Winograd on U made on this call, from the filters w (flip: the data gradient's) or from an
 * older blob's unpacked U (the other NULL), k's x, bias and y set: MGR_KERNEL_OK or
 * MGR_KERNEL_OUT_OF_MEMORY */
static int mgr_wino_run_made(mgr_wino* k, const float* w, const float* unpacked, int flip) {
    int64_t uld, un; /* the 16 matrices a cache line apart more: written 16 at a time */
    if (!mgr_muladd(MGR_WINO_SKEW, k->cin, k->urows, &uld) || !mgr_muladd(0, uld, 16, &un))
        return MGR_KERNEL_OUT_OF_MEMORY;
    float* u = (float*)malloc((size_t)un * sizeof(float));
    if (!u) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_wino_filters f = {w, unpacked, u, k->cin, k->cout, uld, flip};
    mgr_parallel_for(k->urows, mgr_wino_filter_part, &f);
    int status = mgr_wino_run_on(k, u, uld);
    free(u);
    return status;
}

/* conv2d_f32 by Winograd where the plan's path is it and its filters are not packed, the
 * filters transformed on this call: MGR_KERNEL_OK or MGR_KERNEL_OUT_OF_MEMORY; else
 * MGR_KERNEL_UNSUPPORTED, for the caller's other ways */
static int mgr_conv2d_winograd(const mgr_call* call) {
    mgr_wino k;
    if (call->ints[PATH] != MGR_WINO_PATH || call->ints[PACKED] || !mgr_wino_of(call->ints, &k))
        return MGR_KERNEL_UNSUPPORTED;
    mgr_wino_conv_buffers(&k, call);
    return mgr_wino_run_made(&k, (const float*)call->bufs[1], NULL, 0);
}

#endif
