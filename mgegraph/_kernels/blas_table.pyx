# The BLAS in use: four function pointers, SciPy's by default (see blas_table.pxd).
#
# Design: the kernels cimport these four functions, so which library runs a GEMM is one pointer
# store away, chosen once when the CPU backend is made (blas_select.py). Every library behind
# them takes the Fortran BLAS interface with 32-bit integers (SciPy's OpenBLAS; MKL's
# libmkl_rt in its LP64 layer), which is what the lowerings check dimensions against.

from scipy.linalg cimport cython_blas as scipy_blas

ctypedef void (*sgemm_t)(char*, char*, int*, int*, int*, float*, float*, int*, float*, int*,
                         float*, float*, int*) noexcept nogil
ctypedef void (*dgemm_t)(char*, char*, int*, int*, int*, double*, double*, int*, double*, int*,
                         double*, double*, int*) noexcept nogil
ctypedef void (*sgemv_t)(char*, int*, int*, float*, float*, int*, float*, int*, float*, float*,
                         int*) noexcept nogil
ctypedef void (*dgemv_t)(char*, int*, int*, double*, double*, int*, double*, int*, double*,
                         double*, int*) noexcept nogil

cdef sgemm_t _sgemm = scipy_blas.sgemm
cdef dgemm_t _dgemm = scipy_blas.dgemm
cdef sgemv_t _sgemv = scipy_blas.sgemv
cdef dgemv_t _dgemv = scipy_blas.dgemv
# the library's "threads for the calling thread only" call (OpenBLAS's
# openblas_set_num_threads_local, MKL's mkl_set_num_threads_local), when it has one
ctypedef int (*local_threads_t)(int) noexcept nogil
cdef local_threads_t _local_threads = NULL
# whether the GEMM kernels split their GEMMs among the plan's own threads (see blas_table.pxd)
cdef bint _split = False
_current = "openblas"

ROUTINES = ("sgemm", "dgemm", "sgemv", "dgemv")


cdef void sgemm(char* transa, char* transb, int* m, int* n, int* k, float* alpha, float* a,
                int* lda, float* b, int* ldb, float* beta, float* c, int* ldc) noexcept nogil:
    _sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef void dgemm(char* transa, char* transb, int* m, int* n, int* k, double* alpha, double* a,
                int* lda, double* b, int* ldb, double* beta, double* c, int* ldc) noexcept nogil:
    _dgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef void sgemv(char* trans, int* m, int* n, float* alpha, float* a, int* lda, float* x,
                int* incx, float* beta, float* y, int* incy) noexcept nogil:
    _sgemv(trans, m, n, alpha, a, lda, x, incx, beta, y, incy)


cdef void dgemv(char* trans, int* m, int* n, double* alpha, double* a, int* lda, double* x,
                int* incx, double* beta, double* y, int* incy) noexcept nogil:
    _dgemv(trans, m, n, alpha, a, lda, x, incx, beta, y, incy)


cdef bint blas_split_gemms() noexcept nogil:
    return _split


cdef extern from *:
    """
    #include <pthread.h>
    /* SciPy's OpenBLAS keeps its "per-thread" count for the whole process: the first kernel in
       sets it to 1 and the last one out puts the saved count back, so that kernels running
       at once in several threads cannot leave it at 1. A forked child starts with it open. */
    typedef int (*mg_set_threads_t)(int);
    static pthread_mutex_t mg_blas_lock = PTHREAD_MUTEX_INITIALIZER;
    static int mg_blas_inside = 0, mg_blas_saved = 0;
    static void mg_blas_enter(mg_set_threads_t set) {
        pthread_mutex_lock(&mg_blas_lock);
        if (mg_blas_inside++ == 0) mg_blas_saved = set(1);
        pthread_mutex_unlock(&mg_blas_lock);
    }
    static void mg_blas_leave(mg_set_threads_t set) {
        pthread_mutex_lock(&mg_blas_lock);
        if (--mg_blas_inside == 0) set(mg_blas_saved);
        pthread_mutex_unlock(&mg_blas_lock);
    }
    static void mg_blas_reset_in_child(void) {
        pthread_mutex_init(&mg_blas_lock, NULL);
        mg_blas_inside = 0;
    }
    static int mg_blas_watch_fork(void) {
        return pthread_atfork(NULL, NULL, mg_blas_reset_in_child);
    }
    """
    ctypedef int (*mg_set_threads_t)(int) noexcept nogil
    void mg_blas_enter(mg_set_threads_t set) noexcept nogil
    void mg_blas_leave(mg_set_threads_t set) noexcept nogil
    int mg_blas_watch_fork() noexcept nogil

