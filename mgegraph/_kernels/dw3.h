/* The depthwise path's 3x3 planes (conv_depthwise.pxi): one output plane of a 3x3 depthwise
 * convolution at column stride 1 or 2 (any row stride, padding and row dilation; no column
 * dilation), with its bias and activation, from one input plane.
 *
 * Design: a depthwise layer does 9 multiply-adds per output cell and reads and writes each cell
 * about once, so it runs at the speed of its loads and stores, not at the FMA peak. The plane is
 * first copied into the thread's zero-padded plane (``pad``, whose border the caller zeroed
 * once), so that every output cell reads its 9 taps from inside it: no bounds to test and no
 * border cells to treat apart. Each output row is then summed in vector registers VW cells at
 * a time: the 9 weights stay broadcast in registers, each tap is one unaligned load and one
 * multiply-add, and the sum gets its bias and activation before its one store (tap-by-tap passes
 * over the output, dw_tap.h's, store and reload it 9 times). The last vector of a row ends at
 * its last cell, recomputing a few cells to the same bits; rows narrower than VW take vectors
 * of HW cells alike, rows narrower than HW go cell by cell. At column stride 2 the padded plane
 * is kept as its even columns, then its odd ones (two half planes), so each tap column reads one
 * of them at unit stride and both strides share the loop. A cell sums its taps in the same
 * order (rows, then columns) in any lane or alone, and one source built per instruction set
 * through GCC's target attribute, picked by cpu_isa.h's codes as conv_tile.h's, keeps a cell's
 * bits the same whatever thread computes it. */
#ifndef MG_DW3_H
#define MG_DW3_H

#include <stddef.h>
#include <string.h>

#include "activation.h"
#include "cpu_isa.h"

typedef struct {
    ptrdiff_t h, w, oh, ow, sh, sw, ph, pw, dh;
} dw3_geom;

/* the padded plane's rows: hp of wp cells; at column stride 2, ld = ceil(wp / 2) cells apart in
 * each half plane */
static inline ptrdiff_t dw3_hp(const dw3_geom* g) { return g->h + 2 * g->ph; }
static inline ptrdiff_t dw3_wp(const dw3_geom* g) { return g->w + 2 * g->pw; }
static inline ptrdiff_t dw3_ld(const dw3_geom* g) {
    return g->sw == 2 ? (dw3_wp(g) + 1) / 2 : dw3_wp(g);
}

/* the elements of one thread's padded plane */
static inline ptrdiff_t dw3_slot(const dw3_geom* g) {
    return dw3_hp(g) * (g->sw == 2 ? 2 * dw3_ld(g) : dw3_wp(g));
}

#define DW3_ARGS(T)                                                                          \
    const T *restrict x, T *restrict pad, const T *restrict k, const T *restrict bias,      \
        int act, T *restrict y, const dw3_geom *g

typedef void (*dw3_f32_fn)(DW3_ARGS(float));
typedef void (*dw3_f64_fn)(DW3_ARGS(double));

/* x's rows into the padded plane's interior. At column stride 2, padded column q = c + pw goes to
 * half plane q % 2 at q / 2: x's even columns to half pw % 2 from pw / 2 on, its odd ones to the
 * other from (pw + 1) / 2 on, VW pairs at a time by SPLIT() where the build has SIMD shuffles
 * (a split of two vectors; the last VW pairs of a row too, some split again: one at a time, a
 * 56-wide row's 12 left over took as long as the convolution), else one pair at a time. */
#define DW3_PAD(T, SPLIT)                                                                    \
    for (ptrdiff_t r = 0; r < g->h; r++) {                                                   \
        const T* xr = x + r * g->w;                                                          \
        T* pr = pad + (r + g->ph) * ld;                                                      \
        if (g->sw == 1) {                                                                    \
            memcpy(pr + g->pw, xr, (size_t)g->w * sizeof(T));                                \
            continue;                                                                        \
        }                                                                                    \
        T* ev = pr + (g->pw % 2) * odd + g->pw / 2;                                          \
        T* od = pr + (1 - g->pw % 2) * odd + (g->pw + 1) / 2;                                \
        ptrdiff_t i = 0, pairs = g->w / 2;                                                   \
        SPLIT()                                                                              \
        for (; i < pairs; i++) ev[i] = xr[2 * i], od[i] = xr[2 * i + 1];                     \
        if (g->w % 2) ev[pairs] = xr[2 * pairs];                                             \
    }
