/* Winograd F(2x2, 3x3)'s input and output transforms (float32) for wino_conv.h's driver, on a
 * run of tiles along one row of tiles, VW tiles per vector.
 *
 * Design: a tile's 4x4 window starts two columns after the previous tile's, so VW windows'
 * columns 0 and 1 are the even and odd columns of 2 VW consecutive ones, and columns 2 and 3
 * those of the 2 VW starting two later: two unaligned loads and two shuffles per column pair
 * and window row, read straight from the input plane; where a vector reaches past the plane's
 * edge (the padding) a masked load gives zeros there and touches nothing outside. The output
 * transform writes the two output rows of the run's tiles, cropped to `end` cells (masked
 * stores), with the bias and activation. Every lane does the same adds and subtracts in the
 * same order (no FMA can form from adds alone), so each vector width gives the bits the scalar
 * loops gave before them. One source, built once per instruction set through GCC's target attribute, as
 * conv_tile.h; runs of at most 8 tiles take AVX2's vectors on an AVX-512 CPU too, half as wide.
 * Measured on the 2-core AMD EPYC (Zen 4), 1 thread, convnet's backward-data call (64 -> 32
 * channels at 32x32, batch 32): the scalar loops' input transform took 3.55 ms of 10.3 (and
 * gained only 1.6x from a second thread), their output transform 1.22; these take 1.46 and
 * 0.37, the call 7.3 ms.
 */
#ifndef MG_WINO_TILE_H
#define MG_WINO_TILE_H

#include <stddef.h>

#include "activation.h"
#include "cpu_isa.h"

/* a shuffle of two vectors by literal lane indices: clang's and GCC 12's builtin, or GCC's
 * older one (which takes the indices as a vector) */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define WINO_SHUFFLE(itype, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define WINO_SHUFFLE(itype, a, b, ...) __builtin_shuffle(a, b, (itype){__VA_ARGS__})
#endif
#define WINO_EVEN4 0, 2, 4, 6
#define WINO_ODD4 1, 3, 5, 7
#define WINO_LO4 0, 4, 1, 5
#define WINO_HI4 2, 6, 3, 7
#define WINO_EVEN8 0, 2, 4, 6, 8, 10, 12, 14
#define WINO_ODD8 1, 3, 5, 7, 9, 11, 13, 15
#define WINO_LO8 0, 8, 1, 9, 2, 10, 3, 11
#define WINO_HI8 4, 12, 5, 13, 6, 14, 7, 15
#define WINO_EVEN16 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define WINO_ODD16 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define WINO_LO16 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define WINO_HI16 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31

typedef void (*wino_in_fn)(const float* const* rows, ptrdiff_t q0, ptrdiff_t w, ptrdiff_t count,
                           float* dst, ptrdiff_t ld);
typedef void (*wino_out_fn)(const float* m, ptrdiff_t ld, ptrdiff_t count, float* y0,
                            float* y1, ptrdiff_t end, float add, int act);

/* dst[(4 i + j) ld + k] = (B^T d B)[i][j] of tile k < count, whose window is
 * rows[r][q0 + 2 k + (0..3)], r < 4, of a plane w columns wide: columns outside [0, w) and rows
 * that are NULL read as 0 */
#define WINO_IN_BODY(VW, EVEN, ODD, LOAD_IN, STORE)                                          \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    typedef int ivec __attribute__((vector_size(VW * 4), unused)); /* older GCC's shuffles */ \
    for (ptrdiff_t k = 0; k < count; k += VW) {                                              \
        vec d[4][4], t[4][4], out[16];                                                       \
        ptrdiff_t c = q0 + 2 * k; /* the first column the VW windows read */                 \
        int inside = c >= 0 && c + 2 * VW + 2 <= w;                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                \
            vec a = {0}, b = {0}, f = {0}, e = {0};                                          \
            if (rows[i] && inside) {                                                         \
                const float* p = rows[i] + c;                                                \
                a = *(const uvec*)p, b = *(const uvec*)(p + VW);                             \
                f = *(const uvec*)(p + 2), e = *(const uvec*)(p + 2 + VW);                   \
            } else if (rows[i]) {                                                            \
                a = LOAD_IN(rows[i], c, w), b = LOAD_IN(rows[i], c + VW, w);                 \
                f = LOAD_IN(rows[i], c + 2, w), e = LOAD_IN(rows[i], c + 2 + VW, w);         \
            }                                                                                \
            d[i][0] = WINO_SHUFFLE(ivec, a, b, EVEN);                                        \
            d[i][1] = WINO_SHUFFLE(ivec, a, b, ODD);                                         \
            d[i][2] = WINO_SHUFFLE(ivec, f, e, EVEN);                                        \
            d[i][3] = WINO_SHUFFLE(ivec, f, e, ODD);                                         \
        }                                                                                    \
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) { /* B^T d */                   \
            t[0][j] = d[0][j] - d[2][j];                                                     \
            t[1][j] = d[1][j] + d[2][j];                                                     \
            t[2][j] = d[2][j] - d[1][j];                                                     \
            t[3][j] = d[1][j] - d[3][j];                                                     \
        }                                                                                    \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) { /* (B^T d) B */               \
            out[4 * i] = t[i][0] - t[i][2];                                                  \
            out[4 * i + 1] = t[i][1] + t[i][2];                                              \
            out[4 * i + 2] = t[i][2] - t[i][1];                                              \
            out[4 * i + 3] = t[i][1] - t[i][3];                                              \
        }                                                                                    \
        if (count - k >= VW) {                                                               \
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++)                            \
                *(uvec*)(dst + x * ld + k) = out[x];                                         \
        } else {                                                                             \
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++)                            \
                STORE(dst + x * ld + k, out[x], count - k);                                  \
        }                                                                                    \
    }

