/* The pointwise path of conv.pyx ("pointwise", conv_pointwise.pxi): a float32 1x1 convolution at
 * stride 1 without padding (MobileNet's expand and project layers), the bias and activation
 * applied at the store.
 *
 * Design: such a convolution is the GEMM y (no, cells) = w (no, nc) x (nc, cells) on NCHW as it
 * lies: x's channels are the rows of its right-hand matrix (ldx apart), y's those of the result.
 * The direct path hands that GEMM to the BLAS, which packs x's panels, then passes over y once
 * more for the bias and activation (2.4 MB for 192 channels at 56x56, beyond L2). Here a tile
 * keeps ROWS output channels x NV vectors of consecutive cells in registers for the whole sum
 * over input channels, reading x in place (NV vector loads per channel) and the weights as they
 * lie, w[o][k] (ROWS broadcasts per channel, from rows that stay in L1), and stores each cell
 * once, bias and activation applied: the register blocking of conv_tile.h's row tiles without
 * their padded copy and result rows. The tiles of a column strip run over every block of output
 * channels in turn, so the strip (nc x NV vectors) is read from L1 after its first block.
 * A range of cells narrower than a tile ends on tiles of fewer vectors, then on one vector that
 * ends at the range's last cell (recomputing some cells to the same bits); a range narrower than
 * a vector goes cell by cell. Every cell sums its channels in order, one multiply-add each, in
 * any lane, tile or thread (scalar code contracts to the same FMA in each target function), so
 * the bits do not depend on the split into ranges. One source built per instruction set
 * through GCC's target attribute, picked by cpu_isa.h's codes, as conv_tile.h's and dw3.h's.
 *
 * The sums stay in registers through the store: the rows are unrolled, each guarded, where a
 * loop bounded by no kept them on the stack (12 spills and reloads per tile, as much as 32
 * channels' multiply-adds take on AVX2). On AVX2 the first block of a strip prefetches the
 * next strip's columns: with nc rows ldx apart, a strip is nc lines from as many pages, more
 * streams than the hardware prefetcher follows, so its first block otherwise waits on each
 * (192 -> 32 at 56x56). With few input channels (at most PW_NARROW_CHANNELS) AVX2 runs tiles of
 * 2 vectors, not 3: a strip then fills whole lines of y, and the sum over a few channels is too
 * short to hide the wider tile's stores. Measured on AMD Zen 3 (1 thread; a C harness calling
 * the kernels before and after these three changes alternately in one process, medians of 41
 * calls, the machine loaded), new over old time: 192 -> 32 at 56x56 0.91-0.94, 32 -> 192 at
 * 56x56 0.94-0.96 and at 28x28 0.92-0.93, 192 -> 32 at 28x28 0.93-1.01, 16 -> 96 at 112x112
 * 0.76, 960 -> 160 at 7x7 0.97, 160 -> 960 0.90; the bits unchanged. AVX-512 keeps its tiles
 * and takes no prefetch (not measured here: this CPU has no AVX-512); only its store lost the
 * stack round trip. */
#ifndef MG_CONV_POINTWISE_H
#define MG_CONV_POINTWISE_H

#include <stddef.h>

#include "activation.h"
#include "cpu_isa.h"

#define PW_ARGS                                                                              \
    const float *restrict x, ptrdiff_t ldx, ptrdiff_t nc, const float *restrict w,           \
        ptrdiff_t no, const float *restrict bias, int act, float *restrict y, ptrdiff_t ldy, \
        ptrdiff_t c0, ptrdiff_t c1

/* y[o][c] = act(sum_k w[o * nc + k] * x[k * ldx + c] + bias[o]) for o < no, c in [c0, c1) */
typedef void (*pw_fn)(PW_ARGS);

/* output channels [o, o + ROWS) (rows past no repeat the last and are not stored) of the NV
 * vectors of cells from c; PF: prefetch the next strip of NV vectors (its lines) */
