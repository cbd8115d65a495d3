/* The int8 GEMM core of the quantized convolution and linear kernels (qgemm.pyx):
 * C[m, n] = sum_k A[m, k] * B[k, n] in int32, with the requantisation epilogue fused at the
 * tile's store.
 *
 * Design: A holds the weights, int8 (a uint8 weight is shifted to int8 by -128 when it is
 * packed, its zero point with it), B the activations, uint8 (an int8 activation is shifted by
 * +128 when it is packed, the sign bit flipped), which is the operand order of VNNI's vpdpbusd
 * (u8 x s8, four products summed into an int32 lane). With x' and w' the shifted values and zx',
 * zw'[m] their zero points,
 *     acc = sum (x' - zx')(w' - zw') + bias
 *         = sum x' w'  +  (bias - zx' rowsum(w') + K zx' zw')  -  zw' colsum(x'),
 * the middle term is a per-row constant computed once when the weights are packed, and the last
 * one (only where a weight zero point is not 0) takes the per-column sums of B, computed from
 * the packed B. Every sum wraps in int32: the result is the true one modulo 2^32, so exact
 * wherever the true accumulator fits in int32 (the ops' contract), and beyond it the same
 * integers as any other int32 accumulation (quantized.pyx's portable loops).
 *
 * Packed layouts (KG = ceil(K / 4) groups of 4 k; K padded with zeros, which add nothing, to
 * KGS = KG rounded up to 16 groups, 64 k: one AMX tile's depth):
 *   A: [M rounded up to QG_AR rows][KGS * 4 k] int8, row-major (missing rows are zero);
 *   B: [ceil(N / QG_NB) column blocks][KGS][QG_NB columns][4 k] uint8 (missing columns zero).
 * A column block of one k group is 64 bytes: one zmm, two ymm, one row of an AMX tile; A's
 * rows are AMX tile rows. One layout serves every variant, so weights packed once (the prepack
 * pass, at compile time) are valid whichever variant runs.
 *
 * One tile is QG_MR rows by up to QG_NV column blocks, summed over all of K in registers. Four
 * variants of the tile, one per instruction set, all exact integer sums, so all give the same
 * integers: AVX-512 VNNI (8 x 3 zmm accumulators), AVX-VNNI (vpdpbusd on ymm), AVX2 (widened to
 * int16 and summed in pairs with vpmaddwd, 4 x 8 register blocks: vpmaddubsw would saturate;
 * on weights whose packed bytes prove it cannot, qg_pairs_fit, the vpmaddubsw tile
 * qg_tile_avx2_pairs) and portable C. A fifth, AMX (qgemm_amx.h), runs blocks of 32 x 32 on the tile registers
 * (TDPBSUD: signed A rows times unsigned B, the same operands) and the AVX-512 VNNI epilogue.
 * On aarch64 built with the dot product (-march=armv8.2-a+dotprod) the portable variant's tile
 * and GEMV run on sdot (s8 x s8: B's bytes sign-flipped, the difference added back).
 * The epilogue is one C loop built per instruction set, in float32 without contraction: the same
 * bits everywhere. qg_widest picks the widest variant this CPU runs, once
 * per process, or the one MGEGRAPH_INT8_ISA names (the tests force each one).
 */
#ifndef MG_QGEMM_H
#define MG_QGEMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* QG_PORTABLE_ONLY builds what a non-x86 machine builds (to check that it compiles) */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(QG_PORTABLE_ONLY)
#define QG_X86 1
#include <immintrin.h>
#else
#define QG_X86 0
#endif

#define QG_MR 8  /* rows of A per tile */
#define QG_AR 16 /* A's rows are padded to a multiple of this: an AMX tile's rows */
#define QG_KS 16 /* B's and A's k groups are padded to a multiple of this: an AMX tile's depth */
#define QG_NB 16 /* columns of B per packed block */
#define QG_NV 3  /* column blocks per tile, at most */
#define QG_TILE_COLS (QG_NB * QG_NV)

enum { QG_PORTABLE = 0, QG_AVX2 = 1, QG_AVXVNNI = 2, QG_AVX512VNNI = 3, QG_AMX = 4, QG_ISAS = 5 };
enum { QG_OUT_INT32 = 0, QG_OUT_INT8 = 1, QG_OUT_UINT8 = 2 };

static const char* const qg_isa_names[QG_ISAS] = {"portable", "avx2", "avxvnni", "avx512vnni",
                                                   "amx"};

#include "qgemm_amx.h"

/* whether this CPU runs variant ``isa`` (AMX: and the kernel lets this process use the tiles) */
static inline int qg_isa_ok(int isa) {
#if QG_X86
    __builtin_cpu_init();
    if (isa == QG_AVX2) return __builtin_cpu_supports("avx2");
    if (isa == QG_AVXVNNI) return __builtin_cpu_supports("avx2")
                                  && __builtin_cpu_supports("avxvnni");
    if (isa == QG_AVX512VNNI || isa == QG_AMX)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx512vnni") && (isa != QG_AMX || qg_amx_ready());
#endif
    return isa == QG_PORTABLE;
}

static inline int qg_widest(void) {
    for (int isa = QG_ISAS - 1; isa > 0; isa--)
        if (qg_isa_ok(isa)) return isa;
    return QG_PORTABLE;
}

/* ---- packing ---------------------------------------------------------------------------- */

static inline ptrdiff_t qg_groups(ptrdiff_t k) { return (k + 3) / 4; }
static inline ptrdiff_t qg_blocks(ptrdiff_t n, ptrdiff_t per) { return (n + per - 1) / per; }
/* k groups of a packed B column block and of a packed A row (a multiple of QG_KS) */
static inline ptrdiff_t qg_padded_groups(ptrdiff_t kg) { return qg_blocks(kg, QG_KS) * QG_KS; }
/* bytes between A's rows, and between B's column blocks */
static inline ptrdiff_t qg_a_stride(ptrdiff_t kg) { return qg_padded_groups(kg) * 4; }
static inline ptrdiff_t qg_b_stride(ptrdiff_t kg) { return qg_padded_groups(kg) * QG_NB * 4; }
/* bytes of packed A of m rows of kg groups */
static inline ptrdiff_t qg_a_bytes(ptrdiff_t m, ptrdiff_t kg) {
    return qg_blocks(m, QG_AR) * QG_AR * qg_a_stride(kg);
}

/* the sum of a weight row's shifted values (int8: as stored; uint8: minus 128) */
static int32_t qg_row_sum(const uint8_t* w, int w_unsigned, ptrdiff_t k) {
    int32_t s = 0;
    if (w_unsigned)
        for (ptrdiff_t i = 0; i < k; i++) s += (int32_t)w[i] - 128;
    else
        for (ptrdiff_t i = 0; i < k; i++) s += (int8_t)w[i];
    return s;
}

/* Packs rows [0, m) of w (k values each, row stride ldw; uint8 when w_unsigned, shifted to int8
 * by flipping its sign bit) into A's layout, and each row's constant bias - zx' rowsum + K zx'
 * zw' (wrapped to int32, as the sums wrap; zw the shifted zero points, bias NULL for none). */
