# Sort, topk and the scans cumsum, cumprod, cumprod_backward (mgegraph/ops/sorting.py).
#
# Parameter layout: the ints are the Order and Scan structs below, whose field names this module
# exports (ORDER_FIELDS, SCAN_FIELDS) for the shared lowering, mgegraph/kernel_abi/sorting.py,
# to pack by name. Buffers: sort/topk x, then values, indices (int32) and a workspace of two
# int32 arrays of `length` per thread; cumsum/cumprod x, then y; cumprod_backward x, dy, then dx.
#
# Design: the rows' and lines' loops are sorting.h's, the header the C runtime's sorting kernels
# include too (one source, the same bits; its note says how each op orders and accumulates).
# This module splits the rows (sort) or lines (scans) into contiguous ranges by parallel_for:
# every output is computed as on one thread; csrc_cuda/sorting.cu is the CUDA twin.

from libc.stdint cimport int32_t, int64_t

from .abi cimport Call, KERNEL_OK, kernel_address
from .dtypes cimport num_t
from .params cimport fields_of
from .parallel cimport parallel_for, part_fn

ctypedef struct Order:          # x (rows, length); the first k of each sorted row
    Py_ssize_t rows, length, k, descending, threads

ctypedef struct Scan:           # x (outer, length, inner), scanned along length
    Py_ssize_t outer, length, inner, exclusive, reverse, threads

cdef Order _order
cdef Scan _scan
ORDER_FIELDS = fields_of(_order, sizeof(Order))
SCAN_FIELDS = fields_of(_scan, sizeof(Scan))

cdef extern from "sorting.h" nogil:
    void mg_order_rows_f32(const float* x, float* values, int32_t* indices, int32_t* slot,
                           Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n, Py_ssize_t k,
                           int descending)
    void mg_order_rows_f64(const double* x, double* values, int32_t* indices, int32_t* slot,
                           Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n, Py_ssize_t k,
                           int descending)
    void mg_order_rows_i32(const int32_t* x, int32_t* values, int32_t* indices, int32_t* slot,
                           Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n, Py_ssize_t k,
                           int descending)
    void mg_order_rows_i64(const int64_t* x, int64_t* values, int32_t* indices, int32_t* slot,
                           Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n, Py_ssize_t k,
                           int descending)
    void mg_scan_lines_f32(const float* x, float* y, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t L,
                           Py_ssize_t M, int exclusive, int reverse, int product)
    void mg_scan_lines_f64(const double* x, double* y, Py_ssize_t lo, Py_ssize_t hi,
                           Py_ssize_t L, Py_ssize_t M, int exclusive, int reverse, int product)
    void mg_scan_lines_i32(const int32_t* x, int32_t* y, Py_ssize_t lo, Py_ssize_t hi,
                           Py_ssize_t L, Py_ssize_t M, int exclusive, int reverse, int product)
    void mg_scan_lines_i64(const int64_t* x, int64_t* y, Py_ssize_t lo, Py_ssize_t hi,
                           Py_ssize_t L, Py_ssize_t M, int exclusive, int reverse, int product)
    void mg_cumprod_backward_lines_f32(const float* x, const float* g, float* dx, Py_ssize_t lo,
                                       Py_ssize_t hi, Py_ssize_t L, Py_ssize_t M, int exclusive,
                                       int reverse)
    void mg_cumprod_backward_lines_f64(const double* x, const double* g, double* dx,
                                       Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t L, Py_ssize_t M,
                                       int exclusive, int reverse)
    void mg_cumprod_backward_lines_i32(const int32_t* x, const int32_t* g, int32_t* dx,
                                       Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t L, Py_ssize_t M,
                                       int exclusive, int reverse)
    void mg_cumprod_backward_lines_i64(const int64_t* x, const int64_t* g, int64_t* dx,
                                       Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t L, Py_ssize_t M,
                                       int exclusive, int reverse)


