/* What the C runtime's pooling kernels (pool2d_f32.c, pool2d_backward_f32.c, pool2d_i8.c) share
 * beside the passes of _kernels/pool.h and pool_int.h: the block of a call, the threads a pass
 * pays for, and the checks of a block (kernel_abi/pool.py's FIELDS) against its buffers. */
#ifndef MGR_POOL_C_H
#define MGR_POOL_C_H

#include <string.h>

#include "../mgr_kernel.h"
#include "grain.h"
#include "pool.h"

enum { POOL_FIELDS = (int)(sizeof(pool_block) / sizeof(int64_t)) };

/* the block of a call (the loader checked it) */
static inline pool_block pool_block_of(const mgr_call* call) {
    pool_block s;
    memcpy(&s, call->ints, sizeof s);
    return s;
}

/* part over the planes of block s (ctx its pass) on the threads it pays for: one per MiB moved,
 * `full` full-size buffers and one pooled of `item`-byte values (grain.h, the executor's rule,
 * where the lowering counts the bytes of each input and output) */
static inline void pool_parts(pool_part_fn part, void* ctx, const pool_block* s, int full,
                              int64_t item) {
    mgr_parallel_for_upto(s->planes, mg_threads_for(pool_moved_bytes(s, full, item),
                                                    MG_GRAIN_BYTES, mgr_run_threads()),
                          part, ctx);
}

/* The checks of a block whose buffers 0 (full-size) and 1 (pooled) hold values of `item` bytes
 * of blob dtype `dtype`. They bound the sizes, not the geometry: a window may lie wholly in the
 * padding (pool.h reads nothing of it). */
static const char* pool_check(const mgr_check_args* x, int64_t dtype, int64_t item) {
    const int64_t* s = x->ints;
    const pool_block* b = (const pool_block*)x->ints;
    int64_t xe, ye, ends, reach;
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[1] != dtype)
        return "reads and writes its own dtype only";
    for (int f = 0; f < POOL_FIELDS; f++)
        if (s[f] < 0) return "a field is negative";
    if (b->mode >= POOL_MODES) return "a mode past the adaptive average";
    /* adaptive: (o + 1) * size stays an int64_t */
    if (pool_is_adaptive(b) &&
        (b->oh < 1 || b->ow < 1 || b->oh > b->h || b->ow > b->w ||
         !mgr_muladd(0, b->oh, b->h, &ends) || !mgr_muladd(0, b->ow, b->w, &ends)))
        return "adaptive windows want 1 <= output size <= input size";
    if (!pool_is_adaptive(b) && (b->kh < 1 || b->kw < 1 || b->sh < 1 || b->sw < 1))
        return "a window must have cells and positive strides";
    if (b->ph > MGR_EMPTY_DIM || b->pw > MGR_EMPTY_DIM || b->eh > MGR_EMPTY_DIM ||
        b->ew > MGR_EMPTY_DIM)
        return "a padding is past any window";
    if (b->dh > MGR_EMPTY_DIM || b->dw > MGR_EMPTY_DIM) return "a dilation is past any window";
    if (b->dh < 1 || b->dw < 1) return "dilations must be positive";
    if (!mgr_muladd(0, b->planes, b->h, &xe) || !mgr_muladd(0, xe, b->w, &xe) ||
        xe > x->buf_bytes[0] / item)
        return "planes * h * w reaches past x's bytes";
    if (!mgr_muladd(0, b->planes, b->oh, &ye) || !mgr_muladd(0, ye, b->ow, &ye) ||
        ye > x->buf_bytes[1] / item)
        return "planes * oh * ow reaches past y's bytes";
    int64_t loops[5] = {b->planes, b->oh, b->ow, b->kh, b->kw};
    if (!mgr_counts_ok(loops, 5)) return "its sizes make no loop this runtime bounds";
    /* the window's extent stays an int64_t for any output cell */
    if (!mgr_muladd(0, b->oh, b->sh, &reach) || !mgr_muladd(reach, b->kh, b->dh, &reach) ||
        !mgr_muladd(0, b->ow, b->sw, &reach) || !mgr_muladd(reach, b->kw, b->dw, &reach))
        return "the windows reach past any index";
    return NULL;
}

#endif
