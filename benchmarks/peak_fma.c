/* The CPU's float32 peak: a register-only loop of independent fused multiply-adds, 12 chains of
 * one 512-bit (or 256-bit) vector per thread, as wide as the build's -march allows. Nothing is
 * read from memory inside the loop, so its rate is the FMA units' alone: the ceiling every kernel
 * of benchmarks/resnet_layers.py is set against. */
#include <omp.h>

typedef float vec __attribute__((vector_size(64)));

double peak_fma(long iterations, int threads) {
    double sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        vec acc[12], b = (vec){0} + 1.0000001f, c = (vec){0} + 1e-7f;
        for (int i = 0; i < 12; i++) acc[i] = (vec){0} + (float)i;
        for (long it = 0; it < iterations; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) acc[i] = acc[i] * b + c;
        for (int i = 1; i < 12; i++) acc[0] += acc[i];
        for (int i = 0; i < 16; i++) sink += acc[0][i];
    }
    return sink; /* read by the caller, so the loop is not optimised away */
}
