# matinv (mgegraph/ops/linalg_inv.py): the inverse of each (n, n) matrix of a batch.
#
# Parameter layout: the ints are the Matinv struct below, whose field names this module exports
# (MATINV_FIELDS) for the lowering, mgegraph/_kernels/lowering/matinv.py, to pack by name; no
# floats. Buffers: a, then y, then the workspace: batch * n pivot rows (Py_ssize_t).
#
# Design: Gauss-Jordan elimination with partial pivoting in the output itself (the classic
# in-place inversion: each eliminated column k is replaced by the inverse's column, the rows
# swapped for the pivots are swapped back as columns at the end), so the only scratch is the
# pivot rows. The arithmetic is in the dtype, as LAPACK's getri and MegEngine's kernel. The
# units of work are the matrices; threads (parallel.pyx) take contiguous ranges of them, so
# every result is computed as on one thread. A pivot column of exact zeros means a singular
# matrix: KERNEL_BAD_VALUE, which the run raises as a KernelError (NumPy raises LinAlgError).
# csrc_cuda/matinv.cu does the same operations in the same order, a thread per matrix.

from libc.math cimport fabs
from libc.string cimport memcpy
from cython cimport floating

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct Matinv:             # a, y (batch, n, n)
    Py_ssize_t batch, n, threads

cdef Matinv _mi
MATINV_FIELDS = fields_of(_mi, sizeof(Matinv))


cdef inline Py_ssize_t pivot_row(const floating* y, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    # the row at or below k with the largest |y[., k]|, the first among equals, a NaN only when
    # no number is larger than 0 (so a NaN propagates, as in NumPy); -1: all exactly zero
    cdef Py_ssize_t i, best = -1
    cdef double top = 0, v
    for i in range(k, n):
        v = fabs(y[i * n + k])
        if v > top or (best < 0 and v != v):
            if v == v:
                top = v
            best = i
    return best


cdef inline void swap_rows(floating* y, Py_ssize_t n, Py_ssize_t r, Py_ssize_t s) noexcept nogil:
    cdef Py_ssize_t j
    cdef floating t
    for j in range(n):
        t = y[r * n + j]
        y[r * n + j] = y[s * n + j]
        y[s * n + j] = t


cdef inline void eliminate(floating* y, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    # row k scaled by 1 / pivot and subtracted from every other row; column k becomes the
    # inverse's (the identity's column k, eliminated alongside)
    cdef Py_ssize_t i, j
    cdef floating inv = 1 / y[k * n + k], f
    y[k * n + k] = 1
    for j in range(n):
        y[k * n + j] = y[k * n + j] * inv
    for i in range(n):
        if i == k:
            continue
        f = y[i * n + k]
        y[i * n + k] = 0
        for j in range(n):
            y[i * n + j] = y[i * n + j] - f * y[k * n + j]


cdef inline int invert(floating* y, Py_ssize_t n, Py_ssize_t* pivots) noexcept nogil:
    cdef Py_ssize_t k, i, p
    cdef floating t
    for k in range(n):
        p = pivot_row(y, n, k)
        if p < 0:
            return KERNEL_BAD_VALUE
        pivots[k] = p
        if p != k:
            swap_rows(y, n, k, p)
        eliminate(y, n, k)
    for k in range(n - 1, -1, -1):
        p = pivots[k]
        if p != k:
            for i in range(n):
                t = y[i * n + k]
                y[i * n + k] = y[i * n + p]
                y[i * n + p] = t
    return KERNEL_OK


cdef inline int matrices(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                         floating* tag) noexcept nogil:
    cdef const Matinv* s = <const Matinv*>c.ints
    cdef Py_ssize_t n = s.n, b
    cdef const floating* a = <const floating*>c.bufs[0]
    cdef floating* y = <floating*>c.bufs[1]
    cdef Py_ssize_t* pivots = <Py_ssize_t*>c.bufs[2]
    cdef int status
    for b in range(lo, hi):
        memcpy(y + b * n * n, a + b * n * n, n * n * sizeof(floating))  # never in place
        status = invert(y + b * n * n, n, pivots + b * n)
        if status != KERNEL_OK:
            return status
    return KERNEL_OK


cdef int part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return matrices(<const Call*>c, lo, hi, <float*>NULL)
cdef int part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return matrices(<const Call*>c, lo, hi, <double*>NULL)


cdef int matinv_f32(const Call* c) noexcept nogil:
    cdef const Matinv* s = <const Matinv*>c.ints
    return parallel_for(s.threads, s.batch, part_f32, <void*>c)
cdef int matinv_f64(const Call* c) noexcept nogil:
    cdef const Matinv* s = <const Matinv*>c.ints
    return parallel_for(s.threads, s.batch, part_f64, <void*>c)

KERNELS = {
    "matinv_f32": kernel_address(matinv_f32),
    "matinv_f64": kernel_address(matinv_f64),
}
