/* Winograd F(2x2, 3x3)'s driver (float32): the geometry of a call, the filter, input and output
 * transforms' loops and the work items, one source for the Python executor (conv_winograd.pxi,
 * under OpenMP) and the C runtime (deploy/csrc/kernels/conv_wino_c.h, under mgr_parallel_for).
 * Each caller keeps its thread loop and owns the scratch: U, and per thread V and M.
 *
 * Design: each 2x2 block of output cells (a tile) is A^T [(G g G^T) * (B^T d B)] A (Lavin and
 * Gray, 2015), d the 4x4 input window under it, g the 3x3 filter; summed over input channels the
 * 16 elementwise products become 16 GEMMs, M[xi] (cout, tiles) = U[xi] (cout, cin) V[xi] (cin,
 * tiles). Every image's tiles are numbered together (small planes still make wide GEMMs) and
 * taken in blocks whose V and M stay in L2 between the transforms and the GEMMs. A work item is
 * a block, or where there are fewer blocks than threads a split of its output channels (each
 * split transforms the block's input itself): V = B^T d B (wino_tile.h's vectors, by runs of
 * tiles along their rows), the 16 GEMMs, y = A^T M A with the bias and activation. The GEMMs run
 * conv_tile.h's row tiles (ROWS output channels x COLS tiles in registers, each sum over cin in
 * order from zero; U packed as they read weights, V stored in panels of COLS tiles,
 * v[xi][j / COLS][c][j % COLS], so a tile's operand is one contiguous run, zeros past the
 * block's tiles), or the caller's GEMM on plain matrices (the executor's BLAS and AVX-512 gather
 * tile: V (cin, block) and U (cout, cin) unpacked). No output's sum depends on the blocks or on
 * a split, so any thread count gives the same bits, and the two callers give the same bits
 * where both run the row tiles (every C call; the executor's AVX2 plans).
 *
 * Scratch: U is 16 matrices of urows x cin, `uld` floats apart; a thread's slot holds V (16 x
 * vld) then M (16 x mld). The 16 matrices of each are written 16 at a time: were they a power
 * of two apart the 16 streams would fall in the same cache sets and evict each other (the
 * 512-channel U took 4x the whole convolution's time), so each starts WINO_SKEW floats further.
 */
#ifndef MG_WINO_CONV_H
#define MG_WINO_CONV_H

#include <stdint.h>
#include <string.h>

#include "conv_data.h"  /* conv_data_weight: the data gradient's filters */
#include "conv_tile.h"  /* the row tiles, CONV_PACK */
#include "wino_tile.h"  /* the input and output transforms */

/* V and M of one block on the row tiles: 512 KiB (Zen 3's L2; 2^18 and 2^19 were slower) */
#ifndef WINO_BLOCK_FLOATS
#define WINO_BLOCK_FLOATS (1 << 17)
#endif
/* V and M of one block on the caller's GEMM: 2 MiB (the executor's BLAS, fitted on Zen 4) */
#define WINO_GEMM_BLOCK_FLOATS (1 << 19)
#define WINO_SKEW 16
#define WINO_MIN_TILES 32 /* the fewest tiles a block is cut to for the threads */
#define WINO_CALLER_GEMM (-1) /* wino_sizes.tile_isa: the caller's GEMM, not the row tiles */

/* A call's sizes, from the caller's parameters (the executor's Conv, the C runtime's block) */
typedef struct {
    int64_t batch, cin, h, w, cout, oh, ow, ph, pw;
    int act;           /* activation.h's code, applied after the bias */
    int64_t threads;   /* the threads the blocks are cut for (not the bits: any count gives them) */
    int tile_isa;      /* the row tile's instruction set (conv_tile_of), or WINO_CALLER_GEMM */
    int transform_isa; /* wino_tile.h's transforms' (wino_of) */
    int64_t gemm_cols; /* the caller's GEMM: blocks of whole such columns where they pay, or 0 */
} wino_sizes;

/* A call's geometry (wino_conv_of) */
typedef struct {
    wino_sizes s;
    int rows;        /* the row tiles run the GEMMs (U packed, V in panels) */
    conv_tile tile;  /* they: tile.rows output channels x tile.cols tiles */
    wino_transforms f;
    int64_t th, tw, ntiles;  /* rows and columns of tiles per image; every image's tiles */
    int64_t urows;           /* U's rows: cout, on the row tiles rounded up to whole packs */
    int64_t block, pcols;    /* tiles per block; V's panels' columns (the block's on plain V) */
    int64_t nblocks, splits; /* the work items: each block's output channels in `splits` */
    int64_t vld, mld, slot;  /* floats between V's matrices and M's; a thread's V and M */
} wino_conv;

