/* C = op(A) op(B) in float32 for the C runtime: a GEMM of many rows on op(B) in panels, and a
 * single row's GEMV (gemv_row.h, the Python executor's loops for a float32 row).
 *
 * Panels: op(B) (k x n) cut into blocks of `panel` columns (zeros past n), each stored k rows of
 * `panel` floats: panel j at panels + j * k * panel, its row p at + p * panel. The exporter packs
 * a constant op(B) (linear's and matmul's weights) so once (deploy/export.py's gemm_panels, the
 * width of the exporting CPU's tile); other operands are packed so on each call, at this CPU's
 * width. A register tile keeps MR rows x W columns of C (W dividing the panel: the widest of
 * this CPU's tiles that does) and runs over k in blocks of KC: its W-column slice of a panel's
 * KC rows (KC x W floats, 16 KiB on AVX2) stays in L1 while the tile passes every MR rows of a
 * block of rows, whose KC columns of A (at most MC_TILES tiles: 144 x 256 floats on AVX2) stay
 * in L2 while the panels pass (GotoBLAS's loop order; A is read where it lies, not packed).
 *
 * Bits: each element of C is summed over k in order from zero, one fused multiply-add per step
 * where the tile's isa has it, as conv_tile.h's gather tiles sum it (the Python executor's tile
 * GEMM on AVX-512); a k block starts its tile from the sums the last block stored (float32,
 * exactly what the registers held), so blocking over k changes no bit, nor does the tile's
 * width, nor the threads: work items are blocks of rows x panels, each element computed whole
 * by one item, which runs every k block of it. x86-64's baseline tile (no FMA) multiplies and
 * adds; aarch64's NEON tile (and its baseline, contracted) has the FMA, so its bits are x86's FMA
 * tiles'. The files that include this one build with -ffp-contract=fast (kernels.CONTRACTED):
 * the export's -ffp-contract=off would split each FMA in two. linear's bias and activation are applied to each tile after its last k block,
 * while it is in L1 (act(sum + bias), the add and op linalg.pyx's epilogue rounds). */
#ifndef MGR_GEMM_FMA_H
#define MGR_GEMM_FMA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../mgr_kernel.h"
#include "activation.h"
#include "cpu_isa.h"
#include "gemv_row.h"
#include "grain.h"

#define MGR_GEMM_MR_MAX 8      /* the most rows a tile keeps */
#define MGR_GEMM_W_MAX 64      /* the most columns a tile keeps, and the widest panel */
#define MGR_GEMM_KC_FLOATS 4096 /* a tile's slice of a k block: KC x W floats (16 KiB of L1) */
#define MGR_GEMM_MC_TILES 24    /* row tiles per block of rows (its KC columns of A in L2) */
#define MGR_GEMM_ITEMS 8        /* work items wanted for the threads when the panels are few */

/* c[r][0..W) for r < MR (ldc apart) = (first ? 0 : c) + sum over p < kb of a_r[p * as] * b[p][..],
 * b's rows ldb apart, a_r = px[r] */
typedef void (*mgr_panel_tile_fn)(const float* const* px, ptrdiff_t as, ptrdiff_t kb,
                                  const float* b, ptrdiff_t ldb, float* c, ptrdiff_t ldc,
                                  int first);

#define MGR_PANEL_TILE_BODY(VW, MR, NV)                                                      \
    typedef float vec __attribute__((vector_size(VW * 4)));                                  \
    typedef float uvec __attribute__((vector_size(VW * 4), aligned(4)));                     \
    vec acc[MR][NV];                                                                         \
    const float* row[MR];                                                                    \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                   \
        row[r] = px[r];                                                                      \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                 \
            acc[r][v] = first ? (vec){0} : *(const uvec*)(c + r * ldc + v * VW);             \
    }                                                                                        \
    for (ptrdiff_t p = 0; p < kb; p++, b += ldb) {                                           \
        vec wv[NV];                                                                          \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) wv[v] = *(const uvec*)(b + v * VW); \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                               \
            vec x = row[r][p * as] - (vec){0};                                               \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] += x * wv[v];     \
        }                                                                                    \
    }                                                                                        \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                     \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                 \
            *(uvec*)(c + r * ldc + v * VW) = acc[r][v];

#define MGR_PANEL_TILE_ARGS                                                                  \
    const float* const* px, ptrdiff_t as, ptrdiff_t kb, const float* b, ptrdiff_t ldb,       \
    float* c, ptrdiff_t ldc, int first

static void mgr_panel_tile_base(MGR_PANEL_TILE_ARGS) { MGR_PANEL_TILE_BODY(4, 4, 2) }

