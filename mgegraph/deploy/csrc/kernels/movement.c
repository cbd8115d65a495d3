/* The copies of movement.pyx for every dtype: strided_<dt> (slice, transpose, broadcast_to: a
 * contiguous y walked in order over element strides of x from an offset; kernel_abi/movement.py's
 * strided_params: ndim, shape[ndim], strides[ndim], offset), concat_<dt> (rows of bytes: count,
 * outer, then each input's row bytes; y's rows are the inputs' rows side by side) and pad_<dt>
 * (Pad: mode, ndim, fill_bits, then out shape, in shape, pad before and input strides [ndim each];
 * the four modes of pad_source). Moving data is copying bits, so, as in movement.pyx, each loop is
 * written once per element size and a dtype's kernels are those of its size: bitwise. Bufs x, y;
 * concat's x0 .. x(count-1), y. */
#include <string.h>

#include "../mgr_kernel.h"

#define MGR_MOVE_DIMS 8

/* y[e] = x[at] over the odometer of shape and strides (T: an element of the size) */
#define MGR_STRIDED_LOOP(T)                                                                   \
    do {                                                                                      \
        const T* xt = (const T*)x;                                                            \
        T* yt = (T*)y;                                                                        \
        for (int64_t e = 0; e < count; e++) {                                                 \
            yt[e] = xt[at];                                                                   \
            for (int64_t d = ndim - 1; d >= 0; d--) { /* the odometer, its offset kept */     \
                at += stride[d];                                                              \
                if (++index[d] < shape[d]) break;                                             \
                at -= stride[d] * shape[d];                                                   \
                index[d] = 0;                                                                 \
            }                                                                                 \
        }                                                                                     \
    } while (0)

static int strided_copy(const mgr_call* call, int64_t size) {
    const int64_t* s = call->ints;
    int64_t ndim = s[0];
    const int64_t* shape = s + 1;
    const int64_t* stride = s + 1 + ndim;
    const char* x = call->bufs[0] + s[1 + 2 * ndim] * size;
    char* y = call->bufs[1];
    int64_t index[MGR_MOVE_DIMS] = {0}, count = 1, at = 0;
    for (int64_t d = 0; d < ndim; d++) count *= shape[d];
    if (size == 1) MGR_STRIDED_LOOP(uint8_t);
    else if (size == 2) MGR_STRIDED_LOOP(uint16_t);
    else if (size == 4) MGR_STRIDED_LOOP(uint32_t);
    else MGR_STRIDED_LOOP(uint64_t);
    return MGR_KERNEL_OK;
}

static const char* strided_check(const mgr_check_args* x, int64_t dtype, int64_t size) {
    const int64_t* s = x->ints;
    int64_t count = 1, ahead = 0, behind = 0;
    if (x->n_bufs != 2 || x->n_floats != 0 || x->n_ints < 1)
        return "wants buffers x, y, ndim, shape, strides, offset and no floats";
    if (s[0] < 1 || s[0] > MGR_MOVE_DIMS || (int64_t)x->n_ints != 2 + 2 * s[0])
        return "its ndim and the size of its parameter block disagree (1 <= ndim <= 8)";
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[1] != dtype)
        return "x and y are not of the kernel's dtype";
    const int64_t* shape = s + 1;
    const int64_t* stride = s + 1 + s[0];
    int64_t offset = s[1 + 2 * s[0]];
    for (int64_t d = 0; d < s[0]; d++)
        if (shape[d] < 0 || !mgr_muladd(0, count, shape[d], &count))
            return "a dimension is negative or the shape too large";
    if (count > x->buf_bytes[1] / size) return "its shape reaches past y's bytes";
    if (!mgr_counts_ok(shape, (int)s[0])) return "its shape makes no loop this runtime bounds";
    if (count == 0) return NULL; /* reads nothing */
    for (int64_t d = 0; d < s[0]; d++) /* the furthest elements ahead of and behind offset */
        if (stride[d] == INT64_MIN ||
            !mgr_muladd(stride[d] >= 0 ? ahead : behind, shape[d] - 1,
                        stride[d] >= 0 ? stride[d] : -stride[d],
                        stride[d] >= 0 ? &ahead : &behind))
            return "its strides reach past any index";
    if (offset < behind || !mgr_muladd(offset, 1, ahead, &ahead) ||
        ahead >= x->buf_bytes[0] / size)
        return "its window reaches past x's bytes";
    return NULL;
}

