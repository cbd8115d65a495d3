/* The int8 convolution on top of qgemm.h: one group of one image (or of several small ones,
 * side by side: qg_images_per_gemm) as a GEMM whose B is the patches (im2col) packed straight
 * into B's layout, and a direct depthwise kernel.
 *
 * Design: B's k index is (channel, kernel row, kernel column) as the weight's (in/groups, kh,
 * kw) flattening; column n is the output cell (oh, ow) (of image n / cells). Packing one k
 * group unfolds its 4 k rows for the column range being packed (a memcpy per output row at
 * stride 1, the zero point's stored value at padded positions) and interleaves them
 * (qg_interleave); a 1x1 stride-1 convolution without padding reads its channel rows in place
 * (within one image). The depthwise kernel (groups == in channels == out channels) takes one
 * channel plane at a time: the plane minus its zero point in int16 with zero padding, summed
 * tap by tap into an int32 plane over contiguous output columns (vectorised by the compiler,
 * per instruction set), then the same epilogue.
 */
#ifndef MG_QCONV_H
#define MG_QCONV_H

#include "qgemm.h"

/* one group's geometry: c input channels of an h x w plane, a kh x kw window */
typedef struct {
    ptrdiff_t c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
} qg_conv;

static inline int qg_conv_in_place(const qg_conv* g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Design: the patches are unfolded from a padded copy of the image (each channel's plane with
 * ph rows and pw columns of the zero point's stored value around it: qg_pad_image), so a k row's
 * run over one output row is a plain copy, or every sw-th byte, with no bounds to test, and
 * vector copies may read and write past a run (the copy and the rows have QG_RUN_SLACK bytes
 * after them; the next run overwrites what a copy wrote past its end). Measured on ResNet-18's
 * 8x3x64x64 layers (Zen 3, 1 thread): the unfold from the unpadded planes, a division and
 * three bounds-tested byte loops a run of 2 to 32 bytes, took a quarter of the int8 plan's time. */
#define QG_RUN_SLACK 64

/* a padded image's sizes: hp x wp per channel (the window never reaches past them), and the
 * bytes of the copy */
static inline ptrdiff_t qg_padded_h(const qg_conv* g) { return g->h + 2 * g->ph; }
static inline ptrdiff_t qg_padded_w(const qg_conv* g) { return g->w + 2 * g->pw; }
static inline ptrdiff_t qg_padded_bytes(const qg_conv* g) {
    return g->c * qg_padded_h(g) * qg_padded_w(g) + QG_RUN_SLACK;
}

/* bytes of qg_pack_b_conv's scratch for columns [n0, n1): 4 rows of them (and slack), and,
 * but for a 1x1 convolution read in place, the padded copy of each image they reach */
static inline ptrdiff_t qg_pack_b_scratch(const qg_conv* g, ptrdiff_t n0, ptrdiff_t n1) {
    ptrdiff_t cells = g->oh * g->ow, images = n1 > n0 ? (n1 - 1) / cells - n0 / cells + 1 : 0;
    return 4 * (n1 - n0 + QG_RUN_SLACK) + (qg_conv_in_place(g) ? 0 : images * qg_padded_bytes(g));
}

/* the c planes of x (h x w) into dst with pad around (qg_padded_h x qg_padded_w each) */
static void qg_pad_image(const uint8_t* x, const qg_conv* g, uint8_t pad, uint8_t* dst) {
    ptrdiff_t hp = qg_padded_h(g), wp = qg_padded_w(g);
    memset(dst, pad, (size_t)qg_padded_bytes(g));
    for (ptrdiff_t ch = 0; ch < g->c; ch++)
        for (ptrdiff_t r = 0; r < g->h; r++)
            memcpy(dst + (ch * hp + r + g->ph) * wp + g->pw, x + (ch * g->h + r) * g->w,
                   (size_t)g->w);
}

/* dst[e] = src[e * step] for e in [0, run); may read and write up to QG_RUN_SLACK bytes past */
static inline void qg_copy_run(const uint8_t* src, ptrdiff_t step, ptrdiff_t run, uint8_t* dst) {
#if QG_X86
    if (step == 1) {
        for (ptrdiff_t e = 0; e < run; e += 16)
            _mm_storeu_si128((__m128i*)(dst + e), _mm_loadu_si128((const __m128i*)(src + e)));
        return;
    }
    if (step == 2) {
        const __m128i even = _mm_set1_epi16(0x00ff);
        for (ptrdiff_t e = 0; e < run; e += 16) {
            __m128i lo = _mm_and_si128(_mm_loadu_si128((const __m128i*)(src + 2 * e)), even);
            __m128i hi = _mm_and_si128(_mm_loadu_si128((const __m128i*)(src + 2 * e + 16)), even);
            _mm_storeu_si128((__m128i*)(dst + e), _mm_packus_epi16(lo, hi));
        }
        return;
    }
#endif
    for (ptrdiff_t e = 0; e < run; e++) dst[e] = src[e * step];
}

/* cells [c0, c0 + count) of one tap's patch row into dst: output row oh reads the padded
 * image from base + oh * row_step, every sw-th byte (scalars by value: dst aliases nothing) */
static inline void qg_unfold_row(const uint8_t* base, ptrdiff_t row_step, ptrdiff_t ow,
                                 ptrdiff_t sw, ptrdiff_t c0, ptrdiff_t count, uint8_t* dst) {
    ptrdiff_t oh = c0 ? c0 / ow : 0, first = c0 - oh * ow;
    const uint8_t* src = base + oh * row_step;
    if (first) { /* the rest of a row */
        ptrdiff_t run = ow - first < count ? ow - first : count;
        qg_copy_run(src + first * sw, sw, run, dst);
        dst += run, count -= run, src += row_step;
    }
    for (; count >= ow; count -= ow, dst += ow, src += row_step) qg_copy_run(src, sw, ow, dst);
    if (count > 0) qg_copy_run(src, sw, count, dst);
}

/* How many images one GEMM takes as its columns (their cells side by side), of `images`.
 *
 * Design: one image a GEMM reads all the weights once per image; on small planes (ResNet-18 at
 * 8x3x64x64: 4 x 4 and 2 x 2 cells in its last stages) that is 8 passes over up to 2.4 MB of
 * weights for 16 or 4 columns each, which the tiles pad to 16 (or the GEMV runs at 4), and the
 * weights come from L3 every time. Images side by side make one GEMM of 128 or 32 full columns,
 * the weights read once. From QG_TILE_COLS cells up an image fills a tile's panel by itself,
 * and more images would only grow B past the L2 cache. Measured with the padded unfold below
 * (Zen 3, AVX2 vpmaddubsw tile, 1 thread, CPU time, medians of 15, against the commit before
 * both; a machine at load 5-10 on 2 cores, so ratios only): 8 images of 512 channels at 2 x 2
 * 0.34 of the time, of 256 at 4 x 4 0.42, of 128 at 8 x 8 0.47, of 64 at 16 x 16 0.70. */
#define QG_BATCH_COLUMNS 256 /* at most this many columns of small images in one GEMM */
static inline ptrdiff_t qg_images_per_gemm(ptrdiff_t cells, ptrdiff_t images) {
    if (cells >= QG_TILE_COLS || cells <= 0) return 1;
    ptrdiff_t per = QG_BATCH_COLUMNS / cells;
    return per < images ? per : images;
}

/* Packs columns [n0, n1) (n0 a multiple of QG_NB) of one group's patches into B's layout,
 * column n the cell n % cells of image n / cells (x the first image, image_bytes between
 * images; one image's columns: any image_bytes); scratch holds qg_pack_b_scratch(g, n0, n1)
 * bytes. pad is the stored zero point, flip 0x80 for int8 x. A 1x1 stride-1 convolution
 * without padding reads its channel rows in place where the columns are one image's. */
static void qg_pack_b_conv(const uint8_t* x, ptrdiff_t image_bytes, const qg_conv* g,
                           ptrdiff_t n0, ptrdiff_t n1, uint8_t pad, uint8_t flip,
                           uint8_t* scratch, uint8_t* dst) {
    ptrdiff_t k = g->c * g->kh * g->kw, kg = qg_groups(k), block_stride = qg_b_stride(kg);
    ptrdiff_t cells = g->oh * g->ow, row_bytes = n1 - n0 + QG_RUN_SLACK;
    ptrdiff_t first = n0 / cells, images = (n1 - 1) / cells - first + 1;
    ptrdiff_t wp = qg_padded_w(g), image_pad = qg_padded_bytes(g);
    ptrdiff_t row_step = g->sh * wp, ow = g->ow, sw = g->sw;
    ptrdiff_t l0 = n0 - first * cells, l1 = n1 - first * cells; /* from the first image's */
    ptrdiff_t ch = 0, ti = 0, tj = 0; /* the tap of row kk */
    int in_place = qg_conv_in_place(g);
    uint8_t* padded = scratch + 4 * row_bytes;
    x += first * image_bytes;
    /* the groups past K that pad a block to the tiles' depth: zeros */
    for (ptrdiff_t b = n0 / QG_NB; b * QG_NB < n1; b++)
        memset(dst + b * block_stride + kg * QG_NB * 4, 0, (size_t)(block_stride - kg * QG_NB * 4));
    for (ptrdiff_t i = 0; i < images && !in_place; i++)
        qg_pad_image(x + i * image_bytes, g, pad, padded + i * image_pad);
    for (ptrdiff_t grp = 0; grp < kg; grp++) {
        const uint8_t* rows[4] = {NULL, NULL, NULL, NULL};
        for (int j = 0; j < 4 && grp * 4 + j < k; j++) {
            ptrdiff_t kk = grp * 4 + j, tap = (ch * qg_padded_h(g) + ti * g->dh) * wp + tj * g->dw;
            if (++tj == g->kw && (tj = 0, ++ti == g->kh)) ti = 0, ch++;
            if (in_place && images == 1) {
                rows[j] = x + kk * cells + l0;
                continue;
            }
            uint8_t* row = scratch + j * row_bytes;
            for (ptrdiff_t i = 0; i < images; i++) { /* image i's cells [c0, c1) */
                ptrdiff_t c0 = i ? 0 : l0, c1 = i < images - 1 ? cells : l1 - i * cells;
                uint8_t* out = row + i * cells + c0 - l0;
                if (in_place)
                    memcpy(out, x + i * image_bytes + kk * cells + c0, (size_t)(c1 - c0));
                else
                    qg_unfold_row(padded + i * image_pad + tap, row_step, ow, sw, c0, c1 - c0,
                                  out);
            }
            rows[j] = row;
        }
        qg_interleave(rows, n0, n1, flip, dst + grp * QG_NB * 4, block_stride);
    }
}

/* ---- depthwise -------------------------------------------------------------------------- */

/* One channel: x (h x w, stored bytes, signed when x_signed) minus zx into the int16 plane
 * padded (hp x wp, zeros around), then acc (oh x ow) = sum over taps of (w - zw) * patch. */
#define QG_DEPTHWISE_ARGS                                                                   \
    const uint8_t* x, int x_signed, int32_t zx, const uint8_t* wt, int w_unsigned, int32_t zw, \
        const qg_conv* g, int16_t* padded, int32_t* acc

#define QG_DEPTHWISE_BODY                                                                   \
    ptrdiff_t hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw;                                 \
    memset(padded, 0, (size_t)(hp * wp) * sizeof(int16_t));                                 \
    for (ptrdiff_t r = 0; r < g->h; r++) {                                                  \
        int16_t* dst = padded + (r + g->ph) * wp + g->pw;                                   \
        const uint8_t* src = x + r * g->w;                                                  \
        if (x_signed)                                                                       \
            for (ptrdiff_t c = 0; c < g->w; c++) dst[c] = (int16_t)((int8_t)src[c] - zx);   \
        else                                                                                \
            for (ptrdiff_t c = 0; c < g->w; c++) dst[c] = (int16_t)(src[c] - zx);           \
    }                                                                                       \
    memset(acc, 0, (size_t)(g->oh * g->ow) * sizeof(int32_t));                              \
    for (ptrdiff_t i = 0; i < g->kh; i++)                                                   \
        for (ptrdiff_t j = 0; j < g->kw; j++) {                                             \
            int32_t tap = w_unsigned ? wt[i * g->kw + j] - zw : (int8_t)wt[i * g->kw + j] - zw; \
            for (ptrdiff_t r = 0; r < g->oh; r++) {                                         \
                const int16_t* src = padded + (r * g->sh + i * g->dh) * wp + j * g->dw;     \
                int32_t* out = acc + r * g->ow;                                             \
                if (g->sw == 1)                                                             \
                    for (ptrdiff_t c = 0; c < g->ow; c++) out[c] += tap * src[c];           \
                else                                                                        \
                    for (ptrdiff_t c = 0; c < g->ow; c++) out[c] += tap * src[c * g->sw];   \
            }                                                                               \
        }

static void qg_depthwise_portable(QG_DEPTHWISE_ARGS) { QG_DEPTHWISE_BODY }
#if QG_X86
__attribute__((target("avx512f,avx512bw,prefer-vector-width=512")))
static void qg_depthwise_avx512(QG_DEPTHWISE_ARGS) { QG_DEPTHWISE_BODY }

/* AVX2: taps two at a time with vpmaddwd, all of a window summed in registers per 16 outputs.
 *
 * Design: the loop above, vectorised by GCC for AVX2, widens to int32 and multiplies with
 * vpmulld, one tap at a time, loading and storing the int32 plane for every tap: on AMD Zen 3
 * it ran 0.55-0.69 of the portable (SSE2) build's time on 56-112 wide planes and 1.14 on 14 x
 * 14 ones. Here the plane is laid out as sw column phases (padded column c at phase c % sw,
 * index c / sw), so every tap reads 16 contiguous int16 whatever the stride; two taps' values
 * are interleaved (vpunpckl/hwd) and multiplied by the two weights in one vpmaddwd, exact:
 * |x - zx|, |w - zw| <= 255, so a pair sums to at most 130050. Windows of more than
 * QG_DW_TAPS taps take the loop above. */
#define QG_DW_TAPS 64
#define QG_DW_SLACK 16 /* int16 past each phase's row, read by the last 16 outputs of a row */

/* int16 elements of the padded plane for geometry g, for every variant */
static inline ptrdiff_t qg_depthwise_scratch(const qg_conv* g) {
    ptrdiff_t hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw;
    ptrdiff_t phased = hp * g->sw * ((wp + g->sw - 1) / g->sw + QG_DW_SLACK);
    return phased > hp * wp ? phased : hp * wp;
}

__attribute__((target("avx2"))) static void qg_depthwise_avx2(QG_DEPTHWISE_ARGS) {
    if (g->kh * g->kw > QG_DW_TAPS) {
        QG_DEPTHWISE_BODY
        return;
    }
    ptrdiff_t wp = g->w + 2 * g->pw, sw = g->sw;
    ptrdiff_t pwid = (wp + sw - 1) / sw + QG_DW_SLACK, row = sw * pwid;
    ptrdiff_t taps = g->kh * g->kw, off[QG_DW_TAPS + 1];
    int32_t pair[QG_DW_TAPS / 2 + 1];
    memset(padded, 0, (size_t)((g->h + 2 * g->ph) * row) * sizeof(int16_t));
    for (ptrdiff_t r = 0; r < g->h; r++) {
        int16_t* dst = padded + (r + g->ph) * row;
        const uint8_t* src = x + r * g->w;
        /* phase p holds input columns c with (c + pw) % sw == p, at (c + pw) / sw */
        for (ptrdiff_t p = 0; p < sw; p++) {
            ptrdiff_t c = ((p - g->pw) % sw + sw) % sw;
            int16_t* d = dst + p * pwid + (c + g->pw) / sw;
            if (x_signed)
                for (; c < g->w; c += sw) *d++ = (int16_t)((int8_t)src[c] - zx);
            else
                for (; c < g->w; c += sw) *d++ = (int16_t)(src[c] - zx);
        }
    }
    for (ptrdiff_t t = 0; t < taps; t++) {
        ptrdiff_t i = t / g->kw, j = t % g->kw;
        int32_t w = (w_unsigned ? wt[t] : (int8_t)wt[t]) - zw;
        off[t] = i * g->dh * row + (j * g->dw) % sw * pwid + (j * g->dw) / sw;
        /* (tap t, tap t + 1) as the two int16 of an int32 lane; an odd last tap pairs with 0 */
        if (t % 2 == 0) pair[t / 2] = (int32_t)(uint16_t)(int16_t)w;
        else pair[t / 2] |= (int32_t)((uint32_t)(uint16_t)(int16_t)w << 16);
    }
    if (taps % 2) off[taps] = off[taps - 1];
    for (ptrdiff_t r = 0; r < g->oh; r++) {
        const int16_t* base = padded + r * g->sh * row;
        int32_t* out = acc + r * g->ow;
        for (ptrdiff_t c0 = 0; c0 < g->ow; c0 += 16) {
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
            for (ptrdiff_t t = 0; t < taps; t += 2) {
                __m256i a = _mm256_loadu_si256((const __m256i*)(base + off[t] + c0));
                __m256i b = _mm256_loadu_si256((const __m256i*)(base + off[t + 1] + c0));
                __m256i w = _mm256_set1_epi32(pair[t / 2]);
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), w));
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), w));
            }
            /* lo holds outputs 0-3 and 8-11, hi 4-7 and 12-15 */
            int32_t v[16] __attribute__((aligned(32)));
            _mm256_store_si256((__m256i*)v, _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_store_si256((__m256i*)(v + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
            ptrdiff_t n = g->ow - c0 < 16 ? g->ow - c0 : 16;
            memcpy(out + c0, v, (size_t)n * sizeof(int32_t));
        }
    }
}
#else
static inline ptrdiff_t qg_depthwise_scratch(const qg_conv* g) {
    return (g->h + 2 * g->ph) * (g->w + 2 * g->pw);
}
#endif

