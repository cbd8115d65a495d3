/* conv2d_f32 on the package's gather tiles (conv_tile.h, included: the tiles conv.pyx's packed
 * path runs, one source for both executors): conv_blocked.pxi's packed_call written again in
 * C, over mgr_parallel_for instead of OpenMP.
 *
 * A tile keeps PIX output cells x CH output channels in registers and sums each over (input
 * channel, tap) in order from zero, by fused multiply-adds where its isa has them; conv_out
 * then adds the bias and applies the activation. So the tiles of one arithmetic (FMA, or the
 * x86-64 baseline's multiply and add) give the same bits: on packed weights (blocks of P
 * channels, w[block][c][tap][P], the prepack pass's layout) any tile whose CH divides P reads
 * its columns in place (rows P floats apart), which lets an AVX2 CPU run a plan packed for
 * AVX-512's 64-channel tile, bitwise. Weights not packed are packed here on each call, in
 * blocks of the tile's width: their plan ran another way (Winograd, a GEMM through the BLAS),
 * so these agree with it within float32 rounding.
 *
 * Work items, as packed_call's: a chunk of at most MGR_CHUNK_TILES cell tiles (over the whole
 * batch's cells, so small planes fill the tiles) by a group of channel blocks, whose results
 * go to the part's own slot, then out into y while they are in cache. The items do not depend
 * on the thread count and each output is one tile's sum, so every thread count gives the same
 * bits. Padded images are copied once into a zeroed buffer, so the taps need no bounds. */
#ifndef MGR_CONV_GATHER_C_H
#define MGR_CONV_GATHER_C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../mgr_kernel.h"
#include "conv_data.h"
#include "conv_tile.h"

/* the Conv parameter block (kernel_abi/conv.py's FIELDS) */
enum { BATCH, CIN, H, W, COUT, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, GROUPS, HAS_BIAS, PATH,
       ACT, ISA, THREADS, TRANSPOSED, PACKED, FIELDS };

#define MGR_BLOCKED_PATH 3           /* conv.pyx's C_BLOCKED: the row tiles */
#define MGR_GATHER_PATH 4            /* conv.pyx's C_GATHER */
#define MGR_CONV_MAX_TAPS 64         /* conv_blocked.pxi's BLOCKED_MAX_TAPS */
#define MGR_CHUNK_TILES 8            /* packed_call's PACKED_CHUNK_TILES */
#define MGR_GROUP_BYTES (512 * 1024) /* a group of channel blocks' weights, where it can */
#define MGR_MIN_ITEMS 8              /* work items at least, so that a few threads balance */
#define MGR_MIN_GROUP_CHANNELS 8     /* fewer output channels per group keep the plain loop */

typedef struct {
    conv_gather_fn fn;
    int64_t pix, ch;
} mgr_gather_tile;

typedef struct {
    mgr_gather_tile t;
    conv_out_fn out;
    const float* planes; /* x, or its zero-padded copy: (batch, cin, hp, wp) */
    const float* w;      /* per group, blocks of `pack` output channels: [block][c][tap][pack] */
    const float* bias;
    float* y;
    int act;
    int64_t nc, no, cin, cout, pack, kdim, taps; /* nc, no: channels per group */
    int64_t plane, wp, sh, sw, ow, ncols, ncells;  /* ncols: one image's output cells */
    int64_t ldy, nblocks, nchunks, ntiles, ogroups, chunk_tiles; /* the most tiles a chunk has */
    int panels; /* planes holds a tile's cells' channels together: mgr_conv2d_pointwise's */
    ptrdiff_t offs[MGR_CONV_MAX_TAPS];
    int failed; /* a part found no memory for its slot */
} mgr_conv_tiles;

static inline int64_t mgr_round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
/* where part i of n units cut into `parts` begins (parallel.pxd's cut) */
static inline int64_t mgr_cut(int64_t n, int64_t parts, int64_t i) { return n * i / parts; }

/* The tile of instruction set `isa` (conv_packed_tiles) that runs weights packed by `pack`
 * channels (the widest whose channels divide it), or, for pack 0, the one padding `cout`
 * channels the least; 0 where the isa has none. */
static int mgr_gather_tile_for(int isa, int64_t pack, int64_t cout, mgr_gather_tile* out) {
    conv_packed_tile tiles[CONV_PACKED_MAX];
    int n = conv_packed_tiles(isa, tiles), found = 0;
    for (int i = 0; i < n; i++) {
        int64_t ch = tiles[i].ch;
        int better = pack ? pack % ch == 0 && (!found || ch > out->ch)
                          : !found || mgr_round_up(cout, ch) < mgr_round_up(cout, out->ch);
        if (better) *out = (mgr_gather_tile){tiles[i].fn, tiles[i].pix, ch};
        found |= better;
    }
    return found;
}

