/* max_pool2d_backward_f32, avg_pool2d_backward_f32 and max_pool2d_select_f32: the pooling
 * gradients' passes of _kernels/pool.h, pool.pyx's (one source: the same bits). Each window
 * sends dy to its first maximum (the first cell equal to the window's max, or the first NaN) or
 * spreads dy / float32(divisor) over its cells; overlapping windows add up in pool.h's order;
 * windows that tile the plane store their shares (a -0.0 share stays -0.0). select reads h
 * where the max's gradient would go (its adjoint). Built for the baseline and for AVX2, the
 * planes split among the threads they pay for. The parameter block of kernel_abi/pool.py's
 * FIELDS; bufs x, dy, dx (max), dy, dx (average), x, h, y (select). */
#include "pool_c.h"

POOL_BASE_PART(backward_part, pool_backward_f32)

/* pass op over the call's buffers by index: x, h and dx (y for select) full-size, dy pooled */
static int pass(const mgr_call* call, int op, int x, int h, int dx, int dy, int full) {
    pool_block s = pool_block_of(call);
    char** b = call->bufs;
    pool_run run = pool_run_of(op, &s, b[x], b[h], b[dx], b[dy], b[dx]);
    pool_parts(backward_part(&run), &run, &s, full, 4);
    return MGR_KERNEL_OK;
}

int mgr_max_pool2d_backward_f32(const mgr_call* call) {
    return pass(call, POOL_R_MAX_BACKWARD, 0, 0, 2, 1, 2);
}
int mgr_avg_pool2d_backward_f32(const mgr_call* call) {
    return pass(call, POOL_R_AVG_BACKWARD, 1, 1, 1, 0, 1);
}
int mgr_max_pool2d_select_f32(const mgr_call* call) {
    return pass(call, POOL_R_SELECT, 0, 1, 2, 2, 2);
}

/* pool_check's over a view of the block's buffers: the full-size side the smallest of those
 * buffers but `pooled`, the pooled side that one; argmax: the window's cells counted in an int
 * (pool.h's first hit) */
static const char* sides_check(const mgr_check_args* x, size_t n, size_t pooled, int argmax,
                               const char* wants) {
    if (x->n_bufs != n || x->n_ints != POOL_FIELDS || x->n_floats != 0) return wants;
    int64_t full = INT64_MAX;
    for (size_t b = 0; b < n; b++) {
        if (x->buf_dtypes[b] != 0) return "reads and writes float32 only";
        if (b != pooled && x->buf_bytes[b] < full) full = x->buf_bytes[b];
    }
    int64_t bytes[2] = {full, x->buf_bytes[pooled]}, dtypes[2] = {0, 0}, cells;
    mgr_check_args view = *x;
    view.n_bufs = 2, view.buf_bytes = bytes, view.buf_dtypes = dtypes;
    const char* why = pool_check(&view, 0, 4);
    if (why) return why;
    if (argmax && (!mgr_muladd(0, x->ints[2], x->ints[3], &cells) || cells > INT32_MAX))
        return "a plane of more cells than an argmax counts";
    return NULL;
}

const char* mgr_max_pool2d_backward_f32_check(const mgr_check_args* x) {
    return sides_check(x, 3, 1, 1, "wants buffers x, dy, dx, 17 ints and no floats");
}
const char* mgr_avg_pool2d_backward_f32_check(const mgr_check_args* x) {
    return sides_check(x, 2, 0, 0, "wants buffers dy, dx, 17 ints and no floats");
}
const char* mgr_max_pool2d_select_f32_check(const mgr_check_args* x) {
    return sides_check(x, 3, 2, 1, "wants buffers x, h, y, 17 ints and no floats");
}