static void qg_pack_a(const uint8_t* w, int w_unsigned, ptrdiff_t m, ptrdiff_t k, ptrdiff_t ldw,
                     const int32_t* zw, int32_t zx, const int32_t* bias, int8_t* dst,
                     int32_t* row_const) {
    ptrdiff_t lda = qg_a_stride(qg_groups(k));
    uint8_t flip = w_unsigned ? 0x80 : 0;
    memset(dst, 0, (size_t)qg_a_bytes(m, qg_groups(k)));
    for (ptrdiff_t r = 0; r < m; r++)
        for (ptrdiff_t i = 0; i < k; i++) dst[r * lda + i] = (int8_t)(w[r * ldw + i] ^ flip);
    for (ptrdiff_t r = 0; r < m; r++) {
        int64_t c = (bias ? bias[r] : 0) - (int64_t)zx * qg_row_sum(w + r * ldw, w_unsigned, k)
                    + (int64_t)k * zx * zw[r];
        row_const[r] = (int32_t)(uint32_t)(uint64_t)c;
    }
}

/* The flags word that follows packed weights' per-channel constants (qgemm.pyx's packed_size):
 * QG_ZERO_POINTS where a weight zero point is not 0, QG_PAIRS_FIT where qg_pairs_fit proved
 * the packed A (a flag set from its bytes when packed, never assumed from a dtype). A word of 0
 * or 1 (weights packed before the second flag existed) runs the widening tile, as it did. */
enum { QG_ZERO_POINTS = 1, QG_PAIRS_FIT = 2 };

/* Whether vpmaddubsw is exact on rows [0, rows) of packed A (lda bytes apart, k padded with
 * zeros): with the activation u in [0, 255], a k pair (2i, 2i + 1) of a row sums
 * u0 w0 + u1 w1 in int16 without saturating for every u exactly when the pair's positive parts
 * sum to at most 128 and its negative parts to at least -128 (255 * 128 = 32640 <= 32767). The
 * pairs are the packed layout's own: bytes 2i, 2i + 1 of a row, zero padding included. */
static int qg_pairs_fit(const int8_t* a, ptrdiff_t lda, ptrdiff_t rows) {
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t i = 0; i < lda; i += 2) {
            int w0 = a[r * lda + i], w1 = a[r * lda + i + 1];
            int pos = (w0 > 0 ? w0 : 0) + (w1 > 0 ? w1 : 0);
            int neg = (w0 < 0 ? w0 : 0) + (w1 < 0 ? w1 : 0);
            if (pos > 128 || neg < -128) return 0;
        }
    return 1;
}

/* the flags word of packed weights: `groups` packed As of m rows (qg_a_bytes apart), and the
 * oc = groups * m shifted weight zero points */
static int32_t qg_weights_flags(const int8_t* a, ptrdiff_t groups, ptrdiff_t m, ptrdiff_t kg,
                                const int32_t* zw) {
    int32_t flags = QG_PAIRS_FIT;
    for (ptrdiff_t o = 0; o < groups * m; o++)
        if (zw[o]) flags |= QG_ZERO_POINTS;
    for (ptrdiff_t gi = 0; gi < groups; gi++)
        if (!qg_pairs_fit(a + gi * qg_a_bytes(m, kg), qg_a_stride(kg), m))
            flags &= ~QG_PAIRS_FIT;
    return flags;
}

/* Interleaves the 4 k rows of one group (rows[j] NULL past K: zeros) for columns [n0, n1) of B
 * (n0 a multiple of QG_NB; row values n - n0 apart by 1) into the packed B of that group, whose
 * column blocks lie block_stride bytes apart; flip (0 or 0x80) shifts int8 to uint8. */
static void qg_interleave(const uint8_t* const rows[4], ptrdiff_t n0, ptrdiff_t n1, uint8_t flip,
                          uint8_t* dst, ptrdiff_t block_stride) {
    ptrdiff_t n = n0;
#if QG_X86
    __m128i f = _mm_set1_epi8((char)flip);
    for (; n + QG_NB <= n1; n += QG_NB) {
        __m128i r[4];
        for (int j = 0; j < 4; j++)
            r[j] = rows[j] ? _mm_xor_si128(_mm_loadu_si128((const __m128i*)(rows[j] + n - n0)), f)
                           : _mm_setzero_si128();
        __m128i t0 = _mm_unpacklo_epi8(r[0], r[1]), t1 = _mm_unpackhi_epi8(r[0], r[1]);
        __m128i t2 = _mm_unpacklo_epi8(r[2], r[3]), t3 = _mm_unpackhi_epi8(r[2], r[3]);
        __m128i* out = (__m128i*)(dst + (n / QG_NB) * block_stride);
        _mm_storeu_si128(out, _mm_unpacklo_epi16(t0, t2));
        _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(t0, t2));
        _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(t1, t3));
        _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(t1, t3));
    }
#endif
    for (; n < n1; n += QG_NB) {
        uint8_t* out = dst + (n / QG_NB) * block_stride;
        for (ptrdiff_t c = 0; c < QG_NB; c++)
            for (int j = 0; j < 4; j++)
                out[c * 4 + j] = rows[j] && n + c < n1 ? (uint8_t)(rows[j][n + c - n0] ^ flip)
                                                        : 0;
    }
}

/* Packs columns [n0, n1) of B when each column's k values are contiguous (x (N, K), a linear
 * layer's input: B[k, n] = x[n * ldx + k]); n0 a multiple of QG_NB. */
static void qg_pack_b_columns(const uint8_t* x, ptrdiff_t k, ptrdiff_t ldx, ptrdiff_t n0,
                              ptrdiff_t n1, uint8_t flip, uint8_t* dst) {
    ptrdiff_t block_stride = qg_b_stride(qg_groups(k));
    for (ptrdiff_t b = n0 / QG_NB; b * QG_NB < n1; b++) {
        uint8_t* out = dst + b * block_stride;
        memset(out, 0, (size_t)block_stride);
        for (ptrdiff_t c = 0; c < QG_NB && b * QG_NB + c < n1; c++) {
            const uint8_t* col = x + (b * QG_NB + c) * ldx;
            for (ptrdiff_t i = 0; i < k; i++)
                out[(i / 4) * QG_NB * 4 + c * 4 + i % 4] = (uint8_t)(col[i] ^ flip);
        }
    }
}

/* colsum[n] for columns [n0, n1) of a packed B (zeros past K add nothing) */
static void qg_column_sums(const uint8_t* b, ptrdiff_t kg, ptrdiff_t n0, ptrdiff_t n1,
                           int32_t* colsum) {
    for (ptrdiff_t n = n0; n < n1; n++) {
        const uint8_t* p = b + (n / QG_NB) * qg_b_stride(kg) + (n % QG_NB) * 4;
        int32_t s = 0;
        for (ptrdiff_t g = 0; g < kg; g++, p += QG_NB * 4) s += p[0] + p[1] + p[2] + p[3];
        colsum[n] = s;
    }
}

/* ---- tiles: QG_MR rows x nv column blocks of int32 sums into tile[QG_MR][QG_TILE_COLS] ----- */