static int concat_rows(const mgr_call* call) {
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

static const char* concat_check(const mgr_check_args* x, int64_t dtype, int64_t size) {
    const int64_t* s = x->ints;
    int64_t row = 0, bytes;
    if (x->n_ints < 2 || x->n_floats != 0 || s[0] < 1 || (int64_t)x->n_ints != 2 + s[0] ||
        (int64_t)x->n_bufs != s[0] + 1)
        return "wants count inputs, y, count, outer, count row sizes and no floats";
    if (s[1] < 0) return "outer is negative";
    for (int64_t i = 0; i <= s[0]; i++)
        if (x->buf_dtypes[i] != dtype) return "its buffers are not of the kernel's dtype";
    for (int64_t i = 0; i < s[0]; i++) {
        if (s[2 + i] < 0 || s[2 + i] % size || !mgr_muladd(0, s[1], s[2 + i], &bytes) ||
            bytes > x->buf_bytes[i] || !mgr_muladd(row, 1, s[2 + i], &row))
            return "an input's rows reach past its bytes";
    }
    if (!mgr_muladd(0, s[1], row, &bytes) || bytes > x->buf_bytes[s[0]])
        return "the rows reach past y's bytes";
    if (row == 0 && s[1] > MGR_EMPTY_DIM) /* rows of nothing: no long loop over them */
        return "outer makes no loop this runtime bounds";
    return NULL;
}

/* -- pad: movement.pyx's pad_source, pad_row_base and pad_impl ---------------------------- */
enum { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, PAD_WRAP };

/* j is an output index minus the padding before; the input index it reads, or -1 where the
 * constant is written. Reflect is periodic with period 2(n-1) (NumPy's repeated reflection for
 * pads wider than the axis); wrap with period n. */
static int64_t pad_source(int64_t mode, int64_t j, int64_t n) {
    if (0 <= j && j < n) return j;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_WRAP) {
        j = j % n;
        return j < 0 ? j + n : j;
    }
    if (mode == PAD_EDGE || n == 1) return j < 0 ? 0 : n - 1;
    int64_t p = 2 * (n - 1);
    j = j % p;
    if (j < 0) j += p;
    return j >= n ? p - j : j;
}

#define MGR_PAD_ROW(T)                                                                        \
    do {                                                                                      \
        const T* xt = (const T*)x;                                                            \
        T* yt = (T*)y + r * inner;                                                            \
        T fill = (T)s[2];                                                                     \
        for (int64_t i = 0; i < inner; i++) {                                                 \
            int64_t j = base >= 0 ? pad_source(mode, i - before[last], in_shape[last]) : -1;   \
            yt[i] = j < 0 ? fill : xt[base + j * strides[last]];                              \
        }                                                                                     \
    } while (0)

static int pad_copy(const mgr_call* call, int64_t size) {
    const int64_t* s = call->ints;
    int64_t mode = s[0], ndim = s[1], last = ndim - 1, rows = 1, index[MGR_MOVE_DIMS] = {0};
    const int64_t* out_shape = s + 3;
    const int64_t* in_shape = out_shape + ndim;
    const int64_t* before = in_shape + ndim;
    const int64_t* strides = before + ndim;
    const char* x = call->bufs[0];
    char* y = call->bufs[1];
    int64_t inner = out_shape[last];
    for (int64_t d = 0; d < last; d++) rows *= out_shape[d];
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = 0; /* the input offset of the row read, or -1 for a constant row */
        for (int64_t d = 0; d < last && base >= 0; d++) {
            int64_t j = pad_source(mode, index[d] - before[d], in_shape[d]);
            base = j < 0 ? -1 : base + j * strides[d];
        }
        if (size == 1) MGR_PAD_ROW(uint8_t);
        else if (size == 2) MGR_PAD_ROW(uint16_t);
        else if (size == 4) MGR_PAD_ROW(uint32_t);
        else MGR_PAD_ROW(uint64_t);
        for (int64_t d = last - 1; d >= 0; d--) { /* the next row's index */
            if (++index[d] < out_shape[d]) break;
            index[d] = 0;
        }
    }
    return MGR_KERNEL_OK;
}

