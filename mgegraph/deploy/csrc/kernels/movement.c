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

/* STEP for each element e of the contiguous side, `at` its element at stride over the odometer
 * of shape (strided: y[e] = x[at]; slice_backward: y[at] = x[e]), T an element of the size */
#define MGR_STRIDED_WALK(T, STEP)                                                             \
    do {                                                                                      \
        const T* xt = (const T*)x;                                                            \
        T* yt = (T*)y;                                                                        \
        for (int64_t e = 0; e < count; e++) {                                                 \
            STEP;                                                                             \
            for (int64_t d = ndim - 1; d >= 0; d--) { /* the odometer, its offset kept */     \
                at += stride[d];                                                              \
                if (++index[d] < shape[d]) break;                                             \
                at -= stride[d] * shape[d];                                                   \
                index[d] = 0;                                                                 \
            }                                                                                 \
        }                                                                                     \
    } while (0)
#define MGR_READ_STRIDED(T) MGR_STRIDED_WALK(T, yt[e] = xt[at])
#define MGR_WRITE_STRIDED(T) MGR_STRIDED_WALK(T, yt[at] = xt[e])

static int strided_copy(const mgr_call* call, int64_t size) {
    const int64_t* s = call->ints;
    int64_t ndim = s[0];
    const int64_t* shape = s + 1;
    const int64_t* stride = s + 1 + ndim;
    const char* x = call->bufs[0] + s[1 + 2 * ndim] * size;
    char* y = call->bufs[1];
    int64_t index[MGR_MOVE_DIMS] = {0}, count = 1, at = 0;
    for (int64_t d = 0; d < ndim; d++) count *= shape[d];
    if (size == 1) MGR_READ_STRIDED(uint8_t);
    else if (size == 2) MGR_READ_STRIDED(uint16_t);
    else if (size == 4) MGR_READ_STRIDED(uint32_t);
    else MGR_READ_STRIDED(uint64_t);
    return MGR_KERNEL_OK;
}

/* NULL where every element of a window of ``shape`` (no dimension empty) at element ``stride``s
 * (any sign) from ``offset`` lies in [0, limit), else ``past`` or what is wrong */
static const char* window_check(const int64_t* shape, const int64_t* stride, int64_t ndim,
                                int64_t offset, int64_t limit, const char* past) {
    int64_t ahead = 0, behind = 0;
    for (int64_t d = 0; d < ndim; d++) /* the furthest elements ahead of and behind offset */
        if (stride[d] == INT64_MIN ||
            !mgr_muladd(stride[d] >= 0 ? ahead : behind, shape[d] - 1,
                        stride[d] >= 0 ? stride[d] : -stride[d],
                        stride[d] >= 0 ? &ahead : &behind))
            return "its strides reach past any index";
    if (offset < behind || !mgr_muladd(offset, 1, ahead, &ahead) || ahead >= limit) return past;
    return NULL;
}

static const char* strided_check(const mgr_check_args* x, int64_t dtype, int64_t size) {
    const int64_t* s = x->ints;
    int64_t count = 1;
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
    return window_check(shape, stride, s[0], offset, x->buf_bytes[0] / size,
                        "its window reaches past x's bytes");
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

/* -- slice_backward and gather (every size), scatter_add (floats) --------------------------- */
/* ints: ndim, shape[ndim], y's element strides[ndim] (non-zero), offset, size: the contiguous x
 * lands on a strided window of y, zeroed first (size elements) */
static int slice_backward_copy(const mgr_call* call, int64_t size) {
    const int64_t* s = call->ints;
    int64_t ndim = s[0], index[MGR_MOVE_DIMS] = {0}, count = 1, at = s[1 + 2 * ndim];
    const int64_t* shape = s + 1;
    const int64_t* stride = s + 1 + ndim;
    const char* x = call->bufs[0];
    char* y = call->bufs[1];
    memset(y, 0, (size_t)(s[2 + 2 * ndim] * size));
    for (int64_t d = 0; d < ndim; d++) count *= shape[d];
    if (size == 1) MGR_WRITE_STRIDED(uint8_t);
    else if (size == 2) MGR_WRITE_STRIDED(uint16_t);
    else if (size == 4) MGR_WRITE_STRIDED(uint32_t);
    else MGR_WRITE_STRIDED(uint64_t);
    return MGR_KERNEL_OK;
}

static const char* slice_backward_check(const mgr_check_args* x, int64_t dtype, int64_t size) {
    const int64_t* s = x->ints;
    int64_t count = 1;
    if (x->n_bufs != 2 || x->n_floats != 0 || x->n_ints < 1)
        return "wants buffers x, y, ndim, shape, strides, offset, size and no floats";
    int64_t ndim = s[0];
    if (ndim < 1 || ndim > MGR_MOVE_DIMS || (int64_t)x->n_ints != 3 + 2 * ndim)
        return "its ndim and the size of its parameter block disagree (1 <= ndim <= 8)";
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[1] != dtype)
        return "x and y are not of the kernel's dtype";
    int64_t offset = s[1 + 2 * ndim], total = s[2 + 2 * ndim];
    for (int64_t d = 0; d < ndim; d++)
        if (s[1 + d] < 0 || !mgr_muladd(0, count, s[1 + d], &count))
            return "a dimension is negative or the shape too large";
    if (count > x->buf_bytes[0] / size) return "its shape reaches past x's bytes";
    if (total < 0 || total > x->buf_bytes[1] / size) return "its size reaches past y's bytes";
    if (!mgr_counts_ok(s + 1, (int)ndim)) return "its shape makes no loop this runtime bounds";
    if (count == 0) return NULL;
    return window_check(s + 1, s + 1 + ndim, ndim, offset, total,
                        "its window reaches past y's size");
}