#define QG_TILE_ARGS                                                                        \
    const int8_t* a, ptrdiff_t lda, const uint8_t* b, ptrdiff_t block_stride, ptrdiff_t kg, \
        int nv, int32_t* tile

static inline int32_t qg_word(const int8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void qg_tile_portable(QG_TILE_ARGS) {
    for (int r = 0; r < QG_MR; r++)
        for (int c = 0; c < nv * QG_NB; c++) {
            const uint8_t* bc = b + (c / QG_NB) * block_stride + (c % QG_NB) * 4;
            int32_t s = 0;
            for (ptrdiff_t g = 0; g < kg; g++)
                for (int j = 0; j < 4; j++)
                    s += (int32_t)a[r * lda + g * 4 + j] * bc[g * QG_NB * 4 + j];
            tile[r * QG_TILE_COLS + c] = s;
        }
}

/* aarch64 with ARMv8.2's dot product (built for it: -march=armv8.2-a+dotprod defines
 * __ARM_FEATURE_DOTPROD): sdot multiplies int8 by int8, so B's uint8 bytes go in with their sign
 * bit flipped (b - 128) and each row gets 128 times the sum of its A bytes back. The integers
 * are the portable tile's (int32 wraps alike). Per column block and half of the rows, 4 rows x
 * 4 vectors of 4 columns (16 accumulators); a B vector is 4 columns' 4 bytes of one k group. */
#if defined(__GNUC__) && defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD) \
    && !defined(QG_PORTABLE_ONLY)
#include <arm_neon.h>
#define QG_SDOT 1
static void qg_tile_sdot(QG_TILE_ARGS) {
    const int8x16_t flip = vdupq_n_s8(-128);
    for (int v = 0; v < nv; v++)
        for (int h = 0; h < QG_MR; h += 4) {
            int32x4_t acc[4][4];
            uint32_t back[4] = {0, 0, 0, 0};
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) acc[r][q] = vdupq_n_s32(0);
            for (ptrdiff_t g = 0; g < kg; g++) {
                const uint8_t* bg = b + v * block_stride + g * QG_NB * 4;
                int8x16_t bv[4];
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++)
                    bv[q] = veorq_s8(vreinterpretq_s8_u8(vld1q_u8(bg + 16 * q)), flip);
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
                    int8x16_t av =
                        vreinterpretq_s8_s32(vdupq_n_s32(qg_word(a + (h + r) * lda + g * 4)));
                    _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++)
                        acc[r][q] = vdotq_s32(acc[r][q], bv[q], av);
                }
            }
            for (int r = 0; r < 4; r++) {
                for (ptrdiff_t i = 0; i < kg * 4; i++)
                    back[r] += (uint32_t)(int32_t)a[(h + r) * lda + i] * 128u;
                for (int q = 0; q < 4; q++)
                    vst1q_s32(tile + (h + r) * QG_TILE_COLS + v * QG_NB + 4 * q,
                              vreinterpretq_s32_u32(vaddq_u32(vreinterpretq_u32_s32(acc[r][q]),
                                                              vdupq_n_u32(back[r]))));
            }
        }
}
#endif

#if QG_X86
/* AVX-512 VNNI: 8 rows x NV zmm (16 columns each) accumulators; per k group NV loads of B, 8
 * broadcasts of A's 4 bytes, 8 * NV vpdpbusd */
#define QG_TILE512(NV)                                                                      \
    {                                                                                       \
        __m512i acc[QG_MR][NV];                                                             \
        _Pragma("GCC unroll 8") for (int r = 0; r < QG_MR; r++)                             \
            _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++) acc[r][v] =                \
                _mm512_setzero_si512();                                                     \
        for (ptrdiff_t g = 0; g < kg; g++) {                                                \
            __m512i bv[NV];                                                                 \
            _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++) bv[v] =                    \
                _mm512_loadu_si512(b + v * block_stride + g * QG_NB * 4);                   \
            _Pragma("GCC unroll 8") for (int r = 0; r < QG_MR; r++) {                       \
                __m512i av = _mm512_set1_epi32(qg_word(a + r * lda + g * 4));               \
                _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++) acc[r][v] =            \
                    _mm512_dpbusd_epi32(acc[r][v], bv[v], av);                              \
            }                                                                               \
        }                                                                                   \
        _Pragma("GCC unroll 8") for (int r = 0; r < QG_MR; r++)                             \
            _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++)                            \
                _mm512_storeu_si512(tile + r * QG_TILE_COLS + v * 16, acc[r][v]);           \
    }

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void qg_tile_avx512vnni(
    QG_TILE_ARGS) {
    if (nv >= 3) QG_TILE512(3) else if (nv == 2) QG_TILE512(2) else QG_TILE512(1)
}

/* 4 rows x 2 ymm accumulators per column block and half of the rows; DOT(acc, b, a) adds each
 * int32 lane's 4 products of a k group (B's uint8, A's int8 broadcast) to acc */
#define QG_TILE_4X2(DOT)                                                                    \
    for (int v = 0; v < nv; v++)                                                            \
        for (int h = 0; h < QG_MR; h += 4) {                                                \
            __m256i acc[4][2];                                                              \
            for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();     \
            const uint8_t* bv = b + v * block_stride;                                       \
            for (ptrdiff_t g = 0; g < kg; g++) {                                            \
                __m256i b0 = _mm256_loadu_si256((const __m256i*)(bv + g * QG_NB * 4));      \
                __m256i b1 = _mm256_loadu_si256((const __m256i*)(bv + g * QG_NB * 4 + 32)); \
                for (int r = 0; r < 4; r++) {                                               \
                    __m256i av = _mm256_set1_epi32(qg_word(a + (h + r) * lda + g * 4));     \
                    acc[r][0] = DOT(acc[r][0], b0, av);                                     \
                    acc[r][1] = DOT(acc[r][1], b1, av);                                     \
                }                                                                           \
            }                                                                               \
            for (int r = 0; r < 4; r++) {                                                   \
                int32_t* out = tile + (h + r) * QG_TILE_COLS + v * QG_NB;                   \
                _mm256_storeu_si256((__m256i*)out, acc[r][0]);                              \
                _mm256_storeu_si256((__m256i*)(out + 8), acc[r][1]);                        \
            }                                                                               \
        }

/* AVX-VNNI: vpdpbusd on ymm */
__attribute__((target("avx2,avxvnni"))) static void qg_tile_avxvnni(QG_TILE_ARGS) {
    QG_TILE_4X2(_mm256_dpbusd_avx_epi32)
}

