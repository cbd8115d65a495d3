/* C = op(A) op(B) in float32 on panels of op(B) and register tiles: the one GEMM of the Python
 * executor's "tiles" way on AVX2 (linalg.pyx's panel_product) and of the C runtime
 * (deploy/csrc/kernels/gemm_c.h, which adds a single row's GEMV and the memory of a per-call
 * packing), so the two give the same bits.
 *
 * Seam: the includer brings its threads as an mg_gemm_pool_fn (the C runtime's
 * mgr_parallel_for_upto; the executor's parallel_for behind a shim) and any memory: a job packs
 * its operands where the includer says (mg_gemm_pack_run: the executor's workspace, memory the
 * C runtime allocates) or reads the exporter's packed weights, so nothing here allocates or
 * fails.
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
 * tiles'. The files that include this one build with FP contraction (the package's default; the
 * C export's kernels.CONTRACTED): -ffp-contract=off would split each FMA in two. linear's bias
 * and activation are applied to each tile after its last k block, while it is in L1
 * (act(sum + bias), the add and op linalg.pyx's epilogue rounds); an includer's epilogue
 * (addmm's) takes k in one block instead, so that C keeps its values until the tile's sums are
 * whole. */
#ifndef MG_GEMM_TILE_H
#define MG_GEMM_TILE_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "activation.h"
#include "cpu_isa.h"

/* The seam to the includer's threads: part(ctx, lo, hi) over [0, n) in contiguous runs, on at
 * most `most` threads, each unit in exactly one run (the bits do not depend on the count) */
typedef void (*mg_gemm_part_fn)(void* ctx, int64_t lo, int64_t hi);
typedef void (*mg_gemm_pool_fn)(int64_t n, int64_t most, mg_gemm_part_fn part, void* ctx);

#define MG_GEMM_MR_MAX 8      /* the most rows a tile keeps */
#define MG_GEMM_W_MAX 64      /* the most columns a tile keeps, and the widest panel */
#define MG_GEMM_KC_FLOATS 4096 /* a tile's slice of a k block: KC x W floats (16 KiB of L1) */
#define MG_GEMM_MC_TILES 24    /* row tiles per block of rows (its KC columns of A in L2) */
#define MG_GEMM_ITEMS 8        /* work items wanted for the threads when the panels are few */

/* c[r][0..W) for r < MR (ldc apart) = (first ? 0 : c) + sum over p < kb of a_r[p * as] * b[p][..],
 * b's rows ldb apart, a_r = px[r] */
typedef void (*mg_panel_tile_fn)(const float* const* px, ptrdiff_t as, ptrdiff_t kb,
                                  const float* b, ptrdiff_t ldb, float* c, ptrdiff_t ldc,
                                  int first);

#define MG_PANEL_TILE_BODY(VW, MR, NV)                                                      \
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

#define MG_PANEL_TILE_ARGS                                                                  \
    const float* const* px, ptrdiff_t as, ptrdiff_t kb, const float* b, ptrdiff_t ldb,       \
    float* c, ptrdiff_t ldc, int first

static void mg_panel_tile_base(MG_PANEL_TILE_ARGS) { MG_PANEL_TILE_BODY(4, 4, 2) }

#if defined(__GNUC__) && defined(__x86_64__) && !defined(MGR_GEMM_PORTABLE)
__attribute__((target("avx2,fma"))) static void mg_panel_tile_avx2(MG_PANEL_TILE_ARGS)
{ MG_PANEL_TILE_BODY(8, 6, 2) }
__attribute__((target("avx2,fma"))) static void mg_panel_tile_avx2_8(MG_PANEL_TILE_ARGS)
{ MG_PANEL_TILE_BODY(8, 6, 1) }
__attribute__((target("avx512f,fma,prefer-vector-width=512")))
static void mg_panel_tile_avx512(MG_PANEL_TILE_ARGS) { MG_PANEL_TILE_BODY(16, 7, 4) }
#endif

/* aarch64's NEON tile, 8 rows x 8 columns (16 accumulators of its 32 registers): where A's rows
 * are contiguous (as 1) it loads 4 steps of k of each row as one vector and takes them by lane
 * (vfmaq_laneq_f32), 16 loads per 64 multiply-adds; A transposed broadcasts one value per row
 * and step. Each element is the same fused multiply-adds over k in order as x86's FMA tiles. */