/* One position xi's GEMM, M = U V in output channels [o0, o1): U[xi] (urows, cin) as
 * wino_u_at lays it out, V[xi] (cin, nb) as wino_input, M[xi] (cout, nb) rows `block` apart */
typedef void (*wino_gemm_fn)(const wino_conv* k, const float* u, const float* v, float* m,
                             int64_t nb, int64_t o0, int64_t o1);

/* A call's buffers: x, U (its 16 matrices uld floats apart), the bias (or NULL), y; the GEMM */
typedef struct {
    const wino_conv* k;
    const float *x, *u, *bias;
    float* y;
    int64_t uld;
    wino_gemm_fn gemm;
} wino_call;

static inline int64_t wino_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t wino_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t wino_rup(int64_t a, int64_t b) { return wino_cdiv(a, b) * b; }

/* Tiles per block on the row tiles: whole tiles of `cols` columns, V and M within `fit` tiles (or
 * WINO_MIN_TILES), so that the busiest of `threads` threads (each taking whole blocks) computes
 * the fewest columns; a narrower block only where it saves that part an eighth of its columns,
 * as each block reads all of U again (8 images of 4x4 tiles, 256 channels, on 2 threads: 2
 * blocks of 16 tiles, where one of 32 left a thread idle). */
static int64_t wino_block_rows(int64_t ntiles, int64_t fit, int64_t cols, int64_t threads) {
    int64_t widest = (fit < WINO_MIN_TILES ? WINO_MIN_TILES : fit) / cols * cols;
    int64_t best = cols, best_cols = 0;
    widest = wino_min(widest, wino_rup(ntiles, cols));
    if (widest < cols) widest = cols;
    for (int64_t block = widest; ntiles && block >= cols; block -= cols) {
        int64_t n = wino_cdiv(ntiles, block), parts = wino_min(n, threads);
        int64_t busiest = wino_cdiv(n, parts) * block;
        if (!best_cols || busiest * 8 < best_cols * 7) best = block, best_cols = busiest;
    }
    return best;
}

/* Tiles per block on the caller's GEMM: V and M within WINO_GEMM_BLOCK_FLOATS (or 32 tiles), in a
 * number of blocks the threads divide where there are 32 tiles a thread; whole `gemm_cols`
 * columns (the AVX-512 gather tile's 64) where the threads still share the tiles evenly, the
 * last block more than half full (ResNet's 56x56 layer at batch 1: 784 tiles in 4 blocks of
 * 196, not 5 of 192, which took 1.16x the time on 2 threads) */
static int64_t wino_block_gemm(const wino_sizes* s, int64_t ntiles) {
    int64_t fit = WINO_GEMM_BLOCK_FLOATS / (16 * (s->cin + s->cout) + (s->cin + s->cout == 0));
    int64_t n = wino_cdiv(ntiles, fit > 32 ? fit : 32), whole, threads = s->threads;
    if (threads > 1 && ntiles >= 32 * threads) n = wino_rup(n, threads);
    if (n < 1) n = 1;
    if (threads < 1) threads = 1;
    if (s->gemm_cols && ntiles >= s->gemm_cols * n) {
        whole = wino_cdiv(ntiles, n) / s->gemm_cols * s->gemm_cols;
        if (wino_cdiv(ntiles, whole) % threads == 0 &&
            wino_cdiv(ntiles, whole) * whole - ntiles < whole / 2)
            return whole;
    }
    return wino_cdiv(ntiles, n) > 1 ? wino_cdiv(ntiles, n) : 1; /* an empty batch: one block */
}

/* a * b + c into *out, 0 where it passes INT64_MAX (sizes no scratch can hold) */
static inline int wino_muladd(int64_t a, int64_t b, int64_t c, int64_t* out) {
    return !__builtin_mul_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
}

