/* int8 and uint8 pooling: the one source of pool_int.pxi's kernels and of the C runtime's
 * (mgegraph/deploy/csrc/kernels/pool2d_i8.c): rows of windows, vectorised, and the planes
 * around them (pi_planes, at the end), on pool.h's windows.
 *
 * One output row's interior windows (every cell inside the input: no clamping) are pooled in
 * separable passes over scratch rows on the stack: the window's rows reduced column by column
 * (max, or a uint16 sum), then kw shifted copies of that row reduced (the window's columns),
 * then every sw-th result picked; an average's picked sums are then divided, rounded half to
 * even exactly. A contiguous run of cells (a global pool's plane, a window of whole rows) is
 * reduced in one pass. A max of a small window at stride 1 or 2 skips those passes on x86
 * (pi_max_plane_body: 32 windows a vector straight from the input, border columns included).
 *
 * Design: each pass is a plain C loop with unit stride (or a literal stride 2), which GCC
 * vectorises. The same source is compiled three times (as build_flags.py builds the fused
 * kernel): for any CPU (SSE2 on x86-64), for AVX2 and for AVX-512BW, through
 * __attribute__((target)) on the entry points, whose always-inline passes take on the target;
 * pi_widest picks the widest this CPU runs, once. Integers only, with one float step (a
 * quotient's estimate, corrected exactly in integers), so every variant gives the same bits.
 * int8 values are taken with their sign bit flipped (flip = 0x80), which maps int8's order onto
 * uint8's and adds 128 to each value: a max is flipped back, and a mean of values each 128 more
 * is the mean plus 128, an even number, so rounding ties to even is unchanged.
 * Limits, where the caller (pool_int.pxi) keeps its per-window loop: windows too wide or too
 * far apart for a block of them to fit the scratch rows (pi_chunk 0), an average of more than
 * PI_MAX_CELLS cells (uint16 sums).
 */
#ifndef MG_POOL_INT_H
#define MG_POOL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pool.h"

/* PI_PORTABLE_ONLY builds what a non-x86 machine builds (to check that it compiles) */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(PI_PORTABLE_ONLY)
#define PI_X86 1
#else
#define PI_X86 0
#endif

/* PI_SCALAR: no row passes at all, pool_int.pxi's per-window loop (the baseline) */
enum { PI_SCALAR = 0, PI_PORTABLE = 1, PI_AVX2 = 2, PI_AVX512 = 3, PI_ISAS = 4 };
static const char* const pi_isa_names[PI_ISAS] = {"scalar", "portable", "avx2", "avx512"};

#define PI_MAX_CELLS 257 /* 257 * 255 = 65535: an average's window sum fits uint16 */

/* the interior windows of one output row */
typedef struct {
    const uint8_t* x;           /* the first window's top-left cell */
    ptrdiff_t step;             /* between a window's rows: dilation x row length */
    ptrdiff_t rows, kw, sw, dw; /* a window's rows (clamped) and columns; column strides */
    ptrdiff_t n;                /* windows, sw columns apart */
    ptrdiff_t readable;         /* bytes of the input from x on */
    int32_t div;                /* an average's divisor; 0: a max */
    int32_t offset;             /* added to each average's sum: the counted padding's cells */
    uint8_t flip;               /* 0x80 for int8, 0 for uint8 */
    uint8_t* y;                 /* n outputs */
} pi_row;

#define PI_EDGES 8 /* border columns of a row that a max in vectors keeps the spans of */

/* A max in vectors (pi_max_plan_of): the geometry of its planes, the same for each */
typedef struct {
    pool_block s;                       /* the windows (as_sliding applied) */
    int64_t lo, hi;                     /* the output columns of windows inside the input */
    int64_t row_lo, row_hi;             /* the output rows of windows needing no clamping */
    int64_t n_edges, edge_at[PI_EDGES]; /* the other output columns */
    pool_span edge[PI_EDGES];           /* and their columns, clamped: the same in every row */
    uint8_t edge_keep[PI_EDGES][16];    /* of 16 columns from edge[e].lo, those it takes */
    int64_t zero_point;                 /* a window with no cell's value */
    const uint8_t* end;                 /* of the input: no load reaches it */
} pi_max_plan;

/* one output row's windows [lo, hi) of a max in vectors (pi_max_plane_body) */
typedef struct {
    const uint8_t* x;     /* the first window's top-left cell */
    ptrdiff_t step;       /* between a window's rows: dilation x row length */
    ptrdiff_t rows, kw, sw, dw; /* a window's rows (clamped) and columns; column strides */
    ptrdiff_t n;          /* windows */
    ptrdiff_t readable;   /* bytes of the input from x on */
    ptrdiff_t room;       /* bytes of the plane's output from y on */
    int is_signed;        /* int8 (else uint8) */
    uint8_t* y;
} pi_max_row;