if mg_blas_watch_fork() != 0:
    raise ImportError("pthread_atfork failed: the BLAS thread guard could not watch for fork")


cdef int blas_one_thread() noexcept nogil:
    if _local_threads == NULL:
        return -1
    if not _split:  # MKL: the calling thread's own count (_split: SciPy's OpenBLAS is in use)
        return _local_threads(1)
    mg_blas_enter(<mg_set_threads_t>_local_threads)
    return 0


cdef void blas_restore_threads(int token) noexcept nogil:
    if _local_threads == NULL or token < 0:
        return
    if _split:
        mg_blas_leave(<mg_set_threads_t>_local_threads)
    else:
        _local_threads(token)


# the library's raw per-thread setter, returning the previous count, or -1 without one: for
# local_threads (tests); the kernels take blas_one_thread instead
cdef int blas_local_threads(int n) noexcept nogil:
    if _local_threads == NULL:
        return -1
    return _local_threads(n)


def use(str name, dict addresses=None):
    """Route the kernels' BLAS calls to ``name``: "openblas" (SciPy's), or another library
    whose Fortran routines' addresses ``addresses`` gives ({"sgemm": int, ...}, all four).
    ``addresses["local_threads"]``, for either, is the library's per-thread thread-count call
    (int (int), returning the previous count), when it has one."""
    global _sgemm, _dgemm, _sgemv, _dgemv, _current, _local_threads, _split
    addresses = addresses or {}
    _local_threads = <local_threads_t><Py_ssize_t>addresses.get("local_threads", 0)
    _split = name == "openblas" and _local_threads != NULL
    if name == "openblas":
        _sgemm, _dgemm = scipy_blas.sgemm, scipy_blas.dgemm
        _sgemv, _dgemv = scipy_blas.sgemv, scipy_blas.dgemv
    else:
        if any(not addresses.get(r) for r in ROUTINES):
            raise ValueError(f"BLAS {name!r} needs the addresses of {', '.join(ROUTINES)}")
        _sgemm = <sgemm_t><Py_ssize_t>addresses["sgemm"]
        _dgemm = <dgemm_t><Py_ssize_t>addresses["dgemm"]
        _sgemv = <sgemv_t><Py_ssize_t>addresses["sgemv"]
        _dgemv = <dgemv_t><Py_ssize_t>addresses["dgemv"]
    _current = name


def local_threads(int n):
    """Set the calling thread's BLAS threads to ``n`` and return the previous count, or -1 when
    the library in use cannot (the kernels' guard, blas_table.pxd, from Python: for tests).

    >>> previous = local_threads(1); _ = local_threads(previous)
    """
    return blas_local_threads(n)


def splits_gemms() -> bool:
    """Whether the GEMM kernels split their GEMMs among their own threads now (blas_table.pxd)."""
    return _split


def current() -> str:
    """The name of the BLAS the kernels call now."""
    return _current


def time_sgemm(int m, int n, int k, const float[::1] a, const float[::1] b, float[::1] c,
               int repeats):
    """Seconds of the fastest of ``repeats`` calls of the current sgemm, C (n, m) = B A in
    column-major terms (row-major C (m, n) = A (m, k) @ B (k, n)): the calibration's probe."""
    from time import perf_counter
    cdef char no = c'N'
    cdef float one = 1, zero = 0
    cdef int r
    best = float("inf")
    if a.shape[0] < m * k or b.shape[0] < k * n or c.shape[0] < m * n:
        raise ValueError("buffers too small for the probe's shape")
    for r in range(repeats):
        start = perf_counter()
        with nogil:
            _sgemm(&no, &no, &n, &m, &k, &one, <float*>&b[0], &n, <float*>&a[0], &k, &zero,
                   &c[0], &n)
        best = min(best, perf_counter() - start)
    return best