/* work item `item`: chunk item % nchunks of the cells, channel block group (item / nchunks) %
 * ogroups of convolution group item / (nchunks * ogroups), through res into y */
static void mgr_conv_item(const mgr_conv_tiles* c, int64_t item, float* res) {
    const float* px[CONV_PIX_MAX];
    int64_t pix = c->t.pix, ch = c->t.ch, chunk = item % c->nchunks;
    int64_t og = item / c->nchunks % c->ogroups, g = item / (c->nchunks * c->ogroups);
    int64_t first = mgr_cut(c->ntiles, c->nchunks, chunk) * pix;
    int64_t last = mgr_cut(c->ntiles, c->nchunks, chunk + 1) * pix;
    int64_t ob0 = og * c->nblocks / c->ogroups, ob1 = (og + 1) * c->nblocks / c->ogroups;
    const float* planes = c->planes + g * c->nc * c->plane;
    const float* wg = c->w + g * mgr_round_up(c->no, c->pack) * c->kdim;
    if (last > c->ncells) last = c->ncells;
    for (int64_t o = ob0; o < ob1; o++) { /* a block's weights stay in cache past the tiles */
        const float* wo = wg + o * ch / c->pack * c->kdim * c->pack + o * ch % c->pack;
        for (int64_t i = 0; i * pix < last - first; i++) {
            for (int64_t p = 0; p < pix; p++) { /* a tile past the last cell repeats it */
                int64_t cell = first + i * pix + p < c->ncells ? first + i * pix + p
                                                               : c->ncells - 1;
                int64_t q = cell % c->ncols;
                px[p] = c->panels ? planes + cell / pix * c->cin * pix + cell % pix
                                  : planes + cell / c->ncols * c->cin * c->plane +
                                        q / c->ow * c->sh * c->wp + q % c->ow * c->sw;
            }
            c->t.fn(px, c->plane, c->offs, c->taps, c->nc, wo, c->pack,
                    res + i * pix * c->ldy + o * ch, c->ldy, 0);
        }
    }
    for (int64_t cell = first; cell < last;) { /* out by images: a chunk may span them */
        int64_t n = cell / c->ncols, end = (n + 1) * c->ncols < last ? (n + 1) * c->ncols : last;
        int64_t o1 = ob1 * ch < c->no ? ob1 * ch : c->no;
        c->out(res + (cell - first) * c->ldy, c->ldy, c->y + (n * c->cout + g * c->no) *
               c->ncols + cell % c->ncols, c->ncols, end - cell, ob0 * ch, o1,
               c->bias ? c->bias + g * c->no : NULL, c->act);
        cell = end;
    }
}

/* parts of the work items, each with its own slot for a chunk's results */
static void mgr_conv_items(void* ctx, int64_t lo, int64_t hi) {
    mgr_conv_tiles* c = (mgr_conv_tiles*)ctx;
    float* res = (float*)malloc((size_t)(c->chunk_tiles * c->t.pix * c->ldy) * sizeof(float));
    if (!res) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t item = lo; item < hi; item++) mgr_conv_item(c, item, res);
    free(res);
}

/* the batch copied into zero-padded planes: parts of [0, batch), an image each */
typedef struct {
    const float* x;
    float* padded;
    int64_t channels, h, w, hp, wp, ph, pw;
} mgr_conv_pad;

static void mgr_conv_pad_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_conv_pad* k = (const mgr_conv_pad*)ctx;
    int64_t plane = k->hp * k->wp;
    for (int64_t n = lo; n < hi; n++) {
        float* dst = k->padded + n * k->channels * plane;
        memset(dst, 0, (size_t)(k->channels * plane) * sizeof(float));
        for (int64_t ch = 0; ch < k->channels; ch++)
            for (int64_t r = 0; r < k->h; r++)
                memcpy(dst + (ch * k->hp + r + k->ph) * k->wp + k->pw,
                       k->x + ((n * k->channels + ch) * k->h + r) * k->w,
                       (size_t)k->w * sizeof(float));
    }
}

/* weights w[g][o][kdim] (no per group) packed into blocks of `pack` channels,
 * packed[g][block][kdim][pack], zero past no (conv_blocked.pxi's pack_weight); with flip, the
 * data gradient's weights of the forward filters w (conv_data.h; kdim = nc * taps): parts of
 * [0, groups * blocks) */