/* AVX2: exact sums with vpmaddwd on operands widened to int16, in register blocks of 4 rows x 8
 * columns (8 accumulators); B widened in the block, A once per tile into a stack buffer.
 *
 * Design (measured on AMD EPYC Zen 3, GCC 12, 1 thread, GEMMs of ResNet-18's shapes and the
 * MLP's, one process, interleaved, medians of 15; a shared machine, so ratios only): this tile
 * takes 0.73-0.83 of the time of the one it replaced (2 rows x 16 columns, both operands widened
 * by vpmovzx/vpmovsx in the k loop: lane-crossing shuffles, one a cycle on Zen 3, 6 per 128
 * multiply-adds), because here
 *   - A's 4 bytes of a k group are widened once per tile (stack, QG_AVX2_KC groups at a time)
 *     and broadcast from memory (vpbroadcastq: a load, no shuffle);
 *   - B's 32 bytes (8 columns x 4 k) are widened in-lane, vpunpcklbw/hbw against zero (columns
 *     0, 1, 4, 5 and 2, 3, 6, 7), and each serves 4 rows; vphaddd puts the columns back in order
 *     at the store;
 *   - the k loop is inline assembly: GCC 12 kept the 8 accumulators of the same loop in C with
 *     a spill and register moves every iteration (0.85-0.99 of the old time, not 0.75).
 * Taken only where proven: vpmaddubsw (u8 x s8 pairs summed to int16, then vpmaddwd by ones),
 * which ONNX Runtime's MLAS and oneDNN use on AVX2, ran these GEMMs in 0.47-0.63 of the old time,
 * but it saturates where a pair's products exceed int16 (255 x (127 + 127)); it is exact only
 * when every k pair of a weight row has positive parts summing to at most 128 and negative parts
 * to at least -128, which 7-bit weights meet (quantization's qint7, ONNX Runtime's reduce_range)
 * and full-range per-channel int8 weights (a 127 in every channel) almost never do. The packing
 * checks it on the bytes (qg_pairs_fit) and flags the weights; qg_tile_avx2_pairs runs those:
 * per 32 products one vpmaddubsw and one vpmaddwd, as many multiplies as this tile's two
 * vpmaddwd, but no widening of either operand and half the adds. Measured against this tile on
 * the same 7-bit packed weights (Zen 3, 1 thread, ResNet-18's 3x3 convolutions at 1x224 and
 * 8x64, interleaved medians of 25 CPU times, benchmarks/int8_pairs_tile.py; a machine at load
 * 8-13 on 2 cores, so ratios only): 0.60-0.91 of its time, median 0.72. Splitting the activation into its high 7 bits and low bit makes it
 * exact for any weights at 3 multiplies per 32 multiply-adds, against vpmaddwd's 2.
 * Not taken either: the GEMV's 4-bit split in this tile (benchmarks/int8_nibble_tile.c, both
 * ways in inline assembly, bitwise this tile's sums; Zen 3, 1 thread, interleaved medians of 25
 * and 31, four runs on a machine at load 2-10). Splitting B per call into nibble planes
 * (vpmaddubsw of each with A's int8, 8 k groups summed in int16, then vpmaddwd by 1 and 16) took
 * 1.00-1.36x this tile's time on ResNet-18's GEMM shapes at 64x64 and 1.11-1.32x on the MLP's
 * at batch 128; splitting A once at pack time (w + 128 = 16 h + l, B read as int8, a column-sum
 * correction) 1.25-1.46x and 1.21-1.43x (the MLP's figures from the runs where the tile's own
 * time held steady: its 2-4 ms calls suffered the load's preemption more). Per 32 products the
 * split needs 2 vpmaddubsw plus 1/4 vpmaddwd where this tile needs 2 vpmaddwd, and on Zen 3
 * both run on the same two vector-multiply pipes, which bound this loop: the saved widening
 * (2 unpacks per 128 products) does not pay for the extra multiplies. */
#define QG_AVX2_KC 128 /* k groups of A widened at a time: 8 rows x 512 k x 2 bytes, 8 KiB */

/* one k step of a row: t = B_lo * A_r, acc_lo += t; A_r = B_hi * A_r, acc_hi += A_r */
#define QG_AVX2_ROW(ar, lo, hi)                                                             \
    "vpmaddwd %%ymm" #ar ", %%ymm9, %%ymm8\n\t"                                             \
    "vpaddd %%ymm8, %%ymm" #lo ", %%ymm" #lo "\n\t"                                         \
    "vpmaddwd %%ymm" #ar ", %%ymm10, %%ymm" #ar "\n\t"                                      \
    "vpaddd %%ymm" #ar ", %%ymm" #hi ", %%ymm" #hi "\n\t"

/* rows 0-3 of a16 (int16, 4 per k group, rows QG_AVX2_KC * 4 apart) x 8 columns of packed B over
 * `groups` k groups; raw[r] the sums of columns 0, 1, 4, 5 of row r (k pairs apart), raw[4 + r]
 * those of 2, 3, 6, 7. Registers: ymm0-7 the sums, 8-10 B and its halves, 11 zero, 12-15 A. */
__attribute__((target("avx2"))) static void qg_avx2_block(const uint8_t* b, const int16_t* a16,
                                                          ptrdiff_t groups, __m256i* raw) {
    __asm__ volatile(
        "vpxor %%xmm0, %%xmm0, %%xmm0\n\t"
        "vpxor %%xmm1, %%xmm1, %%xmm1\n\t"
        "vpxor %%xmm2, %%xmm2, %%xmm2\n\t"
        "vpxor %%xmm3, %%xmm3, %%xmm3\n\t"
        "vpxor %%xmm4, %%xmm4, %%xmm4\n\t"
        "vpxor %%xmm5, %%xmm5, %%xmm5\n\t"
        "vpxor %%xmm6, %%xmm6, %%xmm6\n\t"
        "vpxor %%xmm7, %%xmm7, %%xmm7\n\t"
        "vpxor %%xmm11, %%xmm11, %%xmm11\n\t"
        "test %[n], %[n]\n\t"
        "jle 2f\n\t"
        "1:\n\t"
        "vmovdqu (%[b]), %%ymm8\n\t"
        "vpbroadcastq (%[a]), %%ymm12\n\t"
        "vpbroadcastq %c[row1](%[a]), %%ymm13\n\t"
        "vpbroadcastq %c[row2](%[a]), %%ymm14\n\t"
        "vpbroadcastq %c[row3](%[a]), %%ymm15\n\t"
        "vpunpcklbw %%ymm11, %%ymm8, %%ymm9\n\t"
        "vpunpckhbw %%ymm11, %%ymm8, %%ymm10\n\t"
        QG_AVX2_ROW(12, 0, 4) QG_AVX2_ROW(13, 1, 5) QG_AVX2_ROW(14, 2, 6) QG_AVX2_ROW(15, 3, 7)
        "add %[b_step], %[b]\n\t"
        "add $8, %[a]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        "2:\n\t"
        "vmovdqu %%ymm0, (%[raw])\n\t"
        "vmovdqu %%ymm1, 32(%[raw])\n\t"
        "vmovdqu %%ymm2, 64(%[raw])\n\t"
        "vmovdqu %%ymm3, 96(%[raw])\n\t"
        "vmovdqu %%ymm4, 128(%[raw])\n\t"
        "vmovdqu %%ymm5, 160(%[raw])\n\t"
        "vmovdqu %%ymm6, 192(%[raw])\n\t"
        "vmovdqu %%ymm7, 224(%[raw])\n\t"
        : [b] "+r"(b), [a] "+r"(a16), [n] "+r"(groups)
        : [raw] "r"(raw), [b_step] "i"(QG_NB * 4), [row1] "i"(QG_AVX2_KC * 8),
          [row2] "i"(2 * QG_AVX2_KC * 8), [row3] "i"(3 * QG_AVX2_KC * 8)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
}
#undef QG_AVX2_ROW

__attribute__((target("avx2"))) static void qg_tile_avx2(QG_TILE_ARGS) {
    int16_t a16[QG_MR * QG_AVX2_KC * 4] __attribute__((aligned(32)));
    __m256i raw[8];
    for (ptrdiff_t g0 = 0; g0 < kg; g0 += QG_AVX2_KC) {
        ptrdiff_t groups = kg - g0 < QG_AVX2_KC ? kg - g0 : QG_AVX2_KC;
        /* 16 k a step: a row of packed A is padded to 64 k, so this never reads past it */
        for (int r = 0; r < QG_MR; r++)
            for (ptrdiff_t i = 0; i < groups * 4; i += 16)
                _mm256_store_si256((__m256i*)(a16 + r * QG_AVX2_KC * 4 + i),
                                   _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                       (const __m128i*)(a + r * lda + g0 * 4 + i))));
        for (int v = 0; v < nv; v++)
            for (int half = 0; half < 2; half++)
                for (int h = 0; h < QG_MR; h += 4) {
                    qg_avx2_block(b + v * block_stride + g0 * QG_NB * 4 + half * 32,
                                  a16 + h * QG_AVX2_KC * 4, groups, raw);
                    for (int r = 0; r < 4; r++) {
                        __m256i* out = (__m256i*)(tile + (h + r) * QG_TILE_COLS + v * QG_NB
                                                  + half * 8);
                        __m256i s = _mm256_hadd_epi32(raw[r], raw[4 + r]);
                        _mm256_storeu_si256(out, g0 ? _mm256_add_epi32(_mm256_loadu_si256(out), s)
                                                    : s);
                    }
                }
    }
}