#if defined(__GNUC__) && defined(__x86_64__) && !defined(MGR_GEMM_PORTABLE)
__attribute__((target("avx2,fma"))) static void mgr_panel_tile_avx2(MGR_PANEL_TILE_ARGS)
{ MGR_PANEL_TILE_BODY(8, 6, 2) }
__attribute__((target("avx2,fma"))) static void mgr_panel_tile_avx2_8(MGR_PANEL_TILE_ARGS)
{ MGR_PANEL_TILE_BODY(8, 6, 1) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void mgr_panel_tile_avx512(MGR_PANEL_TILE_ARGS) { MGR_PANEL_TILE_BODY(16, 7, 4) }
#endif

/* aarch64's NEON tile, 8 rows x 8 columns (16 accumulators of its 32 registers): where A's rows
 * are contiguous (as 1) it loads 4 steps of k of each row as one vector and takes them by lane
 * (vfmaq_laneq_f32), 16 loads per 64 multiply-adds; A transposed broadcasts one value per row
 * and step. Each element is the same fused multiply-adds over k in order as x86's FMA tiles. */
#if defined(__GNUC__) && defined(__aarch64__) && !defined(MGR_GEMM_PORTABLE)
#include <arm_neon.h>

#define MGR_NEON_STEP(lane) /* step p + lane of k: acc[r] += x[r][lane] * b's row */         \
    {                                                                                        \
        const float* bp = b + (p + lane) * ldb;                                              \
        float32x4_t w0 = vld1q_f32(bp), w1 = vld1q_f32(bp + 4);                              \
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {                                \
            acc[r][0] = vfmaq_laneq_f32(acc[r][0], w0, x[r], lane);                          \
            acc[r][1] = vfmaq_laneq_f32(acc[r][1], w1, x[r], lane);                          \
        }                                                                                    \
    }

static void mgr_panel_tile_neon(MGR_PANEL_TILE_ARGS) {
    float32x4_t acc[8][2];
    ptrdiff_t p = 0;
    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
        acc[r][0] = first ? vdupq_n_f32(0) : vld1q_f32(c + r * ldc);
        acc[r][1] = first ? vdupq_n_f32(0) : vld1q_f32(c + r * ldc + 4);
    }
    if (as == 1)
        for (; p + 4 <= kb; p += 4) {
            float32x4_t x[8];
            _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) x[r] = vld1q_f32(px[r] + p);
            MGR_NEON_STEP(0) MGR_NEON_STEP(1) MGR_NEON_STEP(2) MGR_NEON_STEP(3)
        }
    for (; p < kb; p++) { /* A transposed, or the last steps of k */
        float32x4_t w0 = vld1q_f32(b + p * ldb), w1 = vld1q_f32(b + p * ldb + 4);
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
            float32x4_t x = vld1q_dup_f32(px[r] + p * as);
            acc[r][0] = vfmaq_f32(acc[r][0], w0, x);
            acc[r][1] = vfmaq_f32(acc[r][1], w1, x);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
        vst1q_f32(c + r * ldc, acc[r][0]);
        vst1q_f32(c + r * ldc + 4, acc[r][1]);
    }
}
#endif

typedef struct { mgr_panel_tile_fn fn; int64_t mr, w; } mgr_panel_tile;

/* The widest tile of this CPU whose width divides `panel` (a multiple of 8): AVX-512's 7 x 64,
 * AVX2's 6 x 16 (the shapes of conv_tile.h's widest gather tiles), the baseline's 4 x 8; an FMA
 * CPU reads panels of 8 (a blob packed for the baseline tile) with a 6 x 8 AVX2 tile, so every
 * FMA CPU gives the same bits. aarch64 runs every panel on its NEON tile, 8 x 8, which has
 * those bits too. -DMGR_GEMM_PORTABLE builds the baseline tile alone (as every build for another
 * CPU is). */
static inline mgr_panel_tile mgr_panel_tile_for(int64_t panel) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(MGR_GEMM_PORTABLE)
    int isa = cpu_isa_widest();
    if (isa == 2 && panel % 64 == 0) return (mgr_panel_tile){mgr_panel_tile_avx512, 7, 64};
    if (isa >= 1 && panel % 16 == 0) return (mgr_panel_tile){mgr_panel_tile_avx2, 6, 16};
    if (isa >= 1) return (mgr_panel_tile){mgr_panel_tile_avx2_8, 6, 8};
#elif defined(__GNUC__) && defined(__aarch64__) && !defined(MGR_GEMM_PORTABLE)
    return (mgr_panel_tile){mgr_panel_tile_neon, 8, 8}; /* any panel: 8 divides them all */