typedef struct {
    const float* w;
    float* packed;
    int64_t no, kdim, pack, blocks;
    int64_t flip, nc, taps;
} mgr_conv_pack;

static void mgr_conv_pack_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_conv_pack* k = (const mgr_conv_pack*)ctx;
    for (int64_t gb = lo; gb < hi; gb++) {
        int64_t g = gb / k->blocks, o0 = gb % k->blocks * k->pack;
        float* blk = k->packed + gb * k->kdim * k->pack;
        for (int64_t r = 0; r < k->pack; r++)
            for (int64_t j = 0, o = o0 + r; j < k->kdim; j++)
                blk[j * k->pack + r] =
                    o >= k->no ? 0.0f
                    : k->flip ? k->w[conv_data_weight(g, o, j / k->taps, j % k->taps, k->nc,
                                                      k->no, k->taps)]
                              : k->w[(g * k->no + o) * k->kdim + j];
    }
}

/* The fewest groups, at least `wanted`, that split `blocks` evenly (conv_blocked.pxi's
 * even_groups) */
static int64_t mgr_even_groups(int64_t blocks, int64_t wanted) {
    int64_t groups = wanted < 1 ? 1 : wanted > blocks ? blocks : wanted;
    while (blocks % groups) groups++;
    return groups;
}

/* The instruction sets whose tiles give the plan's arithmetic on this CPU, widest first (the
 * plan's isa 0: the baseline tile's multiply and add; else the FMA): how many are in out[]. On
 * x86-64 without the FMA, none: the caller's loop calls fmaf. Elsewhere the baseline tile,
 * which aarch64's build contracts into FMAs. */
static int mgr_tile_isas(int plan_isa, int* out) {
#if defined(__GNUC__) && defined(__x86_64__)
    int n = 0;
    if (plan_isa == 0) out[n++] = 0;
    else
        for (int isa = cpu_isa_widest(); isa >= 1; isa--) out[n++] = isa;
    return n;
#else
    (void)plan_isa;
    out[0] = 0;
    return 1;
#endif
}

/* The geometry of the tiles' walk, or 0 where they do not run this block (the caller's loop
 * does): at most MGR_CONV_MAX_TAPS taps, `min_channels` output channels per group, every
 * window inside the padded planes (a hostile block's oh may say otherwise), sizes that do not
 * overflow, a tile of this CPU with the plan's arithmetic. */
static int mgr_conv_tiles_of(const int64_t* s, int64_t min_channels, mgr_conv_tiles* c) {
    int64_t hp, wp, reach_y, reach_x, isas_n;
    int isas[3];
    memset(c, 0, sizeof *c);
    c->taps = s[KH] * s[KW];
    c->nc = s[CIN] / s[GROUPS];
    c->no = s[COUT] / s[GROUPS];
    if (c->taps > MGR_CONV_MAX_TAPS || c->no < min_channels || s[BATCH] == 0 ||
        s[OH] == 0 || s[OW] == 0 || !mgr_muladd(s[H], 2, s[PH], &hp) ||
        !mgr_muladd(s[W], 2, s[PW], &wp) || !mgr_muladd(0, hp, wp, &c->plane) ||
        !mgr_muladd(0, s[OH] - 1, s[SH], &reach_y) ||
        !mgr_muladd(reach_y, s[KH] - 1, s[DH], &reach_y) || reach_y >= hp ||
        !mgr_muladd(0, s[OW] - 1, s[SW], &reach_x) ||
        !mgr_muladd(reach_x, s[KW] - 1, s[DW], &reach_x) || reach_x >= wp)
        return 0;
    isas_n = mgr_tile_isas((int)s[ISA], isas);
    int64_t k = 0;
    while (k < isas_n && !mgr_gather_tile_for(isas[k], s[PACKED], c->no, &c->t)) k++;
    if (k == isas_n) return 0;
    c->out = conv_out_of(isas[k]);
    c->cin = s[CIN];
    c->cout = s[COUT];
    c->kdim = c->nc * c->taps;
    c->pack = s[PACKED] ? s[PACKED] : c->t.ch;
    c->wp = wp;
    c->sh = s[SH];
    c->sw = s[SW];
    c->ow = s[OW];
    c->ncols = s[OH] * s[OW];
    c->ncells = s[BATCH] * c->ncols;
    c->act = (int)s[ACT];
    for (int64_t i = 0; i < s[KH]; i++)
        for (int64_t j = 0; j < s[KW]; j++) c->offs[i * s[KW] + j] = i * s[DH] * wp + j * s[DW];
    c->nblocks = (c->no + c->t.ch - 1) / c->t.ch;
    c->ldy = c->nblocks * c->t.ch;
    c->ntiles = (c->ncells + c->t.pix - 1) / c->t.pix;
    c->nchunks = (c->ntiles + MGR_CHUNK_TILES - 1) / MGR_CHUNK_TILES;
    c->chunk_tiles = MGR_CHUNK_TILES;
    /* a few items per thread; a group's weights in L2 where the next chunk reads them again */
    int64_t units = s[GROUPS] * c->nchunks, wanted = (MGR_MIN_ITEMS + units - 1) / units;
    int64_t bytes = c->kdim * c->ldy * (int64_t)sizeof(float);
    if (c->nchunks > 1 && (bytes + MGR_GROUP_BYTES - 1) / MGR_GROUP_BYTES > wanted)
        wanted = (bytes + MGR_GROUP_BYTES - 1) / MGR_GROUP_BYTES;
    c->ogroups = mgr_even_groups(c->nblocks, wanted);
    return 1;
}