typedef void (*qg_depthwise_fn)(QG_DEPTHWISE_ARGS);

static qg_depthwise_fn qg_depthwise_of(int isa) {
    (void)isa;
#if QG_X86
    if (isa >= QG_AVX512VNNI) return qg_depthwise_avx512;  /* AMX included */
    if (isa >= QG_AVX2) return qg_depthwise_avx2;
#endif
    return qg_depthwise_portable;
}

/* the epilogue over one channel's int32 plane (row m of the output), in tile-wide chunks */
static void qg_store_plane(const qg_variant* var, const int32_t* acc, ptrdiff_t m,
                           ptrdiff_t cells, const qg_epilogue* e) {
    for (ptrdiff_t n0 = 0; n0 < cells; n0 += QG_TILE_COLS) {
        ptrdiff_t cols = cells - n0 < QG_TILE_COLS ? cells - n0 : QG_TILE_COLS;
        var->store(acc + n0, 0, m, 1, n0, (int)cols, e);
    }
}


/* ---- the transposed convolution: W^T x on the GEMM, then col2im ------------------------- */

/* Design: a transposed convolution of x (c_in, h, w) per group is the GEMM of the transposed
 * weight, rows (o, i, j) of C_out/groups * kh * kw, by x's channel rows (the in-place 1x1 case
 * above: its B is x itself), giving for every input cell the int32 contribution of each tap
 * of each output channel; col2im then adds each tap's plane into the output cells it reaches
 * (oh = ih * sh - ph + i * dh, likewise across). Every term is an exact int32 product sum and the
 * adds wrap as the tiles' do, so the output is the exact accumulator, whatever the order. */