#endif
    (void)panel;
    return (mgr_panel_tile){mgr_panel_tile_base, 4, 8};
}

/* the panel width this CPU's widest tile reads: what a GEMM packs op(B) into on each call, and
 * what the exporter packs weights into (deploy.kernels.gemm_panel asks the same of cpu_isa) */
static inline int64_t mgr_gemm_panel(void) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(MGR_GEMM_PORTABLE)
    int isa = cpu_isa_widest();
    return isa == 2 ? 64 : isa == 1 ? 16 : 8;
#else
    return 8;
#endif
}

/* The loader's check of packed panels for n columns over k: NULL with *floats the floats they
 * take, else what is wrong. Any multiple of 8 up to 64 runs (the tile taken is the widest whose
 * width divides it), so a blob packed on another CPU runs here with the same bits. */
static inline const char* mgr_gemm_panels_check(int64_t n, int64_t k, int64_t panel,
                                                int64_t* floats) {
    if (panel < 8 || panel > MGR_GEMM_W_MAX || panel % 8 != 0)
        return "its panel width is not a multiple of 8 from 8 to 64";
    if (n < 0 || n > INT64_MAX - MGR_GEMM_W_MAX || !mgr_muladd(0, (n + panel - 1) / panel * panel, k, floats))
        return "m, n or k is negative or too large";
    return NULL;
}

/* A GEMM on panels: C (m x n, row-major) = op(A) op(B), then act(C + bias) where bias or act */
typedef struct {
    int ta;                /* A stored (k, m): op(A)'s row i is A's column i */
    int64_t m, n, k, panel;
    const float* a;
    const float* panels;   /* op(B) in panels of `panel` columns (above) */
    float* c;
    const float* bias;     /* NULL: none */
    int act;               /* activation.h's code */
} mgr_gemm_job;

typedef struct {
    const mgr_gemm_job* g;
    mgr_panel_tile t;
    int64_t kc, mc, npanels;
} mgr_gemm_plan;

/* one tile of C at rows [r0, r0 + rows) and columns [j0, j0 + cols): straight into C when
 * whole, else through a local tile (a short last row tile reads its last row again) */
static inline void mgr_gemm_tile(const mgr_gemm_plan* s, int64_t r0, int64_t rows, int64_t j0,
                                 int64_t cols, int64_t p0, int64_t kb, const float* b) {
    const mgr_gemm_job* g = s->g;
    const float* px[MGR_GEMM_MR_MAX];
    float part[MGR_GEMM_MR_MAX * MGR_GEMM_W_MAX];
    int64_t mr = s->t.mr, w = s->t.w, r, j;
    int first = p0 == 0, last = p0 + kb >= g->k, whole = rows == mr && cols == w;
    for (r = 0; r < mr; r++) {
        int64_t i = r0 + (r < rows ? r : rows - 1);
        px[r] = g->a + (g->ta ? i + p0 * g->m : i * g->k + p0);
    }
    float* dst = whole ? g->c + r0 * g->n + j0 : part;
    int64_t ld = whole ? g->n : w;
    if (!whole && !first)
        for (r = 0; r < rows; r++)
            memcpy(part + r * w, g->c + (r0 + r) * g->n + j0, (size_t)cols * sizeof(float));
    s->t.fn(px, g->ta ? g->m : 1, kb, b, s->g->panel, dst, ld, first);
    if (!whole)
        for (r = 0; r < rows; r++)
            memcpy(g->c + (r0 + r) * g->n + j0, part + r * w, (size_t)cols * sizeof(float));
    if (last && (g->bias || g->act))
        for (r = 0; r < rows; r++) {
            float* y = g->c + (r0 + r) * g->n + j0;
            const float* bias = g->bias ? g->bias + j0 : NULL;
            if (bias)
                for (j = 0; j < cols; j++) y[j] = act_f32(y[j] + bias[j], g->act);
            else
                for (j = 0; j < cols; j++) y[j] = act_f32(y[j], g->act);
        }
}

/* work items [lo, hi) (item = row block * npanels + panel: a part of mgr_parallel_for), every
 * k block of each, k blocks outermost */