/* The convolution of block s on the tiles, x by the filters w (or, with flip, by the data
 * gradient's weights of the forward filters w: conv_data.h) into y, bias NULL or per output
 * channel: MGR_KERNEL_OK or MGR_KERNEL_OUT_OF_MEMORY; MGR_KERNEL_UNSUPPORTED where they do not
 * run it (mgr_conv_tiles_of, with `min_channels`), for the caller's loop */
static int mgr_conv_tiles_run(const int64_t* s, const float* x, const float* w,
                              const float* bias, float* y, int flip, int64_t min_channels) {
    mgr_conv_tiles c;
    float *padded = NULL, *packed = NULL;
    int64_t padded_n, packed_n;
    if (!mgr_conv_tiles_of(s, min_channels, &c) || (flip && s[PACKED]))
        return MGR_KERNEL_UNSUPPORTED;
    if (!mgr_muladd(0, s[BATCH], s[CIN], &padded_n) ||
        !mgr_muladd(0, padded_n, c.plane, &padded_n) ||
        !mgr_muladd(0, s[GROUPS], mgr_round_up(c.no, c.pack), &packed_n) ||
        !mgr_muladd(0, packed_n, c.kdim, &packed_n))
        return MGR_KERNEL_OUT_OF_MEMORY;
    c.planes = x;
    c.w = w;
    c.bias = bias;
    c.y = y;
    if (s[PH] || s[PW]) {
        mgr_conv_pad pad = {c.planes, NULL, s[CIN], s[H], s[W], s[H] + 2 * s[PH], c.wp, s[PH],
                            s[PW]};
        padded = pad.padded = (float*)malloc((size_t)(padded_n ? padded_n : 1) * sizeof(float));
        if (!padded) return MGR_KERNEL_OUT_OF_MEMORY;
        mgr_parallel_for(s[BATCH], mgr_conv_pad_part, &pad);
        c.planes = padded;
    }
    if (!s[PACKED]) {
        mgr_conv_pack pack = {c.w,  NULL, c.no, c.kdim, c.pack, (c.no + c.pack - 1) / c.pack,
                              flip, c.nc, c.taps};
        packed = pack.packed = (float*)malloc((size_t)(packed_n ? packed_n : 1) * sizeof(float));
        if (!packed) {
            free(padded);
            return MGR_KERNEL_OUT_OF_MEMORY;
        }
        mgr_parallel_for(s[GROUPS] * pack.blocks, mgr_conv_pack_part, &pack);
        c.w = packed;
    }
    mgr_parallel_for(s[GROUPS] * c.ogroups * c.nchunks, mgr_conv_items, &c);
    free(padded);
    free(packed);
    return c.failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

/* conv2d_f32 on the tiles (mgr_conv_tiles_run of the call's buffers) */
static int mgr_conv2d_tiles(const mgr_call* call) {
    const int64_t* s = call->ints;
    return mgr_conv_tiles_run(s, (const float*)call->bufs[0], (const float*)call->bufs[1],
                              s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL,
                              (float*)call->bufs[s[HAS_BIAS] ? 3 : 2], 0, MGR_MIN_GROUP_CHANNELS);
}

/* ---- 1x1 convolutions, unpadded, on packed weights: their cells packed into panels -------------
 * A gather tile broadcasts each of its cells' values, channel after channel: on NCHW planes
 * every channel's few cells sit on a cache line of their own (at a stride, half used or less),
 * so a tile over 256 channels touches 256 lines, besides its weights, and L1 holds no more. The
 * executor's GEMM packs its A panel (im2col's rows, at a stride) into contiguous memory
 * instead. Here each tile's PIX cells are copied once, channel by channel, into a panel
 * (panels[tile][c][PIX]) the tiles read as a stream, at a channel stride of PIX: each output
 * the same sum in the same order (one tap: the input channels from zero), bitwise the walk
 * over the planes (which a build with -DMGR_NO_PANELS runs: the tests' reference). */
typedef struct {
    const float* x;
    float* panels;
    int64_t pix, cin, plane, ncols, ncells, ow, w, sh, sw;
} mgr_conv_panel_pack;

/* parts of [0, tiles): panel t holds cells t * pix .. (the last one's cells only) */
static void mgr_conv_panel_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_conv_panel_pack* k = (const mgr_conv_panel_pack*)ctx;
    int64_t from[CONV_PIX_MAX];
    for (int64_t t = lo; t < hi; t++) {
        int64_t n = k->ncells - t * k->pix < k->pix ? k->ncells - t * k->pix : k->pix;
        float* panel = k->panels + t * k->cin * k->pix;
        for (int64_t p = 0; p < n; p++) {
            int64_t cell = t * k->pix + p, q = cell % k->ncols;
            from[p] = cell / k->ncols * k->cin * k->plane + q / k->ow * k->sh * k->w +
                      q % k->ow * k->sw;
        }
        for (int64_t c = 0; c < k->cin; c++, panel += k->pix)
            for (int64_t p = 0; p < n; p++) panel[p] = k->x[from[p] + c * k->plane];
    }
}