#if defined(__GNUC__) && defined(__aarch64__) && !defined(MGR_GEMM_PORTABLE)
#include <arm_neon.h>

#define MG_NEON_STEP(lane) /* step p + lane of k: acc[r] += x[r][lane] * b's row */         \
    {                                                                                        \
        const float* bp = b + (p + lane) * ldb;                                              \
        float32x4_t w0 = vld1q_f32(bp), w1 = vld1q_f32(bp + 4);                              \
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {                                \
            acc[r][0] = vfmaq_laneq_f32(acc[r][0], w0, x[r], lane);                          \
            acc[r][1] = vfmaq_laneq_f32(acc[r][1], w1, x[r], lane);                          \
        }                                                                                    \
    }

static void mg_panel_tile_neon(MG_PANEL_TILE_ARGS) {
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
            MG_NEON_STEP(0) MG_NEON_STEP(1) MG_NEON_STEP(2) MG_NEON_STEP(3)
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

typedef struct { mg_panel_tile_fn fn; int64_t mr, w; } mg_panel_tile;

/* The widest tile of this CPU whose width divides `panel` (a multiple of 8): AVX-512's 7 x 64,
 * AVX2's 6 x 16 (the shapes of conv_tile.h's widest gather tiles), the baseline's 4 x 8; an FMA
 * CPU reads panels of 8 (a blob packed for the baseline tile) with a 6 x 8 AVX2 tile, so every
 * FMA CPU gives the same bits. aarch64 runs every panel on its NEON tile, 8 x 8, which has
 * those bits too. -DMGR_GEMM_PORTABLE builds the baseline tile alone (as every build for another
 * CPU is). */
static inline mg_panel_tile mg_panel_tile_for(int64_t panel) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(MGR_GEMM_PORTABLE)
    int isa = cpu_isa_widest();
    if (isa == 2 && panel % 64 == 0) return (mg_panel_tile){mg_panel_tile_avx512, 7, 64};
    if (isa >= 1 && panel % 16 == 0) return (mg_panel_tile){mg_panel_tile_avx2, 6, 16};
    if (isa >= 1) return (mg_panel_tile){mg_panel_tile_avx2_8, 6, 8};
#elif defined(__GNUC__) && defined(__aarch64__) && !defined(MGR_GEMM_PORTABLE)
    return (mg_panel_tile){mg_panel_tile_neon, 8, 8}; /* any panel: 8 divides them all */
#endif
    (void)panel;
    return (mg_panel_tile){mg_panel_tile_base, 4, 8};
}

/* the panel width this CPU's widest tile reads: what a GEMM packs op(B) into on each call, and
 * what the exporter packs weights into (deploy.kernels.gemm_panel asks the same of cpu_isa) */
static inline int64_t mg_gemm_panel(void) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(MGR_GEMM_PORTABLE)
    int isa = cpu_isa_widest();
    return isa == 2 ? 64 : isa == 1 ? 16 : 8;
#else
    return 8;
#endif
}

/* the floats op(B) (k x n) takes in panels of `panel` columns: a per-call packing's workspace */
static inline int64_t mg_gemm_panels_floats(int64_t n, int64_t k, int64_t panel) {
    return (n + panel - 1) / panel * panel * k;
}

/* An includer's epilogue of a tile's final sums (rows x cols of them, ld apart), C's rows
 * [r0, r0 + rows) and columns [j0, j0 + cols): it writes those elements of C, which until then
 * hold what they held before the GEMM (an addmm's addend may be C itself) */
typedef void (*mg_gemm_out_fn)(const void* ctx, const float* sums, int64_t ld, int64_t r0,
                               int64_t rows, int64_t j0, int64_t cols);

/* A GEMM on panels: C (m x n, row-major) = op(A) op(B), then act(C + bias) where bias or act,
 * or out's epilogue where given */
