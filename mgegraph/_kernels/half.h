/* The half-precision floats' bits: float16 (IEEE binary16) and bfloat16, both held as uint16_t.
 *
 * Design: a kernel never computes in a half type; it reads one into a float (exactly: every half
 * value is a float) and rounds a result into one. Rounding is to nearest, ties to even, straight
 * from the double (or float) it is given, never through a float first, so a double rounds as
 * NumPy (float16) and ml_dtypes (bfloat16) round it; a NaN stays a NaN of the same sign (NumPy's
 * payload rule for float16, a quiet NaN for bfloat16), an overflow is an infinity. Plain C with no
 * instruction set assumed, so every CPU build and the CUDA sources can include it.
 */
#ifndef MG_HALF_H
#define MG_HALF_H

#ifdef __CUDACC_RTC__
/* NVRTC has no standard headers (memcpy is its builtin): the three widths spelled out */
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#include <string.h>
#endif

#ifdef __CUDACC__
#define MG_HALF_FN static __host__ __device__ __forceinline__
#else
#define MG_HALF_FN static inline
#endif

MG_HALF_FN float mg_bits_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

MG_HALF_FN float mg_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1Fu)  /* infinity, or a NaN keeping its payload */
        return mg_bits_float(sign | 0x7F800000u | (mant << 13));
    if (exp != 0)
        return mg_bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
    /* zero or subnormal: mant * 2^-24, exact in a float */
    float f = (float)mant * 5.9604644775390625e-8f;
    return sign ? -f : f;
}

MG_HALF_FN float mg_bf16_to_float(uint16_t h) {
    return mg_bits_float((uint32_t)h << 16);
}

/* The significand ``sig`` (< 2^53) shifted right by ``shift`` bits, rounded to nearest even. */
MG_HALF_FN uint64_t mg_round_shift(uint64_t sig, int shift) {
    if (shift >= 64)
        return 0;  /* below half of the smallest step: sig < 2^53 <= 2^(shift - 1) */
    uint64_t q = sig >> shift, rem = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

/* ``d`` rounded to a float with ``mant_bits`` stored significand bits and exponent bias
 * ``bias`` (binary16: 10, 15; bfloat16: 7, 127), as its bits without the sign. A carry out of
 * the significand lands in the exponent, so the largest values round up to infinity. */
MG_HALF_FN uint16_t mg_round_to_half(uint64_t abs_bits, int mant_bits, int bias) {
    int e = (int)(abs_bits >> 52) - 1023;
    uint64_t sig = (abs_bits & ((1ull << 52) - 1)) | (1ull << 52);
    uint16_t inf = (uint16_t)(((2 * bias + 1) << mant_bits));
    if (e > bias)
        return inf;
    if (e >= 1 - bias)  /* normal */
        return (uint16_t)((((uint64_t)(e + bias)) << mant_bits)
                          + mg_round_shift(sig, 52 - mant_bits) - (1ull << mant_bits));
    /* subnormal (or zero): in units of the smallest step, 2^(1 - bias - mant_bits) */
    return (uint16_t)mg_round_shift(sig, 52 - mant_bits + (1 - bias) - e);
}

MG_HALF_FN uint16_t mg_double_to_f16(double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    uint64_t abs_bits = bits & 0x7FFFFFFFFFFFFFFFull;
    if (abs_bits >= 0x7FF0000000000000ull) {
        uint16_t m = (uint16_t)(0x7C00u + ((abs_bits & 0xFFFFFFFFFFFFFull) >> 42));
        return sign | (m == 0x7C00u && abs_bits != 0x7FF0000000000000ull ? 0x7C01u : m);
    }
    if (abs_bits < 0x3E60000000000000ull)  /* below 2^-25: zero (halfway to 2^-24 rounds up) */
        return sign;
    return sign | mg_round_to_half(abs_bits, 10, 15);
}

MG_HALF_FN uint16_t mg_double_to_bf16(double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    uint64_t abs_bits = bits & 0x7FFFFFFFFFFFFFFFull;
    if (abs_bits > 0x7FF0000000000000ull)  /* NaN: a quiet one */
        return sign | 0x7FC0u;
    if (abs_bits == 0x7FF0000000000000ull)
        return sign | 0x7F80u;
    if (abs_bits < 0x3790000000000000ull)  /* below 2^-134: zero */
        return sign;
    return sign | mg_round_to_half(abs_bits, 7, 127);
}

#endif
