/* conv2d_backward_data_f32 (the transposed convolution, the data gradient), on conv2d_f32's
 * block (x the result dx); bufs w, dy, [bias,] dx[, workspace]. It runs the way the plan chose:
 * - the tiles ("blocked" or "gather") or Winograd: at stride 1 the data gradient is the forward
 *   convolution of dy padded by d (k - 1) - p by the filters transposed and turned
 *   (conv_data.h, the layout conv.pyx reads too), which runs on the gather tiles (the
 *   executor's row tiles sum each output in the same order: the same bits) or conv_wino_c.h,
 *   the bias (has_bias, the epilogue pass's) added as each output is stored: bitwise the Python
 *   executor's;
 * - the GEMM and col2im (every other way, and every stride above 1): conv_data_gemm.h's, col =
 *   W_g^T dy_g on gemm_tile.h's panels, then conv_col2im.h's col2im with the bias (a 1x1 at
 *   stride 1 unpadded: the GEMM into dx's planes, then the bias): bitwise the executor's
 *   "tiles" way (conv_gemm.pxi's data_tiles, the same header), within float32 rounding of its
 *   BLAS ways ("im2col", "direct").
 * A block whose scratch would pass 16 times its buffers keeps a gather of each dx cell's taps
 * summed in double, rounded once, then the bias (data_part): within rounding too.
 *
 * A file of its own, so that a model without a transposed convolution holds none of this (nor
 * the GEMM's tiles). Built with -ffp-contract=fast (kernels.CONTRACTED), as the package builds
 * the tiles. */
#include "../mgr_kernel.h"
#include "conv_data_gemm.h"
#include "conv_gather_c.h" /* the Conv block's field names, the tiles, conv_data.h */
#include "conv_wino_c.h"
#include "grain.h" /* the GEMM's threads, the executor's rule */

/* one plane of dx plus its channel's bias, once its sums are rounded */
static void data_bias(float* plane, float bias, int64_t n) {
    for (int64_t k = 0; k < n; k++) plane[k] = plane[k] + bias;
}

/* parts of [0, batch * cin): the planes of dx each thread computes */
static void data_part(void* ctx, int64_t lo, int64_t hi) {
    const mgr_call* call = ctx;
    const int64_t* s = call->ints;
    const float* w = (const float*)call->bufs[0];
    const float* dy = (const float*)call->bufs[1];
    float* dx = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    int64_t cg = s[CIN] / s[GROUPS], og = s[COUT] / s[GROUPS], taps = s[KH] * s[KW];
    for (int64_t nc = lo; nc < hi; nc++) {
        int64_t n = nc / s[CIN], c = nc % s[CIN], g = c / cg;
        for (int64_t iy = 0; iy < s[H]; iy++)
            for (int64_t ix = 0; ix < s[W]; ix++) {
                double acc = 0;
                for (int64_t o = g * og; o < (g + 1) * og; o++) {
                    const float* wo = w + (o * cg + c % cg) * taps;
                    const float* dyo = dy + (n * s[COUT] + o) * s[OH] * s[OW];
                    for (int64_t i = 0; i < s[KH]; i++) {
                        int64_t ty = iy + s[PH] - i * s[DH];  /* oy * sh, where it divides */
                        if (ty < 0 || ty % s[SH] || ty / s[SH] >= s[OH]) continue;
                        for (int64_t j = 0; j < s[KW]; j++) {
                            int64_t tx = ix + s[PW] - j * s[DW];
                            if (tx < 0 || tx % s[SW] || tx / s[SW] >= s[OW]) continue;
                            acc += (double)wo[i * s[KW] + j] *
                                   dyo[ty / s[SH] * s[OW] + tx / s[SW]];
                        }
                    }
                }
                dx[(nc * s[H] + iy) * s[W] + ix] = (float)acc;
            }
        if (s[HAS_BIAS]) data_bias(dx + nc * s[H] * s[W], ((const float*)call->bufs[2])[c],
                                   s[H] * s[W]);
    }
}

/* The forward convolution that the data gradient of block s is (conv_data.h's
 * conv_data_as_forward), in t: dy's channels in, dx's out, dy padded by d (k - 1) - p, stride
 * 1, no activation; 0 where it is none (a stride, or a padding past d (k - 1)): the executor's
 * tiles and Winograd take none. */