/* k = the geometry of a call of sizes s: 1, or 0 where its scratch passes any size */
static int wino_conv_of(wino_conv* k, const wino_sizes* s) {
    int64_t threads = s->threads > 1 ? s->threads : 1, fit, vn, mn;
    memset(k, 0, sizeof *k);
    k->s = *s;
    k->rows = s->tile_isa != WINO_CALLER_GEMM;
    k->f = wino_of(s->transform_isa);
    k->th = (s->oh + 1) / 2, k->tw = (s->ow + 1) / 2;
    if (!wino_muladd(s->batch, k->th * k->tw, 0, &k->ntiles)) return 0;
    if (k->rows) {
        k->tile = conv_tile_of(s->tile_isa);
        k->urows = wino_rup(s->cout, CONV_PACK);
        fit = WINO_BLOCK_FLOATS / (16 * (s->cin + s->cout) + 1);
        k->block = wino_block_rows(k->ntiles, fit, k->tile.cols, threads);
        k->pcols = k->tile.cols;
    } else {
        k->urows = s->cout;
        k->block = k->pcols = wino_block_gemm(s, k->ntiles);
    }
    k->nblocks = wino_cdiv(k->ntiles, k->block);
    k->splits = 1;
    if (k->rows && k->nblocks && k->nblocks < threads)
        k->splits = wino_min(wino_cdiv(threads, k->nblocks), k->urows / CONV_PACK);
    if (k->splits < 1) k->splits = 1;
    return wino_muladd(s->cin, k->block, WINO_SKEW, &k->vld) &&
           wino_muladd(s->cout, k->block, WINO_SKEW, &k->mld) && wino_muladd(16, k->vld, 0, &vn) &&
           wino_muladd(16, k->mld, 0, &mn) && wino_muladd(1, vn, mn, &k->slot);
}

/* floats between two of U's 16 matrices made on a call (scratch, not a blob's) */
static inline int64_t wino_uld(const wino_conv* k) {
    return k->urows * k->s.cin + WINO_SKEW;
}

/* where U[xi]'s row o, column c lies, from U[xi]: packed in blocks of CONV_PACK output channels
 * (u[o / 8][c][o % 8]) on the row tiles, else u[o][c] */
static inline int64_t wino_u_at(const wino_conv* k, int64_t o, int64_t c) {
    int64_t cin = k->s.cin;
    return k->rows ? (o / CONV_PACK * cin + c) * CONV_PACK + o % CONV_PACK : o * cin + c;
}

/* U[xi][o][c] = (G g G^T)[xi] for U's rows o in [lo, hi), g = w[o, c] (with flip, the data
 * gradient's of the forward filters w: w[c, o] turned 180 degrees, as conv_data.h lays it out);
 * zeros for o >= cout */
static void wino_filter(const wino_conv* k, const float* w, float* u, int64_t uld, int flip,
                        int64_t lo, int64_t hi) {
    int64_t cin = k->s.cin, cout = k->s.cout;
    for (int64_t o = lo; o < hi; o++)
        for (int64_t c = 0; c < cin; c++) {
            float g[9] = {0}, t[4][3];
            float* dst = u + wino_u_at(k, o, c);
            for (int i = 0; o < cout && i < 9; i++)
                g[i] = w[flip ? conv_data_weight(0, o, c, i, cin, cout, 9) : (o * cin + c) * 9 + i];
            for (int i = 0; i < 3; i++) { /* G g: g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 */
                t[0][i] = g[i];
                t[1][i] = (g[i] + g[3 + i] + g[6 + i]) * 0.5f;
                t[2][i] = (g[i] - g[3 + i] + g[6 + i]) * 0.5f;
                t[3][i] = g[6 + i];
            }
            for (int i = 0; i < 4; i++) { /* (G g) G^T, row by row */
                dst[(4 * i) * uld] = t[i][0];
                dst[(4 * i + 1) * uld] = (t[i][0] + t[i][1] + t[i][2]) * 0.5f;
                dst[(4 * i + 2) * uld] = (t[i][0] - t[i][1] + t[i][2]) * 0.5f;
                dst[(4 * i + 3) * uld] = t[i][2];
            }
        }
}

/* tiles from `tile` to the end of its row of tiles and of its panel (column j of the block), of
 * the `left` of its block */
static inline int64_t wino_run(const wino_conv* k, int64_t tile, int64_t j, int64_t left) {
    return wino_min(wino_min(k->tw - tile % k->tw, left), k->pcols - j % k->pcols);
}

/* V[xi] = (B^T d B)[xi] of tile first + j's window d in input channels [c0, c1), in panels:
 * v[xi][j / pcols][c][j % pcols]; on the row tiles zeros in the columns [nb, whole panels) */
