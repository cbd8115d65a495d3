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

# Threads the BLAS may use for calls from the calling thread only, returning the previous count
# (0: the library's global count), or -1 when the library in use has no such call. The kernels
# that split GEMMs among their own threads (conv.pyx, linalg.pyx) set 1 in each of them, so that
# the BLAS does not start its own threads under theirs, and restore it after. NOTE: MKL keeps the
# count per thread, but SciPy's OpenBLAS keeps it for the whole process: the calling thread sets
# it before its parallel region and restores it after the join, so that the parts' restores,
# in whatever order they run, only ever put back 1.
cdef int blas_local_threads(int n) noexcept nogil

# Whether the GEMM kernels (linalg.pyx) split each GEMM among the plan's OpenMP threads, calling
# the BLAS on one thread in each part: so for OpenBLAS, whose own pthread pool would otherwise
# take turns with OpenMP's on the same cores, when it has the per-thread call above. MKL runs on
# the OpenMP pool itself (its GNU threading layer, blas_select.py) and splits its own GEMMs.
cdef bint blas_split_gemms() noexcept nogil