/* a pad's widths and indices kept far from int64's ends, so no index arithmetic overflows */
#define MGR_PAD_LIMIT ((int64_t)1 << 40)

static const char* pad_check(const mgr_check_args* x, int64_t dtype, int64_t size) {
    const int64_t* s = x->ints;
    int64_t count = 1, in_count = 1, furthest = 0;
    if (x->n_bufs != 2 || x->n_floats != 0 || x->n_ints < 3)
        return "wants buffers x, y, mode, ndim, fill, 4 x ndim sizes and no floats";
    int64_t ndim = s[1];
    if (ndim < 1 || ndim > MGR_MOVE_DIMS || (int64_t)x->n_ints != 3 + 4 * ndim)
        return "its ndim and the size of its parameter block disagree (1 <= ndim <= 8)";
    if (s[0] < PAD_CONSTANT || s[0] > PAD_WRAP) return "a mode past wrap";
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[1] != dtype)
        return "x and y are not of the kernel's dtype";
    const int64_t* out_shape = s + 3;
    const int64_t* in_shape = out_shape + ndim;
    const int64_t* before = in_shape + ndim;
    const int64_t* strides = before + ndim;
    for (int64_t d = 0; d < ndim; d++) {
        if (out_shape[d] < 0 || out_shape[d] > MGR_PAD_LIMIT || in_shape[d] < 0 ||
            in_shape[d] > MGR_PAD_LIMIT || before[d] < -MGR_PAD_LIMIT ||
            before[d] > MGR_PAD_LIMIT)
            return "a size or a width is negative or past 2^40";
        if (!mgr_muladd(0, count, out_shape[d], &count) ||
            !mgr_muladd(0, in_count, in_shape[d], &in_count))
            return "the shapes are too large";
    }
    if (count > x->buf_bytes[1] / size) return "its output shape reaches past y's bytes";
    if (!mgr_counts_ok(out_shape, (int)ndim)) return "its shape makes no loop this runtime bounds";
    if (count == 0) return NULL;
    if (in_count == 0) /* nothing to read: only the constant mode fills from nothing */
        return s[0] == PAD_CONSTANT ? NULL : "edge, reflect and wrap pad an empty input";
    for (int64_t d = 0; d < ndim; d++)
        if (strides[d] < 0 || !mgr_muladd(furthest, in_shape[d] - 1, strides[d], &furthest))
            return "its input strides are negative or reach past any index";
    if (furthest >= x->buf_bytes[0] / size) return "its input strides reach past x's bytes";
    return NULL;
}

/* a dtype's kernels: those of its element size, checked to read and write that dtype */
#define MGR_MOVE_KERNELS(S, DTYPE, SIZE)                                                      \
    int mgr_strided_##S(const mgr_call* call) { return strided_copy(call, SIZE); }           \
    const char* mgr_strided_##S##_check(const mgr_check_args* x) {                           \
        return strided_check(x, DTYPE, SIZE);                                                 \
    }                                                                                         \
    int mgr_concat_##S(const mgr_call* call) { return concat_rows(call); }                   \
    const char* mgr_concat_##S##_check(const mgr_check_args* x) {                            \
        return concat_check(x, DTYPE, SIZE);                                                  \
    }                                                                                         \
    int mgr_pad_##S(const mgr_call* call) { return pad_copy(call, SIZE); }                   \
    const char* mgr_pad_##S##_check(const mgr_check_args* x) { return pad_check(x, DTYPE, SIZE); }

/* the blob's dtype codes (deploy/blob.py) and sizes */
MGR_MOVE_KERNELS(f32, 0, 4)
MGR_MOVE_KERNELS(f64, 1, 8)
MGR_MOVE_KERNELS(i32, 2, 4)
MGR_MOVE_KERNELS(i64, 3, 8)
MGR_MOVE_KERNELS(u8, 4, 1)
MGR_MOVE_KERNELS(i8, 5, 1)
MGR_MOVE_KERNELS(bool, 6, 1)
MGR_MOVE_KERNELS(i16, 7, 2)