static void wino_input(const wino_conv* k, const float* x, float* v, int64_t first, int64_t nb,
                       int64_t c0, int64_t c1) {
    int64_t cin = k->s.cin, w = k->s.w, cols = k->pcols;
    int64_t whole = k->rows ? wino_rup(nb, cols) : nb;
    for (int64_t c = c0; c < c1; c++) {
        for (int64_t j = 0; j < nb;) {
            int64_t tile = first + j, count = wino_run(k, tile, j, nb - j);
            const float* plane = x + (tile / (k->th * k->tw) * cin + c) * k->s.h * w;
            const float* rows[4];
            for (int64_t i = 0; i < 4; i++) { /* window rows 2a - ph + i, NULL off the plane */
                int64_t r = 2 * (tile / k->tw % k->th) - k->s.ph + i;
                rows[i] = r >= 0 && r < k->s.h ? plane + r * w : NULL;
            }
            k->f.in(rows, 2 * (tile % k->tw) - k->s.pw, w, count,
                    v + (j / cols * cin + c) * cols + j % cols, k->vld);
            j += count;
        }
        for (int xi = 0; nb < whole && xi < 16; xi++)
            memset(v + xi * k->vld + (nb / cols * cin + c) * cols + nb % cols, 0,
                   (size_t)(whole - nb) * sizeof(float));
    }
}

/* M (rows of block floats) = U V for output channels [o0, o1) (o0 a whole number of packs), of
 * one position xi: per panel of V (cin x cols floats, in L1), every row tile of U */
static void wino_gemm_rows(const wino_conv* k, const float* u, const float* v, float* m,
                           int64_t nb, int64_t o0, int64_t o1) {
    ptrdiff_t zero = 0;
    int64_t rows = k->tile.rows, cols = k->tile.cols, cin = k->s.cin;
    for (int64_t b = 0; b < nb; b += cols)
        for (int64_t r0 = o0; r0 < o1; r0 += rows)
            k->tile.fn(v + b * cin, cols, &zero, 1, cin, u + wino_u_at(k, r0, 0),
                       m + r0 * k->block + b, k->block, wino_min(o1 - r0, rows), 0);
}

/* y's cells of tiles [first, first + nb) in output channels [o0, o1) = A^T M A, with the bias
 * and activation */
static void wino_output(const wino_conv* k, const float* m, const float* bias, float* y,
                        int64_t first, int64_t nb, int64_t o0, int64_t o1) {
    int64_t oh = k->s.oh, ow = k->s.ow;
    for (int64_t o = o0; o < o1; o++)
        for (int64_t j = 0; j < nb;) {
            int64_t tile = first + j, count = wino_min(k->tw - tile % k->tw, nb - j);
            int64_t a = tile / k->tw % k->th, b = tile % k->tw;
            float* out =
                y + (tile / (k->th * k->tw) * k->s.cout + o) * oh * ow + 2 * a * ow + 2 * b;
            k->f.out(m + o * k->block + j, k->mld, count, out, 2 * a + 1 < oh ? out + ow : NULL,
                     wino_min(2 * count, ow - 2 * b), bias ? bias[o] : 0.0f, k->s.act);
            j += count;
        }
}

/* block `blk`'s first tile and its number of tiles */
static inline int64_t wino_block_tiles(const wino_conv* k, int64_t blk, int64_t* first) {
    *first = blk * k->block;
    return wino_min(k->block, k->ntiles - *first);
}

/* Work item `item` of nblocks * splits (a block, a split of its output channels) on one thread,
 * with its V and M at area (a slot) */
static void wino_item(const wino_call* c, float* area, int64_t item) {
    const wino_conv* k = c->k;
    float* m = area + 16 * k->vld;
    int64_t packs = k->urows / CONV_PACK, split = item % k->splits, first;
    int64_t nb = wino_block_tiles(k, item / k->splits, &first), o0 = 0, o1 = k->s.cout;
    if (k->splits > 1) {
        o0 = split * packs / k->splits * CONV_PACK;
        o1 = wino_min((split + 1) * packs / k->splits * CONV_PACK, k->s.cout);
    }
    wino_input(k, c->x, area, first, nb, 0, k->s.cin);
    for (int xi = 0; xi < 16; xi++)
        c->gemm(k, c->u + xi * c->uld, area + xi * k->vld, m + xi * k->mld, nb, o0, o1);
    wino_output(k, m, c->bias, c->y, first, nb, o0, o1);
}

#endif
