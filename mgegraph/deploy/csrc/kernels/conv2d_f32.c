/* conv2d_f32, grouped and depthwise too, and conv2d_winograd_packed_f32 (its Winograd on filters
 * the export transformed and packed: below). Where the plan chose Winograd, Winograd
 * (conv_wino_c.h over wino_conv.h, the executor's driver: its GEMMs on the row tiles, bitwise
 * the Python executor's on AVX2 plans, within float32 rounding of its other ways); else on the
 * package's gather tiles where they run it
 * (conv_gather_c.h: packed weights bitwise the Python executor's packed path; weights not
 * packed within float32 rounding of its other ways, Winograd and the GEMMs through the BLAS);
 * elsewhere (more than 64 taps, fewer than 8 output channels per group: depthwise, or an x86
 * CPU without the FMA running an FMA plan) a plain loop with the tiles' order of sums: each
 * output over its group's input channels, then the taps (i-major), from zero, the zero
 * padding's products included, by fused multiply-adds where the block's isa has them (1 AVX2,
 * 2 AVX-512) and by a multiply and an add on the baseline tile (0); then act(sum + bias) as
 * conv_out. The parameter block is kernel_abi/conv.py's FIELDS; bufs x, the weights (packed,
 * one group: blocks of `packed` output channels, w[block][c][tap][packed]; else (cout,
 * cin / groups, kh, kw)), [bias,] y[, workspace] (unused: the tiles allocate their own). The
 * block's `transposed` says how im2col's GEMM lays out its product in Python (y or y^T, then a
 * transpose): the same convolution, which these loops compute either way.
 *
 * conv2d_backward_data_f32, the transposed convolution, is conv2d_data_f32.c's.
 *
 * Built with -ffp-contract=fast (kernels.CONTRACTED), as the package builds the tiles. */
#include "../mgr_kernel.h"
#include "conv_gather_c.h" /* the Conv block's field names, the tiles, activation.h */
#include "conv_wino_c.h"

#include <math.h>

#define MGR_CONV_BODY(STEP)                                                                   \
    const mgr_call* call = ctx;                                                               \
    const int64_t* s = call->ints;                                                            \
    const float* x = (const float*)call->bufs[0];                                             \
    const float* w = (const float*)call->bufs[1];                                             \
    const float* bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;                     \
    float* y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];                                       \
    int64_t taps = s[KH] * s[KW], pack = s[PACKED];                                           \
    int64_t cg = s[CIN] / s[GROUPS], og = s[COUT] / s[GROUPS]; /* channels per group */      \
    for (int64_t no = lo; no < hi; no++) { /* this part's (image, output channel) planes */    \
            int64_t n = no / s[COUT], o = no % s[COUT];                                       \
            const float* wo = pack ? w + (o / pack) * cg * taps * pack + o % pack             \
                                   : w + o * cg * taps;                                       \
            const float* xg = x + (n * s[CIN] + o / og * cg) * s[H] * s[W];                   \
            int64_t step = pack ? pack : 1;                                                   \
            float add = bias ? bias[o] : 0;                                                   \
            for (int64_t oy = 0; oy < s[OH]; oy++)                                            \
                for (int64_t ox = 0; ox < s[OW]; ox++) {                                      \
                    float acc = 0;                                                            \
                    for (int64_t c = 0; c < cg; c++) {                                        \
                        const float* xc = xg + c * s[H] * s[W];                               \
                        for (int64_t i = 0; i < s[KH]; i++)                                   \
                            for (int64_t j = 0; j < s[KW]; j++) {                             \
                                int64_t iy = oy * s[SH] + i * s[DH] - s[PH];                  \
                                int64_t ix = ox * s[SW] + j * s[DW] - s[PW];                  \
                                float xv = iy >= 0 && iy < s[H] && ix >= 0 && ix < s[W]       \
                                               ? xc[iy * s[W] + ix] : 0.0f;                   \
                                float wv = wo[(c * taps + i * s[KW] + j) * step];             \
                                acc = STEP(xv, wv, acc);                                      \
                            }                                                                 \
                    }                                                                         \
                    y[((n * s[COUT] + o) * s[OH] + oy) * s[OW] + ox] =                        \
                        act_f32(acc + add, (int)s[ACT]);                                      \
                }                                                                             \
        }