static int data_as_forward(const int64_t* s, int64_t* t) {
    conv_shape shape = mgr_conv_shape(s), f;
    int is_forward = conv_data_as_forward(&shape, &f);
    memcpy(t, s, FIELDS * sizeof *t);
    t[CIN] = f.cin, t[COUT] = f.cout, t[H] = f.h, t[W] = f.w, t[OH] = f.oh, t[OW] = f.ow;
    t[PH] = f.ph, t[PW] = f.pw, t[ACT] = 0;
    return is_forward;
}

/* The most floats of scratch the data gradient of block s takes (the tiles' zero-padded copy
 * of dy, the GEMM's col): 16 times dy's and dx's together, or 16 Mi. A geometry past both (a
 * dilation of hundreds over a few cells, a block a fuzzer made) keeps the double sums, which
 * need no memory beyond the buffers. */
#define DATA_SCRATCH_MIN (1 << 24)
static int data_scratch_fits(const int64_t* s, int64_t floats) {
    int64_t xs, ys; /* an empty tensor's other sizes are not bounded by its bytes */
    return floats <= DATA_SCRATCH_MIN ||
           (mgr_muladd(0, s[BATCH], s[CIN], &xs) && mgr_muladd(0, xs, s[H], &xs) &&
            mgr_muladd(0, xs, s[W], &xs) && mgr_muladd(0, s[BATCH], s[COUT], &ys) &&
            mgr_muladd(0, ys, s[OH], &ys) && mgr_muladd(0, ys, s[OW], &ys) &&
            floats / 16 <= xs + ys);
}

/* whether the tiles' zero-padded copy of dy (t: data_as_forward's block) fits */
static int data_padding_fits(const int64_t* t) {
    int64_t padded, hp, wp;
    return mgr_muladd(t[H], 2, t[PH], &hp) && mgr_muladd(t[W], 2, t[PW], &wp) &&
           mgr_muladd(0, t[BATCH], t[CIN], &padded) && mgr_muladd(0, padded, hp, &padded) &&
           mgr_muladd(0, padded, wp, &padded) && data_scratch_fits(t, padded);
}

/* The GEMM path: conv_data_gemm.h's, which the executor's "tiles" way runs too (the same bits,
 * at any thread count; its "im2col" and "direct" ways sum on the BLAS: within float32 rounding),
 * its scratch malloc'd here. */
static int data_gemm(const int64_t* s, const float* w, const float* dy, const float* bias,
                     float* dx) {
    conv_data_gemm_shape shape = {s[BATCH], s[CIN], s[COUT], s[GROUPS],
                                  {s[H], s[W], s[OH], s[OW], s[KH], s[KW], s[SH], s[SW], s[PH],
                                   s[PW], s[DH], s[DW]}};
    int64_t cg = s[CIN] / s[GROUPS], ocg = s[COUT] / s[GROUPS], kdim, npix, edge, bound, gemm_at;
    /* col (kdim x npix), then dy_g's panels and W_g^T's row tiles (npix and kdim rounded up to
     * a tile, times ocg) and a flag per panel and row tile: at most col + edge (ocg + 1) */
    if (!mgr_muladd(0, cg, s[KH] * s[KW], &kdim) || !mgr_muladd(0, s[OH], s[OW], &npix) ||
        !mgr_muladd(kdim, 1, npix, &edge) ||
        !mgr_muladd(edge, 1, MG_GEMM_W_MAX + MG_GEMM_MR_MAX, &edge) ||
        !mgr_muladd(0, kdim, npix, &bound) || !mgr_muladd(bound, edge, ocg + 1, &bound) ||
        !data_scratch_fits(s, bound))
        return MGR_KERNEL_UNSUPPORTED;
    int64_t floats = conv_data_gemm_floats(&shape, &gemm_at);
    float* scratch = (float*)malloc((size_t)(floats ? floats : 1) * sizeof(float));
    if (!scratch) return MGR_KERNEL_OUT_OF_MEMORY;
    int64_t threads = mgr_run_threads();
    conv_data_gemm_run(&shape, w, dy, bias, dx, scratch, mgr_parallel_for_upto,
                       mg_gemm_threads(kdim, npix, ocg, 4, threads), threads);
    free(scratch);
    return MGR_KERNEL_OK;
}

/* The data gradient the way the plan's path runs it in the executor, where that is Winograd or
 * the tiles (t: data_as_forward's block): the same sums, so the same bits; else
 * MGR_KERNEL_UNSUPPORTED, for data_gemm */
