/* conv2d_f32 on the package's gather tiles, by the driver conv.pyx's packed path runs
 * (_kernels/conv_gather.h, included with conv_tile.h: one source for both executors): what is
 * the C runtime's own. It reads the int64 parameter block (and checks that a hostile one's
 * windows stay inside the planes), picks a tile of this CPU with the plan's arithmetic, owns
 * the scratch (the padded batch, the weights packed on the call, a slot per part of the items,
 * all malloc'd) and runs each step over mgr_parallel_for instead of OpenMP.
 *
 * Packed weights give the executor's bits (conv_gather.h); weights not packed are packed here
 * on each call, in blocks of the tile's width: their plan ran another way (Winograd, a GEMM
 * through the BLAS), so these agree with it within float32 rounding. */
#ifndef MGR_CONV_GATHER_C_H
#define MGR_CONV_GATHER_C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../mgr_kernel.h"
#include "conv_gather.h"

/* the Conv parameter block (kernel_abi/conv.py's FIELDS); its first 16 are conv_shape's */
enum { BATCH, CIN, H, W, COUT, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, GROUPS, HAS_BIAS, PATH,
       ACT, ISA, THREADS, TRANSPOSED, PACKED, FIELDS };

#define MGR_BLOCKED_PATH 3           /* conv.pyx's C_BLOCKED: the row tiles */
#define MGR_GATHER_PATH 4            /* conv.pyx's C_GATHER */
#define MGR_MIN_ITEMS 8              /* work items at least, so that a few threads balance */
#define MGR_MIN_GROUP_CHANNELS 8     /* fewer output channels per group keep the plain loop */

static inline int64_t mgr_round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* the sizes of parameter block s */
static inline conv_shape mgr_conv_shape(const int64_t* s) {
    conv_shape t = {s[BATCH], s[CIN], s[H], s[W], s[COUT], s[OH], s[OW], s[KH], s[KW],
                    s[SH],    s[SW],  s[PH], s[PW], s[DH], s[DW], s[GROUPS]};
    return t;
}

/* parts of the work items, each with its own slot for a chunk's results */
typedef struct {
    conv_gather c;
    int failed; /* a part found no memory for its slot */
} mgr_conv_tiles;

static void mgr_conv_items(void* ctx, int64_t lo, int64_t hi) {
    mgr_conv_tiles* k = (mgr_conv_tiles*)ctx;
    float* res = (float*)malloc((size_t)conv_gather_slot(&k->c) * sizeof(float));
    if (!res) {
        __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t item = lo; item < hi; item++) conv_gather_item(&k->c, item, res);
    free(res);
}

/* the batch copied into zero-padded planes: parts of [0, batch), an image each */
typedef struct {
    const conv_gather* c;
    const float* x;
    float* padded;
} mgr_conv_pad;

static void mgr_conv_pad_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_conv_pad* k = (const mgr_conv_pad*)ctx;
    conv_gather_pad(k->c, k->x, k->padded, lo, hi);
}

/* the weights packed on the call (conv_gather_pack): parts of [0, groups * blocks) */
typedef struct {
    const conv_gather* c;
    const float* w;
    float* packed;
    int flip;
} mgr_conv_pack;

static void mgr_conv_pack_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_conv_pack* k = (const mgr_conv_pack*)ctx;
    conv_gather_pack(k->w, k->packed, k->c->nc, k->c->no, k->c->taps, k->c->pack, k->flip, lo,
                     hi);
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

/* The walk of the tiles over block s, or 0 where they do not run it (the caller's loop does):
 * at most CONV_GATHER_MAX_TAPS taps, `min_channels` output channels per group, every window
 * inside the padded planes (a hostile block's oh may say otherwise), sizes that do not
 * overflow, a tile of this CPU with the plan's arithmetic. */
static int mgr_conv_tiles_of(const int64_t* s, int64_t min_channels, mgr_conv_tiles* k) {
    int64_t hp, wp, plane, reach_y, reach_x, isas_n, i = 0;
    int isas[3];
    conv_shape shape = mgr_conv_shape(s);
    conv_packed_tile tile = {NULL, 0, 0};
    memset(k, 0, sizeof *k);
    if (s[KH] * s[KW] > CONV_GATHER_MAX_TAPS || s[COUT] / s[GROUPS] < min_channels ||
        s[BATCH] == 0 || s[OH] == 0 || s[OW] == 0 || !mgr_muladd(s[H], 2, s[PH], &hp) ||
        !mgr_muladd(s[W], 2, s[PW], &wp) || !mgr_muladd(0, hp, wp, &plane) ||
        !mgr_muladd(0, s[OH] - 1, s[SH], &reach_y) ||
        !mgr_muladd(reach_y, s[KH] - 1, s[DH], &reach_y) || reach_y >= hp ||
        !mgr_muladd(0, s[OW] - 1, s[SW], &reach_x) ||
        !mgr_muladd(reach_x, s[KW] - 1, s[DW], &reach_x) || reach_x >= wp ||
        !conv_gather_geometry(&k->c, &shape))
        return 0;
    isas_n = mgr_tile_isas((int)s[ISA], isas);
    while (i < isas_n && !conv_gather_tile_for(isas[i], s[PACKED], k->c.no, &tile)) i++;
    if (i == isas_n) return 0;
    conv_gather_walk(&k->c, tile, s[PACKED], MGR_MIN_ITEMS, isas[i]);
    k->c.act = (int)s[ACT];
    return 1;
}

