/* Counter-based random samplers, one definition for the CPU (_kernels/rng.pyx) and CUDA
 * (csrc_cuda/rng.cu, through its link csrc_cuda/rng_sample.h).
 *
 * Design: element i of a draw is a pure function of (key, i), the key being the op's seed mixed
 * with its step (the stream's counter, an int64 input): no state is carried from element to
 * element or from run to run, so any split of the work among threads, the CPU or the GPU gives
 * the same numbers, and a plan replayed with the next step draws new ones. The bits are
 * splitmix64's finaliser over (key + i * golden), then once more per extra word j an element
 * needs (rejection samplers draw until they accept). Uniforms keep the top 53 bits (double) or
 * 24 bits (float): exact multiples of 2**-53 or 2**-24 in [0, 1). Normals are Box-Muller's
 * cosine branch; gamma is Marsaglia and Tsang's (alpha < 1 boosted by u ** (1 / alpha));
 * Poisson is Knuth's product of uniforms below lam = 10 and Hormann's PTRS above (NumPy's
 * choice of both). A rejection loop that has not accepted after MG_RNG_TRIES words gives NaN
 * (it accepts with probability above 0.9 per try, so this never happens in practice).
 * Plain C, so every CPU build and NVRTC can include it.
 */
#ifndef MG_RNG_SAMPLE_H
#define MG_RNG_SAMPLE_H

#ifdef __CUDACC_RTC__
typedef unsigned long long uint64_t;
typedef long long int64_t;
#else
#include <math.h>
#include <stdint.h>
#endif

#ifdef __CUDACC__
#define MG_RNG_FN static __host__ __device__ __forceinline__
#else
#define MG_RNG_FN static inline
#endif

#define MG_RNG_GOLDEN 0x9E3779B97F4A7C15ULL
#define MG_RNG_TRIES 1024
#define MG_RNG_PI 3.14159265358979323846
#ifdef __CUDACC_RTC__
#define MG_RNG_NAN __longlong_as_double(0x7ff8000000000000LL)
#else
#define MG_RNG_NAN NAN
#endif

MG_RNG_FN uint64_t mg_rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The key of one draw: its seed and its step, mixed as dropout's mask mixes them. */
MG_RNG_FN uint64_t mg_rng_key(uint64_t seed, int64_t step) {
    uint64_t key = mg_rng_mix(seed + MG_RNG_GOLDEN);
    return mg_rng_mix(key ^ mg_rng_mix((uint64_t)step + MG_RNG_GOLDEN));
}

/* Word j of element i's random bits. */
MG_RNG_FN uint64_t mg_rng_bits(uint64_t key, uint64_t i, uint64_t j) {
    uint64_t z = mg_rng_mix(key + i * MG_RNG_GOLDEN);
    return j == 0 ? z : mg_rng_mix(z + j * MG_RNG_GOLDEN);
}

MG_RNG_FN double mg_rng_u53(uint64_t key, uint64_t i, uint64_t j) {
    return (double)(mg_rng_bits(key, i, j) >> 11) * 1.1102230246251565e-16;  /* 2**-53 */
}

MG_RNG_FN float mg_rng_u24(uint64_t key, uint64_t i) {
    return (float)(mg_rng_bits(key, i, 0) >> 40) * 5.9604644775390625e-08f;  /* 2**-24 */
}

/* A standard normal from words j and j + 1 (1 - u is in (0, 1]: the log is finite). */
MG_RNG_FN double mg_rng_normal(uint64_t key, uint64_t i, uint64_t j) {
    double r = sqrt(-2.0 * log(1.0 - mg_rng_u53(key, i, j)));
    return r * cos(2.0 * MG_RNG_PI * mg_rng_u53(key, i, j + 1));
}

/* Gamma(alpha, 1) for alpha >= 1, from word `first` on; NaN if no try accepted. */
MG_RNG_FN double mg_rng_gamma_ge1(uint64_t key, uint64_t i, double alpha, uint64_t first) {
    double d = alpha - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (uint64_t j = first; j < first + 3 * MG_RNG_TRIES; j += 3) {
        double x = mg_rng_normal(key, i, j), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = 1.0 - mg_rng_u53(key, i, j + 2);  /* in (0, 1] */
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
    return MG_RNG_NAN;
}

/* Gamma(alpha, 1); alpha must be > 0 (the caller checks). */
MG_RNG_FN double mg_rng_gamma(uint64_t key, uint64_t i, double alpha) {
    if (alpha >= 1) return mg_rng_gamma_ge1(key, i, alpha, 0);
    /* Gamma(alpha) = Gamma(alpha + 1) * U ** (1 / alpha), U in (0, 1] */
    double u = 1.0 - mg_rng_u53(key, i, 0);
    return mg_rng_gamma_ge1(key, i, alpha + 1.0, 1) * pow(u, 1.0 / alpha);
}

MG_RNG_FN double mg_rng_poisson_small(uint64_t key, uint64_t i, double lam) {
    double limit = exp(-lam), p = 1.0;
    for (uint64_t k = 0; k < MG_RNG_TRIES; ++k) {
        p *= mg_rng_u53(key, i, k);
        if (p <= limit) return (double)k;
    }
    return MG_RNG_NAN;
}

MG_RNG_FN double mg_rng_poisson_ptrs(uint64_t key, uint64_t i, double lam) {
    double slam = sqrt(lam), loglam = log(lam), b = 0.931 + 2.53 * slam;
    double a = -0.059 + 0.02483 * b, invalpha = 1.1239 + 1.1328 / (b - 3.4);
    double vr = 0.9277 - 3.6224 / (b - 2);
    for (uint64_t j = 0; j < 2 * MG_RNG_TRIES; j += 2) {
        double u = mg_rng_u53(key, i, j) - 0.5, v = mg_rng_u53(key, i, j + 1);
        double us = 0.5 - fabs(u), k = floor((2 * a / us + b) * u + lam + 0.43);
        if (us >= 0.07 && v <= vr) return k;
        if (k < 0 || (us < 0.013 && v > us)) continue;
        if (log(v) + log(invalpha) - log(a / (us * us) + b) <= -lam + k * loglam - lgamma(k + 1))
            return k;
    }
    return MG_RNG_NAN;
}

/* Poisson(lam); lam must be >= 0 (the caller checks). */
MG_RNG_FN double mg_rng_poisson(uint64_t key, uint64_t i, double lam) {
    if (lam == 0) return 0.0;
    return lam < 10 ? mg_rng_poisson_small(key, i, lam) : mg_rng_poisson_ptrs(key, i, lam);
}

#endif