static int data_as_planned(const int64_t* t, const float* w, const float* dy, const float* bias,
                           float* dx) {
    mgr_wino k;
    if (t[PATH] == MGR_WINO_PATH) {
        if (!mgr_wino_of(t, &k)) return MGR_KERNEL_UNSUPPORTED;
        mgr_wino_buffers(&k, dy, bias, dx);
        return mgr_wino_run_made(&k, w, NULL, 1);
    }
    /* the executor's row tiles ("blocked") sum each output as the gather tiles do: over dy's
     * channels, then the taps, from zero by one FMA each (conv_tile.h) */
    if ((t[PATH] == MGR_BLOCKED_PATH || t[PATH] == MGR_GATHER_PATH) && data_padding_fits(t))
        return mgr_conv_tiles_run(t, dy, w, bias, dx, 1, 1);
    return MGR_KERNEL_UNSUPPORTED;
}

int mgr_conv2d_backward_data_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    const float* w = (const float*)call->bufs[0];
    const float* dy = (const float*)call->bufs[1];
    const float* bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    float* dx = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    int64_t t[FIELDS];
    int status = MGR_KERNEL_UNSUPPORTED;
    if (data_as_forward(s, t)) status = data_as_planned(t, w, dy, bias, dx);
    if (status == MGR_KERNEL_UNSUPPORTED) status = data_gemm(s, w, dy, bias, dx);
    if (status != MGR_KERNEL_UNSUPPORTED) return status;
    mgr_parallel_for(s[BATCH] * s[CIN], data_part, (void*)call);
    return MGR_KERNEL_OK;
}

const char* mgr_conv2d_backward_data_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t xe, we, ye, taps;
    if (x->n_ints != FIELDS || x->n_floats != 0) return "wants 23 ints and no floats";
    size_t nb = s[HAS_BIAS] ? 1 : 0, out = 2 + nb;
    if (s[HAS_BIAS] > 1) return "has_bias must be 0 or 1";
    if (x->n_bufs != 3 + nb && x->n_bufs != 4 + nb)
        return "wants buffers w, dy, [bias,] dx[, workspace]";
    for (size_t b = 0; b <= out; b++)
        if (x->buf_dtypes[b] != 0) return "reads and writes float32 only";
    for (int f = 0; f < FIELDS; f++)
        if (s[f] < 0) return "a field is negative";
    if (s[GROUPS] < 1 || s[CIN] % s[GROUPS] || s[COUT] % s[GROUPS])
        return "groups must divide the input and output channels";
    if (s[SH] < 1 || s[SW] < 1 || s[DH] < 1 || s[DW] < 1 || s[KH] < 1 || s[KW] < 1)
        return "strides, dilations and the kernel must be positive";
    if (s[PACKED]) return "takes no packed weights";
    if (nb && x->buf_bytes[2] / 4 < s[CIN]) return "the bias holds fewer than cin floats";
    int64_t loops[7] = {s[BATCH], s[CIN], s[H], s[W], s[COUT], s[KH], s[KW]};
    if (!mgr_counts_ok(loops, 7)) return "its sizes make no loop this runtime bounds";
    int64_t reach;  /* iy + ph and i * dh stay int64_ts */
    if (s[H] > MGR_EMPTY_DIM * 64 || s[W] > MGR_EMPTY_DIM * 64 || s[PH] > MGR_EMPTY_DIM ||
        s[PW] > MGR_EMPTY_DIM || !mgr_muladd(0, s[KH], s[DH], &reach) ||
        !mgr_muladd(0, s[KW], s[DW], &reach))
        return "the windows reach past any index";
    if (!mgr_muladd(0, s[BATCH], s[CIN], &xe) || !mgr_muladd(0, xe, s[H], &xe) ||
        !mgr_muladd(0, xe, s[W], &xe) || xe > x->buf_bytes[out] / 4)
        return "batch * cin * h * w reaches past dx's bytes";
    if (!mgr_muladd(0, s[KH], s[KW], &taps) || !mgr_muladd(0, s[COUT], s[CIN] / s[GROUPS], &we) ||
        !mgr_muladd(0, we, taps, &we) || we > x->buf_bytes[0] / 4)
        return "the weights reach past w's bytes";
    if (!mgr_muladd(0, s[BATCH], s[COUT], &ye) || !mgr_muladd(0, ye, s[OH], &ye) ||
        !mgr_muladd(0, ye, s[OW], &ye) || ye > x->buf_bytes[1] / 4)
        return "batch * cout * oh * ow reaches past dy's bytes";
    return NULL;
}
