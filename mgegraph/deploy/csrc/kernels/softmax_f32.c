/* softmax_f32: the body of nn.pyx's (softmax.h, one source for both executors); the parameter
 * block of kernel_abi/nn.py's SOFTMAX_FIELDS (outer, n, inner, take_log); bufs x, y. */
#include "../mgr_kernel.h"
#include "softmax.h"

enum { OUTER, N, INNER, TAKE_LOG, FIELDS };

int mgr_softmax_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    softmax_rows_f32((const float*)call->bufs[0], (float*)call->bufs[1], s[OUTER], s[N],
                     s[INNER], s[TAKE_LOG] != 0);
    return MGR_KERNEL_OK;
}

const char* mgr_softmax_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t elems;
    if (x->n_bufs != 2 || x->n_ints != FIELDS || x->n_floats != 0)
        return "wants buffers x, y, 4 ints and no floats";
    if (x->buf_dtypes[0] != 0 || x->buf_dtypes[1] != 0) return "reads and writes float32 only";
    if (s[OUTER] < 0 || s[N] < 0 || s[INNER] < 0 || s[TAKE_LOG] < 0 || s[TAKE_LOG] > 1)
        return "a field is negative or take_log is not 0 or 1";
    if (!mgr_counts_ok(s, 3)) return "outer, n and inner make no loop this runtime bounds";
    if (!mgr_muladd(0, s[OUTER], s[N], &elems) || !mgr_muladd(0, elems, s[INNER], &elems) ||
        elems > x->buf_bytes[0] / 4 || elems > x->buf_bytes[1] / 4)
        return "outer * n * inner reaches past its buffers' bytes";
    return NULL;
}
