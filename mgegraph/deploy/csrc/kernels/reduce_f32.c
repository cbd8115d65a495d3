/* reduce_f32: sum, prod, mean, var, max and min of float32 over any axes: the bodies of
 * reduce.pyx's (_kernels/reduce.h, one source for both executors: the same bits, NumPy's
 * pairwise sums included). The parameter block of kernel_abi/reduce.py (op, kept_ndim, kept
 * shape and strides, ndr, reduced shape and strides, threads: the runtime's own thread count is
 * used, as far as the bytes moved pay for them: grain.h, the executor's rule); the input walked
 * as (kept dims..., reduced dims...) through element strides, the output contiguous over the
 * kept dims. Threads take contiguous runs of reduce.h's units, each computed as on one thread.
 * argmax and argmin are not here (their output is an index). Bufs x, y. */
#include "../mgr_kernel.h"
#include "grain.h"
#include "reduce.h"

#define MGR_REDUCE_OPS (MG_R_MIN + 1) /* sum .. min: a float32 output */

static void reduce_part(void* run, int64_t lo, int64_t hi) {
    mg_reduce_part_f32((const mg_reduce_run*)run, lo, hi);
}

int mgr_reduce_f32(const mgr_call* call) {
    mg_reduce_run run;
    int status = mg_reduce_setup(&run, call->ints, call->bufs[0], call->bufs[1], MG_REDUCE_F32);
    if (status != MG_REDUCE_OK || run.units == 0) return status;
    mgr_parallel_for_upto(run.units,
                          mg_threads_for(run.moved, MG_GRAIN_BYTES, mgr_run_threads()),
                          reduce_part, &run);
    return MGR_KERNEL_OK;
}

/* a group's sizes and the furthest element it reaches (added to *reach): 0 where malformed */
static int group_ok(const int64_t* p, int64_t* count, int64_t* reach) {
    if (p[0] < 1 || p[0] > MG_REDUCE_DIMS) return 0;
    *count = 1;
    for (int64_t i = 0; i < p[0]; i++)
        if (p[1 + i] < 0 || !mgr_muladd(0, *count, p[1 + i], count)) return 0;
    if (!mgr_counts_ok(p + 1, (int)p[0])) return 0;
    for (int64_t i = 0; *count > 0 && i < p[0]; i++)
        if (p[1 + p[0] + i] < 0 || !mgr_muladd(*reach, p[1 + i] - 1, p[1 + p[0] + i], reach))
            return 0;
    return 1;
}

const char* mgr_reduce_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t kept, red, reach = 0, loops;
    if (x->n_bufs != 2 || x->n_floats != 0 || x->n_ints < 3)
        return "wants buffers x, y, the reduce block and no floats";
    if (x->buf_dtypes[0] != 0 || x->buf_dtypes[1] != 0) return "reads and writes float32 only";
    if (s[0] < 0 || s[0] >= MGR_REDUCE_OPS) return "runs sum, prod, mean, var, max and min only";
    if (s[1] < 1 || s[1] > MG_REDUCE_DIMS || (int64_t)x->n_ints < 3 + 2 * s[1])
        return "its kept dims and the size of its parameter block disagree";
    const int64_t* r = s + 2 + 2 * s[1];
    if (r[0] < 1 || r[0] > MG_REDUCE_DIMS || (int64_t)x->n_ints != 4 + 2 * s[1] + 2 * r[0])
        return "its reduced dims and the size of its parameter block disagree";
    if (!group_ok(s + 1, &kept, &reach) || !group_ok(r, &red, &reach))
        return "a dimension or stride is negative or too large";
    if (kept > x->buf_bytes[1] / 4) return "its kept dims reach past y's bytes";
    if (kept > 0 && red > 0 && reach >= x->buf_bytes[0] / 4)
        return "its strides reach past x's bytes";
    if (!mgr_muladd(0, kept, red, &loops) || (red == 0 && kept > MGR_EMPTY_DIM))
        return "its sizes make no loop this runtime bounds";
    if (red == 0 && kept > 0 && s[0] >= MG_R_MAX) return "takes the max or min of nothing";
    return NULL;
}