/* output rows 2a (y0) and 2a + 1 (y1, NULL past the output) of tiles k < count from
 * m[xi ld + k]: A^T M A, then + add and the activation act, the first `end` cells of each */
#define WINO_OUT_BODY(VW, LO, HI, LOAD, STORE)                                               \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    typedef int ivec __attribute__((vector_size(VW * 4)));                                   \
    vec addv = (vec){0} + add;                                                               \
    for (ptrdiff_t k = 0; k < count; k += VW) {                                              \
        vec mv[16], row[2][2];                                                               \
        if (count - k >= VW) {                                                               \
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++)                            \
                mv[x] = *(const uvec*)(m + x * ld + k);                                      \
        } else {                                                                             \
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++)                            \
                mv[x] = LOAD(m + x * ld + k, count - k);                                     \
        }                                                                                    \
        _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {                                \
            vec t0, t1, t2, t3; /* A^T M: rows m0 + m1 + m2, m1 - m2 - m3 */                 \
            if (i == 0) {                                                                    \
                t0 = mv[0] + mv[4] + mv[8];                                                  \
                t1 = mv[1] + mv[5] + mv[9];                                                  \
                t2 = mv[2] + mv[6] + mv[10];                                                 \
                t3 = mv[3] + mv[7] + mv[11];                                                 \
            } else {                                                                         \
                t0 = mv[4] - mv[8] - mv[12];                                                 \
                t1 = mv[5] - mv[9] - mv[13];                                                 \
                t2 = mv[6] - mv[10] - mv[14];                                                \
                t3 = mv[7] - mv[11] - mv[15];                                                \
            }                                                                                \
            vec even = t0 + t1 + t2, odd = t1 - t2 - t3; /* (A^T M) A */                     \
            row[i][0] = WINO_SHUFFLE(ivec, even, odd, LO) + addv;                            \
            row[i][1] = WINO_SHUFFLE(ivec, even, odd, HI) + addv;                            \
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                              \
                ACT_VEC(vec, ivec, row[i][h], act); /* activation.h's, as the op's */         \
        }                                                                                    \
        ptrdiff_t q = 2 * k, n = end - q < 2 * VW ? end - q : 2 * VW;                        \
        _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {                                \
            float* y = i ? y1 : y0;                                                          \
            if (!y) break;                                                                   \
            if (n == 2 * VW) {                                                               \
                *(uvec*)(y + q) = row[i][0];                                                 \
                *(uvec*)(y + q + VW) = row[i][1];                                            \
            } else if (n > 0) {                                                              \
                STORE(y + q, row[i][0], n < VW ? n : VW);                                    \
                if (n > VW) STORE(y + q + VW, row[i][1], n - VW);                            \
            }                                                                                \
        }                                                                                    \
    }

#define WINO_IN_ARGS                                                                         \
    const float* const* rows, ptrdiff_t q0, ptrdiff_t w, ptrdiff_t count, float* dst,        \
    ptrdiff_t ld
#define WINO_OUT_ARGS                                                                        \
    const float* m, ptrdiff_t ld, ptrdiff_t count, float* y0, float* y1, ptrdiff_t end,      \
    float add, int act