typedef struct {
    void (*row)(const pi_row* a);
    uint8_t (*run_max)(const uint8_t* x, ptrdiff_t n, uint8_t flip); /* flipped back */
    int64_t (*run_sum)(const uint8_t* x, ptrdiff_t n, uint8_t flip); /* of the flipped values */
    /* a max's planes in vectors, [0] uint8, [1] int8 (y_end: the plane's); NULL: none */
    void (*max_plane[2])(const pi_max_plan* m, const uint8_t* x, uint8_t* y,
                         const uint8_t* y_end);
} pi_variant;

/* whether this CPU runs variant ``isa`` */
static inline int pi_isa_ok(int isa) {
#if PI_X86
    __builtin_cpu_init();
    if (isa == PI_AVX2) return __builtin_cpu_supports("avx2");
    if (isa == PI_AVX512) return __builtin_cpu_supports("avx512f")
                                 && __builtin_cpu_supports("avx512bw")
                                 && __builtin_cpu_supports("avx512vl");
#endif
    return isa == PI_SCALAR || isa == PI_PORTABLE;
}

static inline int pi_widest(void) {
    for (int isa = PI_ISAS - 1; isa > PI_PORTABLE; isa--)
        if (pi_isa_ok(isa)) return isa;
    return PI_PORTABLE;
}

#define PI_INLINE static inline __attribute__((always_inline))

/* ---- the passes ------------------------------------------------------------------------- */
/* Each pass runs over whole blocks of PI_B values (a literal inner loop: vectorised with no
 * scalar tail, which on rows of 56 or 112 cells cost more than the vectors). The scratch rows
 * are long enough for the blocks, whose extra values are computed and never stored to y; the
 * input is read in whole blocks where the bytes past a row are still inside it (readable). */

#define PI_B 64
#define PI_BUF 2048 /* values per scratch row */

static inline ptrdiff_t pi_up(ptrdiff_t n) { return (n + PI_B - 1) / PI_B * PI_B; }

/* windows per chunk of a row (a multiple of PI_B; 0 where one block of them does not fit):
 * their picked columns, rounded up, and the window's span, rounded up, fit the scratch */
static inline ptrdiff_t pi_chunk(ptrdiff_t kw, ptrdiff_t sw, ptrdiff_t dw) {
    ptrdiff_t room = PI_BUF - (kw - 1) * dw - 2 * PI_B;
    return room < 0 ? 0 : ((room - 1) / sw + 1) / PI_B * PI_B;
}

/* v[c] = the max over the rows of x[r * step + c] ^ flip, c < m rounded up to blocks (0 past
 * readable - (rows - 1) * step, where the last row's readable bytes end) */
PI_INLINE void pi_rows_max(const uint8_t* restrict x, ptrdiff_t step, ptrdiff_t rows,
                           ptrdiff_t m, ptrdiff_t readable, uint8_t flip, uint8_t* restrict v) {
    ptrdiff_t safe = readable - (rows - 1) * step, all = pi_up(m);
    ptrdiff_t whole = all <= safe ? all : safe / PI_B * PI_B;
    for (ptrdiff_t c0 = 0; c0 < whole; c0 += PI_B)
        for (int k = 0; k < PI_B; k++) v[c0 + k] = x[c0 + k] ^ flip;
    for (ptrdiff_t r = 1; r < rows; r++) {
        const uint8_t* restrict p = x + r * step;
        for (ptrdiff_t c0 = 0; c0 < whole; c0 += PI_B)
            for (int k = 0; k < PI_B; k++) {
                uint8_t a = p[c0 + k] ^ flip;
                v[c0 + k] = a > v[c0 + k] ? a : v[c0 + k];
            }
    }
    for (ptrdiff_t c = whole; c < all; c++) {
        uint8_t best = 0;
        for (ptrdiff_t r = 0; c < safe && r < rows; r++) {
            uint8_t a = x[r * step + c] ^ flip;
            best = a > best ? a : best;
        }
        v[c] = best;
    }
}

/* v[c] = the sum over the rows of x[r * step + c] ^ flip, c < m, as pi_rows_max */
PI_INLINE void pi_rows_sum(const uint8_t* restrict x, ptrdiff_t step, ptrdiff_t rows,
                           ptrdiff_t m, ptrdiff_t readable, uint8_t flip, uint16_t* restrict v) {
    ptrdiff_t safe = readable - (rows - 1) * step, all = pi_up(m);
    ptrdiff_t whole = all <= safe ? all : safe / PI_B * PI_B;
    for (ptrdiff_t c0 = 0; c0 < whole; c0 += PI_B)
        for (int k = 0; k < PI_B; k++) v[c0 + k] = (uint16_t)(x[c0 + k] ^ flip);
    for (ptrdiff_t r = 1; r < rows; r++) {
        const uint8_t* restrict p = x + r * step;
        for (ptrdiff_t c0 = 0; c0 < whole; c0 += PI_B)
            for (int k = 0; k < PI_B; k++)
                v[c0 + k] = (uint16_t)(v[c0 + k] + (uint8_t)(p[c0 + k] ^ flip));
    }
    for (ptrdiff_t c = whole; c < all; c++) {
        uint16_t total = 0;
        for (ptrdiff_t r = 0; c < safe && r < rows; r++)
            total = (uint16_t)(total + (uint8_t)(x[r * step + c] ^ flip));
        v[c] = total;
    }
}

