/* group_norm_f32: group norm's forward, the body of norm.pyx's float32 path (group_norm.h's
 * gn_forward_f32, one source for both executors: the same bits); the parameter block of
 * kernel_abi/norm.py's FIELDS (batch, channels, inner, groups, activation, threads: the
 * runtime's own thread count is used, as far as the bytes moved pay for them: grain.h, the
 * executor's rule) and [eps]; bufs x, weight, bias, y. Threads take contiguous runs of the
 * batch * groups groups, each computed as on one thread. */
#include "../mgr_kernel.h"
#include "grain.h"
#include "group_norm.h"

enum { BATCH, CHANNELS, INNER, GROUPS, ACTIVATION, THREADS, FIELDS };

typedef struct {
    const mgr_call* call;
    GroupNormLoops loops;
} forward_job;

static void forward_part(void* ctx, int64_t lo, int64_t hi) {
    const forward_job* job = ctx;
    const mgr_call* c = job->call;
    const int64_t* s = c->ints;
    gn_forward_f32(&job->loops, (const float*)c->bufs[0], (const float*)c->bufs[1],
                   (const float*)c->bufs[2], (float*)c->bufs[3], s[CHANNELS], s[INNER],
                   s[GROUPS], (int)s[ACTIVATION], c->floats[0], lo, hi);
}

int mgr_group_norm_f32(const mgr_call* call) {
    forward_job job = {call, group_norm_loops()};
    const int64_t* s = call->ints;
    double moved = 4.0 * (2.0 * (double)s[BATCH] * (double)s[CHANNELS] * (double)s[INNER] +
                          2.0 * (double)s[CHANNELS]);
    mgr_parallel_for_upto(s[BATCH] * s[GROUPS],
                          mg_threads_for(moved, MG_GRAIN_BYTES, mgr_run_threads()),
                          forward_part, &job);
    return MGR_KERNEL_OK;
}

const char* mgr_group_norm_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t elems;
    if (x->n_bufs != 4 || x->n_ints != FIELDS || x->n_floats != 1)
        return "wants buffers x, weight, bias, y, 6 ints and 1 float";
    for (size_t b = 0; b < 4; b++)
        if (x->buf_dtypes[b] != 0) return "reads and writes float32 only";
    if (s[BATCH] < 0 || s[CHANNELS] < 0 || s[INNER] < 0 || s[GROUPS] < 1 ||
        s[CHANNELS] % s[GROUPS] != 0)
        return "a size is negative, or groups is not a positive divisor of channels";
    if (s[ACTIVATION] < ACT_NONE || s[ACTIVATION] > ACT_RELU6) return "an activation past relu6";
    if (!mgr_counts_ok(s, 3)) return "batch, channels and inner make no loop this runtime bounds";
    if (!mgr_muladd(0, s[BATCH], s[CHANNELS], &elems) || !mgr_muladd(0, elems, s[INNER], &elems) ||
        elems > x->buf_bytes[0] / 4 || elems > x->buf_bytes[3] / 4)
        return "batch * channels * inner reaches past x or y";
    if (s[CHANNELS] > x->buf_bytes[1] / 4 || s[CHANNELS] > x->buf_bytes[2] / 4)
        return "channels reach past the weight or the bias";
    return NULL;
}
