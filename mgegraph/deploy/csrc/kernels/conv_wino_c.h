/* conv2d_f32's Winograd F(2x2, 3x3) where the plan chose it (its `path`): the driver of
 * _kernels/wino_conv.h (the executor's, one source: its geometry, transforms' loops and work
 * items) over mgr_parallel_for, on conv_tile.h's row tiles for its 16 GEMMs (AVX-512 8 x 48,
 * AVX2 4 x 24, the baseline 4 x 8; a plan's isa 0 the baseline's). What is the C runtime's own:
 * the geometry read from the int64 block, the scratch malloc'ed per part, the error codes, and
 * U from a blob: conv2d_winograd_packed_f32 reads U from the blob (the export transformed and
 * packed the filters, the same arithmetic: deploy/conv_prepack.py); conv2d_winograd_f32 (older
 * blobs) reads U unpacked, U[xi][o][c], and packs it on each call; conv2d_f32 on a Winograd path
 * transforms the filters on each call.
 *
 * The items go to the threads as they come (a shared counter: a thread the system starts late
 * leaves its items to the others, as the executor's dynamic schedule). No output's sum depends
 * on the blocks, so any thread count gives the same bits; and they are the Python executor's
 * on AVX2 plans, which run the same items on the same tiles (on AVX-512 it runs the gather tile
 * and the BLAS, on a plan's isa 0 the BLAS: within float32 rounding). */
#ifndef MGR_CONV_WINO_C_H
#define MGR_CONV_WINO_C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_gather_c.h" /* the Conv block's fields, conv_tile.h */
#include "wino_conv.h"

#define MGR_WINO_PATH 6 /* conv.pyx's C_WINOGRAD */

typedef struct {
    wino_conv geo;
    wino_call call; /* call.k is &geo: a mgr_wino is not copied */
    int64_t next;   /* the next work item a part takes */
    int failed;
} mgr_wino;

/* U made on a call: from the filters w (transformed; flip: the data gradient's) or from an
 * older blob's unpacked U (16, cout, cin) (moved into the packed layout); parts of [0, urows) */
typedef struct {
    const wino_conv* k;
    const float* w;
    const float* unpacked;
    float* u;
    int64_t uld;
    int flip;
} mgr_wino_filters;

static void mgr_wino_filter_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_wino_filters* f = (const mgr_wino_filters*)ctx;
    int64_t cin = f->k->s.cin, cout = f->k->s.cout;
    if (f->w) {
        wino_filter(f->k, f->w, f->u, f->uld, f->flip, lo, hi);
        return;
    }
    for (int xi = 0; xi < 16; xi++)
        for (int64_t o = lo; o < hi; o++)
            for (int64_t c = 0; c < cin; c++)
                f->u[xi * f->uld + wino_u_at(f->k, o, c)] =
                    o < cout ? f->unpacked[(xi * cout + o) * cin + c] : 0.0f;
}

/* a thread's part: work items taken from the shared counter as it comes, on its own V and M;
 * [lo, hi) only says how many parts there are */
static void mgr_wino_items(void* ctx, int64_t lo, int64_t hi) {
    mgr_wino* k = (mgr_wino*)ctx;
    int64_t items = k->geo.nblocks * k->geo.splits, item;
    float* area = (float*)malloc((size_t)k->geo.slot * sizeof(float));
    (void)lo, (void)hi;
    if (!area) {
        __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    while ((item = __atomic_fetch_add(&k->next, 1, __ATOMIC_RELAXED)) < items)
        wino_item(&k->call, area, item);
    free(area);
}

/* Whether Winograd runs this block (float32 3x3, stride 1, undilated, one group, not empty),
 * and its geometry in k, cut for this runtime's threads; 0 where the sizes overflow. The row
 * tile of the plan's arithmetic: 0 the baseline tile's multiply and add, else the FMA on this
 * CPU's widest tile (or the baseline tile where it has none, as the executor falls back). */
static int mgr_wino_of(const int64_t* s, mgr_wino* k) {
    int widest = cpu_isa_widest();
    wino_sizes sizes = {s[BATCH], s[CIN],  s[H],       s[W], s[COUT], s[OH], s[OW], s[PH],
                        s[PW],    (int)s[ACT], mgr_run_threads(), s[ISA] == 0 ? 0 : widest,
                        widest,   0};
    memset(k, 0, sizeof *k);
    if (s[GROUPS] != 1 || s[KH] != 3 || s[KW] != 3 || s[SH] != 1 || s[SW] != 1 || s[DH] != 1 ||
        s[DW] != 1 || s[BATCH] * s[COUT] == 0 || s[OH] == 0 || s[OW] == 0)
        return 0;
    if (!wino_conv_of(&k->geo, &sizes)) return 0;
    k->call.k = &k->geo;
    k->call.gemm = wino_gemm_rows;
    return 1;
}

/* k's x, bias and y */
static void mgr_wino_buffers(mgr_wino* k, const float* x, const float* bias, float* y) {
    k->call.x = x, k->call.bias = bias, k->call.y = y;
}

/* k's x, bias and y: conv2d_f32's buffers x, [bias,] y */
static void mgr_wino_conv_buffers(mgr_wino* k, const mgr_call* call) {
    const int64_t* s = call->ints;
    mgr_wino_buffers(k, (const float*)call->bufs[0],
                     s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL,
                     (float*)call->bufs[s[HAS_BIAS] ? 3 : 2]);
}

/* Winograd on U (packed as the row tiles read it, its 16 matrices uld floats apart), k's
 * buffers set: status */
static int mgr_wino_run_on(mgr_wino* k, const float* u, int64_t uld) {
    int64_t items = k->geo.nblocks * k->geo.splits, threads = mgr_run_threads();
    k->call.u = u;
    k->call.uld = uld;
    mgr_parallel_for(items < threads ? items : threads, mgr_wino_items, k);
    return k->failed ? MGR_KERNEL_OUT_OF_MEMORY : MGR_KERNEL_OK;
}

/* Winograd on U made on this call, from the filters w (flip: the data gradient's) or from an
 * older blob's unpacked U (the other NULL), k's buffers set: MGR_KERNEL_OK or
 * MGR_KERNEL_OUT_OF_MEMORY */
static int mgr_wino_run_made(mgr_wino* k, const float* w, const float* unpacked, int flip) {
    int64_t uld, un;
    if (!mgr_muladd(WINO_SKEW, k->geo.urows, k->geo.s.cin, &uld) || !mgr_muladd(0, uld, 16, &un))
        return MGR_KERNEL_OUT_OF_MEMORY;
    float* u = (float*)malloc((size_t)un * sizeof(float));
    if (!u) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_wino_filters f = {&k->geo, w, unpacked, u, uld, flip};
    mgr_parallel_for(k->geo.urows, mgr_wino_filter_part, &f);
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