cdef inline int order_part(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                           num_t* tag) noexcept nogil:
    cdef const Order* s = <const Order*>c.ints
    cdef Py_ssize_t n = s.length
    cdef int32_t* slot
    cdef int descending = s.descending != 0
    if n == 0:  # nothing to write, and no workspace buffer to read
        return KERNEL_OK
    slot = <int32_t*>c.bufs[3] + 2 * n * part
    if num_t is float:
        mg_order_rows_f32(<const float*>c.bufs[0], <float*>c.bufs[1], <int32_t*>c.bufs[2], slot,
                          lo, hi, n, s.k, descending)
    elif num_t is double:
        mg_order_rows_f64(<const double*>c.bufs[0], <double*>c.bufs[1], <int32_t*>c.bufs[2],
                          slot, lo, hi, n, s.k, descending)
    elif num_t is int32_t:
        mg_order_rows_i32(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[1], <int32_t*>c.bufs[2],
                          slot, lo, hi, n, s.k, descending)
    else:
        mg_order_rows_i64(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[1], <int32_t*>c.bufs[2],
                          slot, lo, hi, n, s.k, descending)
    return KERNEL_OK


cdef inline int scan_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi, bint product,
                          num_t* tag) noexcept nogil:
    cdef const Scan* s = <const Scan*>c.ints
    cdef int exclusive = s.exclusive != 0, reverse = s.reverse != 0
    if num_t is float:
        mg_scan_lines_f32(<const float*>c.bufs[0], <float*>c.bufs[1], lo, hi, s.length, s.inner,
                          exclusive, reverse, product)
    elif num_t is double:
        mg_scan_lines_f64(<const double*>c.bufs[0], <double*>c.bufs[1], lo, hi, s.length,
                          s.inner, exclusive, reverse, product)
    elif num_t is int32_t:
        mg_scan_lines_i32(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[1], lo, hi, s.length,
                          s.inner, exclusive, reverse, product)
    else:
        mg_scan_lines_i64(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[1], lo, hi, s.length,
                          s.inner, exclusive, reverse, product)
    return KERNEL_OK


cdef inline int cumprod_backward_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                                      num_t* tag) noexcept nogil:
    cdef const Scan* s = <const Scan*>c.ints
    cdef int exclusive = s.exclusive != 0, reverse = s.reverse != 0
    if num_t is float:
        mg_cumprod_backward_lines_f32(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                      <float*>c.bufs[2], lo, hi, s.length, s.inner, exclusive,
                                      reverse)
    elif num_t is double:
        mg_cumprod_backward_lines_f64(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                      <double*>c.bufs[2], lo, hi, s.length, s.inner, exclusive,
                                      reverse)
    elif num_t is int32_t:
        mg_cumprod_backward_lines_i32(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1],
                                      <int32_t*>c.bufs[2], lo, hi, s.length, s.inner, exclusive,
                                      reverse)
    else:
        mg_cumprod_backward_lines_i64(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1],
                                      <int64_t*>c.bufs[2], lo, hi, s.length, s.inner, exclusive,
                                      reverse)
    return KERNEL_OK


# parallel_for's parts, one per (kernel, dtype): each casts the tag to pick the fused type
cdef int sort_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return order_part(<const Call*>c, part, lo, hi, <float*>NULL)
cdef int sort_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return order_part(<const Call*>c, part, lo, hi, <double*>NULL)
cdef int sort_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return order_part(<const Call*>c, part, lo, hi, <int32_t*>NULL)
cdef int sort_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return order_part(<const Call*>c, part, lo, hi, <int64_t*>NULL)

cdef int sum_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, False, <float*>NULL)
cdef int sum_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, False, <double*>NULL)
cdef int sum_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, False, <int32_t*>NULL)
cdef int sum_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, False, <int64_t*>NULL)

cdef int prod_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, True, <float*>NULL)
cdef int prod_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, True, <double*>NULL)
cdef int prod_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, True, <int32_t*>NULL)
cdef int prod_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return scan_part(<const Call*>c, lo, hi, True, <int64_t*>NULL)

