/* The data gradient's GEMM path on the package's own GEMM (the transposed convolution at any
 * stride): per (image, group), col = W_g^T dy_g on gemm_tile.h's panels, then conv_col2im.h's
 * col2im into dx's planes with the bias; for a 1x1 at stride 1 unpadded, W_g^T dy_g is dx's
 * planes themselves, then the bias. float32. One source for both executors: the Python
 * executor's "tiles" way (conv_gemm.pxi's data_tiles) and the C runtime's data_gemm
 * (conv2d_data_f32.c), so the two give the same bits.
 *
 * Seam: the includer brings its threads (an mg_gemm_pool_fn: the executor's parallel_for behind
 * a shim, the C runtime's mgr_parallel_for_upto) and the scratch, conv_data_gemm_floats of it in
 * one layout: col (kh * kw * cg rows of oh * ow cells; none for the 1x1), then the GEMM's
 * packing scratch (mg_gemm_scratch_floats': dy_g's panels, W_g^T's row tiles where they pay,
 * the packing's flags). Nothing here allocates or fails.
 *
 * Bits: each cell of col is its sum over dy's channels of the group in order (gemm_tile.h's: any
 * split of the tiles among threads, and any tile width of an FMA CPU, gives the same), and
 * col2im sums a dx cell's terms in the order (i, j) whatever channels a thread takes: so the
 * bits depend on neither executor nor thread count. */
#ifndef MG_CONV_DATA_GEMM_H
#define MG_CONV_DATA_GEMM_H

#include <stdint.h>
#include <string.h>

#include "conv_col2im.h"
#include "gemm_tile.h"

/* the data gradient's sizes: dx (batch, cin, h, w), dy (batch, cout, oh, ow), w (cout,
 * cin / groups, kh, kw) */
typedef struct {
    int64_t batch, cin, cout, groups;
    conv_col2im_geometry g;
} conv_data_gemm_shape;

/* whether dx's planes are W_g^T dy_g themselves: a 1x1 at stride 1, unpadded */
static inline int conv_data_gemm_direct(const conv_data_gemm_shape* s) {
    const conv_col2im_geometry* g = &s->g;
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* The floats of scratch a call takes (see above), col's first; the GEMM's from *gemm_at. The
 * includer bounds the sizes first (the C runtime's loader check; the executor's are tensors). */
static inline int64_t conv_data_gemm_floats(const conv_data_gemm_shape* s, int64_t* gemm_at) {
    int64_t cg = s->cin / s->groups, kdim = cg * s->g.kh * s->g.kw, npix = s->g.oh * s->g.ow;
    int64_t apack, ready;
    *gemm_at = conv_data_gemm_direct(s) ? 0 : kdim * npix;
    return *gemm_at + mg_gemm_scratch_floats(kdim, npix, s->cout / s->groups, mg_gemm_panel(),
                                             1, &apack, &ready);
}

/* what each part of the pool's second run does: dx's channels [lo, hi) of one (image, group) */
typedef struct {
    int direct;        /* the 1x1's planes are the GEMM's already: the bias alone */
    const float* col;
    float* dx;         /* the group's planes of one image */
    const float* bias; /* the group's, or NULL */
    const conv_col2im_geometry* g;
} conv_data_gemm_part;

static void conv_data_gemm_planes(void* ctx, int64_t lo, int64_t hi) {
    const conv_data_gemm_part* p = (const conv_data_gemm_part*)ctx;
    const conv_col2im_geometry* g = p->g;
    int64_t plane = g->h * g->w;
    if (!p->direct) {
        conv_col2im_rows_f32(p->col + lo * g->kh * g->kw * g->oh * g->ow, p->dx, p->bias, lo, hi,
                             g);
        return;
    }
    for (int64_t c = lo; c < hi && p->bias; c++) { /* the bits of a separate add */
        float* x = p->dx + c * plane;
        for (int64_t k = 0; k < plane; k++) x[k] = x[k] + p->bias[c];
    }
}

/* dx from w, dy and bias (NULL: none), on `pool`: the GEMMs on at most gemm_threads threads,
 * col2im (or the bias) by dx's channels on at most `threads` */
static inline void conv_data_gemm_run(const conv_data_gemm_shape* s, const float* w,
                                      const float* dy, const float* bias, float* dx,
                                      float* scratch, mg_gemm_pool_fn pool,
                                      int64_t gemm_threads, int64_t threads) {
    int64_t cg = s->cin / s->groups, ocg = s->cout / s->groups, gemm_at;
    int64_t kdim = cg * s->g.kh * s->g.kw, npix = s->g.oh * s->g.ow, plane = s->g.h * s->g.w;
    int64_t apack, ready, panel = mg_gemm_panel();
    int direct = conv_data_gemm_direct(s);
    conv_data_gemm_floats(s, &gemm_at);
    mg_gemm_scratch_floats(kdim, npix, ocg, panel, 1, &apack, &ready);
    for (int64_t n = 0; n < s->batch; n++)
        for (int64_t grp = 0; grp < s->groups; grp++) {
            float* dxg = dx + (n * s->cin + grp * cg) * plane;
            float* col = direct ? dxg : scratch;
            conv_data_gemm_part part = {direct, col, dxg, bias ? bias + grp * cg : NULL, &s->g};
            if (kdim && npix && ocg == 0) /* a GEMM over no channels of dy packs nothing */
                memset(col, 0, (size_t)(kdim * npix) * sizeof(float));
            else if (kdim && npix) {
                float* work = scratch + gemm_at;
                mg_gemm_job job = {1, kdim, npix, ocg, panel, w + grp * ocg * kdim, NULL, col,
                                   NULL, 0, NULL, NULL, pool, gemm_threads, NULL};
                mg_gemm_pack_run(&job, 0, dy + (n * s->cout + grp * ocg) * npix, work,
                                 apack >= 0 ? work + apack : NULL, (int*)(work + ready));
            }
            if (!direct || bias) pool(cg, threads, conv_data_gemm_planes, &part);
        }
}

#endif