#define MGR_FMA_STEP(a, b, acc) fmaf(a, b, acc)
#define MGR_MUL_ADD_STEP(a, b, acc) ((acc) + (a) * (b)) /* an FMA only where the baseline tile's is */

/* parts of [0, batch * cout): the planes of y each thread computes (mgr_parallel_for) */
static void conv_fma(void* ctx, int64_t lo, int64_t hi) { MGR_CONV_BODY(MGR_FMA_STEP) }
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void conv_fma_avx2(void* ctx, int64_t lo, int64_t hi)
{ MGR_CONV_BODY(MGR_FMA_STEP) }
#endif
static void conv_mul_add(void* ctx, int64_t lo, int64_t hi) { MGR_CONV_BODY(MGR_MUL_ADD_STEP) }

int mgr_conv2d_f32(const mgr_call* call) {
    int status = mgr_conv2d_winograd(call);
    if (status == MGR_KERNEL_UNSUPPORTED) status = mgr_conv2d_pointwise(call);
    if (status == MGR_KERNEL_UNSUPPORTED) status = mgr_conv2d_tiles(call);
    if (status != MGR_KERNEL_UNSUPPORTED) return status;
    mgr_part_fn body = conv_fma;
    if (call->ints[ISA] == 0) body = conv_mul_add;
#if defined(__GNUC__) && defined(__x86_64__)
    else {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("fma")) body = conv_fma_avx2;
    }
#endif
    mgr_parallel_for(call->ints[BATCH] * call->ints[COUT], body, (void*)call);
    return MGR_KERNEL_OK;
}

/* what a Conv block's weights are: the plan's filters (packed or not), or U of Winograd, unpacked
 * (16, cout, cin) or packed (16, cout rounded up to CONV_PACK, cin) */
enum { CONV_FILTERS, WINO_U, WINO_U_PACKED };

/* The Conv block's checks for conv2d_f32, conv2d_winograd_f32 and conv2d_winograd_packed_f32
 * (`weights`, the kind of their second buffer): NULL where it is safe to run. */
