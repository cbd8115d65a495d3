# Row-major GEMM on contiguous matrices, through the BLAS in use (blas_table.pxd: SciPy's OpenBLAS,
# or MKL where blas_select.py measured it faster).
#
# Design: BLAS is column-major. A row-major (r, c) matrix is the column-major (c, r) matrix, so
# row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: swap the
# operands and keep each one's transpose flag. The lowerings check that every dimension fits
# BLAS's 32-bit ints (check_blas_dims in mgegraph/_kernels/lowering/matmul.py).

from libc.string cimport memset
from cython cimport floating
from .blas_table cimport sgemm, dgemm, sgemv, dgemv


cdef inline void gemv(char trans, int rows, int cols, floating alpha, const floating* a, int lda,
                      const floating* x, floating beta, floating* y) noexcept nogil:
    # y = alpha op(a) x + beta y for a column-major (rows, cols) matrix a; x and y are contiguous
    cdef int one = 1
    if floating is float:
        sgemv(&trans, &rows, &cols, &alpha, <float*>a, &lda, <float*>x, &one, &beta, y, &one)
    else:
        dgemv(&trans, &rows, &cols, &alpha, <double*>a, &lda, <double*>x, &one, &beta, y, &one)


cdef inline void gemm(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                      const floating* a,   # IN  op(a) is (m, k)
                      const floating* b,   # IN  op(b) is (k, n)
                      floating* c,         # OUT (m, n)
                      bint accumulate) noexcept nogil:
    # C = op(A) op(B), or C += op(A) op(B) when accumulate (backward passes sum over a batch).
    cdef int im = <int>m, jn = <int>n, ik = <int>k
    cdef int lda = im if ta else ik, ldb = ik if tb else jn
    cdef char fa = c'T' if ta else c'N', fb = c'T' if tb else c'N'
    cdef floating alpha = 1, beta = 1 if accumulate else 0
    if m == 0 or n == 0:
        return
    if k == 0:
        # gemv returns without touching y when k == 0; the product of empty sums is zero
        if not accumulate:
            memset(c, 0, <size_t>(m * n) * sizeof(floating))
        return
    # A vector operand goes to gemv, which BLAS implements far faster than a thin gemm
    # (depthwise convolutions have one filter row per group).
    if n == 1:
        if ta:
            gemv(c'N', im, ik, alpha, a, im, b, beta, c)
        else:
            gemv(c'T', ik, im, alpha, a, ik, b, beta, c)
    elif m == 1:
        if tb:
            gemv(c'T', ik, jn, alpha, b, ik, a, beta, c)
        else:
            gemv(c'N', jn, ik, alpha, b, jn, a, beta, c)
    elif floating is float:
        sgemm(&fb, &fa, &jn, &im, &ik, &alpha, <float*>b, &ldb, <float*>a, &lda, &beta, c, &jn)
    else:
        dgemm(&fb, &fa, &jn, &im, &ik, &alpha, <double*>b, &ldb, <double*>a, &lda, &beta, c, &jn)


cdef inline void gemm_scaled(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                             floating alpha,
                             const floating* a, Py_ssize_t lda,  # IN  op(a) (m, k)
                             const floating* b, Py_ssize_t ldb,  # IN  op(b) (k, n)
                             floating beta,                      # 0 or 1
                             floating* c, Py_ssize_t ldc) noexcept nogil:
    # C = alpha op(A) op(B) + beta C (addmm: beta 1 adds the product into C in place)
    cdef int im = <int>m, jn = <int>n, ik = <int>k
    cdef int ia = <int>lda, ib = <int>ldb, ic = <int>ldc
    cdef char fa = c'T' if ta else c'N', fb = c'T' if tb else c'N'
    cdef Py_ssize_t r
    if m == 0 or n == 0:
        return
    if k == 0:
        if beta == 0:
            for r in range(m):
                memset(c + r * ldc, 0, <size_t>n * sizeof(floating))
        return
    if m == 1 and not ta and not tb:  # one row of a: a gemv over b, as in gemm
        gemv(c'N', jn, ik, alpha, b, ib, a, beta, c)
    elif floating is float:
        sgemm(&fb, &fa, &jn, &im, &ik, &alpha, <float*>b, &ib, <float*>a, &ia, &beta, c, &ic)
    else:
        dgemm(&fb, &fa, &jn, &im, &ik, &alpha, <double*>b, &ib, <double*>a, &ia, &beta, c, &ic)


cdef inline void gemm_ld(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                         const floating* a, Py_ssize_t lda,  # IN  op(a) (m, k); stored rows lda apart
                         const floating* b, Py_ssize_t ldb,  # IN  op(b) (k, n); stored rows ldb apart
                         floating* c, Py_ssize_t ldc,        # OUT (m, n), rows ldc apart
                         bint accumulate) noexcept nogil:
    # gemm on matrices whose rows are further apart than their length (windows of larger arrays:
    # a block of rows or columns, one tap's shifted plane). BLAS asks each leading dimension to
    # be at least its stored row's length.
    gemm_scaled(ta, tb, m, n, k, 1, a, lda, b, ldb, 1 if accumulate else 0, c, ldc)
