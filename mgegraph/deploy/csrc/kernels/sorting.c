/* sort, topk, cumsum, cumprod and cumprod_backward of every numeric dtype: the rows and lines of
 * _kernels/sorting.h, the header sorting.pyx runs (one source: the same indices on ties, NaN
 * placed alike, the same order of sums). The parameter blocks are kernel_abi/sorting.py's: Order
 * (rows, length, k, descending, threads) over bufs x, values, indices (int32)[, workspace of
 * two int32 arrays of length per sorting thread], and Scan (outer, length, inner, exclusive,
 * reverse, threads) over x, y, or x, dy, dx for cumprod_backward. The rows and lines run on the
 * caller's thread in one workspace slot (the plan's threads field sizes the Python executor's
 * split, which changes no bit). */
#include "../mgr_kernel.h"
#include "sorting.h"

enum { ROWS, LENGTH, K, DESCENDING, ORDER_THREADS, ORDER_INTS };
enum { OUTER, SCAN_LENGTH, INNER, EXCLUSIVE, REVERSE, SCAN_THREADS, SCAN_INTS };
#define MGR_INT32_DTYPE 2

static const char* order_check(const mgr_check_args* x, int64_t dtype, int64_t size) {
    const int64_t* s = x->ints;
    int64_t elems, kept;
    if ((x->n_bufs != 3 && x->n_bufs != 4) || x->n_ints != ORDER_INTS || x->n_floats != 0)
        return "wants buffers x, values, indices[, workspace] and the 5 ints of Order";
    if (x->buf_dtypes[0] != dtype || x->buf_dtypes[1] != dtype ||
        x->buf_dtypes[2] != MGR_INT32_DTYPE)
        return "x and values are not of the kernel's dtype, or the indices not int32";
    if (s[ROWS] < 0 || s[LENGTH] < 0 || s[LENGTH] > INT32_MAX || s[K] < 0 || s[K] > s[LENGTH])
        return "rows, length and k are not 0 <= k <= length < 2^31";
    if (s[DESCENDING] != 0 && s[DESCENDING] != 1) return "descending is not 0 or 1";
    if (!mgr_muladd(0, s[ROWS], s[LENGTH], &elems) || elems > x->buf_bytes[0] / size ||
        !mgr_muladd(0, s[ROWS], s[K], &kept) || kept > x->buf_bytes[1] / size ||
        kept > x->buf_bytes[2] / 4)
        return "rows x length reaches past x, or rows x k past values or indices";
    if (!mgr_counts_ok(s, 2)) return "its rows make no loop this runtime bounds";
    if (s[LENGTH] > 0 && (x->n_bufs != 4 || x->buf_bytes[3] / 8 < s[LENGTH]))
        return "its workspace is shorter than two int32 arrays of length";
    return NULL;
}

static const char* scan_check(const mgr_check_args* x, int64_t dtype, int64_t size,
                              size_t n_bufs) {
    const int64_t* s = x->ints;
    int64_t elems;
    if (x->n_bufs != n_bufs || x->n_ints != SCAN_INTS || x->n_floats != 0)
        return n_bufs == 2 ? "wants buffers x, y and the 6 ints of Scan"
                           : "wants buffers x, dy, dx and the 6 ints of Scan";
    for (size_t b = 0; b < n_bufs; b++)
        if (x->buf_dtypes[b] != dtype) return "its buffers are not of the kernel's dtype";
    if (s[OUTER] < 0 || s[SCAN_LENGTH] < 0 || s[INNER] < 0)
        return "outer, length or inner is negative";
    if ((s[EXCLUSIVE] != 0 && s[EXCLUSIVE] != 1) || (s[REVERSE] != 0 && s[REVERSE] != 1))
        return "exclusive or reverse is not 0 or 1";
    if (!mgr_counts_ok(s, 3)) return "its lines make no loop this runtime bounds";
    elems = s[OUTER] * s[SCAN_LENGTH] * s[INNER]; /* bounded by mgr_counts_ok */
    for (size_t b = 0; b < n_bufs; b++)
        if (elems > x->buf_bytes[b] / size) return "outer x length x inner reaches past a buffer";
    return NULL;
}

#define MGR_SORTING_KERNELS(S, T, DTYPE)                                                      \
    static int order_##S(const mgr_call* call) {                                              \
        const int64_t* s = call->ints;                                                        \
        if (s[LENGTH] == 0) return MGR_KERNEL_OK; /* nothing to write, no workspace */        \
        mg_order_rows_##S((const T*)call->bufs[0], (T*)call->bufs[1],                         \
                          (int32_t*)call->bufs[2], (int32_t*)call->bufs[3], 0, s[ROWS],       \
                          s[LENGTH], s[K], (int)s[DESCENDING]);                               \
        return MGR_KERNEL_OK;                                                                 \
    }                                                                                         \
    int mgr_sort_##S(const mgr_call* call) { return order_##S(call); }                       \
    const char* mgr_sort_##S##_check(const mgr_check_args* x) {                              \
        return order_check(x, DTYPE, sizeof(T));                                              \
    }                                                                                         \
    int mgr_topk_##S(const mgr_call* call) { return order_##S(call); }                       \
    const char* mgr_topk_##S##_check(const mgr_check_args* x) {                              \
        return order_check(x, DTYPE, sizeof(T));                                              \
    }                                                                                         \
    static int scan_##S(const mgr_call* call, int product) {                                  \
        const int64_t* s = call->ints;                                                        \
        mg_scan_lines_##S((const T*)call->bufs[0], (T*)call->bufs[1], 0,                      \
                          s[OUTER] * s[INNER], s[SCAN_LENGTH], s[INNER], (int)s[EXCLUSIVE],   \
                          (int)s[REVERSE], product);                                          \
        return MGR_KERNEL_OK;                                                                 \
    }                                                                                         \
    int mgr_cumsum_##S(const mgr_call* call) { return scan_##S(call, 0); }                   \
    const char* mgr_cumsum_##S##_check(const mgr_check_args* x) {                            \
        return scan_check(x, DTYPE, sizeof(T), 2);                                            \
    }                                                                                         \
    int mgr_cumprod_##S(const mgr_call* call) { return scan_##S(call, 1); }                  \
    const char* mgr_cumprod_##S##_check(const mgr_check_args* x) {                           \
        return scan_check(x, DTYPE, sizeof(T), 2);                                            \
    }                                                                                         \
    int mgr_cumprod_backward_##S(const mgr_call* call) {                                     \
        const int64_t* s = call->ints;                                                        \
        mg_cumprod_backward_lines_##S((const T*)call->bufs[0], (const T*)call->bufs[1],       \
                                      (T*)call->bufs[2], 0, s[OUTER] * s[INNER],              \
                                      s[SCAN_LENGTH], s[INNER], (int)s[EXCLUSIVE],            \
                                      (int)s[REVERSE]);                                       \
        return MGR_KERNEL_OK;                                                                 \
    }                                                                                         \
    const char* mgr_cumprod_backward_##S##_check(const mgr_check_args* x) {                  \
        return scan_check(x, DTYPE, sizeof(T), 3);                                            \
    }

/* the blob's dtype codes (deploy/blob.py) */
MGR_SORTING_KERNELS(f32, float, 0)
MGR_SORTING_KERNELS(f64, double, 1)
MGR_SORTING_KERNELS(i32, int32_t, 2)
MGR_SORTING_KERNELS(i64, int64_t, 3)