/* the first n (< VW) lanes of a vector: loaded (the rest 0) or stored, per instruction set */
typedef float wino_v4 __attribute__((vector_size(16)));
static inline wino_v4 wino_load4(const float* p, ptrdiff_t n) {
    wino_v4 v = {0};
    for (ptrdiff_t i = 0; i < n; i++) v[i] = p[i];
    return v;
}
static inline void wino_store4(float* p, wino_v4 v, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) p[i] = v[i];
}
/* row[c + lane] where 0 <= c + lane < w, else 0 */
static inline wino_v4 wino_row4(const float* row, ptrdiff_t c, ptrdiff_t w) {
    wino_v4 v = {0};
    for (ptrdiff_t i = 0; i < 4; i++)
        if (c + i >= 0 && c + i < w) v[i] = row[c + i];
    return v;
}

static void wino_in_base(WINO_IN_ARGS) {
    WINO_IN_BODY(4, WINO_EVEN4, WINO_ODD4, wino_row4, wino_store4)
}
static void wino_out_base(WINO_OUT_ARGS) {
    WINO_OUT_BODY(4, WINO_LO4, WINO_HI4, wino_load4, wino_store4)
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
typedef float wino_v8 __attribute__((vector_size(32)));
typedef float wino_v16 __attribute__((vector_size(64)));
/* lanes below n on */
__attribute__((target("avx2"))) static inline __m256i wino_mask8(ptrdiff_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n)), lane);
}
/* the lanes of row[c ..] on the plane (0 <= c + lane < w); the rest 0, not read */
__attribute__((target("avx2"))) static inline wino_v8 wino_row8(const float* row, ptrdiff_t c,
                                                                ptrdiff_t w) {
    __m256i on = _mm256_andnot_si256(wino_mask8(-c), wino_mask8(w - c));
    return (wino_v8)_mm256_maskload_ps(row + c, on);
}
__attribute__((target("avx2"))) static inline wino_v8 wino_load8(const float* p, ptrdiff_t n) {
    return (wino_v8)_mm256_maskload_ps(p, wino_mask8(n));
}
__attribute__((target("avx2"))) static inline void wino_store8(float* p, wino_v8 v,
                                                               ptrdiff_t n) {
    _mm256_maskstore_ps(p, wino_mask8(n), (__m256)v);
}
__attribute__((target("avx512f"))) static inline wino_v16 wino_load16(const float* p,
                                                                      ptrdiff_t n) {
    return (wino_v16)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
__attribute__((target("avx512f"))) static inline wino_v16 wino_row16(const float* row,
                                                                     ptrdiff_t c, ptrdiff_t w) {
    ptrdiff_t lo = c < 0 ? (-c < 16 ? -c : 16) : 0, hi = w - c > 16 ? 16 : w - c;
    unsigned on = hi > lo ? ((1u << hi) - 1) & ~((1u << lo) - 1) : 0;
    return (wino_v16)_mm512_maskz_loadu_ps((__mmask16)on, row + c);
}
__attribute__((target("avx512f"))) static inline void wino_store16(float* p, wino_v16 v,
                                                                   ptrdiff_t n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
}

__attribute__((target("avx2"))) static void wino_in_avx2(WINO_IN_ARGS) {
    WINO_IN_BODY(8, WINO_EVEN8, WINO_ODD8, wino_row8, wino_store8)
}
__attribute__((target("avx2"))) static void wino_out_avx2(WINO_OUT_ARGS) {
    WINO_OUT_BODY(8, WINO_LO8, WINO_HI8, wino_load8, wino_store8)
}
/* runs of at most 8 tiles (planes of 16 cells or fewer) take AVX2's vectors, half as wide */
__attribute__((target("avx512f,prefer-vector-width=512"))) static void wino_in_avx512(
    WINO_IN_ARGS) {
    if (count <= 8) {
        wino_in_avx2(rows, q0, w, count, dst, ld);
        return;
    }
    WINO_IN_BODY(16, WINO_EVEN16, WINO_ODD16, wino_row16, wino_store16)
}
__attribute__((target("avx512f,prefer-vector-width=512"))) static void wino_out_avx512(
    WINO_OUT_ARGS) {
    if (count <= 8) {
        wino_out_avx2(m, ld, count, y0, y1, end, add, act);
        return;
    }
    WINO_OUT_BODY(16, WINO_LO16, WINO_HI16, wino_load16, wino_store16)
}
#endif

/* the transforms of instruction set isa (cpu_isa.h's numbering), or the baseline's where this
 * CPU does not run it (a plan made on another machine) */
typedef struct {
    wino_in_fn in;
    wino_out_fn out;
} wino_transforms;

static wino_transforms wino_of(int isa) {
    wino_transforms t = {wino_in_base, wino_out_base};
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa == 2 && cpu_isa_ok(2)) t = (wino_transforms){wino_in_avx512, wino_out_avx512};
    if (isa == 1 && cpu_isa_ok(1)) t = (wino_transforms){wino_in_avx2, wino_out_avx2};
#endif
    return t;
}

#endif
