/* The float32 copies of movement.pyx: strided_f32 (slice, transpose, broadcast_to: a contiguous
 * y walked in order over element strides of x from an offset; kernel_abi/movement.py's
 * strided_params: ndim, shape[ndim], strides[ndim], offset) and concat_f32 (rows of bytes:
 * count, outer, then each input's row bytes; y's rows are the inputs' rows side by side). Copies
 * only: bitwise. Bufs x, y; concat's x0 .. x(count-1), y. */
#include <string.h>

#include "../mgr_kernel.h"

#define MGR_MOVE_DIMS 8

int mgr_strided_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    int64_t ndim = s[0];
    const int64_t* shape = s + 1;
    const int64_t* stride = s + 1 + ndim;
    const float* x = (const float*)call->bufs[0] + s[1 + 2 * ndim];
    float* y = (float*)call->bufs[1];
    int64_t index[MGR_MOVE_DIMS] = {0}, count = 1, at = 0;
    for (int64_t d = 0; d < ndim; d++) count *= shape[d];
    for (int64_t e = 0; e < count; e++) {
        y[e] = x[at];
        for (int64_t d = ndim - 1; d >= 0; d--) { /* the odometer, its offset kept */
            at += stride[d];
            if (++index[d] < shape[d]) break;
            at -= stride[d] * shape[d];
            index[d] = 0;
        }
    }
    return MGR_KERNEL_OK;
}

const char* mgr_strided_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t count = 1, ahead = 0, behind = 0;
    if (x->n_bufs != 2 || x->n_floats != 0 || x->n_ints < 1)
        return "wants buffers x, y, ndim, shape, strides, offset and no floats";
    if (s[0] < 1 || s[0] > MGR_MOVE_DIMS || (int64_t)x->n_ints != 2 + 2 * s[0])
        return "its ndim and the size of its parameter block disagree (1 <= ndim <= 8)";
    if (x->buf_dtypes[0] != 0 || x->buf_dtypes[1] != 0) return "reads and writes float32 only";
    const int64_t* shape = s + 1;
    const int64_t* stride = s + 1 + s[0];
    int64_t offset = s[1 + 2 * s[0]];
    for (int64_t d = 0; d < s[0]; d++)
        if (shape[d] < 0 || !mgr_muladd(0, count, shape[d], &count))
            return "a dimension is negative or the shape too large";
    if (count > x->buf_bytes[1] / 4) return "its shape reaches past y's bytes";
    if (!mgr_counts_ok(shape, (int)s[0])) return "its shape makes no loop this runtime bounds";
    if (count == 0) return NULL; /* reads nothing */
    for (int64_t d = 0; d < s[0]; d++) /* the furthest elements ahead of and behind offset */
        if (stride[d] == INT64_MIN ||
            !mgr_muladd(stride[d] >= 0 ? ahead : behind, shape[d] - 1,
                        stride[d] >= 0 ? stride[d] : -stride[d],
                        stride[d] >= 0 ? &ahead : &behind))
            return "its strides reach past any index";
    if (offset < behind || !mgr_muladd(offset, 1, ahead, &ahead) || ahead >= x->buf_bytes[0] / 4)
        return "its window reaches past x's bytes";
    return NULL;
}

int mgr_concat_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    int64_t count = s[0], outer = s[1];
    char* y = call->bufs[count];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < count; i++) {
            memcpy(y, call->bufs[i] + o * s[2 + i], (size_t)s[2 + i]);
            y += s[2 + i];
        }
    return MGR_KERNEL_OK;
}

const char* mgr_concat_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t row = 0, bytes;
    if (x->n_ints < 2 || x->n_floats != 0 || s[0] < 1 || (int64_t)x->n_ints != 2 + s[0] ||
        (int64_t)x->n_bufs != s[0] + 1)
        return "wants count inputs, y, count, outer, count row sizes and no floats";
    if (s[1] < 0) return "outer is negative";
    for (int64_t i = 0; i <= s[0]; i++)
        if (x->buf_dtypes[i] != 0) return "reads and writes float32 only";
    for (int64_t i = 0; i < s[0]; i++) {
        if (s[2 + i] < 0 || s[2 + i] % 4 || !mgr_muladd(0, s[1], s[2 + i], &bytes) ||
            bytes > x->buf_bytes[i] || !mgr_muladd(row, 1, s[2 + i], &row))
            return "an input's rows reach past its bytes";
    }
    if (!mgr_muladd(0, s[1], row, &bytes) || bytes > x->buf_bytes[s[0]])
        return "the rows reach past y's bytes";
    if (row == 0 && s[1] > MGR_EMPTY_DIM) /* rows of nothing: no long loop over them */
        return "outer makes no loop this runtime bounds";
    return NULL;
}
