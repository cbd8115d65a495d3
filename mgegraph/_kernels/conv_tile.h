/* Register-blocked tiles of a stride-1 convolution (float32), for conv.pyx's "blocked" path.
 *
 * Design: over a zero-padded input plane (hp, wp) read at flat offsets, output cell q (a flat
 * index over rows of wp cells) of one output channel is sum over (c, tap) of
 * w[c, tap] * x[c * cstride + q + off[tap]] (see conv_blocked.pxi). A tile keeps ROWS output
 * channels x COLS consecutive cells in vector registers for the whole sum: per (c, tap) it loads
 * COLS / VW input vectors once and multiplies each by ROWS broadcast weights, so the inner loop
 * does ROWS * COLS / VW fused multiply-adds per COLS / VW + ROWS loads and never touches the
 * output. That is oneDNN's and MLAS's register blocking; the tile shapes fill the register file
 * (AVX-512: 8 x 3 zmm accumulators of 32; AVX2: 4 x 3 of 16 ymm; baseline SSE2: 4 x 2 of 16).
 * With accumulate, the sum starts from y's tile instead of zero (stride 2 sums its four phases
 * in turn, conv_blocked.pxi).
 *
 * One source, built once per instruction set through GCC's target attribute (vector extension
 * types, so no intrinsics) and checked at run time by cpu_isa_ok(). Packed weights come in
 * blocks of CONV_PACK output channels: w[c][tap][CONV_PACK]; a tile of fewer ROWS reads its
 * sub-block. Reads may run up to COLS - 1 cells past the last output cell: the caller's buffer
 * has that slack, and the cells they feed are dropped.
 */
#ifndef MG_CONV_TILE_H
#define MG_CONV_TILE_H

#include <stddef.h>

#include "activation.h" /* the epilogue's activations */
#include "cpu_isa.h" /* cpu_isa_ok: whether this CPU runs an isa's tiles */

#define CONV_PACK 8      /* output channels per packed weight block */
#define CONV_COLS_MAX 48 /* the widest tile's columns: the slack a padded buffer carries */

typedef void (*conv_tile_fn)(const float* x, ptrdiff_t cstride, const ptrdiff_t* offs,
                             ptrdiff_t ntaps, ptrdiff_t nc, const float* w, float* y,
                             ptrdiff_t ldy, ptrdiff_t nrows, int accumulate);