#define DW3_SPLIT_NONE()
#define DW3_SPLIT_PAIRS(at)                                                                  \
    {                                                                                        \
        vec lo = *(const uvec*)(xr + 2 * (at)), hi = *(const uvec*)(xr + 2 * (at) + vw);     \
        *(uvec*)(ev + (at)) = __builtin_shuffle(lo, hi, even_);                              \
        *(uvec*)(od + (at)) = __builtin_shuffle(lo, hi, odd_);                               \
    }
#define DW3_SPLIT_SIMD(EVEN, ODD)                                                            \
    const ivec even_ = {EVEN}, odd_ = {ODD};                                                 \
    for (; i + vw <= pairs; i += vw) DW3_SPLIT_PAIRS(i)                                      \
    if (i < pairs && pairs >= vw) { /* the last vw pairs, some of them again */             \
        DW3_SPLIT_PAIRS(pairs - vw)                                                          \
        i = pairs;                                                                           \
    }
#define DW3_EVEN4 0, 2, 4, 6
#define DW3_ODD4 1, 3, 5, 7
#define DW3_EVEN8 0, 2, 4, 6, 8, 10, 12, 14
#define DW3_ODD8 1, 3, 5, 7, 9, 11, 13, 15
#define DW3_EVEN16 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define DW3_ODD16 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define DW3_SPLIT4() DW3_SPLIT_SIMD(DW3_EVEN4, DW3_ODD4)
#define DW3_SPLIT8() DW3_SPLIT_SIMD(DW3_EVEN8, DW3_ODD8)
#define DW3_SPLIT16() DW3_SPLIT_SIMD(DW3_EVEN16, DW3_ODD16)

/* tap (i, j) of output column 0 in the padded plane, from rp[i], the padded row of tap row i:
 * at column stride 2, padded column 2c + j is the even half's c + j / 2 or the odd half's c */
#define DW3_TAP(S, i, j) ((S) == 1 ? rp[i] + (j) : (j) == 1 ? rp[i] + odd : rp[i] + (j) / 2)

/* output cells [c, c + width) of row yr at column stride S with activation A, in vectors of type
 * VT (kv: the weights, bv: the bias) */
#define DW3_VECTOR(S, A, VT, UVT, IVT, kv, bv, c)                                            \
    {                                                                                        \
        VT acc = (VT){0};                                                                    \
        _Pragma("GCC unroll 3") for (int i = 0; i < 3; i++)                                  \
            _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                              \
                acc += kv[i * 3 + j] * *(const UVT*)(DW3_TAP(S, i, j) + (c));                \
        acc += bv;                                                                           \
        ACT_VEC(VT, IVT, acc, A);                                                            \
        *(UVT*)(yr + (c)) = acc;                                                             \
    }

/* one output row: its last vector of vw cells ends at its last cell */
#define DW3_ROW(S, A)                                                                        \
    {                                                                                        \
        ptrdiff_t c = 0;                                                                     \
        if (ow >= vw) {                                                                      \
            for (; c + vw <= ow; c += vw) DW3_VECTOR(S, A, vec, uvec, ivec, kv, bv, c)       \
            if (c < ow) DW3_VECTOR(S, A, vec, uvec, ivec, kv, bv, ow - vw)                   \
        } else if (ow >= hw) {                                                               \
            for (; c + hw <= ow; c += hw) DW3_VECTOR(S, A, hvec, uhvec, ihvec, kh, bh, c)    \
            if (c < ow) DW3_VECTOR(S, A, hvec, uhvec, ihvec, kh, bh, ow - hw)                \
        } else {                                                                             \
            for (; c < ow; c++) {                                                            \
                T acc = 0;                                                                   \
                for (int i = 0; i < 3; i++)                                                  \
                    for (int j = 0; j < 3; j++) acc += k[i * 3 + j] * DW3_TAP(S, i, j)[c];   \
                yr[c] = act1(acc + b, A);                                                    \
            }                                                                                \
        }                                                                                    \
    }