cdef int prod_grad_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cumprod_backward_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int prod_grad_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cumprod_backward_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int prod_grad_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cumprod_backward_part(<const Call*>c, lo, hi, <int32_t*>NULL)
cdef int prod_grad_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cumprod_backward_part(<const Call*>c, lo, hi, <int64_t*>NULL)


cdef int order(const Call* c, part_fn fn) noexcept nogil:
    cdef const Order* s = <const Order*>c.ints
    return parallel_for(s.threads, s.rows, fn, <void*>c)


cdef int scan(const Call* c, part_fn fn) noexcept nogil:
    cdef const Scan* s = <const Scan*>c.ints
    return parallel_for(s.threads, s.outer * s.inner, fn, <void*>c)


cdef int sort_kernel_f32(const Call* c) noexcept nogil:
    return order(c, sort_f32)
cdef int sort_kernel_f64(const Call* c) noexcept nogil:
    return order(c, sort_f64)
cdef int sort_kernel_i32(const Call* c) noexcept nogil:
    return order(c, sort_i32)
cdef int sort_kernel_i64(const Call* c) noexcept nogil:
    return order(c, sort_i64)
cdef int cumsum_f32(const Call* c) noexcept nogil:
    return scan(c, sum_f32)
cdef int cumsum_f64(const Call* c) noexcept nogil:
    return scan(c, sum_f64)
cdef int cumsum_i32(const Call* c) noexcept nogil:
    return scan(c, sum_i32)
cdef int cumsum_i64(const Call* c) noexcept nogil:
    return scan(c, sum_i64)
cdef int cumprod_f32(const Call* c) noexcept nogil:
    return scan(c, prod_f32)
cdef int cumprod_f64(const Call* c) noexcept nogil:
    return scan(c, prod_f64)
cdef int cumprod_i32(const Call* c) noexcept nogil:
    return scan(c, prod_i32)
cdef int cumprod_i64(const Call* c) noexcept nogil:
    return scan(c, prod_i64)
cdef int cumprod_backward_f32(const Call* c) noexcept nogil:
    return scan(c, prod_grad_f32)
cdef int cumprod_backward_f64(const Call* c) noexcept nogil:
    return scan(c, prod_grad_f64)
cdef int cumprod_backward_i32(const Call* c) noexcept nogil:
    return scan(c, prod_grad_i32)
cdef int cumprod_backward_i64(const Call* c) noexcept nogil:
    return scan(c, prod_grad_i64)


# sort and topk share one kernel: topk's k is shorter than the row
KERNELS = {
    "sort_f32": kernel_address(sort_kernel_f32), "sort_f64": kernel_address(sort_kernel_f64),
    "sort_i32": kernel_address(sort_kernel_i32), "sort_i64": kernel_address(sort_kernel_i64),
    "topk_f32": kernel_address(sort_kernel_f32), "topk_f64": kernel_address(sort_kernel_f64),
    "topk_i32": kernel_address(sort_kernel_i32), "topk_i64": kernel_address(sort_kernel_i64),
    "cumsum_f32": kernel_address(cumsum_f32), "cumsum_f64": kernel_address(cumsum_f64),
    "cumsum_i32": kernel_address(cumsum_i32), "cumsum_i64": kernel_address(cumsum_i64),
    "cumprod_f32": kernel_address(cumprod_f32), "cumprod_f64": kernel_address(cumprod_f64),
    "cumprod_i32": kernel_address(cumprod_i32), "cumprod_i64": kernel_address(cumprod_i64),
    "cumprod_backward_f32": kernel_address(cumprod_backward_f32),
    "cumprod_backward_f64": kernel_address(cumprod_backward_f64),
    "cumprod_backward_i32": kernel_address(cumprod_backward_i32),
    "cumprod_backward_i64": kernel_address(cumprod_backward_i64),
}