/* h[c] = the max over j < kw of v[c + j * dw], c < m (a multiple of PI_B) */
PI_INLINE void pi_cols_max(const uint8_t* restrict v, ptrdiff_t m, ptrdiff_t kw, ptrdiff_t dw,
                           uint8_t* restrict h) {
    for (ptrdiff_t c0 = 0; c0 < m; c0 += PI_B)
        for (int k = 0; k < PI_B; k++) h[c0 + k] = v[c0 + k];
    for (ptrdiff_t j = 1; j < kw; j++) {
        const uint8_t* restrict p = v + j * dw;
        for (ptrdiff_t c0 = 0; c0 < m; c0 += PI_B)
            for (int k = 0; k < PI_B; k++)
                h[c0 + k] = p[c0 + k] > h[c0 + k] ? p[c0 + k] : h[c0 + k];
    }
}

PI_INLINE void pi_cols_sum(const uint16_t* restrict v, ptrdiff_t m, ptrdiff_t kw, ptrdiff_t dw,
                           uint16_t* restrict h) {
    for (ptrdiff_t c0 = 0; c0 < m; c0 += PI_B)
        for (int k = 0; k < PI_B; k++) h[c0 + k] = v[c0 + k];
    for (ptrdiff_t j = 1; j < kw; j++) {
        const uint16_t* restrict p = v + j * dw;
        for (ptrdiff_t c0 = 0; c0 < m; c0 += PI_B)
            for (int k = 0; k < PI_B; k++) h[c0 + k] = (uint16_t)(h[c0 + k] + p[c0 + k]);
    }
}

/* y[o] = h[o * s] ^ flip, o < n; strides 1 and 2 literal, over whole blocks */
PI_INLINE void pi_pick_u8(const uint8_t* restrict h, ptrdiff_t n, ptrdiff_t s, uint8_t flip,
                          uint8_t* restrict y) {
    for (ptrdiff_t o0 = 0; o0 < (s <= 2 ? pi_up(n) : n); o0 += PI_B) {
        if (s == 1)
            for (int k = 0; k < PI_B; k++) y[o0 + k] = h[o0 + k] ^ flip;
        else if (s == 2)
            for (int k = 0; k < PI_B; k++) y[o0 + k] = h[2 * (o0 + k)] ^ flip;
        else /* no literal stride to vectorise: exactly n, reading no column past them */
            for (ptrdiff_t o = o0; o < n && o < o0 + PI_B; o++) y[o] = h[o * s] ^ flip;
    }
}

PI_INLINE void pi_pick_u16(const uint16_t* restrict h, ptrdiff_t n, ptrdiff_t s,
                           uint16_t* restrict p) {
    for (ptrdiff_t o0 = 0; o0 < (s <= 2 ? pi_up(n) : n); o0 += PI_B) {
        if (s == 2)
            for (int k = 0; k < PI_B; k++) p[o0 + k] = h[2 * (o0 + k)];
        else
            for (ptrdiff_t o = o0; o < n && o < o0 + PI_B; o++) p[o] = h[o * s];
    }
}

/* y[o] = rint((t[o] + offset) / div) ^ flip, o < n (a multiple of PI_B), rounding half to
 * even, exactly: the float estimate of the quotient is within one of its floor (the total is
 * under 2^24, so its float is exact, and the product's error is under 2^-6), the remainder
 * moves it there, and the remainder against div / 2 (as 2r against div) rounds, as
 * pool_int.pxi's rounded_quotient. */
PI_INLINE void pi_divide(const uint16_t* restrict t, ptrdiff_t n, int32_t offset, int32_t div,
                         uint8_t flip, uint8_t* restrict y) {
    float rcp = 1.0f / (float)div;
    for (ptrdiff_t o0 = 0; o0 < n; o0 += PI_B)
        for (int k = 0; k < PI_B; k++) {
            int32_t total = (int32_t)t[o0 + k] + offset;
            int32_t q = (int32_t)((float)total * rcp);
            int32_t r = total - q * div;
            int32_t below = r < 0, above = r >= div;
            q += above - below;
            r += (below - above) * div;
            q += (2 * r > div) | ((2 * r == div) & q);
            y[o0 + k] = (uint8_t)q ^ flip;
        }
}

/* Per chunk of windows: n outputs (big_n rounded up), the columns of h their picks read (m,
 * rounded up), the input columns those read; the outputs go through scratch (the blocks compute
 * more than n) and n of them are copied to y. A row of fewer than PI_MIN_WINDOWS windows is
 * cheaper window by window than as a block of PI_B (a global pool's one window, say). */