/* wrap_index of movement.pyx: -n..n-1 valid, negatives from the end */
static int wrap_index(int64_t* i, int64_t n) {
    if (*i < 0) *i += n;
    return 0 <= *i && *i < n;
}

/* gather (np.take_along_axis) and its adjoint scatter_add walk one layout: index64, ndim,
 * shape[ndim], the strides of the tensor indexed (0 on the axis) and of the index [ndim each],
 * axis_length, axis_stride, then scatter_add's size. STEP(e, at) is run for each element e of the
 * contiguous side with `at` the indexed tensor's element; an index out of range stops the run
 * (status 1) as in movement.pyx, after the elements before it. */
#define MGR_GATHER_WALK(STEP)                                                                 \
    do {                                                                                      \
        const int64_t* s = call->ints;                                                        \
        int64_t ndim = s[1], index[MGR_MOVE_DIMS] = {0}, count = 1, at = 0, ai = 0;           \
        const int64_t* shape = s + 2;                                                         \
        const int64_t* ts = shape + ndim;                                                     \
        const int64_t* is = ts + ndim;                                                        \
        int64_t n = is[ndim], axis_stride = is[ndim + 1];                                     \
        for (int64_t d = 0; d < ndim; d++) count *= shape[d];                                 \
        for (int64_t e = 0; e < count; e++) {                                                 \
            int64_t k = s[0] ? ((const int64_t*)call->bufs[1])[ai]                            \
                             : ((const int32_t*)call->bufs[1])[ai];                           \
            if (!wrap_index(&k, n)) return MGR_KERNEL_INDEX_OUT_OF_RANGE;                     \
            STEP(e, at + k * axis_stride);                                                    \
            for (int64_t d = ndim - 1; d >= 0; d--) {                                         \
                at += ts[d];                                                                  \
                ai += is[d];                                                                  \
                if (++index[d] < shape[d]) break;                                             \
                at -= ts[d] * shape[d];                                                       \
                ai -= is[d] * shape[d];                                                       \
                index[d] = 0;                                                                 \
            }                                                                                 \
        }                                                                                     \
        return MGR_KERNEL_OK;                                                                 \
    } while (0)

/* scatter_add: y (the indexed tensor, `size` elements, zeroed first) += x; repeated indices and
 * broadcast axes (stride 0) accumulate in movement.pyx's order */
#define MGR_SCATTER_ADD(S, T)                                                                 \
    static int scatter_add_##S(const mgr_call* call) {                                        \
        const T* xt = (const T*)call->bufs[0];                                                \
        T* y = (T*)call->bufs[2];                                                             \
        memset(y, 0, (size_t)call->ints[4 + 3 * call->ints[1]] * sizeof(T));                  \
        MGR_GATHER_WALK(MGR_ADD_STEP);                                                        \
    }
#define MGR_ADD_STEP(e, to) y[to] += xt[e]

/* gather: y (contiguous) = x at the indexed elements, T an element of the size */
#define MGR_GATHER(T)                                                                         \
    static int gather_##T(const mgr_call* call) {                                             \
        const T* xt = (const T*)call->bufs[0];                                                \
        T* y = (T*)call->bufs[2];                                                             \
        MGR_GATHER_WALK(MGR_TAKE_STEP);                                                       \
    }
#define MGR_TAKE_STEP(e, from) y[e] = xt[from]
MGR_GATHER(uint8_t)
MGR_GATHER(uint16_t)
MGR_GATHER(uint32_t)
MGR_GATHER(uint64_t)

