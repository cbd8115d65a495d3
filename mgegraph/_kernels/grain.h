/* How many threads a piece of work pays for: the one rule of the Python executor (parallel.pyx's
 * threads_for and gemm_threads, which the lowerings pack into each parameter block) and of the
 * C runtime (deploy/csrc/kernels/gemm_c.h, which decides when it runs, at its model's thread
 * count), read by both from here so that a GEMV the executor keeps on one thread does not wake a
 * second one in C.
 *
 * Design: a thread woken from sleep costs about 11 us on the 2-core AMD EPYC (parallel.pyx's
 * fork_join_us), 60-95 us while other work holds the core; a part should do several times that.
 * GRAIN_BYTES: bytes a thread of a memory-bound kernel should move (parallel.pyx's Design: at
 * 25-85 bytes per ns, 1 MiB is 12-40 us). GRAIN_FLOPS: FLOPs one thread of a GEMM should have,
 * 2 MFLOP being about 20 us of a core's sgemm (lowering/matmul.py). */
#ifndef MG_GRAIN_H
#define MG_GRAIN_H

#include <stdint.h>

#define MG_GRAIN_BYTES ((int64_t)1 << 20)
#define MG_GRAIN_FLOPS ((int64_t)2000000)

/* one thread per `grain` units of `work` (a product of factors, so that no product overflows:
 * in double, exact below 2^53), at least 1 and at most `most` */
static inline int64_t mg_threads_for(double work, int64_t grain, int64_t most) {
    double units = work / (double)grain;
    if (units >= (double)most) return most < 1 ? 1 : most;
    return units < 1 ? 1 : (int64_t)units;
}

/* A float GEMM of C (m, n) over k of `itemsize`-byte elements: a single row (a GEMV, which reads
 * its matrix once: memory-bound) by the bytes of its matrix, any other by its FLOPs. */
static inline int64_t mg_gemm_threads(int64_t m, int64_t n, int64_t k, int64_t itemsize,
                                      int64_t most) {
    if (m == 1) return mg_threads_for((double)n * (double)k * (double)itemsize, MG_GRAIN_BYTES,
                                      most);
    return mg_threads_for(2.0 * (double)m * (double)n * (double)k, MG_GRAIN_FLOPS, most);
}

#endif
