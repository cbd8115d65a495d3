# The BLAS routines every kernel calls (through blas.pxd), dispatched through pointers that
# blas_select.py sets at run time: SciPy's OpenBLAS by default, MKL when it is installed and
# measured faster on the machine at hand. One indirect call per GEMM: nothing measurable.

cdef void sgemm(char* transa, char* transb, int* m, int* n, int* k, float* alpha, float* a,
                int* lda, float* b, int* ldb, float* beta, float* c, int* ldc) noexcept nogil
cdef void dgemm(char* transa, char* transb, int* m, int* n, int* k, double* alpha, double* a,
                int* lda, double* b, int* ldb, double* beta, double* c, int* ldc) noexcept nogil
cdef void sgemv(char* trans, int* m, int* n, float* alpha, float* a, int* lda, float* x,
                int* incx, float* beta, float* y, int* incy) noexcept nogil
cdef void dgemv(char* trans, int* m, int* n, double* alpha, double* a, int* lda, double* x,
                int* incx, double* beta, double* y, int* incy) noexcept nogil