#define PI_MIN_WINDOWS 8

PI_INLINE void pi_row_max(const pi_row* a) {
    uint8_t v[PI_BUF], h[PI_BUF], out[PI_BUF];
    ptrdiff_t span = (a->kw - 1) * a->dw + 1, per = pi_chunk(a->kw, a->sw, a->dw);
    for (ptrdiff_t o0 = 0; o0 < a->n; o0 += per) {
        ptrdiff_t n = a->n - o0 < per ? a->n - o0 : per, big_n = pi_up(n);
        ptrdiff_t m = pi_up(((a->sw <= 2 ? big_n : n) - 1) * a->sw + 1);
        const uint8_t* x = a->x + o0 * a->sw;
        pi_rows_max(x, a->step, a->rows, m + span - 1, a->readable - o0 * a->sw, a->flip, v);
        pi_cols_max(v, m, a->kw, a->dw, h);
        pi_pick_u8(h, n, a->sw, a->flip, out);
        memcpy(a->y + o0, out, (size_t)n);
    }
}

PI_INLINE void pi_row_avg(const pi_row* a) {
    uint16_t v[PI_BUF], h[PI_BUF];
    uint8_t out[PI_BUF];
    ptrdiff_t span = (a->kw - 1) * a->dw + 1, per = pi_chunk(a->kw, a->sw, a->dw);
    for (ptrdiff_t o0 = 0; o0 < a->n; o0 += per) {
        ptrdiff_t n = a->n - o0 < per ? a->n - o0 : per, big_n = pi_up(n);
        ptrdiff_t m = pi_up(((a->sw <= 2 ? big_n : n) - 1) * a->sw + 1);
        const uint8_t* x = a->x + o0 * a->sw;
        pi_rows_sum(x, a->step, a->rows, m + span - 1, a->readable - o0 * a->sw, a->flip, v);
        pi_cols_sum(v, m, a->kw, a->dw, h);
        if (a->sw != 1) pi_pick_u16(h, n, a->sw, v); /* v is free again: the picked sums */
        pi_divide(a->sw == 1 ? h : v, big_n, a->offset, a->div, a->flip, out);
        memcpy(a->y + o0, out, (size_t)n);
    }
}

PI_INLINE void pi_row_body(const pi_row* a) {
    if (a->div == 0)
        pi_row_max(a);
    else
        pi_row_avg(a);
}

PI_INLINE uint8_t pi_run_max_body(const uint8_t* restrict x, ptrdiff_t n, uint8_t flip) {
    uint8_t m = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        uint8_t a = x[i] ^ flip;
        m = a > m ? a : m;
    }
    return m ^ flip;
}

PI_INLINE int64_t pi_run_sum_body(const uint8_t* restrict x, ptrdiff_t n, uint8_t flip) {
    int64_t total = 0;
    for (ptrdiff_t i0 = 0; i0 < n; i0 += 1 << 16) { /* 2^16 * 255 < 2^32 */
        ptrdiff_t end = n - i0 < (1 << 16) ? n : i0 + (1 << 16);
        uint32_t s = 0;
        for (ptrdiff_t i = i0; i < end; i++) s += (uint8_t)(x[i] ^ flip);
        total += s;
    }
    return total;
}

/* ---- a max in 32-byte vectors, straight from the input (x86) -------------------------------
 * A small max window needs no separable passes: each block of 32 window starts is the max of the
 * window's rows x kw shifted loads of the input itself (unaligned loads: nothing waits on a store
 * to scratch, as the passes' second pass does), then every sw-th column (sw 1 or 2) of two such
 * blocks packed into 32 outputs, stored straight to y. int8 compares signed (vpmaxsb), uint8
 * unsigned: no flip. Where 32 outputs would write past the plane (another thread's) or a block
 * would read past the input, the block goes through scratch or window by window. The AVX-512
 * variant runs these 32-byte passes too: one path, the one an AVX2 machine tests. */

#define PI_MAX_VEC_CELLS 25 /* larger windows load fewer bytes through the separable passes */

/* The max of rows x cols cells step and dw apart, at least one (flip: 0x80 for int8) */
static inline uint8_t pi_max_cells(const uint8_t* x, ptrdiff_t step, ptrdiff_t dw,
                                   ptrdiff_t rows, ptrdiff_t cols, uint8_t flip) {
    uint8_t m = 0;
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t j = 0; j < cols; j++) {
            uint8_t v = x[r * step + j * dw] ^ flip;
            m = v > m ? v : m;
        }
    return m ^ flip;
}

#if PI_X86
#include <immintrin.h>

#define PI_AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

PI_AVX2_INLINE __m256i pi_max32(__m256i a, __m256i b, int is_signed) {
    return is_signed ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
}