typedef struct {
    int ta;                /* A stored (k, m): op(A)'s row i is A's column i */
    int64_t m, n, k, panel;
    const float* a;
    const float* panels;   /* op(B) in panels of `panel` columns (above) */
    float* c;
    const float* bias;     /* NULL: none */
    int act;               /* activation.h's code */
    mg_gemm_out_fn out;    /* NULL: the bias and act above; else k in one block, C untouched */
    const void* out_ctx;   /* until out writes it */
    mg_gemm_pool_fn pool;  /* the includer's threads, and at most how many of them to use */
    int64_t threads;
    const float* apack;    /* NULL: A read where it lies; else op(A) packed (mg_gemm_pack_run) */
} mg_gemm_job;

/* Whether op(A) is packed before the GEMM: where its rows are read by enough panels to pay for
 * the pass. Packed, each row tile's MR rows are one stream, MR floats per step of k, where
 * otherwise the tile reads MR rows k floats apart (or, A transposed, one cache line per step:
 * with the panel's 16 KiB slice, more lines than L1 keeps). On the 2-core AMD EPYC (Zen 3),
 * GFLOP/s of one thread on op(B) packed beforehand, the fastest of 40 calls, A where it lies /
 * A packed beforehand: (m, n, k) = (1024, 1024, 128) A^T 56.6 / 86.2; (1024, 784, 128) A^T
 * 68.3 / 92.4; (128, 1024, 1024) 76.7 / 81.9; (128, 1024, 784) 85.0 / 86.3. */
#define MG_GEMM_PACK_A_PANELS 4

static inline int mg_gemm_packs_a(int64_t n, int64_t panel) {
    return (n + panel - 1) / panel >= MG_GEMM_PACK_A_PANELS;
}

/* the floats op(A) (m x k) takes packed for the tiles that read panels of `panel` columns: a
 * block of MR rows x k per row tile, step p's MR values together (rows past m repeat its last) */
static inline int64_t mg_gemm_apack_floats(int64_t m, int64_t k, int64_t panel) {
    int64_t mr = mg_panel_tile_for(panel).mr;
    return (m + mr - 1) / mr * mr * k;
}

/* What a run packs: op(B)'s panels (pack item pj) and op(A)'s row tiles (item npanels + t),
 * each by the first work item that reads it (mg_pack_once). Loops, not memcpy (a call per 64
 * bytes cost more than the copy); B^T's rows transposed 8 steps of k at a time, so each read
 * is 32 contiguous bytes of one row. */
typedef struct {
    const mg_gemm_job* g;
    int tb;
    const float* b;
    float *panels, *apack;
    int64_t npanels, mr;
} mg_pack_job;

#define MG_PACK_K 8