/* AVX2 on weights qg_pairs_fit proved: vpmaddubsw sums each k pair of u8 x s8 products in
 * int16 (exact by the proof), vpmaddwd by ones the two pairs of a k group into int32: the sums
 * of vpdpbusd, so of every other tile, on the AVX-VNNI tile's blocking (QG_TILE_4X2); the
 * weights are read as stored, never widened.
 * Summing two steps in int16 before the vpmaddwd is not exact under the proof (2 x 32640). */
/* vpdpbusd's sum from vpmaddubsw (the pairs, exact on proven weights) and vpmaddwd by ones */
#define QG_DOT_PAIRS(acc, b, a) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(b, a), _mm256_set1_epi16(1)))

__attribute__((target("avx2"))) static void qg_tile_avx2_pairs(QG_TILE_ARGS) {
    QG_TILE_4X2(QG_DOT_PAIRS)
}
#undef QG_DOT_PAIRS
#undef QG_TILE_4X2
#endif

typedef void (*qg_tile_fn)(QG_TILE_ARGS);

/* ---- GEMV: a few columns of B against every row of packed A ------------------------------ */

/* A tile computes QG_NB columns a block and widens every weight it reads: a batch-1 linear
 * layer did 16 times the multiply-adds it needs. The GEMV streams packed A's rows once (their K
 * is contiguous and zero-padded to 64, so no tail) against each column of B prepared once per
 * call: the shifted activations x' split into nibbles, x' = 16 hi + lo, each k-contiguous and
 * zero-padded like A's rows. On AVX2, vpmaddubsw (u8 x s8 pairs summed into int16) is exact on
 * nibbles: |2 * 15 * -128| = 3840, and 8 steps of 32 k summed in int16 stay within 30720, so the
 * weights are read as they are stored, never widened; every 8 steps vpmaddwd by 1 and by 16
 * carries the int16 sums into int32. The sums equal the tile's: exact integers, wrapping in
 * int32 like every int32 accumulation. The rule (qg_gemv_fits): up to QG_GEMV_MAX columns (a
 * linear layer's rows, the output cells of a convolution's GEMM: qconv.h's
 * qg_images_per_gemm), known when the plan is made, on a variant that has a GEMV (AVX2,
 * portable); wider GEMMs and the VNNI and AMX variants run
 * their tiles (not measured there: no such CPU in the session that wrote this).
 *
 * Design (measured on AMD EPYC Zen 3, AVX2 variant, 1 thread, the int8 MLP's layers 784->1024,
 * 1024->1024 and 1024->10, weights packed once, uint8 + relu epilogue, one process, GEMV and
 * tiles interleaved, medians of 30; a loaded shared machine, so ratios only; 2-thread times
 * there were dominated by waits for a core): GEMV / tiles 0.14-0.16 at 1 column (0.49 for 10
 * outputs, where the epilogue and the call weigh most), 0.18-0.25 at 2, 0.34-0.39 at 4, 0.61-0.71
 * at 8, 0.86-0.96 at 12, 1.12-1.25 at 16 (benchmarks/int8_gemv.py). A convolution's GEMM of few
 * output cells per image runs it too, its patches packed as for the tiles then prepared
 * (qg_gemv_from_packed): on ResNet-18's last stage at 64x64 (2x2 cells, one image, same
 * conditions) 0.42-0.48 of the tiles' time for the 3x3 ones, 0.63 for the 1x1 stride 2 (a
 * batch of 8 such images is one GEMM of 32 columns on the tiles now: qg_images_per_gemm). */
#define QG_GEMV_COLS 4  /* columns a GEMV pass holds; more run as several passes */
#define QG_GEMV_MAX 8   /* the most columns the rule runs as a GEMV */
#define QG_GEMV_STEPS 8 /* 32-k steps summed in int16: 8 * 3840 <= 32767 */

/* bytes of one prepared column: its low then its high nibbles, each padded like A's rows */
static inline ptrdiff_t qg_gemv_column_bytes(ptrdiff_t kg) { return 2 * qg_a_stride(kg); }

/* Prepares columns [0, n) of B from x (column c's k values at x + c * ldx; flip 0x80 shifts
 * int8 to uint8) into dst (qg_gemv_column_bytes apart), and their sums of x' when colsum is not
 * NULL (a weight zero point is not 0). */
static void qg_gemv_prepare(const uint8_t* x, ptrdiff_t k, ptrdiff_t ldx, ptrdiff_t n,
                            uint8_t flip, uint8_t* dst, int32_t* colsum) {
    ptrdiff_t kp = qg_a_stride(qg_groups(k));
    memset(dst, 0, (size_t)(n * 2 * kp));
    for (ptrdiff_t c = 0; c < n; c++) {
        uint8_t* lo = dst + c * 2 * kp;
        int32_t s = 0;
        for (ptrdiff_t i = 0; i < k; i++) {
            uint8_t v = (uint8_t)(x[c * ldx + i] ^ flip);
            lo[i] = v & 15;
            lo[kp + i] = v >> 4;
            s += v;
        }
        if (colsum) colsum[c] = s;
    }
}

/* The same columns prepared from columns [0, n) of a packed B (a convolution's patches, which
 * qg_pack_b_conv packs), n at most QG_NB: one column block. */