PI_AVX2_INLINE __m128i pi_max16(__m128i a, __m128i b, int is_signed) {
    return is_signed ? _mm_max_epi8(a, b) : _mm_max_epu8(a, b);
}

/* A border window's max: the max of its rows' 16 columns from x, those not in keep made the
 * least value, then folded to lane 0 (what the shifts bring in never reaches lane 0). The
 * scalar loop took as long as the 32 windows beside it. */
PI_AVX2_INLINE uint8_t pi_edge16(const uint8_t* x, ptrdiff_t step, ptrdiff_t rows,
                                 const uint8_t* keep, int is_signed) {
    __m128i m = _mm_loadu_si128((const __m128i*)x);
    for (ptrdiff_t r = 1; r < rows; r++)
        m = pi_max16(m, _mm_loadu_si128((const __m128i*)(x + r * step)), is_signed);
    m = _mm_blendv_epi8(_mm_set1_epi8(is_signed ? -128 : 0), m,
                        _mm_loadu_si128((const __m128i*)keep));
    m = pi_max16(m, _mm_srli_si128(m, 8), is_signed);
    m = pi_max16(m, _mm_srli_si128(m, 4), is_signed);
    m = pi_max16(m, _mm_srli_si128(m, 2), is_signed);
    m = pi_max16(m, _mm_srli_si128(m, 1), is_signed);
    return (uint8_t)_mm_cvtsi128_si32(m);
}

/* lane k: the max of the window whose top-left cell is x + k */
PI_AVX2_INLINE __m256i pi_windows32(const uint8_t* x, const pi_max_row* a) {
    __m256i m = _mm256_loadu_si256((const __m256i*)x);
    for (ptrdiff_t r = 0; r < a->rows; r++)
        for (ptrdiff_t j = r == 0; j < a->kw; j++)
            m = pi_max32(m, _mm256_loadu_si256((const __m256i*)(x + r * a->step + j * a->dw)),
                         a->is_signed);
    return m;
}

/* outputs o0 .. o0 + 31: at stride 2, the even lanes of two blocks (the second only where
 * more than 16 outputs are left), packed in order */
PI_AVX2_INLINE __m256i pi_outputs32(const pi_max_row* a, ptrdiff_t o0) {
    const uint8_t* x = a->x + o0 * a->sw;
    __m256i low = pi_windows32(x, a);
    if (a->sw == 1) return low;
    __m256i high = a->n - o0 > 16 ? pi_windows32(x + 32, a) : _mm256_setzero_si256();
    __m256i even = _mm256_set1_epi16(0xFF); /* per lane: 8 of low's, then 8 of high's */
    __m256i packed = _mm256_packus_epi16(_mm256_and_si256(low, even),
                                         _mm256_and_si256(high, even));
    return _mm256_permute4x64_epi64(packed, 0xD8);
}

PI_AVX2_INLINE void pi_max_row_body(const pi_max_row* a) {
    ptrdiff_t reach = (a->rows - 1) * a->step + (a->kw - 1) * a->dw; /* past a window's start */
    for (ptrdiff_t o0 = 0; o0 < a->n; o0 += 32) {
        ptrdiff_t valid = a->n - o0 < 32 ? a->n - o0 : 32;
        ptrdiff_t span = a->sw == 2 && valid > 16 ? 64 : 32;
        if (o0 * a->sw + reach + span > a->readable) {
            for (ptrdiff_t o = o0; o < a->n; o++)
                a->y[o] = pi_max_cells(a->x + o * a->sw, a->step, a->dw, a->rows, a->kw,
                                       a->is_signed ? 0x80 : 0);
            return;
        }
        __m256i out = pi_outputs32(a, o0);
        if (o0 + 32 <= a->room) { /* the lanes past n land on cells written later */
            _mm256_storeu_si256((__m256i*)(a->y + o0), out);
        } else {
            uint8_t part[32];
            _mm256_storeu_si256((__m256i*)part, out);
            memcpy(a->y + o0, part, (size_t)valid);
        }
    }
}

/* One plane: each row's windows [lo, hi) in vectors, before its border columns (the vectors'
 * stores may pass hi) on their kept spans. */
PI_AVX2_INLINE void pi_max_plane_body(const pi_max_plan* m, const uint8_t* x, uint8_t* y,
                                      const uint8_t* y_end, int is_signed) {
    const pool_block* s = &m->s;
    pi_max_row a;
    a.step = s->dh * s->w, a.kw = s->kw, a.sw = s->sw, a.dw = s->dw, a.n = m->hi - m->lo;
    a.is_signed = is_signed;
    for (int64_t oh = 0; oh < s->oh; oh++, y += s->ow) {
        pool_span rows = {oh * s->sh - s->ph, s->kh, s->kh};
        if (oh < m->row_lo || oh >= m->row_hi) rows = pool_window(s, 1, oh);
        if (rows.n <= 0) {
            memset(y, (uint8_t)m->zero_point, (size_t)s->ow);
            continue;
        }
        const uint8_t* at = x + rows.lo * s->w;
        a.x = at + m->lo * s->sw - s->pw, a.readable = m->end - a.x;
        a.rows = rows.n, a.y = y + m->lo, a.room = y_end - a.y;
        pi_max_row_body(&a);
        for (int64_t e = 0; e < m->n_edges; e++) {
            const uint8_t* cell = at + m->edge[e].lo;
            if ((m->edge[e].n - 1) * s->dw < 16 && (rows.n - 1) * a.step + 16 <= m->end - cell)
                y[m->edge_at[e]] = pi_edge16(cell, a.step, rows.n, m->edge_keep[e], is_signed);
            else
                y[m->edge_at[e]] = pi_max_cells(cell, a.step, s->dw, rows.n, m->edge[e].n,
                                                is_signed ? 0x80 : 0);
        }
    }
}
#endif