static void mgr_gemm_items(void* ctx, int64_t lo, int64_t hi) {
    const mgr_gemm_plan* s = (const mgr_gemm_plan*)ctx;
    const mgr_gemm_job* g = s->g;
    for (int64_t p0 = 0;; p0 += s->kc) {
        int64_t kb = g->k - p0 < s->kc ? g->k - p0 : s->kc;
        for (int64_t item = lo; item < hi; item++) {
            int64_t r0 = item / s->npanels * s->mc, pj = item % s->npanels;
            int64_t r1 = r0 + s->mc < g->m ? r0 + s->mc : g->m;
            const float* panel = g->panels + pj * g->k * g->panel + p0 * g->panel;
            for (int64_t sub = 0; sub < g->panel; sub += s->t.w) {
                int64_t j0 = pj * g->panel + sub;
                if (j0 >= g->n) break;
                int64_t cols = g->n - j0 < s->t.w ? g->n - j0 : s->t.w;
                for (int64_t r = r0; r < r1; r += s->t.mr)
                    mgr_gemm_tile(s, r, r1 - r < s->t.mr ? r1 - r : s->t.mr, j0, cols, p0, kb,
                                  panel + sub);
            }
        }
        if (p0 + s->kc >= g->k) break;
    }
}

/* Run `g` over this model's threads, as many as its FLOPs pay for (grain.h, the executor's
 * rule): one mgr_parallel_for of (row block, panel) items */
static inline void mgr_gemm_on_panels(const mgr_gemm_job* g) {
    if (g->m == 0 || g->n == 0) return;
    mgr_gemm_plan s = {g, mgr_panel_tile_for(g->panel), 0, 0, (g->n + g->panel - 1) / g->panel};
    int64_t tiles = (g->m + s.t.mr - 1) / s.t.mr, blocks;
    s.kc = MGR_GEMM_KC_FLOATS / s.t.w;
    /* rows in blocks of at most MC_TILES tiles; smaller where the panels are too few to give
     * the threads MGR_GEMM_ITEMS items */
    blocks = (tiles + MGR_GEMM_MC_TILES - 1) / MGR_GEMM_MC_TILES;
    if (blocks * s.npanels < MGR_GEMM_ITEMS) {
        blocks = (MGR_GEMM_ITEMS + s.npanels - 1) / s.npanels;
        if (blocks > tiles) blocks = tiles;
    }
    s.mc = (tiles + blocks - 1) / blocks * s.t.mr;
    mgr_parallel_for_upto((g->m + s.mc - 1) / s.mc * s.npanels,
                          mg_gemm_threads(g->m, g->n, g->k, 4, mgr_run_threads()),
                          mgr_gemm_items, &s);
}

/* panels [lo, hi) of op(B) packed: a part of mgr_parallel_for. Loops, not memcpy (a call per
 * 64 bytes cost more than the copy); B^T's rows transposed 8 steps of k at a time, so each read
 * is 32 contiguous bytes of one row. */
typedef struct { int tb; int64_t n, k, panel; const float* b; float* out; } mgr_pack_job;

#define MGR_PACK_K 8

static void mgr_pack_panels(void* ctx, int64_t lo, int64_t hi) {
    const mgr_pack_job* q = (const mgr_pack_job*)ctx;
    int64_t n = q->n, k = q->k, panel = q->panel;
    for (int64_t pj = lo; pj < hi; pj++) {
        int64_t j0 = pj * panel, w = n - j0 < panel ? n - j0 : panel, p = 0, j;
        float* out = q->out + pj * k * panel;
        if (q->tb)
            for (; p + MGR_PACK_K <= k; p += MGR_PACK_K)
                for (j = 0; j < w; j++) {
                    const float* src = q->b + (j0 + j) * k + p;
                    for (int s = 0; s < MGR_PACK_K; s++) out[(p + s) * panel + j] = src[s];
                }
        for (; p < k; p++) { /* B's rows (or B^T's last steps of k) */
            float* row = out + p * panel;
            if (q->tb)
                for (j = 0; j < w; j++) row[j] = q->b[(j0 + j) * k + p];
            else
                for (j = 0; j < w; j++) row[j] = q->b[p * n + j0 + j];
        }
        if (w < panel)
            for (p = 0; p < k; p++)
                for (j = w; j < panel; j++) out[p * panel + j] = 0.0f;
    }
}

/* A single row times op(B): gemv_row.h's loops, the Python executor's for a float32 row (linalg.pyx),
 * reading B where it lies, once, where the tiles would pack all of it first (mlp-infer at batch 1:
 * 7 MiB of weights copied per call). On the threads its bytes pay for (grain.h: the executor's
 * plan gives it the same count), split as linalg.pyx splits it: a stored B (k, n) by parts of k
 * where the plan gave the parts' sums a workspace (matmul's gemv_split: each thread reads whole
 * rows of B, contiguous bytes), else the columns in blocks of MGR_GEMV_COLS (linalg.pyx's
 * BLOCK_COLUMNS). Each column's sum runs in the same order whatever range or part holds it
 * (gemv_row.h), so any split gives the bits of one call, and those of the Python executor's. */