static void mg_pack_panel(const mg_pack_job* q, int64_t pj) {
    int64_t n = q->g->n, k = q->g->k, panel = q->g->panel;
    int64_t j0 = pj * panel, w = n - j0 < panel ? n - j0 : panel, p = 0, j;
    float* out = q->panels + pj * k * panel;
    if (q->tb)
        for (; p + MG_PACK_K <= k; p += MG_PACK_K)
            for (j = 0; j < w; j++) {
                const float* src = q->b + (j0 + j) * k + p;
                for (int s = 0; s < MG_PACK_K; s++) out[(p + s) * panel + j] = src[s];
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

/* row tile t of op(A): its rows' k values, step by step (A^T's rows are those steps) */
static void mg_pack_rows(const mg_pack_job* q, int64_t t) {
    const mg_gemm_job* g = q->g;
    int64_t mr = q->mr, p, r;
    float* out = q->apack + t * mr * g->k;
    for (r = 0; r < mr; r++) {
        int64_t i = t * mr + r < g->m ? t * mr + r : g->m - 1;
        if (g->ta)
            for (p = 0; p < g->k; p++) out[p * mr + r] = g->a[p * g->m + i];
        else
            for (p = 0; p < g->k; p++) out[p * mr + r] = g->a[i * g->k + p];
    }
}

static void mg_pack_item(const mg_pack_job* q, int64_t item) {
    if (item < q->npanels)
        mg_pack_panel(q, item);
    else
        mg_pack_rows(q, item - q->npanels);
}

/* Pack item `item` unless done: the first thread to claim its flag (0 -> 1) packs it and marks
 * it done (2); another that needs it meanwhile yields until then. A claimant never waits while
 * it holds a claim, so parts run one after another on one thread (a pool that has no other)
 * never wait at all. */
static void mg_pack_once(const mg_pack_job* q, int* flag, int64_t item) {
    int idle = 0;
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 2) return;
    if (__atomic_compare_exchange_n(flag, &idle, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        mg_pack_item(q, item);
        __atomic_store_n(flag, 2, __ATOMIC_RELEASE);
        return;
    }
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != 2) sched_yield();
}

typedef struct {
    const mg_gemm_job* g;
    mg_panel_tile t;
    int64_t kc, mc, npanels;
    const mg_pack_job* q;  /* NULL: nothing to pack */
    int* ready;            /* the pack items' flags */
} mg_gemm_plan;

/* one tile of C at rows [r0, r0 + rows) and columns [j0, j0 + cols): straight into C when
 * whole, else (or for out's epilogue) through a local tile (a short last row tile reads its
 * last row again) */
static inline void mg_gemm_tile(const mg_gemm_plan* s, int64_t r0, int64_t rows, int64_t j0,
                                 int64_t cols, int64_t p0, int64_t kb, const float* b) {
    const mg_gemm_job* g = s->g;
    const float* px[MG_GEMM_MR_MAX];
    float part[MG_GEMM_MR_MAX * MG_GEMM_W_MAX];
    int64_t mr = s->t.mr, w = s->t.w, r, j;
    int first = p0 == 0, last = p0 + kb >= g->k, whole = rows == mr && cols == w && !g->out;
    for (r = 0; r < mr; r++) {
        int64_t i = r0 + (r < rows ? r : rows - 1);
        px[r] = g->apack ? g->apack + (r0 * g->k + p0 * mr + r)
                         : g->a + (g->ta ? i + p0 * g->m : i * g->k + p0);
    }
    float* dst = whole ? g->c + r0 * g->n + j0 : part;
    int64_t ld = whole ? g->n : w;
    if (!whole && !first)
        for (r = 0; r < rows; r++)
            memcpy(part + r * w, g->c + (r0 + r) * g->n + j0, (size_t)cols * sizeof(float));
    s->t.fn(px, g->apack ? mr : g->ta ? g->m : 1, kb, b, g->panel, dst, ld, first);
    if (g->out) { /* its one k block: first and last */
        g->out(g->out_ctx, part, w, r0, rows, j0, cols);
        return;
    }
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

/* work items [lo, hi) (item = row block * npanels + panel: a part of the pool's run), every
 * k block of each, k blocks outermost */
static void mg_gemm_items(void* ctx, int64_t lo, int64_t hi) {
    const mg_gemm_plan* s = (const mg_gemm_plan*)ctx;
    const mg_gemm_job* g = s->g;
    for (int64_t p0 = 0;; p0 += s->kc) {
        int64_t kb = g->k - p0 < s->kc ? g->k - p0 : s->kc;
        for (int64_t item = lo; item < hi; item++) {
            int64_t r0 = item / s->npanels * s->mc, pj = item % s->npanels;
            int64_t r1 = r0 + s->mc < g->m ? r0 + s->mc : g->m;
            if (p0 == 0 && s->q) { /* this item's panel and row tiles, packed by now */
                if (s->q->panels) mg_pack_once(s->q, s->ready + pj, pj);
                for (int64_t t = s->q->apack ? r0 / s->t.mr : 0; s->q->apack && t * s->t.mr < r1;
                     t++)
                    mg_pack_once(s->q, s->ready + s->q->npanels + t, s->q->npanels + t);
            }
            const float* panel = g->panels + pj * g->k * g->panel + p0 * g->panel;
            for (int64_t sub = 0; sub < g->panel; sub += s->t.w) {
                int64_t j0 = pj * g->panel + sub;
                if (j0 >= g->n) break;
                int64_t cols = g->n - j0 < s->t.w ? g->n - j0 : s->t.w;
                for (int64_t r = r0; r < r1; r += s->t.mr)
                    mg_gemm_tile(s, r, r1 - r < s->t.mr ? r1 - r : s->t.mr, j0, cols, p0, kb,
                                  panel + sub);
            }
        }
        if (p0 + s->kc >= g->k) break;
    }
}

/* Run `g` on its pool, packing what q says: one run of (row block, panel) items on at most
 * g->threads threads */
static void mg_gemm_run(const mg_gemm_job* g, const mg_pack_job* q, int* ready) {
    if (g->m == 0 || g->n == 0) return;
    mg_gemm_plan s = {g, mg_panel_tile_for(g->panel), 0, 0, (g->n + g->panel - 1) / g->panel,
                      q, ready};
    int64_t tiles = (g->m + s.t.mr - 1) / s.t.mr, blocks;
    s.kc = g->out ? (g->k > 1 ? g->k : 1) : MG_GEMM_KC_FLOATS / s.t.w;
    /* rows in blocks of at most MC_TILES tiles; smaller where the panels are too few to give
     * the threads MG_GEMM_ITEMS items */
    blocks = (tiles + MG_GEMM_MC_TILES - 1) / MG_GEMM_MC_TILES;
    if (blocks * s.npanels < MG_GEMM_ITEMS) {
        blocks = (MG_GEMM_ITEMS + s.npanels - 1) / s.npanels;
        if (blocks > tiles) blocks = tiles;
    }
    s.mc = (tiles + blocks - 1) / blocks * s.t.mr;
    g->pool((g->m + s.mc - 1) / s.mc * s.npanels, g->threads, mg_gemm_items, &s);
}

/* Run `g` on panels packed already (the exporter's), reading op(A) where it lies */
static inline void mg_gemm_on_panels(const mg_gemm_job* g) { mg_gemm_run(g, NULL, NULL); }

/* the flags a packing run takes: one per panel and per row tile of op(A) */
static inline int64_t mg_gemm_ready_ints(int64_t m, int64_t n, int64_t panel) {
    int64_t mr = mg_panel_tile_for(panel).mr;
    return (n + panel - 1) / panel + (m + mr - 1) / mr;
}

/* The floats of a packing run's scratch, in this order: op(B)'s panels where `pack_b`
 * (mg_gemm_panels_floats), op(A)'s row tiles where mg_gemm_packs_a (from *apack_at, else -1),
 * then, where anything is packed, the run's flags (mg_gemm_ready_ints ints, as wide as floats,
 * from *ready_at): the one layout of the executor's workspace and the C runtime's malloc */
static inline int64_t mg_gemm_scratch_floats(int64_t m, int64_t n, int64_t k, int64_t panel,
                                             int pack_b, int64_t* apack_at, int64_t* ready_at) {
    int64_t panels = pack_b ? mg_gemm_panels_floats(n, k, panel) : 0;
    int64_t rows = mg_gemm_packs_a(n, panel) ? mg_gemm_apack_floats(m, k, panel) : 0;
    *apack_at = rows ? panels : -1;
    *ready_at = panels + rows;
    return panels + rows + (panels + rows > 0 ? mg_gemm_ready_ints(m, n, panel) : 0);
}

/* Run g with its operands packed in the same run of the pool, each piece by the first work item
 * that reads it: op(B) (B stored (k, n), or (n, k) where tb) into `panels`
 * (mg_gemm_panels_floats; NULL: g's panels are packed already), op(A) into `apack`
 * (mg_gemm_apack_floats; NULL: read where it lies); `ready`, mg_gemm_ready_ints ints, is
 * scratch. One run instead of a packing run then the GEMM's: on a loaded machine each wakes
 * threads that may wait for a core. */
static inline void mg_gemm_pack_run(mg_gemm_job* g, int tb, const float* b, float* panels,
                                    float* apack, int* ready) {
    mg_pack_job q = {g, tb, b, panels, apack, (g->n + g->panel - 1) / g->panel,
                     mg_panel_tile_for(g->panel).mr};
    if (panels) g->panels = panels;
    g->apack = apack;
    if (!panels && !apack) {
        mg_gemm_run(g, NULL, NULL);
        return;
    }
    memset(ready, 0, (size_t)mg_gemm_ready_ints(g->m, g->n, g->panel) * sizeof(int));
    mg_gemm_run(g, &q, ready);
}

#endif