/* the rows at column stride S, the activation a constant in each copy of the loop */
#define DW3_ROWS(S)                                                                          \
    for (ptrdiff_t r = 0; r < g->oh; r++) {                                                  \
        const T* rp[3];                                                                      \
        for (int i = 0; i < 3; i++) rp[i] = pad + (r * g->sh + i * g->dh) * ld;              \
        T* yr = y + r * ow;                                                                  \
        if (act == ACT_RELU6)                                                                \
            DW3_ROW(S, ACT_RELU6)                                                            \
        else if (act == ACT_RELU)                                                            \
            DW3_ROW(S, ACT_RELU)                                                             \
        else                                                                                 \
            DW3_ROW(S, ACT_NONE)                                                             \
    }

#define DW3_BODY(T_, IT, VW, HW, ACT1, SPLIT)                                                \
    {                                                                                        \
        typedef T_ T;                                                                        \
        typedef T vec __attribute__((vector_size(VW * sizeof(T))));                          \
        typedef T uvec __attribute__((vector_size(VW * sizeof(T)), aligned(sizeof(T))));     \
        typedef IT ivec __attribute__((vector_size(VW * sizeof(T))));                        \
        typedef T hvec __attribute__((vector_size(HW * sizeof(T))));                         \
        typedef T uhvec __attribute__((vector_size(HW * sizeof(T)), aligned(sizeof(T))));    \
        typedef IT ihvec __attribute__((vector_size(HW * sizeof(T))));                       \
        enum { vw = VW, hw = HW }; /* for the macros below */                                \
        T (*const act1)(T, int) = ACT1;                                                      \
        ptrdiff_t hp = dw3_hp(g), ld = dw3_ld(g), ow = g->ow, odd = hp * ld;                 \
        DW3_PAD(T, SPLIT)                                                                    \
        T b = bias ? *bias : 0;                                                              \
        vec kv[9], bv = (vec){0} + b;                                                        \
        hvec kh[9], bh = (hvec){0} + b;                                                      \
        for (int t = 0; t < 9; t++) kv[t] = (vec){0} + k[t], kh[t] = (hvec){0} + k[t];       \
        if (g->sw == 1)                                                                      \
            DW3_ROWS(1)                                                                      \
        else                                                                                 \
            DW3_ROWS(2)                                                                      \
    }

static void dw3_f32_base(DW3_ARGS(float))
DW3_BODY(float, int, 4, 4, act_f32, DW3_SPLIT_NONE)
static void dw3_f64_base(DW3_ARGS(double))
DW3_BODY(double, long long, 2, 2, act_f64, DW3_SPLIT_NONE)
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void dw3_f32_avx2(DW3_ARGS(float))
DW3_BODY(float, int, 8, 4, act_f32, DW3_SPLIT8)
__attribute__((target("avx2,fma"))) static void dw3_f64_avx2(DW3_ARGS(double))
DW3_BODY(double, long long, 4, 2, act_f64, DW3_SPLIT4)
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void dw3_f32_avx512(DW3_ARGS(float))
DW3_BODY(float, int, 16, 8, act_f32, DW3_SPLIT16)
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void dw3_f64_avx512(DW3_ARGS(double))
DW3_BODY(double, long long, 8, 4, act_f64, DW3_SPLIT8)
#endif

/* the plane kernel for instruction set ``isa`` (0 baseline, 1 AVX2 + FMA, 2 AVX-512F + FMA), or
 * the widest narrower one this CPU runs (a plan made on another machine) */
static inline dw3_f32_fn dw3_f32_of(ptrdiff_t isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 2 && cpu_isa_ok(2)) return dw3_f32_avx512;
    if (isa >= 1 && cpu_isa_ok(1)) return dw3_f32_avx2;
#endif
    (void)isa;
    return dw3_f32_base;
}

static inline dw3_f64_fn dw3_f64_of(ptrdiff_t isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 2 && cpu_isa_ok(2)) return dw3_f64_avx512;
    if (isa >= 1 && cpu_isa_ok(1)) return dw3_f64_avx2;
#endif
    (void)isa;
    return dw3_f64_base;
}

#endif