#define MGR_GEMV_COLS 16

typedef struct {
    gemv_fn fn;
    const float *a, *b;
    float* c;
    int64_t n, k, ldb;
} mgr_gemv_call;

static void mgr_gemv_cols(void* ctx, int64_t lo, int64_t hi) {
    const mgr_gemv_call* g = (const mgr_gemv_call*)ctx;
    int64_t j1 = hi * MGR_GEMV_COLS < g->n ? hi * MGR_GEMV_COLS : g->n;
    g->fn(g->a, g->b, g->ldb, g->k, lo * MGR_GEMV_COLS, j1, 1.0f, 0, g->c);
}

typedef struct {
    gemv_parts_fn sums;
    const float *a, *b;
    float* partials;
    int64_t n, k;
} mgr_gemv_split_call;

/* parts [lo, hi) of k: their sums for every column (gemv_row.h's gemv_parts_*) */
static void mgr_gemv_parts(void* ctx, int64_t lo, int64_t hi) {
    const mgr_gemv_split_call* g = (const mgr_gemv_split_call*)ctx;
    g->sums(g->a, g->b, g->n, g->k, g->n, lo, hi, g->partials);
}

/* c (n) = a (k) op(B); `partials` (gemv_parts(k) x n floats) or NULL. Inlined, as
 * mgr_gemm_epilogue is, so that a caller's constant tb and NULL partials leave out the loops it
 * never runs (linear_f32.c: the dots alone, 12 KB less code at -O3). */
#define MGR_GEMM_INLINE static inline __attribute__((always_inline))

MGR_GEMM_INLINE void mgr_gemv(int tb, int64_t n, int64_t k, const float* a, const float* b,
                              float* c, float* partials) {
    int64_t threads = mg_gemm_threads(1, n, k, 4, mgr_run_threads());
    if (threads > 1 && !tb && partials && gemv_parts(k) > 1) {
        mgr_gemv_split_call g = {NULL, a, b, partials, n, k};
        gemv_finish_fn finish;
        gemv_split_of(&g.sums, &finish);
        mgr_parallel_for_upto(gemv_parts(k), threads, mgr_gemv_parts, &g);
        finish(partials, gemv_parts(k), n, 0, n, 1.0f, 0, c);
        return;
    }
    mgr_gemv_call v = {gemv_of(tb), a, b, c, n, k, tb ? k : n};
    mgr_parallel_for_upto((n + MGR_GEMV_COLS - 1) / MGR_GEMV_COLS, threads, mgr_gemv_cols, &v);
}

/* C = op(A) op(B), then act(C + bias) where bias or act: MGR_KERNEL_OK, or
 * MGR_KERNEL_OUT_OF_MEMORY where op(B)'s panels (k x n rounded up to the panel) are not had.
 * A single row runs the GEMV instead (then the epilogue over its row), split by parts of k
 * where `partials` is given (mgr_gemv). */
MGR_GEMM_INLINE int mgr_gemm_epilogue(int ta, int tb, int64_t m, int64_t n, int64_t k,
                                      const float* a, const float* b, float* c,
                                      const float* bias, int act, float* partials) {
    if (m == 0 || n == 0) return MGR_KERNEL_OK;
    if (m == 1) { /* op(A)'s one row is contiguous either way */
        mgr_gemv(tb, n, k, a, b, c, partials);
        if (bias)
            for (int64_t j = 0; j < n; j++) c[j] = act_f32(c[j] + bias[j], act);
        else if (act)
            for (int64_t j = 0; j < n; j++) c[j] = act_f32(c[j], act);
        return MGR_KERNEL_OK;
    }
    int64_t panel = mgr_gemm_panel(), npanels = (n + panel - 1) / panel;
    float* panels = (float*)malloc((size_t)(k > 0 ? k : 1) * (size_t)(npanels * panel) *
                                   sizeof(float));
    if (!panels) return MGR_KERNEL_OUT_OF_MEMORY;
    mgr_pack_job q = {tb, n, k, panel, b, panels};
    mgr_parallel_for_upto(npanels, mg_gemm_threads(m, n, k, 4, mgr_run_threads()),
                          mgr_pack_panels, &q);
    mgr_gemm_job g = {ta, m, n, k, panel, a, panels, c, bias, act};
    mgr_gemm_on_panels(&g);
    free(panels);
    return MGR_KERNEL_OK;
}

static inline int mgr_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a,
                           const float* b, float* c, float* partials) {
    return mgr_gemm_epilogue(ta, tb, m, n, k, a, b, c, NULL, 0, partials);
}

#endif