#define PW_TILE(NV, o, c, PF)                                                                \
    {                                                                                        \
        const float* wr[ROWS];                                                               \
        vec acc[ROWS][NV];                                                                   \
        _Pragma("GCC unroll 16") for (int r = 0; r < ROWS; r++) {                            \
            wr[r] = w + ((o) + r < no ? (o) + r : no - 1) * nc;                              \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = (vec){0};       \
        }                                                                                    \
        const float* xc = x + (c);                                                           \
        for (ptrdiff_t k = 0; k < nc; k++, xc += ldx) {                                      \
            vec in[NV];                                                                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                             \
                in[v] = *(const uvec*)(xc + v * VW);                                         \
            if (PF) _Pragma("GCC unroll 4") for (int l = 0; l < NV * VW; l += 16)            \
                __builtin_prefetch(xc + NV * VW + l);                                        \
            _Pragma("GCC unroll 16") for (int r = 0; r < ROWS; r++) {                        \
                vec b = wr[r][k] - (vec){0};                                                 \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] += b * in[v]; \
            }                                                                                \
        }                                                                                    \
        _Pragma("GCC unroll 16") for (int r = 0; r < ROWS; r++) {                            \
            if ((o) + r >= no) break;                                                        \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                           \
                vec t = acc[r][v];                                                           \
                if (bias) t += bias[(o) + r] - (vec){0};                                     \
                ACT_VEC(vec, ivec, t, act);                                                  \
                *(uvec*)(y + ((o) + r) * ldy + (c) + v * VW) = t;                            \
            }                                                                                \
        }                                                                                    \
    }

/* every block of output channels over the NV vectors of cells from c, the first prefetching
 * the next strip where PF */
#define PW_STRIP(NV, c, PF)                                                                  \
    {                                                                                        \
        PW_TILE(NV, 0, c, PF)                                                                \
        for (ptrdiff_t o = ROWS; o < no; o += ROWS) PW_TILE(NV, o, c, 0)                     \
    }

#define PW_BODY(VW_, ROWS_, NV_, PF_)                                                        \
    {                                                                                        \
        typedef float vec __attribute__((vector_size(VW_ * 4)));                             \
        typedef float uvec __attribute__((vector_size(VW_ * 4), aligned(4)));                \
        typedef int ivec __attribute__((vector_size(VW_ * 4)));                              \
        enum { VW = VW_, ROWS = ROWS_, COLS = VW_ * NV_ };                                   \
        ptrdiff_t c = c0;                                                                    \
        for (; c + COLS <= c1; c += COLS) PW_STRIP(NV_, c, PF_)                              \
        if (NV_ > 2 && c + 2 * VW <= c1) {                                                   \
            PW_STRIP(2, c, 0)                                                                \
            c += 2 * VW;                                                                     \
        }                                                                                    \
        if (NV_ > 1 && c + VW <= c1) {                                                       \
            PW_STRIP(1, c, 0)                                                                \
            c += VW;                                                                         \
        }                                                                                    \
        if (c < c1 && c1 - c0 >= VW) {                                                       \
            PW_STRIP(1, c1 - VW, 0)                                                          \
            c = c1;                                                                          \
        }                                                                                    \
        for (; c < c1; c++)                                                                  \
            for (ptrdiff_t o = 0; o < no; o++) {                                             \
                float acc = 0;                                                               \
                for (ptrdiff_t k = 0; k < nc; k++) acc += w[o * nc + k] * x[k * ldx + c];    \
                if (bias) acc += bias[o];                                                    \
                y[o * ldy + c] = act_f32(acc, act);                                          \
            }                                                                                \
    }

/* input channels at most for which AVX2 runs the tiles of 2 vectors (pw_avx2_narrow) */
#define PW_NARROW_CHANNELS 96

static void pw_base(PW_ARGS) PW_BODY(4, 4, 2, 0)
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void pw_avx2(PW_ARGS) PW_BODY(8, 4, 3, 1)
__attribute__((target("avx2,fma"))) static void pw_avx2_narrow(PW_ARGS) PW_BODY(8, 4, 2, 1)
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void pw_avx512(PW_ARGS) PW_BODY(16, 8, 3, 0)
#endif

/* the cells of one vector of ``isa``'s kernel: a range at least this wide ends on whole vectors */
static inline ptrdiff_t pw_vector(ptrdiff_t isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 2 && cpu_isa_ok(2)) return 16;
    if (isa >= 1 && cpu_isa_ok(1)) return 8;
#endif
    (void)isa;
    return 4;
}

/* the kernel for instruction set ``isa`` (0 baseline, 1 AVX2 + FMA, 2 AVX-512F + FMA), or the
 * widest narrower one this CPU runs (a plan made on another machine), for nc input channels */
static inline pw_fn pw_of(ptrdiff_t isa, ptrdiff_t nc) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 2 && cpu_isa_ok(2)) return pw_avx512;
    if (isa >= 1 && cpu_isa_ok(1)) return nc <= PW_NARROW_CHANNELS ? pw_avx2_narrow : pw_avx2;
#endif
    (void)isa, (void)nc;
    return pw_base;
}

#endif