static void qg_gemv_from_packed(const uint8_t* b, ptrdiff_t kg, ptrdiff_t n, uint8_t* dst) {
    ptrdiff_t kp = qg_a_stride(kg);
    memset(dst, 0, (size_t)(n * 2 * kp));
    for (ptrdiff_t c = 0; c < n; c++) {
        uint8_t* lo = dst + c * 2 * kp;
        for (ptrdiff_t g = 0; g < kg; g++)
            for (int j = 0; j < 4; j++) {
                uint8_t v = b[g * QG_NB * 4 + c * 4 + j];
                lo[g * 4 + j] = v & 15;
                lo[kp + g * 4 + j] = v >> 4;
            }
    }
}

/* rows [0, rows) of packed A (lda bytes apart) times nc prepared columns (kp = lda bytes of k
 * each): sums[r * nc + c] */
#define QG_GEMV_ARGS \
    const int8_t* a, ptrdiff_t lda, const uint8_t* x, int nc, int rows, int32_t* sums

static void qg_gemv_portable(QG_GEMV_ARGS) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < nc; c++) {
            const uint8_t* lo = x + c * 2 * lda;
            int32_t s = 0;
            for (ptrdiff_t i = 0; i < lda; i++)
                s += (int32_t)a[r * lda + i] * (lo[i] + 16 * lo[lda + i]);
            sums[r * nc + c] = s;
        }
}

#ifdef QG_SDOT
/* sdot on the nibbles (0..15: int8 as they are), 16 bytes of k a step, a row's weights loaded
 * once for the nc columns; lo + 16 hi in wrapping int32, the portable GEMV's integers */
static void qg_gemv_sdot(QG_GEMV_ARGS) {
    for (int r = 0; r < rows; r++) {
        int32x4_t lo[QG_GEMV_COLS], hi[QG_GEMV_COLS];
        for (int c = 0; c < nc; c++) lo[c] = hi[c] = vdupq_n_s32(0);
        for (ptrdiff_t i = 0; i < lda; i += 16) {
            int8x16_t w = vld1q_s8(a + r * lda + i);
            for (int c = 0; c < nc; c++) {
                const uint8_t* xc = x + c * 2 * lda + i;
                lo[c] = vdotq_s32(lo[c], w, vreinterpretq_s8_u8(vld1q_u8(xc)));
                hi[c] = vdotq_s32(hi[c], w, vreinterpretq_s8_u8(vld1q_u8(xc + lda)));
            }
        }
        for (int c = 0; c < nc; c++)
            sums[r * nc + c] = (int32_t)((uint32_t)vaddvq_s32(lo[c])
                                         + 16u * (uint32_t)vaddvq_s32(hi[c]));
    }
}
#endif