#define CONV_TILE_BODY(VW, ROWS, NV)                                                         \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    vec acc[ROWS][NV];                                                                       \
    _Pragma("GCC unroll 8") for (int r = 0; r < ROWS; r++)                                   \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                 \
            acc[r][v] = accumulate && r < nrows ? *(const uvec*)(y + r * ldy + v * VW)       \
                                                : (vec){0};                                  \
    for (ptrdiff_t c = 0; c < nc; c++) {                                                     \
        const float* xc = x + c * cstride;                                                   \
        for (ptrdiff_t t = 0; t < ntaps; t++, w += CONV_PACK) {                              \
            const float* p = xc + offs[t];                                                   \
            vec in[NV];                                                                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                             \
                in[v] = *(const uvec*)(p + v * VW);                                          \
            _Pragma("GCC unroll 8") for (int r = 0; r < ROWS; r++) {                         \
                vec b = w[r] - (vec){0};                                                     \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] += b * in[v]; \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    for (int r = 0; r < ROWS && r < nrows; r++)                                              \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                 \
            *(uvec*)(y + r * ldy + v * VW) = acc[r][v];

#define CONV_TILE_ARGS                                                                       \
    const float* x, ptrdiff_t cstride, const ptrdiff_t* offs, ptrdiff_t ntaps, ptrdiff_t nc, \
    const float* w, float* y, ptrdiff_t ldy, ptrdiff_t nrows, int accumulate

static void conv_tile_base(CONV_TILE_ARGS) { CONV_TILE_BODY(4, 4, 2) }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void conv_tile_avx2(CONV_TILE_ARGS)
{ CONV_TILE_BODY(8, 4, 3) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void conv_tile_avx512(CONV_TILE_ARGS) { CONV_TILE_BODY(16, 8, 3) }
#endif

/* Gather tiles: the transposed blocking, for small planes and strides (conv.pyx's "gather" path).
 * A tile keeps PIX output cells x CH output channels (CH / VW vectors) in registers: per (c, tap)
 * it loads CH / VW weight vectors (w[c][tap][0..CH), rows ldw floats apart: CH for packed
 * weights, a matrix's row length to read CH of its columns in place) and broadcasts one input
 * value per cell, read at px[p] + c * cstride + off[tap], so a cell can sit anywhere (any
 * stride, no wrapped cells computed). The result goes to y[p][0..CH) (cells by channels); the
 * caller transposes.
 */
#define CONV_CPACK 48    /* the widest gather tile's channels */
#define CONV_PIX_MAX 12 /* the most cells a gather tile takes */

typedef void (*conv_gather_fn)(const float* const* px, ptrdiff_t cstride, const ptrdiff_t* offs,
                               ptrdiff_t ntaps, ptrdiff_t nc, const float* w, ptrdiff_t ldw,
                               float* y, ptrdiff_t ldy, int accumulate);

#define CONV_GATHER_BODY(VW, PIX, NV)                                                        \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    vec acc[PIX][NV];                                                                        \
    _Pragma("GCC unroll 8") for (int p = 0; p < PIX; p++)                                    \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[p][v] = (vec){0};           \
    for (ptrdiff_t c = 0; c < nc; c++) {                                                     \
        for (ptrdiff_t t = 0; t < ntaps; t++, w += ldw) {                                    \
            ptrdiff_t off = c * cstride + offs[t];                                           \
            vec wv[NV];                                                                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                             \
                wv[v] = *(const uvec*)(w + v * VW);                                          \
            _Pragma("GCC unroll 8") for (int p = 0; p < PIX; p++) {                          \
                vec b = px[p][off] - (vec){0};                                               \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[p][v] += b * wv[v]; \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    _Pragma("GCC unroll 12") for (int p = 0; p < PIX; p++)                                   \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                               \
            uvec* out = (uvec*)(y + p * ldy + v * VW);                                       \
            *out = accumulate ? *out + acc[p][v] : acc[p][v];                                \
        }

#define CONV_GATHER_ARGS                                                                     \
    const float* const* px, ptrdiff_t cstride, const ptrdiff_t* offs, ptrdiff_t ntaps,      \
    ptrdiff_t nc, const float* w, ptrdiff_t ldw, float* y, ptrdiff_t ldy, int accumulate

static void conv_gather_base(CONV_GATHER_ARGS) { CONV_GATHER_BODY(4, 4, 2) }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void conv_gather_avx2(CONV_GATHER_ARGS)
{ CONV_GATHER_BODY(8, 6, 2) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void conv_gather_avx512(CONV_GATHER_ARGS) { CONV_GATHER_BODY(16, 8, 3) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void conv_gather_avx512_narrow(CONV_GATHER_ARGS) { CONV_GATHER_BODY(16, 12, 2) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void conv_gather_avx512_64(CONV_GATHER_ARGS) { CONV_GATHER_BODY(16, 7, 4) }
#endif

/* aarch64: NEON (every aarch64 CPU has it) through intrinsics, its 32 registers filled: the row
 * tile 8 channels x 12 cells (24 accumulators), each tap's 8 weights loaded as two vectors and
 * taken by lane (vfmaq_laneq_f32) instead of 8 broadcasts; the gather tiles 6 cells x 16
 * channels and 12 x 8 (24 accumulators), the shapes of AVX2's. Each sum is the same fused
 * multiply-adds in the same order as the x86 FMA tiles', so the bits are theirs (and the
 * baseline tile's, which aarch64's builds contract into FMAs). */
#if defined(__GNUC__) && defined(__aarch64__)
#include <arm_neon.h>

/* acc[R0 + lane][v] += q[lane] * in[v] for lane 0..3: four rows' weights in one vector */
#define CONV_NEON_LANES(R0, q, NV)                                                           \
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                   \
        acc[R0][v] = vfmaq_laneq_f32(acc[R0][v], in[v], q, 0);                               \
        acc[R0 + 1][v] = vfmaq_laneq_f32(acc[R0 + 1][v], in[v], q, 1);                       \
        acc[R0 + 2][v] = vfmaq_laneq_f32(acc[R0 + 2][v], in[v], q, 2);                       \
        acc[R0 + 3][v] = vfmaq_laneq_f32(acc[R0 + 3][v], in[v], q, 3);                       \
    }

#define CONV_TILE_NEON_BODY(NV) /* 8 rows: CONV_PACK, so a tap's weights are two vectors */  \
    float32x4_t acc[8][NV];                                                                  \
    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)                                      \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                 \
            acc[r][v] = accumulate && r < nrows ? vld1q_f32(y + r * ldy + v * 4)             \
                                                : vdupq_n_f32(0);                            \
    for (ptrdiff_t c = 0; c < nc; c++) {                                                     \
        const float* xc = x + c * cstride;                                                   \
        for (ptrdiff_t t = 0; t < ntaps; t++, w += CONV_PACK) {                              \
            const float* p = xc + offs[t];                                                   \
            float32x4_t in[NV], lo = vld1q_f32(w), hi = vld1q_f32(w + 4);                    \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) in[v] = vld1q_f32(p + v * 4); \
            CONV_NEON_LANES(0, lo, NV)                                                       \
            CONV_NEON_LANES(4, hi, NV)                                                       \
        }                                                                                    \
    }                                                                                        \
    for (int r = 0; r < 8 && r < nrows; r++)                                                 \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                 \
            vst1q_f32(y + r * ldy + v * 4, acc[r][v]);

#define CONV_GATHER_NEON_BODY(PIX, NV)                                                       \
    float32x4_t acc[PIX][NV];                                                                \
    _Pragma("GCC unroll 12") for (int p = 0; p < PIX; p++)                                   \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[p][v] = vdupq_n_f32(0);     \
    for (ptrdiff_t c = 0; c < nc; c++) {                                                     \
        for (ptrdiff_t t = 0; t < ntaps; t++, w += ldw) {                                    \
            ptrdiff_t off = c * cstride + offs[t];                                           \
            float32x4_t wv[NV];                                                              \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) wv[v] = vld1q_f32(w + v * 4); \
            _Pragma("GCC unroll 12") for (int p = 0; p < PIX; p++) {                         \
                float32x4_t b = vld1q_dup_f32(px[p] + off);                                  \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                         \
                    acc[p][v] = vfmaq_f32(acc[p][v], b, wv[v]);                              \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    _Pragma("GCC unroll 12") for (int p = 0; p < PIX; p++)                                   \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                               \
            float* out = y + p * ldy + v * 4;                                                \
            vst1q_f32(out, accumulate ? vaddq_f32(vld1q_f32(out), acc[p][v]) : acc[p][v]);   \
        }

static void conv_tile_neon(CONV_TILE_ARGS) { CONV_TILE_NEON_BODY(3) }
static void conv_gather_neon(CONV_GATHER_ARGS) { CONV_GATHER_NEON_BODY(6, 4) }
static void conv_gather_neon_narrow(CONV_GATHER_ARGS) { CONV_GATHER_NEON_BODY(12, 2) }
#endif

/* isa: 0 baseline (aarch64's: the NEON tiles), 1 AVX2 + FMA, 2 AVX-512F; rows/cols: the row
 * tile's shape, pix/ch the gather tile's; narrow*: a gather tile of fewer channels, for channel
 * counts it divides */
typedef struct {
    conv_tile_fn fn; ptrdiff_t rows, cols;
    conv_gather_fn gather; ptrdiff_t pix, ch;
    conv_gather_fn narrow; ptrdiff_t narrow_pix, narrow_ch;
} conv_tile;

static conv_tile conv_tile_of(int isa) {
    conv_tile t = {conv_tile_base, 4, 8, conv_gather_base, 4, 8, conv_gather_base, 4, 8};
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa == 1) {
        t.fn = conv_tile_avx2; t.cols = 24;
        t.gather = t.narrow = conv_gather_avx2; t.pix = t.narrow_pix = 6; t.ch = t.narrow_ch = 16;
    }
    if (isa == 2) {
        t.fn = conv_tile_avx512; t.rows = 8; t.cols = 48;
        t.gather = conv_gather_avx512; t.pix = 8; t.ch = 48;
        t.narrow = conv_gather_avx512_narrow; t.narrow_pix = 12; t.narrow_ch = 32;
    }
#elif defined(__GNUC__) && defined(__aarch64__)
    /* aarch64's one isa: its baseline has NEON and the FMA (the NEON tiles above) */
    t.fn = conv_tile_neon; t.rows = 8; t.cols = 12;
    t.gather = conv_gather_neon; t.pix = 6; t.ch = 16;
    t.narrow = conv_gather_neon_narrow; t.narrow_pix = 12; t.narrow_ch = 8;
    (void)isa;
#endif
    return t;
}

/* The gather tiles of conv2d_packed (weights packed once, in blocks of a tile's channels), widest
 * first: AVX-512 adds one of 64 channels x 7 cells (28 accumulators), which ran the ResNet
 * layers it takes 7-25% faster than the 48 x 8 tile on the EPYC (Zen 4), and fills 7x7 planes.
 * Returns how many the isa has (at most CONV_PACKED_MAX). */
#define CONV_PACKED_MAX 3
typedef struct { conv_gather_fn fn; ptrdiff_t pix, ch; } conv_packed_tile;

static int conv_packed_tiles(int isa, conv_packed_tile* out) {
    conv_tile t = conv_tile_of(isa);
    int n = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa == 2) out[n++] = (conv_packed_tile){conv_gather_avx512_64, 7, 64};
#endif
    out[n++] = (conv_packed_tile){t.gather, t.pix, t.ch};
    if (t.narrow_ch != t.ch) out[n++] = (conv_packed_tile){t.narrow, t.narrow_pix, t.narrow_ch};
    return n;
}

/* The gather tiles' results out: y[o * ldy + i] = act(cells[i * ldc + o] + bias[o]) for
 * channels [o0, o1) and cells [0, ncells): cells (cell, channel) rows, y (channel, cell) rows;
 * bias NULL adds 0. By blocks of CONV_OUT_CELLS cells whose rows stay in L1; with AVX2, 8 x 8
 * blocks are transposed in registers (a scalar loop did one element per 3-4 instructions), the
 * rest element by element. Bitwise the same either way: the add and the activation (act, an
 * activation.h code) on every element. */
#define CONV_OUT_CELLS 64
typedef void (*conv_out_fn)(const float* cells, ptrdiff_t ldc, float* y, ptrdiff_t ldy,
                            ptrdiff_t ncells, ptrdiff_t o0, ptrdiff_t o1, const float* bias,
                            int act);

static inline float conv_out_one(float v, float add, int act) { return act_f32(v + add, act); }

#define CONV_OUT_ARGS                                                                        \
    const float* cells, ptrdiff_t ldc, float* y, ptrdiff_t ldy, ptrdiff_t ncells,          \
    ptrdiff_t o0, ptrdiff_t o1, const float* bias, int act

static void conv_out_base(CONV_OUT_ARGS) {
    for (ptrdiff_t i0 = 0; i0 < ncells; i0 += CONV_OUT_CELLS) {
        ptrdiff_t i1 = i0 + CONV_OUT_CELLS < ncells ? i0 + CONV_OUT_CELLS : ncells;
        for (ptrdiff_t o = o0; o < o1; o++) {
            float add = bias ? bias[o] : 0;
            for (ptrdiff_t i = i0; i < i1; i++)
                y[o * ldy + i] = conv_out_one(cells[i * ldc + o], add, act);
        }
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2"))) static void conv_out_avx2(CONV_OUT_ARGS) {
    typedef float v8 __attribute__((vector_size(32)));
    typedef float uv8 __attribute__((vector_size(32), aligned(4)));
    typedef int i8 __attribute__((vector_size(32)));
    const i8 lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
    const i8 pair_lo = {0, 1, 8, 9, 4, 5, 12, 13}, pair_hi = {2, 3, 10, 11, 6, 7, 14, 15};
    const i8 half_lo = {0, 1, 2, 3, 8, 9, 10, 11}, half_hi = {4, 5, 6, 7, 12, 13, 14, 15};
    ptrdiff_t o8 = o0 + (o1 - o0) / 8 * 8;
    for (ptrdiff_t i0 = 0; i0 < ncells; i0 += CONV_OUT_CELLS) {
        ptrdiff_t i1 = i0 + CONV_OUT_CELLS < ncells ? i0 + CONV_OUT_CELLS : ncells;
        ptrdiff_t i8e = i0 + (i1 - i0) / 8 * 8;
        for (ptrdiff_t o = o0; o < o8; o += 8) {
            for (ptrdiff_t i = i0; i < i8e; i += 8) {
                v8 r[8], t[8], u[8], out[8];
                for (int k = 0; k < 8; k++) r[k] = *(const uv8*)(cells + (i + k) * ldc + o);
                for (int k = 0; k < 8; k += 2) {
                    t[k] = __builtin_shuffle(r[k], r[k + 1], lo);
                    t[k + 1] = __builtin_shuffle(r[k], r[k + 1], hi);
                }
                /* u[0..3]: channels (0, 4), (1, 5), (2, 6), (3, 7) of cells 0-3; u[4..7]: 4-7 */
                for (int h = 0; h < 8; h += 4) {
                    u[h] = __builtin_shuffle(t[h], t[h + 2], pair_lo);
                    u[h + 1] = __builtin_shuffle(t[h], t[h + 2], pair_hi);
                    u[h + 2] = __builtin_shuffle(t[h + 1], t[h + 3], pair_lo);
                    u[h + 3] = __builtin_shuffle(t[h + 1], t[h + 3], pair_hi);
                }
                for (int j = 0; j < 4; j++) {
                    out[j] = __builtin_shuffle(u[j], u[j + 4], half_lo);
                    out[j + 4] = __builtin_shuffle(u[j], u[j + 4], half_hi);
                }
                for (int j = 0; j < 8; j++) {
                    float b = bias ? bias[o + j] : 0;
                    v8 v = out[j] + (v8){b, b, b, b, b, b, b, b};
                    ACT_VEC(v8, i8, v, act);
                    *(uv8*)(y + (o + j) * ldy + i) = v;
                }
            }
            for (ptrdiff_t j = o; j < o + 8; j++) {
                float add = bias ? bias[j] : 0;
                for (ptrdiff_t i = i8e; i < i1; i++)
                    y[j * ldy + i] = conv_out_one(cells[i * ldc + j], add, act);
            }
        }
        for (ptrdiff_t o = o8; o < o1; o++) {
            float add = bias ? bias[o] : 0;
            for (ptrdiff_t i = i0; i < i1; i++)
                y[o * ldy + i] = conv_out_one(cells[i * ldc + o], add, act);
        }
    }
}
#endif

static conv_out_fn conv_out_of(int isa) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (isa >= 1) return conv_out_avx2;
#endif
    return conv_out_base;
}

#endif