/* ---- the variants: the same passes compiled per instruction set --------------------------- */

#define PI_VARIANT(name, attr)                                                                 \
    attr static void pi_row_##name(const pi_row* a) { pi_row_body(a); }                       \
    attr static uint8_t pi_run_max_##name(const uint8_t* x, ptrdiff_t n, uint8_t flip) {      \
        return pi_run_max_body(x, n, flip);                                                    \
    }                                                                                          \
    attr static int64_t pi_run_sum_##name(const uint8_t* x, ptrdiff_t n, uint8_t flip) {      \
        return pi_run_sum_body(x, n, flip);                                                    \
    }

PI_VARIANT(portable, )
#if PI_X86
PI_VARIANT(avx2, __attribute__((target("avx2"))))
PI_VARIANT(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))

#define PI_MAX_PLANE(name, attr, S, is_signed)                                                 \
    attr static void pi_max_plane_##S##_##name(const pi_max_plan* m, const uint8_t* x,         \
                                               uint8_t* y, const uint8_t* y_end) {             \
        pi_max_plane_body(m, x, y, y_end, is_signed);                                          \
    }
PI_MAX_PLANE(avx2, __attribute__((target("avx2"))), u8, 0)
PI_MAX_PLANE(avx2, __attribute__((target("avx2"))), i8, 1)
PI_MAX_PLANE(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))), u8, 0)
PI_MAX_PLANE(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))), i8, 1)
#endif

/* the passes of variant ``isa`` (PI_SCALAR has none: its caller keeps the per-window loop) */
static inline pi_variant pi_variant_of(int isa) {
    pi_variant v = {pi_row_portable, pi_run_max_portable, pi_run_sum_portable, {NULL, NULL}};
#if PI_X86
    if (isa == PI_AVX2)
        v = (pi_variant){pi_row_avx2, pi_run_max_avx2, pi_run_sum_avx2,
                         {pi_max_plane_u8_avx2, pi_max_plane_i8_avx2}};
    if (isa == PI_AVX512)
        v = (pi_variant){pi_row_avx512, pi_run_max_avx512, pi_run_sum_avx512,
                         {pi_max_plane_u8_avx512, pi_max_plane_i8_avx512}};
#endif
    return v;
}

/* ---- the planes: pool_int.pxi's kernels and the C runtime's pool2d_i8 / pool2d_u8 --------------
 * Each output row's interior windows go through the variant's row passes, the rest (border,
 * adaptive and over-large windows, rows of fewer than PI_MIN_WINDOWS) through the per-window loop
 * (pi_cell), where a window of whole rows (a global pool's plane) of at least PI_B cells is one
 * contiguous run. A max is the max of the cells inside the input: padding never wins. An average
 * is the window's integer sum (int64, exact for any plane), the counted padding adding the zero
 * point each, divided by the divisor and rounded half to even in integer arithmetic: the floor
 * quotient q and remainder r (0 <= r < div) are exact, and r compared with div / 2 (as 2r with
 * div) decides the rounding, so the result is the exact rint(sum / div) with no float step. It
 * lies between the window's least and greatest integer, so it needs no saturation. A window with
 * no cell inside (never in a plan: its shape rule refuses it) gives the zero point. */

typedef struct {
    pool_block s;       /* the windows, adaptive ones made sliding where they can be */
    const void* x;
    void* y;
    int64_t size;       /* of x, in values */
    int64_t zero_point;
    int rows;           /* whether the variant has row passes (not PI_SCALAR) */
    pi_variant var;
    int64_t lo, hi;     /* the output columns the row passes pool (pi_vector_columns) */
    int fast_max;       /* whether a max goes through var.max_plane, on max's geometry */
    pi_max_plan max;
} pi_run;

/* total / div (div > 0) rounded to nearest, ties to even; C's division truncates toward 0, so
 * a negative remainder moves q down one to the floor */
static inline int64_t pi_rounded_quotient(int64_t total, int64_t div) {
    int64_t q = total / div, r = total - q * div;
    if (r < 0) q -= 1, r += div;
    if (2 * r > div || (2 * r == div && (q & 1))) q += 1;
    return q;
}