static int gather_copy(const mgr_call* call, int64_t size) {
    if (size == 1) return gather_uint8_t(call);
    if (size == 2) return gather_uint16_t(call);
    return size == 4 ? gather_uint32_t(call) : gather_uint64_t(call);
}

/* gather's (scatter: 0) or scatter_add's (1) layout against its buffers x, index, y */
static const char* gather_check(const mgr_check_args* x, int64_t dtype, int64_t size,
                                int scatter) {
    const int64_t* s = x->ints;
    int64_t count = 1, t_far = 0, i_far = 0;
    if (x->n_bufs != 3 || x->n_floats != 0 || x->n_ints < 2)
        return "wants buffers x, index, y and the ints of Gather and its tail, no floats";
    int64_t ndim = s[1];
    if (ndim < 1 || ndim > MGR_MOVE_DIMS || (int64_t)x->n_ints != 4 + scatter + 3 * ndim)
        return "its ndim and the size of its parameter block disagree (1 <= ndim <= 8)";
    if ((s[0] != 0 && s[0] != 1) || x->buf_dtypes[1] != (s[0] ? 3 : 2))
        return "index64 is not 0 or 1, or the index not of its int32 or int64";
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[2] != dtype)
        return "x and y are not of the kernel's dtype";
    const int64_t* shape = s + 2;
    const int64_t* ts = shape + ndim;
    const int64_t* is = ts + ndim;
    int64_t n = is[ndim], axis_stride = is[ndim + 1];
    /* the contiguous side (scatter_add's x, gather's y) and the indexed one's elements */
    int64_t flat = scatter ? 0 : 2, indexed = 2 - flat;
    int64_t total = scatter ? is[ndim + 2] : x->buf_bytes[indexed] / size;
    for (int64_t d = 0; d < ndim; d++)
        if (shape[d] < 0 || !mgr_muladd(0, count, shape[d], &count))
            return "a dimension is negative or the shape too large";
    if (count > x->buf_bytes[flat] / size) return "its shape reaches past its contiguous side";
    if (total < 0 || total > x->buf_bytes[indexed] / size) return "its size reaches past y's bytes";
    if (!mgr_counts_ok(shape, (int)ndim)) return "its shape makes no loop this runtime bounds";
    if (count == 0) return NULL;
    if (n < 1 || axis_stride < 0 || !mgr_muladd(0, n - 1, axis_stride, &t_far))
        return "its axis is empty or its stride negative";
    for (int64_t d = 0; d < ndim; d++)
        if (ts[d] < 0 || is[d] < 0 || !mgr_muladd(t_far, shape[d] - 1, ts[d], &t_far) ||
            !mgr_muladd(i_far, shape[d] - 1, is[d], &i_far))
            return "its strides are negative or reach past any index";
    if (t_far >= total) return "its strides reach past the indexed tensor";
    if (i_far >= x->buf_bytes[1] / (s[0] ? 8 : 4)) return "its index strides reach past the index";
    return NULL;
}

MGR_SCATTER_ADD(f32, float)
MGR_SCATTER_ADD(f64, double)
int mgr_scatter_add_f32(const mgr_call* call) { return scatter_add_f32(call); }
const char* mgr_scatter_add_f32_check(const mgr_check_args* x) {
    return gather_check(x, 0, 4, 1);
}
int mgr_scatter_add_f64(const mgr_call* call) { return scatter_add_f64(call); }
const char* mgr_scatter_add_f64_check(const mgr_check_args* x) {
    return gather_check(x, 1, 8, 1);
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
    const char* mgr_pad_##S##_check(const mgr_check_args* x) { return pad_check(x, DTYPE, SIZE); } \
    int mgr_slice_backward_##S(const mgr_call* call) { return slice_backward_copy(call, SIZE); } \
    const char* mgr_slice_backward_##S##_check(const mgr_check_args* x) {                    \
        return slice_backward_check(x, DTYPE, SIZE);                                          \
    }                                                                                         \
    int mgr_gather_##S(const mgr_call* call) { return gather_copy(call, SIZE); }             \
    const char* mgr_gather_##S##_check(const mgr_check_args* x) {                            \
        return gather_check(x, DTYPE, SIZE, 0);                                               \
    }

/* the blob's dtype codes (deploy/blob.py) and sizes */
MGR_MOVE_KERNELS(f32, 0, 4)
MGR_MOVE_KERNELS(f64, 1, 8)
MGR_MOVE_KERNELS(i32, 2, 4)
MGR_MOVE_KERNELS(i64, 3, 8)
MGR_MOVE_KERNELS(u8, 4, 1)
MGR_MOVE_KERNELS(i8, 5, 1)
MGR_MOVE_KERNELS(bool, 6, 1)
MGR_MOVE_KERNELS(i16, 7, 2)
