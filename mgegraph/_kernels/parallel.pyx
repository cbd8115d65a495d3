# The one thread policy of the CPU kernels (issue 19): how many threads an instruction gets, and
# the loop that runs its parts on them. Declarations and the usage pattern: parallel.pxd.
#
# Design: a lowering decides an instruction's threads from its work (threads_for: bytes it moves,
# or another unit with its own grain) and packs them into the parameter block, so a plan is
# data that says how it runs; at run time parallel_for caps that by max_threads() (OpenMP's
# maximum now, e.g. under threadpoolctl, and 1 in a forked child) and by the independent units
# there are, cuts the units into one contiguous part per thread and runs them in one OpenMP
# region. A part is a range of independent outputs (planes, rows, output elements), never a
# piece of a reduction, so every result is bitwise the same at any thread count. Only this
# module is built with -fopenmp: the kernels call parallel_for with a function pointer.
#
# Fork/join cost, measured with fork_join_us() (empty parts, OMP_WAIT_POLICY=PASSIVE as the
# package sets; the shared 2-core AMD EPYC, medians of 2000 regions): 11 us for 2 threads when
# the second core is idle (waking a sleeping thread), 60-95 us while other work holds it, and
# 0.03 us for one thread (no region). One thread of these kernels moves 25-85 bytes per ns while
# their data sits in L2/L3 (relu_backward 6.3 MB in 73 us, max_pool2d 2.6 MB in 103 us, a bias
# sum 2.1 MB in 80 us). Two threads of a memory-bound kernel gain less than 2x (how much could
# not be measured while the machine was shared); at 1.5x a second thread pays for its 11 us
# from ~30 us of work: ~1-2.5 MB. GRAIN_BYTES is 1 MiB a
# thread (2 threads from 2 MiB moved), in line with the fused kernel's own measurement (a lone
# add gains from 2 threads above ~500k elements, 6 MB; lowering/fused.py). On an oversubscribed
# machine a part whose thread is not scheduled holds up the region: then no threshold helps.
#
# NOTE: GCC's OpenMP pool does not survive fork(): a child whose parent had run a parallel
# region hangs in its first one. pthread_atfork marks the child (any fork, os.fork or C's),
# and max_threads() is 1 there, so every kernel runs its parts in the calling thread.

from cython.parallel cimport prange

from .abi cimport KERNEL_OK

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    static int mg_omp_max_threads(void) { return omp_get_max_threads(); }
    #define MG_HAVE_OPENMP 1
    #else
    static int mg_omp_max_threads(void) { return 1; }
    #define MG_HAVE_OPENMP 0
    #endif
    #include <pthread.h>
    #include <time.h>
    static volatile int mg_forked = 0;
    static void mg_mark_forked(void) { mg_forked = 1; }
    static int mg_watch_fork(void) { return pthread_atfork(NULL, NULL, mg_mark_forked); }
    static double mg_now_us(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
    }
    """
    int mg_omp_max_threads() noexcept nogil
    int MG_HAVE_OPENMP
    int mg_forked
    int mg_watch_fork() noexcept nogil
    double mg_now_us() noexcept nogil

if mg_watch_fork() != 0:
    raise ImportError("pthread_atfork failed: the kernels could not guard against fork")

cdef extern from "grain.h":
    # the grains and the GEMM's rule, shared with the C runtime (deploy/csrc)
    long long MG_GRAIN_BYTES, MG_GRAIN_FLOPS
    long long mg_gemm_threads(long long m, long long n, long long k, long long itemsize,
                              long long most) noexcept nogil

# Whether this build has OpenMP (without it every kernel runs on the calling thread)
OPENMP = bool(MG_HAVE_OPENMP)
# Bytes a thread should move for a second one to pay for the fork/join (see Design; grain.h)
GRAIN_BYTES = MG_GRAIN_BYTES
# FLOPs one thread of a GEMM should have (grain.h)
GRAIN_FLOPS = MG_GRAIN_FLOPS
TEAM_LIMIT = MAX_TEAM


cpdef int max_threads() noexcept nogil:
    """The threads a kernel may use now: OpenMP's maximum, 1 without OpenMP or in a forked
    child.

    >>> max_threads() >= 1
    True
    """
    return 1 if mg_forked else mg_omp_max_threads()


cdef int team(Py_ssize_t planned, Py_ssize_t units) noexcept nogil:
    # the threads an instruction planned for `planned` runs on now, over `units` parts at most
    cdef Py_ssize_t nt = planned
    nt = min(nt, <Py_ssize_t>max_threads())
    nt = min(nt, units)
    nt = min(nt, <Py_ssize_t>MAX_TEAM)
    return <int>nt if nt > 1 else 1


cdef int parallel_for(Py_ssize_t planned, Py_ssize_t units, part_fn fn, void* ctx) noexcept nogil:
    # fn over [0, units) in team() contiguous parts, part t on thread t (t, passed to fn, can
    # index per-thread scratch); the first failing part's status, in part order, as one thread
    # gives
    cdef int nt = team(planned, units), t
    cdef int status[MAX_TEAM]
    if nt == 1:
        return fn(ctx, 0, 0, units)
    for t in prange(nt, nogil=True, num_threads=nt, schedule="static"):
        status[t] = fn(ctx, t, cut(units, nt, t), cut(units, nt, t + 1))
    for t in range(nt):
        if status[t] != KERNEL_OK:
            return status[t]
    return KERNEL_OK


def threads_for(work: int, grain: int = GRAIN_BYTES) -> int:
    """The threads an instruction doing ``work`` units (bytes moved, by default) should plan for:
    one per ``grain`` units, at most max_threads() now (the parameter block keeps it; the
    kernel caps it again when it runs).

    >>> threads_for(1000)
    1
    """
    if grain <= 0:
        raise ValueError(f"threads_for: grain must be positive, got {grain}")
    return int(max(1, min(max_threads(), MAX_TEAM, work // grain)))


def gemm_threads(long long m, long long n, long long k, long long itemsize) -> int:
    """The threads a float GEMM of C (m, n) over k plans for (grain.h's rule, the C runtime's
    too): a single row by the bytes of its matrix, any other by its FLOPs; at most
    max_threads() now.

    >>> gemm_threads(1, 10, 1024, 4)
    1
    """
    if min(m, n, k) < 0 or itemsize < 1:
        raise ValueError(f"gemm_threads: sizes must not be negative, got {(m, n, k, itemsize)}")
    return int(mg_gemm_threads(m, n, k, itemsize, min(max_threads(), MAX_TEAM)))


cdef int _empty(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return KERNEL_OK


def fork_join_us(int threads=2, int repeats=2000) -> float:
    """The median time in microseconds of one parallel_for over ``threads`` empty parts: what a
    parallel kernel pays before any work (0-ish at one thread).

    >>> fork_join_us(1, 10) < 1000
    True
    """
    import statistics
    cdef double t0
    times = []
    for _ in range(repeats):
        with nogil:
            t0 = mg_now_us()
            parallel_for(threads, threads, _empty, NULL)
            t0 = mg_now_us() - t0
        times.append(t0)
    return statistics.median(times)