/* w (c_in, opg, kh, kw) of `groups` groups of c_in / groups input channels into wt, per group
 * rows (o, i, j) of its c_in / groups values: the A the GEMM packs; zrows[row] = zw[channel] */
static void qg_transpose_weight(const uint8_t* w, const int32_t* zw, ptrdiff_t c_in,
                                ptrdiff_t opg, ptrdiff_t taps, ptrdiff_t groups, uint8_t* wt,
                                int32_t* zrows) {
    ptrdiff_t cg = c_in / groups, m = opg * taps;
    for (ptrdiff_t gi = 0; gi < groups; gi++)
        for (ptrdiff_t c = 0; c < cg; c++)
            for (ptrdiff_t r = 0; r < m; r++)
                wt[(gi * m + r) * cg + c] = w[((gi * cg + c) * opg) * taps + r];
    for (ptrdiff_t gi = 0; gi < groups; gi++)
        for (ptrdiff_t r = 0; r < m; r++) zrows[gi * m + r] = zw[gi * opg + r / taps];
}

/* of the input columns iw in [0, w), those whose output column iw * s + off is in [0, ow) */
static inline void qg_reach(ptrdiff_t off, ptrdiff_t s, ptrdiff_t w, ptrdiff_t ow, ptrdiff_t* lo,
                            ptrdiff_t* hi) {
    ptrdiff_t first = off >= 0 ? 0 : (-off + s - 1) / s;
    ptrdiff_t end = ow - off <= 0 ? 0 : (ow - off + s - 1) / s;
    *hi = end < w ? end : w;
    *lo = first < *hi ? first : *hi;
}