#if QG_X86
__attribute__((target("avx2"), always_inline)) static inline int32_t qg_hsum_avx2(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/* R rows x NC columns in registers (R * NC <= 4: 2 * R * NC int16 sums, R * NC int32 ones, one
 * column's two nibble vectors; the weights are the multiplies' memory operands) */
#define QG_GEMV_BLOCK(R, NC)                                                                \
    {                                                                                       \
        __m256i acc[R][NC];                                                                 \
        for (int r = 0; r < R; r++)                                                         \
            for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_si256();                \
        for (ptrdiff_t k0 = 0; k0 < lda; k0 += 32 * QG_GEMV_STEPS) {                        \
            ptrdiff_t k1 = lda - k0 < 32 * QG_GEMV_STEPS ? lda : k0 + 32 * QG_GEMV_STEPS;    \
            __m256i lo[R][NC], hi[R][NC];                                                   \
            for (int r = 0; r < R; r++)                                                     \
                for (int c = 0; c < NC; c++) lo[r][c] = hi[r][c] = _mm256_setzero_si256();  \
            for (ptrdiff_t k = k0; k < k1; k += 32)                                         \
                for (int c = 0; c < NC; c++) {                                              \
                    const uint8_t* xc = x + c * 2 * lda + k;                                \
                    __m256i xl = _mm256_loadu_si256((const __m256i*)xc);                    \
                    __m256i xh = _mm256_loadu_si256((const __m256i*)(xc + lda));            \
                    for (int r = 0; r < R; r++) {                                           \
                        __m256i w = _mm256_loadu_si256((const __m256i*)(a + r * lda + k));  \
                        lo[r][c] = _mm256_add_epi16(lo[r][c], _mm256_maddubs_epi16(xl, w)); \
                        hi[r][c] = _mm256_add_epi16(hi[r][c], _mm256_maddubs_epi16(xh, w)); \
                    }                                                                       \
                }                                                                           \
            for (int r = 0; r < R; r++)                                                     \
                for (int c = 0; c < NC; c++)                                                \
                    acc[r][c] = _mm256_add_epi32(                                           \
                        acc[r][c],                                                          \
                        _mm256_add_epi32(_mm256_madd_epi16(lo[r][c], _mm256_set1_epi16(1)), \
                                         _mm256_madd_epi16(hi[r][c], _mm256_set1_epi16(16)))); \
        }                                                                                   \
        for (int r = 0; r < R; r++)                                                         \
            for (int c = 0; c < NC; c++) sums[r * nc + c] = qg_hsum_avx2(acc[r][c]);        \
    }

/* rows in blocks of 4 / nc; packed A's rows are padded to QG_AR with zeros, so a caller whose
 * rows start at a multiple of QG_AR may ask for a last block past its real rows */
__attribute__((target("avx2"))) static void qg_gemv_avx2(QG_GEMV_ARGS) {
    int step = nc == 1 ? 4 : nc == 2 ? 2 : 1;
    for (int r0 = 0; r0 < rows; r0 += step, a += step * lda, sums += step * nc) {
        if (nc == 1) QG_GEMV_BLOCK(4, 1)
        else if (nc == 2) QG_GEMV_BLOCK(2, 2)
        else if (nc == 3) QG_GEMV_BLOCK(1, 3)
        else QG_GEMV_BLOCK(1, 4)
    }
}
#undef QG_GEMV_BLOCK
#endif

typedef void (*qg_gemv_fn)(QG_GEMV_ARGS);

/* ---- the epilogue ----------------------------------------------------------------------- */

/* What turns a tile's sums into outputs: per row (output channel) the constant, the shifted
 * weight zero point (NULL: all zero) and the float32 multiplier (out int8/uint8); per column
 * the sums of B (read only where zw is given). out[m * sm + n * sn], storage type ``kind``;
 * where the columns are several images' cells (cells per image, not 0: qconv.h's
 * qg_images_per_gemm), column n = i * cells + c goes to out[i * si + m * sm + c * sn]. */
typedef struct {
    const int32_t* row_const;
    const int32_t* zw;
    const int32_t* colsum;
    const float* mult;
    int32_t zy, lo, hi; /* lo, hi: the storage range, narrowed by relu */
    int kind;
    void* out;
    ptrdiff_t sm, sn;
    ptrdiff_t cells, si; /* cells 0: the columns are one image's */
} qg_epilogue;

/* row m's values q of columns [n0, n0 + cols), in runs that stay within one image */
#define QG_STORE(T, q)                                                                      \
    for (int j = 0; j < cols;) {                                                            \
        ptrdiff_t n = n0 + j, image = e->cells ? n / e->cells : 0;                          \
        ptrdiff_t c = n - image * e->cells;                                                 \
        int run = e->cells && e->cells - c < cols - j ? (int)(e->cells - c) : cols - j;     \
        T* o = (T*)e->out + image * e->si + m * e->sm + c * e->sn;                          \
        if (e->sn == 1)                                                                     \
            for (int u = 0; u < run; u++) o[u] = (T)q[j + u];                               \
        else                                                                                \
            for (int u = 0; u < run; u++) o[u * e->sn] = (T)q[j + u];                       \
        j += run;                                                                           \
    }

/* per row: the int32 sums (wrapping, as the tile's), then the requantised integers, then the
 * store (contiguous or strided): three simple loops the compiler vectorises */
#define QG_EPILOGUE_BODY                                                                    \
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds half to even */        \
    int32_t t[QG_TILE_COLS];                                                                \
    for (int r = 0; r < rows; r++) {                                                        \
        ptrdiff_t m = m0 + r;                                                               \
        const uint32_t* s = (const uint32_t*)(acc + r * lda);                               \
        uint32_t c = (uint32_t)e->row_const[m], z = e->zw ? (uint32_t)e->zw[m] : 0u;        \
        if (z) {                                                                            \
            const uint32_t* cs = (const uint32_t*)e->colsum + n0;                           \
            for (int j = 0; j < cols; j++) t[j] = (int32_t)(s[j] + c - z * cs[j]);          \
        } else {                                                                            \
            for (int j = 0; j < cols; j++) t[j] = (int32_t)(s[j] + c);                      \
        }                                                                                   \
        if (e->kind == QG_OUT_INT32) {                                                      \
            QG_STORE(int32_t, t)                                                            \
            continue;                                                                       \
        }                                                                                   \
        float mf = e->mult[m], lo = (float)(e->lo - e->zy), hi = (float)(e->hi - e->zy);    \
        for (int j = 0; j < cols; j++) {                                                    \
            float f = (float)t[j] * mf;                                                     \
            f = f < lo ? lo : f > hi ? hi : f;                                              \
            t[j] = (int32_t)((f + magic) - magic) + e->zy;                                  \
        }                                                                                   \
        if (e->kind == QG_OUT_INT8)                                                         \
            QG_STORE(int8_t, t)                                                             \
        else                                                                                \
            QG_STORE(uint8_t, t)                                                            \
    }

#define QG_EPILOGUE_ARGS                                                                    \
    const int32_t* acc, ptrdiff_t lda, ptrdiff_t m0, int rows, ptrdiff_t n0, int cols,      \
        const qg_epilogue* e

/* cols at most QG_TILE_COLS */
static void qg_store_portable(QG_EPILOGUE_ARGS) { QG_EPILOGUE_BODY }
#if QG_X86
__attribute__((target("avx2"))) static void qg_store_avx2(QG_EPILOGUE_ARGS) { QG_EPILOGUE_BODY }
__attribute__((target("avx512f,avx512bw,prefer-vector-width=512")))
static void qg_store_avx512(QG_EPILOGUE_ARGS) { QG_EPILOGUE_BODY }
#endif

typedef void (*qg_store_fn)(QG_EPILOGUE_ARGS);

/* ---- the variant in use ----------------------------------------------------------------- */

typedef struct {
    int isa;
    qg_tile_fn tile;
    qg_store_fn store;
    qg_gemv_fn gemv;       /* NULL: few columns run on the tile too */
    qg_tile_fn tile_pairs; /* on weights qg_pairs_fit proved; NULL: the tile runs them too */
} qg_variant;

static qg_variant qg_variant_of(int isa) {
    qg_variant v = {QG_PORTABLE, qg_tile_portable, qg_store_portable, qg_gemv_portable, NULL};
    (void)isa;
#ifdef QG_SDOT
    v.tile = qg_tile_sdot; /* aarch64's one variant, the same integers */
    v.gemv = qg_gemv_sdot;
#endif
#if QG_X86
    if (isa == QG_AVX2)
        v = (qg_variant){isa, qg_tile_avx2, qg_store_avx2, qg_gemv_avx2, qg_tile_avx2_pairs};
    if (isa == QG_AVXVNNI) v = (qg_variant){isa, qg_tile_avxvnni, qg_store_avx2, NULL, NULL};
    if (isa == QG_AVX512VNNI || isa == QG_AMX)
        v = (qg_variant){isa, qg_tile_avx512vnni, qg_store_avx512, NULL, NULL};
#endif
    return v;
}

/* whether a GEMM of n columns runs as a GEMV (qg_gemv_units) on this variant */
static inline int qg_gemv_fits(const qg_variant* var, ptrdiff_t n) {
    return var->gemv != NULL && n <= QG_GEMV_MAX;
}

/* ---- the GEMM over tiles ---------------------------------------------------------------- */

/* A GEMM's operands: packed A (m rows) and B (n columns), kg groups of k; pairs_fit: A's
 * packed weights carry QG_PAIRS_FIT */
typedef struct {
    const int8_t* a;
    const uint8_t* b;
    ptrdiff_t m, n, kg;
    int pairs_fit;
} qg_operands;

/* tiles: column panels of QG_NV blocks by row blocks */
static inline ptrdiff_t qg_tiles(ptrdiff_t m, ptrdiff_t n) {
    return qg_blocks(n, QG_TILE_COLS) * qg_blocks(m, QG_MR);
}

/* Tile t's panel and row block, of mb row blocks and `panels` column panels. Threads take
 * contiguous ranges of tiles: with many panels they go panel-major (a thread's tiles share
 * panels of B, the large operand there); with few (a small plane: 49 columns are a panel of 48
 * and one of 1) row-block-major, or a contiguous split would hand one thread the narrow last
 * panel alone (3 times less work). */
#define QG_PANEL_MAJOR_FROM 8
static inline void qg_tile_at(ptrdiff_t t, ptrdiff_t mb, ptrdiff_t panels, ptrdiff_t* panel,
                              ptrdiff_t* rb) {
    if (panels >= QG_PANEL_MAJOR_FROM)
        *panel = t / mb, *rb = t % mb;
    else
        *rb = t / panels, *panel = t % panels;
}

/* tiles [lo, hi) of the GEMM, each stored through the epilogue */
static void qg_gemm_tiles(const qg_variant* var, const qg_operands* op, const qg_epilogue* e,
                          ptrdiff_t lo, ptrdiff_t hi) {
    int32_t tile[QG_MR * QG_TILE_COLS] __attribute__((aligned(64)));
    ptrdiff_t block_stride = qg_b_stride(op->kg), lda = qg_a_stride(op->kg);
    qg_tile_fn run = op->pairs_fit && var->tile_pairs ? var->tile_pairs : var->tile;
    for (ptrdiff_t t = lo; t < hi; t++) {
        ptrdiff_t panel, rb;
        qg_tile_at(t, qg_blocks(op->m, QG_MR), qg_blocks(op->n, QG_TILE_COLS), &panel, &rb);
        ptrdiff_t n0 = panel * QG_TILE_COLS;
        ptrdiff_t cols = op->n - n0 < QG_TILE_COLS ? op->n - n0 : QG_TILE_COLS;
        int nv = (int)qg_blocks(cols, QG_NB);
        ptrdiff_t m0 = rb * QG_MR, rows = op->m - m0 < QG_MR ? op->m - m0 : QG_MR;
        run(op->a + m0 * lda, lda, op->b + (n0 / QG_NB) * block_stride, block_stride, op->kg,
            nv, tile);
        var->store(tile, QG_TILE_COLS, m0, (int)rows, n0, (int)cols, e);
    }
}

/* ---- the GEMV over row blocks ----------------------------------------------------------- */

/* a GEMV's units of work, which threads split: blocks of QG_AR rows */
static inline ptrdiff_t qg_gemv_blocks(ptrdiff_t m) { return qg_blocks(m, QG_AR); }

/* row blocks [lo, hi) of the GEMV of packed A (op->m rows, op->kg groups) with op->n columns
 * prepared by qg_gemv_prepare at x (op->b unused), each stored through the epilogue */
static void qg_gemv_units(const qg_variant* var, const qg_operands* op, const uint8_t* x,
                          const qg_epilogue* e, ptrdiff_t lo, ptrdiff_t hi) {
    int32_t sums[QG_AR * QG_GEMV_COLS];
    ptrdiff_t lda = qg_a_stride(op->kg);
    for (ptrdiff_t u = lo; u < hi; u++) {
        ptrdiff_t m0 = u * QG_AR, rows = op->m - m0 < QG_AR ? op->m - m0 : QG_AR;
        for (ptrdiff_t n0 = 0; n0 < op->n; n0 += QG_GEMV_COLS) {
            int nc = (int)(op->n - n0 < QG_GEMV_COLS ? op->n - n0 : QG_GEMV_COLS);
            var->gemv(op->a + m0 * lda, lda, x + n0 * qg_gemv_column_bytes(op->kg), nc,
                      (int)rows, sums);
            var->store(sums, nc, m0, (int)rows, n0, nc, e);
        }
    }
}

/* ---- on AMX tiles: blocks of QG_AMX_BLOCK x QG_AMX_BLOCK ---------------------------------- */

/* Whether the GEMM runs on AMX tiles: whenever the variant is AMX.
 * Design: measured (Emerald Rapids, 1 thread, packed weights, 1024 outputs of K 784 and 1024),
 * the tiles win from one row of B up (1 row: 0.031 ms against VNNI's 0.095; 16 rows: 0.061
 * against 0.114; 128: 0.37 against 0.72): they read the weights as whole 1 KiB tiles where the
 * VNNI tile broadcasts 4 bytes at a time. For 10 outputs the two are even. */
static inline int qg_on_amx(const qg_variant* var) { return var->isa == QG_AMX; }

/* the GEMM's units of work, which threads split: tiles, or AMX blocks */
static inline ptrdiff_t qg_units(const qg_variant* var, const qg_operands* op) {
    if (qg_on_amx(var))
        return qg_blocks(op->m, QG_AMX_BLOCK) * qg_blocks(op->n, QG_AMX_BLOCK);
    return qg_tiles(op->m, op->n);
}

/* AMX blocks [lo, hi), each stored through the epilogue; the tile configuration is loaded on
 * this thread for them and released after (a thread holding tile state costs every context
 * switch more) */
static void qg_amx_gemm_blocks(const qg_variant* var, const qg_operands* op,
                               const qg_epilogue* e, ptrdiff_t lo, ptrdiff_t hi) {
    int32_t c[QG_AMX_BLOCK * QG_AMX_BLOCK] __attribute__((aligned(64)));
    ptrdiff_t block_stride = qg_b_stride(op->kg), lda = qg_a_stride(op->kg);
    ptrdiff_t mb = qg_blocks(op->m, QG_AMX_BLOCK), panels = qg_blocks(op->n, QG_AMX_BLOCK);
    qg_amx_begin();
    for (ptrdiff_t t = lo; t < hi; t++) {
        ptrdiff_t panel, rb;
        qg_tile_at(t, mb, panels, &panel, &rb);
        ptrdiff_t m0 = rb * QG_AMX_BLOCK, n0 = panel * QG_AMX_BLOCK;
        ptrdiff_t rows = op->m - m0 < QG_AMX_BLOCK ? op->m - m0 : QG_AMX_BLOCK;
        ptrdiff_t cols = op->n - n0 < QG_AMX_BLOCK ? op->n - n0 : QG_AMX_BLOCK;
        qg_amx_block(op->a + m0 * lda, lda, rows > QG_AMX_BLOCK / 2,
                     op->b + (n0 / QG_NB) * block_stride, block_stride,
                     cols > QG_AMX_BLOCK / 2, qg_padded_groups(op->kg) / QG_KS, c);
        var->store(c, QG_AMX_BLOCK, m0, (int)rows, n0, (int)cols, e);
    }
    qg_amx_end();
}

/* units [lo, hi) of the GEMM (qg_units) */
static void qg_gemm_units(const qg_variant* var, const qg_operands* op, const qg_epilogue* e,
                          ptrdiff_t lo, ptrdiff_t hi) {
    if (qg_on_amx(var))
        qg_amx_gemm_blocks(var, op, e, lo, hi);
    else
        qg_gemm_tiles(var, op, e, lo, hi);
}

/* ---- the machine's peak, for the benchmark ---------------------------------------------- */

/* iterations x 16 independent vpdpbusd on zmm registers, no memory: 16 * 64 multiply-adds an
 * iteration (benchmarks/int8_kernels.py times it); -1 where the CPU has no AVX-512 VNNI. In
 * assembly: from C, GCC keeps an array of accumulators on the stack. */
#if QG_X86
#define QG_DP(r) "vpdpbusd %%zmm17, %%zmm16, %%zmm" #r "\n\t"
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int qg_vnni_loop_512(
    long long iterations) {
    if (iterations <= 0) return 0;
    __asm__ volatile("vpxord %%zmm16, %%zmm16, %%zmm16\n\t"
                     "vpxord %%zmm17, %%zmm17, %%zmm17\n\t"
                     "1:\n\t" QG_DP(0) QG_DP(1) QG_DP(2) QG_DP(3) QG_DP(4) QG_DP(5) QG_DP(6)
                     QG_DP(7) QG_DP(8) QG_DP(9) QG_DP(10) QG_DP(11) QG_DP(12) QG_DP(13)
                     QG_DP(14) QG_DP(15) "dec %0\n\t"
                     "jnz 1b\n\t"
                     : "+r"(iterations)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16",
                       "xmm17", "cc");
    return 0;
}
#undef QG_DP
#endif

static int qg_vnni_loop(long long iterations) {
#if QG_X86
    if (qg_isa_ok(QG_AVX512VNNI)) return qg_vnni_loop_512(iterations);
#endif
    (void)iterations;
    return -1;
}

#endif