/* The convolution of block s on the tiles, x by the filters w (or, with flip, by the data
 * gradient's weights of the forward filters w: conv_data.h) into y, bias NULL or per output
 * channel: MGR_KERNEL_OK or MGR_KERNEL_OUT_OF_MEMORY; MGR_KERNEL_UNSUPPORTED where they do not
 * run it (mgr_conv_tiles_of, with `min_channels`), for the caller's loop */
static int mgr_conv_tiles_run(const int64_t* s, const float* x, const float* w,
                              const float* bias, float* y, int flip, int64_t min_channels) {
    mgr_conv_tiles k;
    float *padded = NULL, *packed = NULL;
    int64_t padded_n, packed_n;
    if (!mgr_conv_tiles_of(s, min_channels, &k) || (flip && s[PACKED]))
        return MGR_KERNEL_UNSUPPORTED;
    conv_gather* c = &k.c;
    if (!mgr_muladd(0, s[BATCH], s[CIN], &padded_n) ||
        !mgr_muladd(0, padded_n, c->plane, &padded_n) ||
        !mgr_muladd(0, s[GROUPS], mgr_round_up(c->no, c->pack), &packed_n) ||
        !mgr_muladd(0, packed_n, c->kdim, &packed_n))
        return MGR_KERNEL_OUT_OF_MEMORY;
    c->planes = x;
    c->weights = w;
    c->bias = bias;
    c->y = y;
    if (s[PH] || s[PW]) {
        mgr_conv_pad pad = {c, x, NULL};
        padded = pad.padded = (float*)malloc((size_t)(padded_n ? padded_n : 1) * sizeof(float));
        if (!padded) return MGR_KERNEL_OUT_OF_MEMORY;
        mgr_parallel_for(s[BATCH], mgr_conv_pad_part, &pad);
        c->planes = padded;
    }
    if (!s[PACKED]) {
        mgr_conv_pack pack = {c, w, NULL, flip};
        packed = pack.packed = (float*)malloc((size_t)(packed_n ? packed_n : 1) * sizeof(float));
        if (!packed) {
            free(padded);
            return MGR_KERNEL_OUT_OF_MEMORY;
        }
        mgr_parallel_for(s[GROUPS] * mgr_round_up(c->no, c->pack) / c->pack, mgr_conv_pack_part,
                         &pack);
        c->weights = packed;
    }
    mgr_parallel_for(conv_gather_items(c), mgr_conv_items, &k);
    free(padded);
    free(packed);
    return k.failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

/* conv2d_f32 on the tiles (mgr_conv_tiles_run of the call's buffers) */
static int mgr_conv2d_tiles(const mgr_call* call) {
    const int64_t* s = call->ints;
    return mgr_conv_tiles_run(s, (const float*)call->bufs[0], (const float*)call->bufs[1],
                              s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL,
                              (float*)call->bufs[s[HAS_BIAS] ? 3 : 2], 0, MGR_MIN_GROUP_CHANNELS);
}

/* the panels of a 1x1 convolution's cells (conv_gather_panel): parts of [0, tiles) */
typedef struct {
    const conv_gather* c;
    const float* x;
    float* panels;
} mgr_conv_panel_pack;

static void mgr_conv_panel_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_conv_panel_pack* k = (const mgr_conv_panel_pack*)ctx;
    conv_gather_panel(k->c, k->x, k->panels, lo, hi);
}

/* conv2d_f32 of a 1x1 kernel, unpadded, one group, on packed weights, on the tiles over panels
 * of its cells (conv_gather.h): MGR_KERNEL_UNSUPPORTED for any other block, or where the tiles
 * do not run it. A build with -DMGR_NO_PANELS walks the planes instead: the tests' reference. */
static int mgr_conv2d_pointwise(const mgr_call* call) {
    const int64_t* s = call->ints;
    mgr_conv_tiles k;
    int64_t panels_n;
#ifdef MGR_NO_PANELS
    return MGR_KERNEL_UNSUPPORTED;
#endif
    if (s[KH] != 1 || s[KW] != 1 || s[PH] || s[PW] || s[GROUPS] != 1 || !s[PACKED] ||
        !mgr_conv_tiles_of(s, MGR_MIN_GROUP_CHANNELS, &k) ||
        !mgr_muladd(0, k.c.ntiles, k.c.t.pix, &panels_n) ||
        !mgr_muladd(0, panels_n, s[CIN], &panels_n))
        return MGR_KERNEL_UNSUPPORTED;
    mgr_conv_panel_pack pack = {&k.c, (const float*)call->bufs[0], NULL};
    pack.panels = (float*)malloc((size_t)panels_n * sizeof(float));
    if (!pack.panels) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_parallel_for(k.c.ntiles, mgr_conv_panel_part, &pack);
    conv_gather_on_panels(&k.c, pack.panels, MGR_MIN_ITEMS);
    k.c.weights = (const float*)call->bufs[1];
    k.c.bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    k.c.y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    mgr_parallel_for(conv_gather_items(&k.c), mgr_conv_items, &k);
    free(pack.panels);
    return k.failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

#endif
