/* The depthwise path's one loop (conv_depthwise.pxi): y[c] += tap * src[c * stride] for c < n.
 *
 * Why here and not in Cython: the kernel modules are built for the baseline instruction set, and
 * the loop, at one multiply-add per element read, runs at the width of the vectors it is
 * compiled for; the im2col path's BLAS picks AVX2 or AVX-512 at run time. So one source, built
 * per instruction set through GCC's target attribute as conv_tile.h's and gemv_row.h's, picked
 * by the Conv block's ``isa`` (cpu_isa.h's codes: the lowering's widest). Within one instruction
 * set a cell's sum is the same whatever thread computes it. */
#ifndef MG_DW_TAP_H
#define MG_DW_TAP_H

#include <stddef.h>

#include "cpu_isa.h"

#define DW_TAP_BODY                                                                          \
    {                                                                                        \
        ptrdiff_t c;                                                                         \
        if (stride == 1)                                                                     \
            for (c = 0; c < n; c++) y[c] += tap * src[c];                                    \
        else if (stride == 2)                                                                \
            for (c = 0; c < n; c++) y[c] += tap * src[2 * c];                                \
        else                                                                                 \
            for (c = 0; c < n; c++) y[c] += tap * src[c * stride];                           \
    }
#define DW_ARGS(T) T *restrict y, const T *restrict src, T tap, ptrdiff_t n, ptrdiff_t stride

typedef void (*dw_tap_f32_fn)(DW_ARGS(float));
typedef void (*dw_tap_f64_fn)(DW_ARGS(double));

static void dw_tap_f32_base(DW_ARGS(float)) DW_TAP_BODY
static void dw_tap_f64_base(DW_ARGS(double)) DW_TAP_BODY
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void dw_tap_f32_avx2(DW_ARGS(float)) DW_TAP_BODY
__attribute__((target("avx2,fma"))) static void dw_tap_f64_avx2(DW_ARGS(double)) DW_TAP_BODY
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void dw_tap_f32_avx512(DW_ARGS(float)) DW_TAP_BODY
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void dw_tap_f64_avx512(DW_ARGS(double)) DW_TAP_BODY
#endif

/* the loop for instruction set ``isa`` (0 baseline, 1 AVX2 + FMA, 2 AVX-512F + FMA), or the
 * widest narrower one this CPU runs (a plan made on another machine) */
static inline dw_tap_f32_fn dw_tap_f32_of(ptrdiff_t isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 2 && cpu_isa_ok(2)) return dw_tap_f32_avx512;
    if (isa >= 1 && cpu_isa_ok(1)) return dw_tap_f32_avx2;
#endif
    (void)isa;
    return dw_tap_f32_base;
}

static inline dw_tap_f64_fn dw_tap_f64_of(ptrdiff_t isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 2 && cpu_isa_ok(2)) return dw_tap_f64_avx512;
    if (isa >= 1 && cpu_isa_ok(1)) return dw_tap_f64_avx2;
#endif
    (void)isa;
    return dw_tap_f64_base;
}

#endif