/* Chunks of as many panels as MGR_PANEL_CHUNK_BYTES hold (L2), so that each block of weights
 * is read once per chunk: a layer of few cells and many weights (ResNet's last skip, 49 cells
 * by 256 x 512 weights) reads them once; the channel block groups as mgr_conv_tiles_of's */
#define MGR_PANEL_CHUNK_BYTES (256 * 1024)
static void mgr_conv_panel_chunks(mgr_conv_tiles* c) {
    int64_t per = MGR_PANEL_CHUNK_BYTES / (c->cin * c->t.pix * (int64_t)sizeof(float));
    c->chunk_tiles = per > MGR_CHUNK_TILES ? per : MGR_CHUNK_TILES;
    c->nchunks = (c->ntiles + c->chunk_tiles - 1) / c->chunk_tiles;
    c->ogroups = mgr_even_groups(c->nblocks, (MGR_MIN_ITEMS + c->nchunks - 1) / c->nchunks);
}

/* conv2d_f32 of a 1x1 kernel, unpadded, one group, on packed weights, on the tiles over panels
 * of its cells: MGR_KERNEL_UNSUPPORTED for any other block, or where the tiles do not run it */
static int mgr_conv2d_pointwise(const mgr_call* call) {
    const int64_t* s = call->ints;
    mgr_conv_tiles c;
    int64_t panels_n;
#ifdef MGR_NO_PANELS
    return MGR_KERNEL_UNSUPPORTED;
#endif
    if (s[KH] != 1 || s[KW] != 1 || s[PH] || s[PW] || s[GROUPS] != 1 || !s[PACKED] ||
        !mgr_conv_tiles_of(s, MGR_MIN_GROUP_CHANNELS, &c) ||
        !mgr_muladd(0, c.ntiles, c.t.pix, &panels_n) ||
        !mgr_muladd(0, panels_n, s[CIN], &panels_n))
        return MGR_KERNEL_UNSUPPORTED;
    mgr_conv_panel_pack k = {(const float*)call->bufs[0], NULL, c.t.pix, s[CIN], s[H] * s[W],
                             c.ncols, c.ncells, s[OW], s[W], s[SH], s[SW]};
    k.panels = (float*)malloc((size_t)panels_n * sizeof(float));
    if (!k.panels) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_parallel_for(c.ntiles, mgr_conv_panel_part, &k);
    c.planes = k.panels;
    c.plane = c.t.pix; /* the tiles' channel stride */
    mgr_conv_panel_chunks(&c);
    c.panels = 1;
    c.w = (const float*)call->bufs[1];
    c.bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    c.y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    mgr_parallel_for(c.ogroups * c.nchunks, mgr_conv_items, &c);
    free(k.panels);
    return c.failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

#endif