/* The output columns [lo, hi) whose windows lie inside the input and the row passes' limits
 * take; none for the scalar variant and adaptive windows (they vary in width). */
static inline void pi_vector_columns(const pi_run* r, int64_t* lo, int64_t* hi) {
    const pool_block* s = &r->s;
    int64_t last = s->w - 1 + s->pw - (s->kw - 1) * s->dw; /* the last inside start, + pw */
    int avg = s->mode == POOL_AVG_INCLUDE || s->mode == POOL_AVG_EXCLUDE;
    *lo = *hi = 0;
    if (!r->rows || pool_is_adaptive(s) || last < 0 || pi_chunk(s->kw, s->sw, s->dw) == 0 ||
        (avg && s->kh * s->kw > PI_MAX_CELLS))
        return;
    *lo = pool_clamp(pool_ceil_div(s->pw, s->sw), 0, s->ow);
    *hi = pool_clamp(last / s->sw + 1, *lo, s->ow);
    if (*hi - *lo < PI_MIN_WINDOWS) *hi = *lo;
}

/* Whether a max goes through var.max_plane, and its geometry: sliding windows of at most
 * PI_MAX_VEC_CELLS cells at stride 1 or 2, at least 2 a row inside the input, and at most
 * PI_EDGES border columns, each with a cell inside. */
static inline void pi_max_plan_of(pi_run* r) {
    const pool_block* s = &r->s;
    pi_max_plan* m = &r->max;
    int64_t last = s->w - 1 + s->pw - (s->kw - 1) * s->dw; /* the last inside start, + pw */
    int64_t bottom = s->h - 1 + s->ph - (s->kh - 1) * s->dh;
    r->fast_max = 0;
    if (!r->rows || !r->var.max_plane[0] || s->mode != POOL_MAX || (s->sw != 1 && s->sw != 2) ||
        last < 0 || s->kh * s->kw > PI_MAX_VEC_CELLS)
        return;
    m->s = *s, m->n_edges = 0, m->zero_point = r->zero_point;
    m->end = (const uint8_t*)r->x + r->size;
    m->lo = pool_clamp(pool_ceil_div(s->pw, s->sw), 0, s->ow);
    m->hi = pool_clamp(last / s->sw + 1, m->lo, s->ow);
    if (m->hi - m->lo < 2 || m->lo + s->ow - m->hi > PI_EDGES) return;
    for (int64_t ow = m->lo > 0 ? 0 : m->hi; ow < s->ow; ow = ow + 1 == m->lo ? m->hi : ow + 1) {
        pool_span cols = pool_window(s, 0, ow);
        if (cols.n <= 0) return; /* a window wholly in the padding: pi_cell's zero point */
        for (int lane = 0; lane < 16; lane++)
            m->edge_keep[m->n_edges][lane] = lane % s->dw == 0 && lane / s->dw < cols.n ? 0xFF : 0;
        m->edge_at[m->n_edges] = ow, m->edge[m->n_edges++] = cols;
    }
    m->row_lo = pool_clamp(pool_ceil_div(s->ph, s->sh), 0, s->oh);
    m->row_hi = bottom < 0 ? m->row_lo : pool_clamp(bottom / s->sh + 1, m->row_lo, s->oh);
    r->fast_max = 1;
}

/* The pass over block s (as_sliding applied) of variant isa, x of zero point zero_point */
static inline pi_run pi_run_of(const pool_block* s, const void* x, void* y, int64_t zero_point,
                               int isa) {
    pi_run r;
    r.s = *s;
    pool_as_sliding(&r.s);
    r.x = x, r.y = y, r.zero_point = zero_point;
    r.size = r.s.planes * r.s.h * r.s.w;
    r.rows = isa != PI_SCALAR;
    r.var = pi_variant_of(isa);
    pi_vector_columns(&r, &r.lo, &r.hi);
    pi_max_plan_of(&r);
    return r;
}

/* int8 is pooled as uint8 with its sign bit flipped (the row passes' flip) */
#define PI_FLIP_i8 0x80
#define PI_FLIP_u8 0

