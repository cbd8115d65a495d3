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

# The BLAS on one thread for the calls the calling thread makes until blas_restore_threads(token):
# the kernels that split GEMMs among their own threads (conv.pyx, linalg.pyx) take it at their
# entry and in each thread of their regions, so that the BLAS does not start its own threads
# under theirs. MKL keeps the count per thread; SciPy's OpenBLAS keeps its "per-thread" count for
# the whole process, so there the first kernel in sets it and the last one out restores it
# (kernels running at once in several threads cannot leave it at 1). No-ops (token -1) for a
# library without such a call.
cdef int blas_one_thread() noexcept nogil
cdef void blas_restore_threads(int token) noexcept nogil

# Whether the GEMM kernels (linalg.pyx) split each GEMM among the plan's OpenMP threads, calling
# the BLAS on one thread in each part: so for OpenBLAS, whose own pthread pool would otherwise
# take turns with OpenMP's on the same cores, when it has the per-thread call above. MKL runs on
# the OpenMP pool itself (its GNU threading layer, blas_select.py) and splits its own GEMMs.
cdef bint blas_split_gemms() noexcept nogil