static const char* conv_check(const mgr_check_args* x, int weights) {
    int winograd = weights != CONV_FILTERS;
    const int64_t* s = x->ints;
    int64_t xe, we, ye, blocks, taps;
    if (x->n_ints != FIELDS || x->n_floats != 0) return "wants 23 ints and no floats";
    for (int f = 0; f < FIELDS; f++)
        if (s[f] < 0) return "a field is negative";
    if (s[TRANSPOSED] > 1) return "a flag is out of its range";
    if (s[GROUPS] < 1 || s[CIN] % s[GROUPS] || s[COUT] % s[GROUPS])
        return "groups must divide the input and output channels";
    if (s[GROUPS] != 1 && s[PACKED]) return "runs packed weights of one group only";
    if (s[HAS_BIAS] > 1 || s[ACT] > ACT_RELU6 || s[ISA] > 2)
        return "a flag is out of its range";
    if (s[SH] < 1 || s[SW] < 1 || s[DH] < 1 || s[DW] < 1 || s[KH] < 1 || s[KW] < 1)
        return "strides, dilations and the kernel must be positive";
    if (winograd && (s[GROUPS] != 1 || s[KH] != 3 || s[KW] != 3 || s[SH] != 1 || s[SW] != 1 ||
                     s[DH] != 1 || s[DW] != 1))
        return "Winograd's filters take a 3x3 kernel at stride 1, undilated, one group";
    if (winograd && s[PACKED] != (weights == WINO_U_PACKED ? CONV_PACK : 0))
        return weights == WINO_U_PACKED ? "Winograd's U is packed by 8 output channels"
                                        : "Winograd's U from the filters is not packed";
    int64_t loops[7] = {s[BATCH], s[COUT], s[OH], s[OW], s[CIN], s[KH], s[KW]};
    if (!mgr_counts_ok(loops, 7)) return "its sizes make no loop this runtime bounds";
    int64_t reach;  /* every tap's input index stays an int64_t (the fuzzer's find) */
    if (!mgr_muladd(0, s[OH], s[SH], &reach) || !mgr_muladd(reach, s[KH], s[DH], &reach) ||
        !mgr_muladd(0, s[OW], s[SW], &reach) || !mgr_muladd(reach, s[KW], s[DW], &reach))
        return "the windows reach past any index";
    size_t want = 3 + (size_t)s[HAS_BIAS]; /* y is buffer want - 1 */
    const char* buffers = mgr_layer_buffers(x, want);
    if (buffers) return buffers;
    blocks = s[PACKED] ? s[COUT] / s[PACKED] + (s[COUT] % s[PACKED] != 0) : s[COUT];
    if (!mgr_muladd(0, s[BATCH], s[CIN], &xe) || !mgr_muladd(0, xe, s[H], &xe) ||
        !mgr_muladd(0, xe, s[W], &xe) || xe > x->buf_bytes[0] / 4)
        return "batch * cin * h * w reaches past x's bytes";
    if (winograd ? !mgr_muladd(CONV_PACK - 1, s[COUT], 1, &we) ||
                       !mgr_muladd(0, weights == WINO_U_PACKED ? we / CONV_PACK * CONV_PACK
                                                               : s[COUT], s[CIN], &we) ||
                       !mgr_muladd(0, we, 16, &we)
                 : !mgr_muladd(0, s[KH], s[KW], &taps) ||
                       !mgr_muladd(0, blocks, s[CIN] / s[GROUPS], &we) ||
                       !mgr_muladd(0, we, taps, &we) ||
                       !mgr_muladd(0, we, s[PACKED] ? s[PACKED] : 1, &we))
        return "the weights reach past any index";
    if (we > x->buf_bytes[1] / 4)
        return weights == WINO_U_PACKED ? "16 * (cout rounded up to 8) * cin of U reach past "
                                          "its bytes"
               : winograd               ? "16 * cout * cin of U reach past its bytes"
                        : "the weights reach past w's bytes";
    if (!mgr_muladd(0, s[BATCH], s[COUT], &ye) || !mgr_muladd(0, ye, s[OH], &ye) ||
        !mgr_muladd(0, ye, s[OW], &ye) || ye > x->buf_bytes[want - 1] / 4 ||
        (s[HAS_BIAS] && s[COUT] > x->buf_bytes[2] / 4))
        return "batch * cout * oh * ow reaches past y's bytes, or cout past the bias";
    return NULL;
}

const char* mgr_conv2d_f32_check(const mgr_check_args* x) {
    return conv_check(x, CONV_FILTERS);
}

/* ---- conv2d_f32's Winograd on U transformed at export ------------------------------------ */

/* conv2d_winograd_packed_f32: bufs x, U (16, cout rounded up to 8, cin) in the row tiles' packed
 * layout (conv_wino_c.h), the export's G g G^T of the plan's filters (deploy/conv_prepack.py),
 * [bias,] y[, workspace]; the Conv block of the plan's instruction, `packed` 8. And
 * conv2d_winograd_f32, of blobs from before the packing: U (16, cout, cin), packed on each call. */
static int winograd_on_u(const mgr_call* call, int packed) {
    const int64_t* s = call->ints;
    const float* u = (const float*)call->bufs[1];
    mgr_wino k;
    if (s[BATCH] * s[COUT] == 0 || s[OH] == 0 || s[OW] == 0) return MGR_KERNEL_OK; /* empty */
    if (!mgr_wino_of(s, &k)) return MGR_KERNEL_OUT_OF_MEMORY; /* sizes past any allocation */
    mgr_wino_conv_buffers(&k, call);
    return packed ? mgr_wino_run_on(&k, u, k.geo.urows * k.geo.s.cin)
                  : mgr_wino_run_made(&k, NULL, u, 0);
}

int mgr_conv2d_winograd_packed_f32(const mgr_call* call) { return winograd_on_u(call, 1); }

const char* mgr_conv2d_winograd_packed_f32_check(const mgr_check_args* x) {
    return conv_check(x, WINO_U_PACKED);
}

int mgr_conv2d_winograd_f32(const mgr_call* call) { return winograd_on_u(call, 0); }

const char* mgr_conv2d_winograd_f32_check(const mgr_check_args* x) {
    return conv_check(x, WINO_U);
}