#define PI_PLANES(S, T)                                                                         \
    /* One clamped window: nr rows w apart by nc columns cs apart, nr * nc > 0 */               \
    static inline T pi_window_max_##S(const T* x, int64_t w, int64_t cs, int64_t nr,           \
                                      int64_t nc) {                                             \
        T m = x[0];                                                                             \
        for (int64_t r = 0; r < nr; r++)                                                        \
            for (int64_t j = 0; j < nc; j++) m = x[r * w + j * cs] > m ? x[r * w + j * cs] : m; \
        return m;                                                                               \
    }                                                                                           \
    static inline int64_t pi_window_sum_##S(const T* x, int64_t w, int64_t cs, int64_t nr,     \
                                            int64_t nc) {                                       \
        int64_t acc = 0;                                                                        \
        for (int64_t r = 0; r < nr; r++)                                                        \
            for (int64_t j = 0; j < nc; j++) acc += x[r * w + j * cs];                          \
        return acc;                                                                             \
    }                                                                                           \
    /* Output cell ow of the row of windows `rows`. Whole rows of the plane (a global pool) are \
     * one contiguous run, reduced in vectors where it fills at least one block (a 7x7 plane is \
     * quicker cell by cell). */                                                                \
    static inline T pi_cell_##S(const pi_run* r, const T* x, pool_span rows, int64_t ow) {      \
        const pool_block* s = &r->s;                                                            \
        pool_span cols = pool_window(s, 0, ow);                                                 \
        int64_t dh = pool_is_adaptive(s) ? 1 : s->dh, dw = pool_is_adaptive(s) ? 1 : s->dw;     \
        int64_t cells = rows.n * cols.n, div = pool_divisor(s, rows, cols), total;              \
        if (rows.n <= 0 || cols.n <= 0) return (T)r->zero_point;                                \
        const T* at = x + rows.lo * s->w + cols.lo;                                             \
        int run = r->rows && cols.n == s->w && (dh == 1 || rows.n == 1) && cells >= PI_B;       \
        if (pool_is_max(s)) {                                                                   \
            if (run) return (T)r->var.run_max((const uint8_t*)at, cells, PI_FLIP_##S);          \
            return pi_window_max_##S(at, dh * s->w, dw, rows.n, cols.n);                        \
        }                                                                                       \
        if (run) /* the flipped values' sum, less the flip's 128 per cell */                    \
            total = r->var.run_sum((const uint8_t*)at, cells, PI_FLIP_##S) -                    \
                    (PI_FLIP_##S != 0) * 128 * cells;                                           \
        else                                                                                    \
            total = pi_window_sum_##S(at, dh * s->w, dw, rows.n, cols.n);                       \
        total += r->zero_point * (div - cells); /* the counted padding's cells */               \
        return (T)pi_rounded_quotient(total, div);                                              \
    }                                                                                           \
    static inline void pi_plane_##S(const pi_run* r, const T* x, T* y) {                        \
        const pool_block* s = &r->s;                                                            \
        pool_span full = {0, s->kw, s->kw}; /* an interior window's columns */                  \
        pi_row a;                                                                               \
        a.step = s->dh * s->w, a.kw = s->kw, a.sw = s->sw, a.dw = s->dw, a.n = r->hi - r->lo;  \
        a.flip = PI_FLIP_##S;                                                                   \
        for (int64_t oh = 0; oh < s->oh; oh++, y += s->ow) {                                    \
            pool_span rows = pool_window(s, 1, oh);                                             \
            int64_t lo = rows.n > 0 ? r->lo : 0, hi = rows.n > 0 ? r->hi : 0;                   \
            if (hi > lo) {                                                                      \
                a.x = (const uint8_t*)(x + rows.lo * s->w + lo * s->sw - s->pw);                \
                a.readable = (const uint8_t*)r->x + r->size - a.x;                              \
                a.rows = rows.n, a.y = (uint8_t*)(y + lo);                                      \
                a.div = pool_is_max(s) ? 0 : (int32_t)pool_divisor(s, rows, full);              \
                /* the counted padding in the flipped values: the zero point (+128 for int8) */ \
                a.offset = pool_is_max(s) ? 0                                                   \
                                          : (int32_t)((r->zero_point + (PI_FLIP_##S != 0) * 128) \
                                                      * (a.div - rows.n * s->kw));              \
                r->var.row(&a);                                                                 \
            }                                                                                   \
            for (int64_t ow = 0; ow < lo; ow++) y[ow] = pi_cell_##S(r, x, rows, ow);            \
            for (int64_t ow = hi; ow < s->ow; ow++) y[ow] = pi_cell_##S(r, x, rows, ow);        \
        }                                                                                       \
    }                                                                                           \
    /* planes [lo, hi) of the pi_run at ctx */                                                  \
    static inline void pi_planes_##S(void* ctx, int64_t lo, int64_t hi) {                       \
        const pi_run* r = (const pi_run*)ctx;                                                   \
        int64_t full = r->s.h * r->s.w, pooled = r->s.oh * r->s.ow;                             \
        for (int64_t p = lo; p < hi; p++) {                                                     \
            const T* x = (const T*)r->x + p * full;                                             \
            T* y = (T*)r->y + p * pooled;                                                       \
            if (r->fast_max)                                                                    \
                r->var.max_plane[PI_FLIP_##S != 0](&r->max, (const uint8_t*)x, (uint8_t*)y,    \
                                                   (const uint8_t*)(y + pooled));               \
            else                                                                                \
                pi_plane_##S(r, x, y);                                                          \
        }                                                                                       \
    }

PI_PLANES(i8, int8_t)
PI_PLANES(u8, uint8_t)

#endif
