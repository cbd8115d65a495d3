# Matrix products: batched matmul with broadcast batch dims, and linear (GEMM + bias).
#
# Parameter layout (ints), written by mgegraph.ops.matmul:
#   matmul: [m, n, k, transpose_a, transpose_b, ndim, batch shape[ndim],
#            batch strides of a [ndim], batch strides of b [ndim]]
#   linear: [m, n, k, has_bias]
# Batch strides are in elements and 0 on broadcast batch dims, so broadcast operands are never
# materialised; the output is contiguous (batch..., m, n). Float dtypes go to BLAS through
# SciPy's Cython bindings; integer dtypes use a plain loop.
#
# Design: BLAS is column-major. A row-major (r, c) matrix is the column-major (c, r) matrix, so
# row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: swap the
# operands and keep each one's transpose flag.

from libc.stdint cimport int32_t, int64_t
from libc.string cimport memset
from cython cimport floating
from scipy.linalg.cython_blas cimport sgemm, dgemm, sgemv, dgemv

from .abi cimport Call, KERNEL_OK, kernel_fn
from .nditer cimport Odometer, odometer_init, odometer_next, count_rows

ctypedef fused num_t:
    float
    double
    int32_t
    int64_t


# -- one matrix product -------------------------------------------------------------------------
cdef inline void gemv(char trans, int rows, int cols, const floating* a, int lda,
                      const floating* x, floating* y) noexcept nogil:
    # y = op(a) x for a column-major (rows, cols) matrix a; x and y are contiguous
    cdef int one = 1
    cdef floating alpha = 1, beta = 0
    if floating is float:
        sgemv(&trans, &rows, &cols, &alpha, <float*>a, &lda, <float*>x, &one, &beta, y, &one)
    else:
        dgemv(&trans, &rows, &cols, &alpha, <double*>a, &lda, <double*>x, &one, &beta, y, &one)


cdef inline void gemm_rm(bint ta, bint tb, int m, int n, int k, const floating* a,
                         const floating* b, floating* c) noexcept nogil:
    # Row-major C[m, n] = op(A)[m, k] op(B)[k, n], all three contiguous.
    cdef int lda = m if ta else k, ldb = k if tb else n
    cdef char fa = c'T' if ta else c'N', fb = c'T' if tb else c'N'
    cdef floating alpha = 1, beta = 0
    if m == 0 or n == 0:
        return
    if k == 0:
        # gemv returns without touching y when k == 0; the product of empty sums is zero
        memset(c, 0, <size_t>m * n * sizeof(floating))
        return
    # A vector operand goes to gemv, which BLAS implements far faster than a thin gemm.
    if n == 1:
        if ta:
            gemv(c'N', m, k, a, m, b, c)
        else:
            gemv(c'T', k, m, a, k, b, c)
    elif m == 1:
        if tb:
            gemv(c'T', k, n, b, k, a, c)
        else:
            gemv(c'N', n, k, b, n, a, c)
    elif floating is float:
        sgemm(&fb, &fa, &n, &m, &k, &alpha, <float*>b, &ldb, <float*>a, &lda, &beta, c, &n)
    else:
        dgemm(&fb, &fa, &n, &m, &k, &alpha, <double*>b, &ldb, <double*>a, &lda, &beta, c, &n)


cdef inline void matmul_loop(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                             const num_t* a, const num_t* b, num_t* c) noexcept nogil:
    # i-p-j order: the innermost loop walks a row of B and of C
    cdef Py_ssize_t ai = 1 if ta else k, ap = m if ta else 1
    cdef Py_ssize_t bp = 1 if tb else n, bj = k if tb else 1
    cdef Py_ssize_t i, p, j
    cdef num_t s
    for i in range(m):
        for j in range(n):
            c[i * n + j] = 0
        for p in range(k):
            s = a[i * ai + p * ap]
            for j in range(n):
                c[i * n + j] += s * b[p * bp + j * bj]


cdef inline void matrix_product(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                                const num_t* a, const num_t* b, num_t* c) noexcept nogil:
    if num_t is float or num_t is double:
        gemm_rm(ta, tb, <int>m, <int>n, <int>k, a, b, c)
    else:
        matmul_loop(ta, tb, m, n, k, a, b, c)


# -- kernels --------------------------------------------------------------------------------------
cdef inline int matmul_impl(const num_t* a, const num_t* b, num_t* c,
                            const Call* call) noexcept nogil:
    cdef const Py_ssize_t* p = call.ints
    cdef Py_ssize_t m = p[0], n = p[1], k = p[2]
    cdef bint ta = p[3] != 0, tb = p[4] != 0
    cdef int ndim = <int>p[5]
    cdef const Py_ssize_t* shape = p + 6
    cdef Py_ssize_t inner = shape[ndim - 1], rows = count_rows(ndim, shape), r, i
    cdef Py_ssize_t sa = p[6 + 2 * ndim - 1], sb = p[6 + 3 * ndim - 1]
    cdef Odometer o
    odometer_init(&o, ndim, shape, p + 6 + ndim, 2)
    for r in range(rows):
        for i in range(inner):
            matrix_product(ta, tb, m, n, k, a + o.offset[0] + i * sa, b + o.offset[1] + i * sb, c)
            c += m * n
        odometer_next(&o)
    return KERNEL_OK


cdef inline int linear_impl(const floating* x, const floating* w, const floating* bias,
                            floating* y, const Call* call) noexcept nogil:
    # y[m, n] = x[m, k] w[n, k]^T (+ bias[n]); the bias is added while the rows are in cache
    cdef Py_ssize_t m = call.ints[0], n = call.ints[1], k = call.ints[2], i, j
    gemm_rm(False, True, <int>m, <int>n, <int>k, x, w, y)
    if bias != NULL:
        for i in range(m):
            for j in range(n):
                y[i * n + j] += bias[j]
    return KERNEL_OK


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int matmul_f32(const Call* c) noexcept nogil:
    return matmul_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <float*>c.bufs[2], c)
cdef int matmul_f64(const Call* c) noexcept nogil:
    return matmul_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <double*>c.bufs[2], c)
cdef int matmul_i32(const Call* c) noexcept nogil:
    return matmul_impl(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1], <int32_t*>c.bufs[2], c)
cdef int matmul_i64(const Call* c) noexcept nogil:
    return matmul_impl(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1], <int64_t*>c.bufs[2], c)

# bufs: x, w, [bias,] y
cdef int linear_f32(const Call* c) noexcept nogil:
    if c.ints[3]:
        return linear_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                           <const float*>c.bufs[2], <float*>c.bufs[3], c)
    return linear_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <const float*>NULL,
                       <float*>c.bufs[2], c)
cdef int linear_f64(const Call* c) noexcept nogil:
    if c.ints[3]:
        return linear_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                           <const double*>c.bufs[2], <double*>c.bufs[3], c)
    return linear_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <const double*>NULL,
                       <double*>c.bufs[2], c)

cdef inline object addr(kernel_fn f):
    return <Py_ssize_t>f

KERNELS = {
    "matmul_f32": addr(matmul_f32), "matmul_f64": addr(matmul_f64),
    "matmul_i32": addr(matmul_i32), "matmul_i64": addr(matmul_i64),
    "linear_f32": addr(linear_f32), "linear_f64": addr(linear_f64),
}
