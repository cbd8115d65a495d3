# Sort, topk and the scans cumsum, cumprod, cumprod_backward (mgegraph/ops/sorting.py).
#
# Parameter layout: the ints are the Order and Scan structs below, whose field names this module
# exports (ORDER_FIELDS, SCAN_FIELDS) for the shared lowering, mgegraph/kernel_abi/sorting.py,
# to pack by name. Buffers: sort/topk x, then values, indices (int32) and a workspace of two
# int32 arrays of `length` per thread; cumsum/cumprod x, then y; cumprod_backward x, dy, then dx.
#
# Design: a sort is a stable bottom-up merge sort of each row's indices (insertion-sorted runs of
# RUN first), comparing through `before`, which puts NaN after every number ascending and before
# every number descending and keeps equal values in index order; topk sorts the whole row and
# keeps the first k (O(n log n), not a selection: one order rule for both ops, and the results
# are always sorted). A scan runs each line (outer, inner) along the axis in order, accumulating
# in the dtype, as NumPy does. cumprod_backward is two passes per line: the reverse recurrence
# r_p = dy_p + x_(p+1) r_(p+1) into dx, then dx_p *= the product of x before p, so a zero input
# needs no division. The units of work are rows (sort) or lines (scans), split into contiguous
# ranges by parallel_for: every output is computed as on one thread. The scans are safe in
# place (an element is read before it is written); csrc_cuda/sorting.cu is the CUDA twin.

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

cdef enum:
    RUN = 16  # rows are insertion-sorted in runs of this many before merging


cdef inline bint is_nan(num_t a) noexcept nogil:
    if num_t is float or num_t is double:
        return a != a
    else:
        return False


cdef inline bint before(num_t a, num_t b, bint descending) noexcept nogil:
    # a goes strictly before b; NaN counts as the largest value
    if descending:
        return a > b or (is_nan(a) and not is_nan(b))
    return a < b or (is_nan(b) and not is_nan(a))


cdef void insertion_runs(const num_t* v, int32_t* idx, Py_ssize_t n,
                         bint descending) noexcept nogil:
    cdef Py_ssize_t lo = 0, i, j, hi
    cdef int32_t cur
    while lo < n:
        hi = min(lo + RUN, n)
        for i in range(lo + 1, hi):
            cur = idx[i]
            j = i
            while j > lo and before(v[cur], v[idx[j - 1]], descending):
                idx[j] = idx[j - 1]
                j -= 1
            idx[j] = cur
        lo = hi


cdef void merge(const num_t* v, const int32_t* src, int32_t* dst, Py_ssize_t lo,
                Py_ssize_t mid, Py_ssize_t hi, bint descending) noexcept nogil:
    # the right run's value goes first only when strictly before the left's: stable
    cdef Py_ssize_t i = lo, j = mid, out
    for out in range(lo, hi):
        if i < mid and (j >= hi or not before(v[src[j]], v[src[i]], descending)):
            dst[out] = src[i]
            i += 1
        else:
            dst[out] = src[j]
            j += 1


cdef int32_t* sort_row(const num_t* v, Py_ssize_t n, int32_t* a, int32_t* b,
                       bint descending) noexcept nogil:
    # the indices of v's values in order, in a or b (returned)
    cdef Py_ssize_t i, width = RUN, lo
    for i in range(n):
        a[i] = <int32_t>i
    insertion_runs(v, a, n, descending)
    while width < n:
        lo = 0
        while lo < n:
            merge(v, a, b, lo, min(lo + width, n), min(lo + 2 * width, n), descending)
            lo += 2 * width
        a, b = b, a
        width *= 2
    return a


cdef inline int order_part(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                           num_t* tag) noexcept nogil:
    cdef const Order* s = <const Order*>c.ints
    cdef Py_ssize_t n = s.length, row, j
    cdef const num_t* x = <const num_t*>c.bufs[0]
    cdef num_t* values = <num_t*>c.bufs[1]
    cdef int32_t* indices = <int32_t*>c.bufs[2]
    cdef int32_t* slot
    cdef int32_t* order
    if n == 0:  # nothing to write, and no workspace buffer to read
        return KERNEL_OK
    slot = <int32_t*>c.bufs[3] + 2 * n * part
    for row in range(lo, hi):
        order = sort_row(x + row * n, n, slot, slot + n, s.descending != 0)
        for j in range(s.k):
            values[row * s.k + j] = x[row * n + order[j]]
            indices[row * s.k + j] = order[j]
    return KERNEL_OK


cdef inline int scan_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi, bint product,
                          num_t* tag) noexcept nogil:
    cdef const Scan* s = <const Scan*>c.ints
    cdef Py_ssize_t L = s.length, M = s.inner, line, p, at, step
    cdef const num_t* x = <const num_t*>c.bufs[0]
    cdef num_t* y = <num_t*>c.bufs[1]
    cdef num_t acc, cur
    for line in range(lo, hi):
        at = (line // M) * L * M + line % M
        step = M
        if s.reverse:
            at, step = at + (L - 1) * M, -M
        acc = 1 if product else 0
        for p in range(L):
            cur = x[at]
            if s.exclusive:
                y[at] = acc
            acc = acc * cur if product else acc + cur
            if not s.exclusive:
                y[at] = acc
            at += step
    return KERNEL_OK


cdef inline int cumprod_backward_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                                      num_t* tag) noexcept nogil:
    # dx_p = (product of x before p) * r_p, with r_p = dy_p + x_(p+1) r_(p+1) (inclusive) or
    # r_p = dy_(p+1) + x_(p+1) r_(p+1) (exclusive), p in scan order
    cdef const Scan* s = <const Scan*>c.ints
    cdef Py_ssize_t L = s.length, M = s.inner, line, p, first, at, step
    cdef const num_t* x = <const num_t*>c.bufs[0]
    cdef const num_t* g = <const num_t*>c.bufs[1]
    cdef num_t* dx = <num_t*>c.bufs[2]
    cdef num_t r, before_p
    for line in range(lo, hi):
        first = (line // M) * L * M + line % M
        step = M
        if s.reverse:
            first, step = first + (L - 1) * M, -M
        r = 0
        for p in range(L - 1, -1, -1):
            at = first + p * step
            if s.exclusive:
                dx[at] = r
                r = g[at] if p == L - 1 else g[at] + x[at] * r
            else:
                r = g[at] if p == L - 1 else g[at] + x[at + step] * r
                dx[at] = r
        before_p = 1
        for p in range(L):
            at = first + p * step
            dx[at] = before_p * dx[at]
            before_p = before_p * x[at]
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