/* One output channel of a transposed convolution of geometry g (h x w in, oh x ow out):
 * acc = the sum over taps t = (i, j) of column plane cols + t * h * w placed at its cells. */
static void qg_col2im_plane(const int32_t* cols, const qg_conv* g, int32_t* acc) {
    memset(acc, 0, (size_t)(g->oh * g->ow) * sizeof(int32_t));
    for (ptrdiff_t i = 0; i < g->kh; i++)
        for (ptrdiff_t j = 0; j < g->kw; j++) {
            const uint32_t* plane = (const uint32_t*)cols + (i * g->kw + j) * g->h * g->w;
            ptrdiff_t lo, hi, off = j * g->dw - g->pw;
            qg_reach(off, g->sw, g->w, g->ow, &lo, &hi);
            for (ptrdiff_t ih = 0; ih < g->h; ih++) {
                ptrdiff_t r = ih * g->sh - g->ph + i * g->dh;
                if (r < 0 || r >= g->oh) continue;
                uint32_t* dst = (uint32_t*)acc + r * g->ow;
                const uint32_t* src = plane + ih * g->w;
                if (g->sw == 1)
                    for (ptrdiff_t iw = lo; iw < hi; iw++) dst[iw + off] += src[iw];
                else
                    for (ptrdiff_t iw = lo; iw < hi; iw++) dst[iw * g->sw + off] += src[iw];
            }
        }
}

#endif
