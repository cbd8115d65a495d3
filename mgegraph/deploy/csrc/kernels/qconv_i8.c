/* The int8 convolution and linear layer: quantized_conv2d_i8/u8 (weights packed per call),
 * quantized_pack_weight_i8/u8 (the weights packed once) and quantized_conv2d_packed_i8/u8 (on
 * them; also the packed linear layer's kernel), named by the input's storage dtype. The GEMM,
 * the patches, the depthwise kernel and the requantisation epilogue are qgemm.h's and qconv.h's,
 * the headers qgemm.pyx runs (one source: the same integers), with its glue here in C: the
 * packed weights' layout (qgemm.pyx's packed_size, pack_weights, weights_view) and the loops over
 * images and groups. The variant is the widest this CPU runs (AVX-512 VNNI, AVX-VNNI, AVX2 or
 * portable; AMX where the CPU and kernel grant it), or the portable tile alone in a build with
 * -DQG_PORTABLE_ONLY (every non-x86 build): all give the same integers. A GEMM of at most
 * QG_GEMV_MAX columns (a batch of few rows, a convolution of few output cells) runs as qgemm.h's
 * GEMV, as in Python (qg_gemv_fits). Threads split each GEMM's tiles or the GEMV's row blocks
 * (mgr_parallel_for), every output computed whole by one: any count, the same bits.
 *
 * Parameter blocks: kernel_abi/quantized.py's QCONV_FIELDS (the convolution: floats the
 * multipliers, then the weight zero points, per output channel; bufs x, w, [bias,] y; the packed
 * kernels: floats the multipliers alone, bufs x, packed, y) and kernel_abi/quantized_pack.py's
 * QPACK_FIELDS (floats the weight zero points; bufs w, [bias,] packed). The transposed
 * convolution on packed weights: quantized_pack_deconv_weight_i8/u8 (the op
 * quantized_pack_transposed_weight; QPACKT_FIELDS; floats each output channel's weight zero
 * point; bufs w, packed) and quantized_deconv2d_packed_i8/u8 (quantized_conv_transpose2d_packed;
 * the convolution's block; floats the multipliers; bufs x, packed, [bias,] y). The packed batched matmul runs on quantized_conv2d_packed. */
#include <float.h>
#include <math.h>

#include "../mgr_kernel.h"
#include "qconv.h"

enum { BATCH, CHANNELS, HEIGHT, WIDTH, OUT_CHANNELS, KERNEL_H, KERNEL_W, OUT_H, OUT_W, STRIDE_H,
       STRIDE_W, PAD_H, PAD_W, DILATION_H, DILATION_W, GROUPS, W_CODE, OUT_CODE, X_ZERO,
       OUT_ZERO, LOW, HIGH, HAS_BIAS, THREADS, FIELDS };
enum { P_OUT_CHANNELS, P_K, P_GROUPS, P_X_ZERO_SHIFTED, P_HAS_BIAS, P_THREADS, PACK_FIELDS };
/* the transposed weight's pack (kernel_abi/quantized_pack.py's QPACKT_FIELDS) */
enum { T_C_IN, T_OUT_PER_GROUP, T_TAPS, T_GROUPS, T_X_ZERO_SHIFTED, T_THREADS, PACKT_FIELDS };
enum { CODE_INT8, CODE_UINT8, CODE_INT32, CODES };
/* the batched matmul's block (kernel_abi/quantized.py's QBMM_FIELDS) */
enum { B_BATCH, B_ROWS, B_DEPTH, B_COLS, B_A_BATCHED, B_B_BATCHED, B_A_CODE, B_OUT_CODE, B_B_ZERO,
       B_OUT_ZERO, B_LOW, B_HIGH, B_HAS_BIAS, B_THREADS, BMM_FIELDS };
/* the blob's dtype codes (deploy/blob.py) */
enum { DT_I32 = 2, DT_U8 = 4, DT_I8 = 5 };
/* the most products one int32 accumulator sums (ops/quantized.py's MAX_WINDOW) */
#define MAX_WINDOW ((int64_t)33025)

static const int64_t CODE_DTYPE[CODES] = {DT_I8, DT_U8, DT_I32};
static const int64_t LOWEST[CODES] = {-128, 0, INT32_MIN}, HIGHEST[CODES] = {127, 255, INT32_MAX};

/* the packed weights (qgemm.pxd's QWeights) */
typedef struct {
    int8_t* a;           /* each group's packed A, one after the other */
    int32_t* row_const;  /* per output channel: bias - zx' rowsum + K zx' zw' */
    int32_t* zw;         /* per output channel, shifted to int8; NULL when all are 0 */
    const float* mult;   /* per output channel; NULL for an int32 result */
    ptrdiff_t groups, m, k, kg, group_bytes;
    int pairs_fit;       /* the packed A carries QG_PAIRS_FIT (qgemm.h's qg_pairs_fit) */
} q_weights;

static ptrdiff_t packed_size(ptrdiff_t oc, ptrdiff_t k, ptrdiff_t groups) {
    return groups * qg_a_bytes(oc / groups, qg_groups(k)) + (2 * oc + 1) * 4;
}

static void weights_view(q_weights* pw, const char* packed, ptrdiff_t oc, ptrdiff_t k,
                         ptrdiff_t groups, const float* mult) {
    pw->groups = groups, pw->m = oc / groups, pw->k = k, pw->kg = qg_groups(k);
    pw->mult = mult;
    pw->group_bytes = qg_a_bytes(pw->m, pw->kg);
    pw->a = (int8_t*)packed;
    pw->row_const = (int32_t*)(packed + groups * pw->group_bytes);
    pw->zw = pw->row_const + oc;
    pw->pairs_fit = (pw->zw[oc] & QG_PAIRS_FIT) != 0;
    if (!(pw->zw[oc] & QG_ZERO_POINTS)) pw->zw = NULL;
}

/* w (oc, k) row-major in groups of oc / groups rows; zw the stored zero points per channel */
static void pack_weights(char* packed, const uint8_t* w, int w_unsigned, ptrdiff_t oc,
                         ptrdiff_t k, ptrdiff_t groups, const int32_t* zw, int32_t zx_shifted,
                         const int32_t* bias) {
    q_weights pw;
    weights_view(&pw, packed, oc, k, groups, NULL);
    pw.zw = pw.row_const + oc; /* the view read the flags, not written yet */
    for (ptrdiff_t o = 0; o < oc; o++) pw.zw[o] = w_unsigned ? zw[o] - 128 : zw[o];
    for (ptrdiff_t gi = 0; gi < groups; gi++)
        qg_pack_a(w + gi * pw.m * k, w_unsigned, pw.m, k, k, pw.zw + gi * pw.m, zx_shifted,
                  bias ? bias + gi * pw.m : NULL, pw.a + gi * pw.group_bytes,
                  pw.row_const + gi * pw.m);
    pw.zw[oc] = qg_weights_flags(pw.a, groups, pw.m, pw.kg, pw.zw);
}

/* ---- one GEMM: B packed, then the tiles split across the threads ------------------------- */

typedef struct {
    qg_variant var;
    qg_operands op;
    qg_epilogue e;
} tiles;

static void tiles_part(void* ctx, int64_t lo, int64_t hi) {
    tiles* t = (tiles*)ctx;
    qg_gemm_units(&t->var, &t->op, &t->e, lo, hi);
}

/* a GEMM of few columns (qg_gemv_fits, the Python kernels' rule) as a GEMV over row blocks */
typedef struct {
    tiles t;
    const uint8_t* columns; /* qg_gemv_from_packed's */
} gemv;

static void gemv_part(void* ctx, int64_t lo, int64_t hi) {
    gemv* s = (gemv*)ctx;
    qg_gemv_units(&s->t.var, &s->t.op, s->columns, &s->t.e, lo, hi);
}

/* where the result goes (qgemm.pxd's QOutput) */
typedef struct {
    char* y;
    int kind;
    int32_t zy, lo, hi;
} q_output;

static int item(int kind) { return kind == QG_OUT_INT32 ? 4 : 1; }

static void epilogue(qg_epilogue* e, const q_weights* pw, const q_output* out,
                     const int32_t* colsum, ptrdiff_t sm, ptrdiff_t sn) {
    e->row_const = pw->row_const, e->zw = pw->zw, e->colsum = colsum, e->mult = pw->mult;
    e->zy = out->zy, e->lo = out->lo, e->hi = out->hi, e->kind = out->kind, e->out = out->y;
    e->sm = sm, e->sn = sn, e->cells = 0, e->si = 0;
}

/* per batch of images (qg_images_per_gemm: small ones side by side) and group one GEMM over
 * the patches (qgemm.pyx's _conv_images), or, with g NULL, the linear layer's one GEMM over
 * x's rows (images of them, k apart) */
static int gemm(const q_weights* pw, const uint8_t* x, int x_signed, int32_t zx,
                ptrdiff_t images, const qg_conv* g, const q_output* out) {
    ptrdiff_t cells = g ? g->oh * g->ow : images, per = g ? qg_images_per_gemm(cells, images) : 1;
    ptrdiff_t n = per * cells, blocks = qg_blocks(n, QG_NB);
    uint8_t* b = malloc((size_t)(blocks * qg_b_stride(pw->kg)) + 1);
    uint8_t* scratch = malloc((size_t)(g ? qg_pack_b_scratch(g, 0, n) : 0) + 1);
    int32_t* colsum = pw->zw ? malloc(sizeof(int32_t) * (size_t)n + 1) : NULL;
    uint8_t flip = x_signed ? 0x80 : 0;
    tiles t;
    t.var = qg_variant_of(qg_widest());
    int some_few = qg_gemv_fits(&t.var, cells); /* the smallest batch's columns */
    uint8_t* columns = some_few ? malloc((size_t)(n * qg_gemv_column_bytes(pw->kg))) : NULL;
    int status = b && scratch && (colsum || !pw->zw) && (columns || !some_few)
                     ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    ptrdiff_t image_bytes = g ? pw->groups * g->c * g->h * g->w : 0;
    t.op.b = b, t.op.m = pw->m, t.op.kg = pw->kg, t.op.pairs_fit = pw->pairs_fit;
    for (ptrdiff_t i = 0; status == MGR_KERNEL_OK && i < (g ? images : 1); i += per) {
        ptrdiff_t cols = g ? (images - i < per ? images - i : per) * cells : n;
        t.op.n = cols;
        for (ptrdiff_t gi = 0; gi < pw->groups; gi++) {
            const uint8_t* xg = x + (i * pw->groups + gi) * (g ? g->c * g->h * g->w : 0);
            if (g)
                qg_pack_b_conv(xg, image_bytes, g, 0, cols, (uint8_t)zx, flip, scratch, b);
            else
                qg_pack_b_columns(x, pw->k, pw->k, 0, cols, flip, b);
            if (colsum) qg_column_sums(b, pw->kg, 0, cols, colsum);
            t.op.a = pw->a + gi * pw->group_bytes;
            epilogue(&t.e, pw, out, colsum, g ? cells : 1, g ? 1 : pw->m);
            if (g) t.e.cells = cells, t.e.si = pw->groups * pw->m * cells;
            t.e.row_const += gi * pw->m;
            if (t.e.zw) t.e.zw += gi * pw->m;
            if (t.e.mult) t.e.mult += gi * pw->m;
            t.e.out = out->y + (i * pw->groups + gi) * pw->m * (g ? cells : 0) * item(out->kind);
            if (qg_gemv_fits(&t.var, cols)) {
                gemv s = {t, columns};
                qg_gemv_from_packed(b, pw->kg, cols, columns);
                mgr_parallel_for(qg_gemv_blocks(pw->m), gemv_part, &s);
            } else {
                mgr_parallel_for(qg_units(&t.var, &t.op), tiles_part, &t);
            }
        }
    }
    free(b);
    free(columns);
    free(scratch);
    free(colsum);
    return status;
}

/* ---- the parameter block's geometry and output ------------------------------------------ */

static qg_conv geometry(const int64_t* s) {
    qg_conv g = {s[CHANNELS] / s[GROUPS], s[HEIGHT], s[WIDTH], s[KERNEL_H], s[KERNEL_W],
                 s[STRIDE_H], s[STRIDE_W], s[PAD_H], s[PAD_W], s[DILATION_H], s[DILATION_W],
                 s[OUT_H], s[OUT_W]};
    return g;
}

static q_output output_of(const mgr_call* c) {
    const int64_t* s = c->ints;
    q_output out = {c->bufs[3 - (s[HAS_BIAS] == 0)],
                    s[OUT_CODE] == CODE_INT32 ? QG_OUT_INT32
                    : s[OUT_CODE] == CODE_INT8 ? QG_OUT_INT8 : QG_OUT_UINT8,
                    (int32_t)s[OUT_ZERO], (int32_t)s[LOW], (int32_t)s[HIGH]};
    return out;
}

/* a linear layer's block: the 1x1 convolution of its rows */
static int is_linear(const int64_t* s) {
    return s[HEIGHT] == 1 && s[WIDTH] == 1 && s[KERNEL_H] == 1 && s[KERNEL_W] == 1 &&
           s[GROUPS] == 1;
}

static int run(const int64_t* s, const q_weights* pw, const char* x, int x_signed,
               const q_output* out) {
    qg_conv g = geometry(s);
    return gemm(pw, (const uint8_t*)x, x_signed, (int32_t)s[X_ZERO], s[BATCH],
                is_linear(s) ? NULL : &g, out);
}

/* the multipliers as float32 (the doubles hold them exactly) */
static float* multipliers(const mgr_call* c, int64_t oc) {
    float* mult = malloc(sizeof(float) * (size_t)oc + 1);
    for (int64_t o = 0; mult && o < oc; o++) mult[o] = (float)c->floats[o];
    return mult;
}

static int conv_packed(const mgr_call* c, int x_signed) {
    const int64_t* s = c->ints;
    float* mult = multipliers(c, s[OUT_CHANNELS]);
    if (!mult) return MGR_KERNEL_OUT_OF_MEMORY;
    q_weights pw;
    int64_t k = s[CHANNELS] / s[GROUPS] * s[KERNEL_H] * s[KERNEL_W];
    weights_view(&pw, c->bufs[1], s[OUT_CHANNELS], k, s[GROUPS],
                 s[OUT_CODE] == CODE_INT32 ? NULL : mult);
    q_output out = output_of(c);
    int status = run(s, &pw, c->bufs[0], x_signed, &out);
    free(mult);
    return status;
}

int mgr_quantized_conv2d_packed_i8(const mgr_call* call) { return conv_packed(call, 1); }
int mgr_quantized_conv2d_packed_u8(const mgr_call* call) { return conv_packed(call, 0); }

/* the depthwise kernel: one (image, channel) plane at a time (qgemm.pyx's depthwise_run) */
static int depthwise(const mgr_call* c, int x_signed, const int32_t* zw, const float* mult,
                     const q_output* out) {
    const int64_t* s = c->ints;
    qg_conv g = geometry(s);
    g.c = s[CHANNELS];
    ptrdiff_t cells = g.oh * g.ow;
    const int32_t* bias = s[HAS_BIAS] ? (const int32_t*)c->bufs[2] : NULL;
    int16_t* padded = malloc(2 * (size_t)qg_depthwise_scratch(&g) + 1);
    int32_t* acc = malloc(sizeof(int32_t) * (size_t)cells + 1);
    int32_t* consts = malloc(sizeof(int32_t) * (size_t)g.c + 1);
    int status = padded && acc && consts ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    qg_variant var = qg_variant_of(qg_widest());
    qg_depthwise_fn plane = qg_depthwise_of(var.isa);
    qg_epilogue e = {consts, NULL, NULL, mult, out->zy, out->lo, out->hi, out->kind, NULL,
                     cells, 1};
    for (ptrdiff_t ch = 0; status == MGR_KERNEL_OK && ch < g.c; ch++)
        consts[ch] = bias ? bias[ch] : 0;
    for (ptrdiff_t u = 0; status == MGR_KERNEL_OK && u < s[BATCH] * g.c; u++) {
        ptrdiff_t ch = u % g.c;
        plane((const uint8_t*)c->bufs[0] + u * g.h * g.w, x_signed, (int32_t)s[X_ZERO],
              (const uint8_t*)c->bufs[1] + ch * g.kh * g.kw, s[W_CODE] == CODE_UINT8, zw[ch], &g,
              padded, acc);
        /* the epilogue's row is the channel; its output is this image's planes */
        e.out = out->y + (u - ch) * cells * item(out->kind);
        qg_store_plane(&var, acc, ch, cells, &e);
    }
    free(padded);
    free(acc);
    free(consts);
    return status;
}

/* the weights packed now, then the GEMMs (quantized.pyx's gemm_conv) */
static int conv(const mgr_call* c, int x_signed) {
    const int64_t* s = c->ints;
    int64_t oc = s[OUT_CHANNELS], k = s[CHANNELS] / s[GROUPS] * s[KERNEL_H] * s[KERNEL_W];
    int32_t zx = (int32_t)s[X_ZERO];
    const int32_t* bias = s[HAS_BIAS] ? (const int32_t*)c->bufs[2] : NULL;
    float* mult = multipliers(c, s[OUT_CHANNELS]);
    int32_t* zw = malloc(sizeof(int32_t) * (size_t)oc + 1);
    int depthwise_ = s[GROUPS] == s[CHANNELS] && s[GROUPS] == oc;
    char* packed = depthwise_ ? NULL : malloc((size_t)packed_size(oc, k, s[GROUPS]));
    int status = mult && zw && (packed || depthwise_) ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    q_output out = output_of(c);
    for (int64_t o = 0; status == MGR_KERNEL_OK && o < oc; o++)
        zw[o] = (int32_t)c->floats[oc + o];
    if (status == MGR_KERNEL_OK && depthwise_) {
        status = depthwise(c, x_signed, zw, mult, &out);
    } else if (status == MGR_KERNEL_OK) {
        q_weights pw;
        pack_weights(packed, (const uint8_t*)c->bufs[1], s[W_CODE] == CODE_UINT8, oc, k,
                     s[GROUPS], zw, x_signed ? zx + 128 : zx, bias);
        weights_view(&pw, packed, oc, k, s[GROUPS], s[OUT_CODE] == CODE_INT32 ? NULL : mult);
        status = run(s, &pw, c->bufs[0], x_signed, &out);
    }
    free(mult);
    free(zw);
    free(packed);
    return status;
}

int mgr_quantized_conv2d_i8(const mgr_call* call) { return conv(call, 1); }
int mgr_quantized_conv2d_u8(const mgr_call* call) { return conv(call, 0); }

/* ---- quantized_conv_transpose2d: per image the GEMM of the transposed weight by x's channel
 * rows (a 1x1 convolution read in place), then col2im per output channel and the epilogue
 * (qgemm.pyx's conv_transpose_run, qconv.h's helpers) ---------------------------------------- */

typedef struct {
    const int32_t* cols; /* per group, rows (o, i, j) of input planes: channel ch's at ch * taps */
    int32_t* acc;        /* a plane per output channel */
    const qg_conv* g;
    ptrdiff_t taps;
    qg_variant var;
    qg_epilogue e;
} col2im_ctx;

static void col2im_part(void* ctx, int64_t lo, int64_t hi) {
    col2im_ctx* s = (col2im_ctx*)ctx;
    ptrdiff_t cells = s->g->oh * s->g->ow;
    for (int64_t ch = lo; ch < hi; ch++) {
        qg_col2im_plane(s->cols + ch * s->taps * s->g->h * s->g->w, s->g, s->acc + ch * cells);
        qg_store_plane(&s->var, s->acc + ch * cells, ch, cells, &s->e);
    }
}

/* pw: the transposed weight's rows (output channel, tap) packed without a bias; per image their
 * GEMM by x's channel rows into int32 planes, then col2im and the epilogue per output channel
 * (qgemm.pyx's conv_transpose_packed_run) */
static int transposed_run(const mgr_call* c, const q_weights* pw, int x_signed,
                          const float* mult) {
    const int64_t* s = c->ints;
    int64_t oc = s[OUT_CHANNELS];
    qg_conv g = geometry(s), unit = {g.c, g.h, g.w, 1, 1, 1, 1, 0, 0, 1, 1, g.h, g.w};
    ptrdiff_t taps = g.kh * g.kw, rows = oc * taps, plane = g.h * g.w, cells = g.oh * g.ow;
    int32_t zx = (int32_t)s[X_ZERO];
    const int32_t* bias = s[HAS_BIAS] ? (const int32_t*)c->bufs[2] : NULL;
    int32_t* consts = malloc(sizeof(int32_t) * (size_t)oc + 1);
    int32_t* cols = malloc(sizeof(int32_t) * (size_t)(rows * plane) + 1);
    int32_t* acc = malloc(sizeof(int32_t) * (size_t)(oc * cells) + 1);
    int status = consts && cols && acc ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    q_output out = output_of(c), planes = {(char*)cols, QG_OUT_INT32, 0, 0, 0};
    col2im_ctx t = {cols, acc, &g, taps, qg_variant_of(qg_widest()),
                    {consts, NULL, NULL, s[OUT_CODE] == CODE_INT32 ? NULL : mult, out.zy, out.lo,
                     out.hi, out.kind, NULL, cells, 1}};
    for (int64_t o = 0; status == MGR_KERNEL_OK && o < oc; o++) consts[o] = bias ? bias[o] : 0;
    for (int64_t i = 0; status == MGR_KERNEL_OK && i < s[BATCH]; i++) {
        status = gemm(pw, (const uint8_t*)c->bufs[0] + i * s[CHANNELS] * plane, x_signed, zx, 1,
                      &unit, &planes);
        t.e.out = out.y + i * oc * cells * item(out.kind);
        if (status == MGR_KERNEL_OK) mgr_parallel_for(oc, col2im_part, &t);
    }
    free(consts);
    free(cols);
    free(acc);
    return status;
}

/* the weight transposed and packed now, then transposed_run */
static int conv_transpose(const mgr_call* c, int x_signed) {
    const int64_t* s = c->ints;
    int64_t oc = s[OUT_CHANNELS], groups = s[GROUPS];
    qg_conv g = geometry(s);
    ptrdiff_t taps = g.kh * g.kw, rows = oc * taps;
    int32_t zx = (int32_t)s[X_ZERO];
    float* mult = multipliers(c, oc);
    int32_t* zw = malloc(sizeof(int32_t) * (size_t)oc + 1);
    int32_t* zrows = malloc(sizeof(int32_t) * (size_t)rows + 1);
    uint8_t* wt = malloc((size_t)(rows * g.c) + 1);
    char* packed = malloc((size_t)packed_size(rows, g.c, groups));
    int status = mult && zw && zrows && wt && packed ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    q_weights pw;
    if (status == MGR_KERNEL_OK) {
        for (int64_t o = 0; o < oc; o++) zw[o] = (int32_t)c->floats[oc + o];
        qg_transpose_weight((const uint8_t*)c->bufs[1], zw, s[CHANNELS], oc / groups, taps, groups,
                            wt, zrows);
        pack_weights(packed, wt, s[W_CODE] == CODE_UINT8, rows, g.c, groups, zrows,
                     x_signed ? zx + 128 : zx, NULL);
        weights_view(&pw, packed, rows, g.c, groups, NULL);
        status = transposed_run(c, &pw, x_signed, mult);
    }
    free(mult);
    free(zw);
    free(zrows);
    free(wt);
    free(packed);
    return status;
}

int mgr_quantized_conv_transpose2d_i8(const mgr_call* call) { return conv_transpose(call, 1); }
int mgr_quantized_conv_transpose2d_u8(const mgr_call* call) { return conv_transpose(call, 0); }

/* on the rows quantized_pack_transposed_weight packed (bufs[1]) */
static int conv_transpose_packed(const mgr_call* c, int x_signed) {
    const int64_t* s = c->ints;
    float* mult = multipliers(c, s[OUT_CHANNELS]);
    if (!mult) return MGR_KERNEL_OUT_OF_MEMORY;
    q_weights pw;
    weights_view(&pw, c->bufs[1], s[OUT_CHANNELS] * s[KERNEL_H] * s[KERNEL_W],
                 s[CHANNELS] / s[GROUPS], s[GROUPS], NULL);
    int status = transposed_run(c, &pw, x_signed, mult);
    free(mult);
    return status;
}

int mgr_quantized_deconv2d_packed_i8(const mgr_call* call) {
    return conv_transpose_packed(call, 1);
}
int mgr_quantized_deconv2d_packed_u8(const mgr_call* call) {
    return conv_transpose_packed(call, 0);
}

/* ---- quantized_batch_matmul: a (batch or 1, rows, depth) @ b (batch or 1, depth, cols), one
 * GEMM per batch, b's matrix the channel rows of a 1x1 convolution (quantized.pyx's) ------- */

static int batch_matmul(const mgr_call* c, int b_signed) {
    const int64_t* s = c->ints;
    int64_t n = s[B_ROWS], k = s[B_DEPTH], cols = s[B_COLS];
    int32_t zb = (int32_t)s[B_B_ZERO];
    float* mult = multipliers(c, n);
    int32_t* zw = malloc(sizeof(int32_t) * (size_t)n + 1);
    char* packed = malloc((size_t)packed_size(n, k, 1));
    int status = mult && zw && packed ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    qg_conv unit = {k, 1, cols, 1, 1, 1, 1, 0, 0, 1, 1, 1, cols};
    int kind = s[B_OUT_CODE] == CODE_INT32 ? QG_OUT_INT32
               : s[B_OUT_CODE] == CODE_INT8 ? QG_OUT_INT8 : QG_OUT_UINT8;
    q_weights pw;
    for (int64_t o = 0; status == MGR_KERNEL_OK && o < n; o++) zw[o] = (int32_t)c->floats[n + o];
    for (int64_t bi = 0; status == MGR_KERNEL_OK && bi < s[B_BATCH]; bi++) {
        if (bi == 0 || s[B_A_BATCHED]) {
            pack_weights(packed, (const uint8_t*)c->bufs[0] + bi * s[B_A_BATCHED] * n * k,
                         s[B_A_CODE] == CODE_UINT8, n, k, 1, zw, b_signed ? zb + 128 : zb,
                         s[B_HAS_BIAS] ? (const int32_t*)c->bufs[2] : NULL);
            weights_view(&pw, packed, n, k, 1, kind == QG_OUT_INT32 ? NULL : mult);
        }
        q_output out = {c->bufs[2 + (s[B_HAS_BIAS] != 0)] + bi * n * cols * item(kind), kind,
                        (int32_t)s[B_OUT_ZERO], (int32_t)s[B_LOW], (int32_t)s[B_HIGH]};
        status = gemm(&pw, (const uint8_t*)c->bufs[1] + bi * s[B_B_BATCHED] * k * cols, b_signed,
                      zb, 1, &unit, &out);
    }
    free(mult);
    free(zw);
    free(packed);
    return status;
}

int mgr_quantized_batch_matmul_i8(const mgr_call* call) { return batch_matmul(call, 1); }
int mgr_quantized_batch_matmul_u8(const mgr_call* call) { return batch_matmul(call, 0); }

/* ---- quantized_pack_weight -------------------------------------------------------------- */

static int pack_call(const mgr_call* c, int w_unsigned) {
    const int64_t* s = c->ints;
    int64_t oc = s[P_OUT_CHANNELS];
    int32_t* zw = malloc(sizeof(int32_t) * (size_t)oc + 1);
    if (!zw) return MGR_KERNEL_OUT_OF_MEMORY;
    for (int64_t o = 0; o < oc; o++) zw[o] = (int32_t)c->floats[o];
    pack_weights(c->bufs[s[P_HAS_BIAS] ? 2 : 1], (const uint8_t*)c->bufs[0], w_unsigned, oc,
                 s[P_K], s[P_GROUPS], zw, (int32_t)s[P_X_ZERO_SHIFTED],
                 s[P_HAS_BIAS] ? (const int32_t*)c->bufs[1] : NULL);
    free(zw);
    return MGR_KERNEL_OK;
}

int mgr_quantized_pack_weight_i8(const mgr_call* call) { return pack_call(call, 0); }
int mgr_quantized_pack_weight_u8(const mgr_call* call) { return pack_call(call, 1); }

/* a transposed convolution's weight (c_in, out_per_group, taps) as its GEMM rows, packed
 * without a bias (qgemm.pyx's pack_transposed_call) */
static int pack_transposed_call(const mgr_call* c, int w_unsigned) {
    const int64_t* s = c->ints;
    int64_t oc = s[T_GROUPS] * s[T_OUT_PER_GROUP], rows = oc * s[T_TAPS];
    int64_t k = s[T_C_IN] / s[T_GROUPS];
    int32_t* zw = malloc(sizeof(int32_t) * (size_t)oc + 1);
    int32_t* zrows = malloc(sizeof(int32_t) * (size_t)rows + 1);
    uint8_t* wt = malloc((size_t)(rows * k) + 1);
    int status = zw && zrows && wt ? MGR_KERNEL_OK : MGR_KERNEL_OUT_OF_MEMORY;
    if (status == MGR_KERNEL_OK) {
        for (int64_t o = 0; o < oc; o++) zw[o] = (int32_t)c->floats[o];
        qg_transpose_weight((const uint8_t*)c->bufs[0], zw, s[T_C_IN], s[T_OUT_PER_GROUP],
                            s[T_TAPS], s[T_GROUPS], wt, zrows);
        pack_weights(c->bufs[1], wt, w_unsigned, rows, k, s[T_GROUPS], zrows,
                     (int32_t)s[T_X_ZERO_SHIFTED], NULL);
    }
    free(zw);
    free(zrows);
    free(wt);
    return status;
}

int mgr_quantized_pack_deconv_weight_i8(const mgr_call* call) {
    return pack_transposed_call(call, 0);
}
int mgr_quantized_pack_deconv_weight_u8(const mgr_call* call) {
    return pack_transposed_call(call, 1);
}

/* ---- the checks ------------------------------------------------------------------------- */

/* every value of `v` (n of them) an integer in [lo, hi] */
static int integers_in(const double* v, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++)
        if (!(v[i] >= lo && v[i] <= hi) || v[i] != (double)(int64_t)v[i]) return 0;
    return 1;
}

/* the geometry: sizes positive (the batch may be 0) and at most 2^24, so no sum of them
 * overflows; groups dividing the channels; the output size the convolution's; K at most the
 * ops' window; x and y inside their buffers */
/* the taps of one axis of a transposed convolution that reach one output cell (ops/quantized.py's
 * _taps_per_output): those i with i * d in one residue class modulo s */
static int64_t taps_per_output(int64_t k, int64_t s, int64_t d) {
    int64_t a = s, b = d;
    while (b) {
        int64_t r = a % b;
        a = b, b = r;
    }
    int64_t step = s / a;
    return (k + step - 1) / step;
}

/* out_h and out_w a transposed convolution's (output_padding below max(stride, dilation)) */
static int transposed_sizes_ok(const int64_t* s) {
    int64_t full_h = (s[HEIGHT] - 1) * s[STRIDE_H] - 2 * s[PAD_H] +
                     s[DILATION_H] * (s[KERNEL_H] - 1) + 1;
    int64_t full_w = (s[WIDTH] - 1) * s[STRIDE_W] - 2 * s[PAD_W] +
                     s[DILATION_W] * (s[KERNEL_W] - 1) + 1;
    int64_t extra_h = s[OUT_H] - full_h, extra_w = s[OUT_W] - full_w;
    return extra_h >= 0 && extra_w >= 0 &&
           extra_h < (s[STRIDE_H] > s[DILATION_H] ? s[STRIDE_H] : s[DILATION_H]) &&
           extra_w < (s[STRIDE_W] > s[DILATION_W] ? s[STRIDE_W] : s[DILATION_W]);
}

static const char* geometry_check(const mgr_check_args* x, int64_t x_dtype, size_t y_buf,
                                  int transposed) {
    const int64_t* s = x->ints;
    for (int f = 0; f <= DILATION_W; f++)
        if (s[f] < (f == BATCH || f == PAD_H || f == PAD_W ? 0 : 1) || s[f] > ((int64_t)1 << 24))
            return "a size, stride or dilation is not positive, or past 2^24";
    if (s[GROUPS] < 1 || s[CHANNELS] % s[GROUPS] || s[OUT_CHANNELS] % s[GROUPS])
        return "the groups do not divide the channels";
    int64_t oh = (s[HEIGHT] + 2 * s[PAD_H] - s[DILATION_H] * (s[KERNEL_H] - 1) - 1);
    int64_t ow = (s[WIDTH] + 2 * s[PAD_W] - s[DILATION_W] * (s[KERNEL_W] - 1) - 1);
    if (transposed ? !transposed_sizes_ok(s)
                   : oh < 0 || ow < 0 || oh / s[STRIDE_H] + 1 != s[OUT_H] ||
                         ow / s[STRIDE_W] + 1 != s[OUT_W])
        return "out_h and out_w are not the convolution's";
    int64_t k = s[CHANNELS] / s[GROUPS] *
                (transposed ? taps_per_output(s[KERNEL_H], s[STRIDE_H], s[DILATION_H]) *
                                  taps_per_output(s[KERNEL_W], s[STRIDE_W], s[DILATION_W])
                            : s[KERNEL_H] * s[KERNEL_W]);
    if (k > MAX_WINDOW) return "each output sums more products than an int32 holds";
    if (s[OUT_CODE] < 0 || s[OUT_CODE] >= CODES) return "its output code is not int8, uint8 or int32";
    int64_t code = s[OUT_CODE], xe, ye;
    if (x->buf_dtypes[0] != x_dtype || x->buf_dtypes[y_buf] != CODE_DTYPE[code])
        return "x or y is not of the dtype its name and output code say";
    int64_t loops[6] = {s[BATCH], s[CHANNELS], s[HEIGHT], s[WIDTH], s[OUT_CHANNELS], 1};
    if (!mgr_counts_ok(loops, 6)) return "its sizes make no loop this runtime bounds";
    if (!mgr_muladd(0, s[BATCH], s[CHANNELS], &xe) || !mgr_muladd(0, xe, s[HEIGHT], &xe) ||
        !mgr_muladd(0, xe, s[WIDTH], &xe) || xe > x->buf_bytes[0])
        return "batch * channels * height * width reaches past x's bytes";
    if (!mgr_muladd(0, s[BATCH], s[OUT_CHANNELS], &ye) || !mgr_muladd(0, ye, s[OUT_H], &ye) ||
        !mgr_muladd(0, ye, s[OUT_W], &ye) ||
        ye > x->buf_bytes[y_buf] / (code == CODE_INT32 ? 4 : 1))
        return "batch * out_channels * out_h * out_w reaches past y's bytes";
    int64_t x_code = x_dtype == DT_I8 ? CODE_INT8 : CODE_UINT8;
    if (s[X_ZERO] < LOWEST[x_code] || s[X_ZERO] > HIGHEST[x_code])
        return "x's zero point is outside its storage range";
    if (code != CODE_INT32 &&
        (s[OUT_ZERO] < LOWEST[code] || s[OUT_ZERO] > HIGHEST[code] || s[LOW] < LOWEST[code] ||
         s[HIGH] > HIGHEST[code] || s[LOW] > s[HIGH]))
        return "the output's zero point or range is outside its storage range";
    if (s[HAS_BIAS] < 0 || s[HAS_BIAS] > 1 || s[THREADS] < 1) return "a flag is out of its range";
    /* the multipliers: finite float32s (a NaN has no integer; a larger double no float) */
    for (int64_t o = 0; code != CODE_INT32 && o < s[OUT_CHANNELS]; o++)
        if (!isfinite(x->floats[o]) || fabs(x->floats[o]) > FLT_MAX)
            return "a multiplier is not a finite float32";
    return NULL;
}

/* Packed weights that are the model's weights (not packed at run time by the plan): their
 * flags word is what the kernels trust, so it must be what the bytes say (qg_weights_flags):
 * QG_ZERO_POINTS exactly, QG_PAIRS_FIT only where proved (else the vpmaddubsw tile would
 * saturate silently), no other bit; a word without QG_PAIRS_FIT on weights that fit is valid
 * (packs from before it). ops/quantized_pack.py's packed_flags_error in Python. */
static const char* flags_check(const mgr_check_args* x, int64_t rows, int64_t k, int64_t groups) {
    const char* packed = x->buf_weights ? x->buf_weights[1] : NULL;
    if (!packed) return NULL;
    q_weights pw;
    weights_view(&pw, packed, rows, k, groups, NULL);
    const int32_t* zw = pw.row_const + rows;
    int32_t stored = zw[rows], proved = qg_weights_flags(pw.a, groups, pw.m, pw.kg, zw);
    if (stored & ~(QG_ZERO_POINTS | QG_PAIRS_FIT)) return "the packed weights' flags word has "
                                                          "bits no kernel knows";
    if ((stored ^ proved) & QG_ZERO_POINTS)
        return "the packed weights' flags word disagrees with their zero points";
    if (stored & ~proved & QG_PAIRS_FIT)
        return "the packed weights claim that every k pair's products fit int16 (QG_PAIRS_FIT) "
               "but their bytes do not";
    return NULL;
}

static const char* packed_check(const mgr_check_args* x, int64_t x_dtype) {
    if (x->n_bufs != 3 || x->n_ints != FIELDS) return "wants buffers x, packed, y and 24 ints";
    if (x->n_floats != (size_t)x->ints[OUT_CHANNELS] || x->ints[HAS_BIAS] != 0)
        return "wants one multiplier per output channel, the bias in the pack";
    const char* why = geometry_check(x, x_dtype, 2, 0);
    if (why) return why;
    const int64_t* s = x->ints;
    int64_t k = s[CHANNELS] / s[GROUPS] * s[KERNEL_H] * s[KERNEL_W];
    if (packed_size(s[OUT_CHANNELS], k, s[GROUPS]) > x->buf_bytes[1])
        return "the packed weights are smaller than their layout";
    return flags_check(x, s[OUT_CHANNELS], k, s[GROUPS]);
}

const char* mgr_quantized_conv2d_packed_i8_check(const mgr_check_args* x) {
    return packed_check(x, DT_I8);
}
const char* mgr_quantized_conv2d_packed_u8_check(const mgr_check_args* x) {
    return packed_check(x, DT_U8);
}

static const char* conv_check(const mgr_check_args* x, int64_t x_dtype, int transposed) {
    if (x->n_ints != FIELDS || x->ints[HAS_BIAS] < 0 || x->ints[HAS_BIAS] > 1)
        return "wants 24 ints";
    const int64_t* s = x->ints;
    size_t y_buf = 2 + (size_t)s[HAS_BIAS];
    if (x->n_bufs != y_buf + 1) return "wants buffers x, w, [bias,] y";
    if (s[OUT_CHANNELS] < 1 || x->n_floats != 2 * (size_t)s[OUT_CHANNELS])
        return "wants a multiplier and a weight zero point per output channel";
    const char* why = geometry_check(x, x_dtype, y_buf, transposed);
    if (why) return why;
    if (s[W_CODE] != CODE_INT8 && s[W_CODE] != CODE_UINT8) return "its weight code is not 8-bit";
    int64_t k = s[CHANNELS] / s[GROUPS] * s[KERNEL_H] * s[KERNEL_W], we;
    if (x->buf_dtypes[1] != CODE_DTYPE[s[W_CODE]] || !mgr_muladd(0, s[OUT_CHANNELS], k, &we) ||
        we > x->buf_bytes[1])
        return "w is not of its code's dtype or is smaller than out_channels * k";
    if (s[HAS_BIAS] && (x->buf_dtypes[2] != DT_I32 || s[OUT_CHANNELS] > x->buf_bytes[2] / 4))
        return "the bias is not int32 of a value per output channel";
    if (!integers_in(x->floats + s[OUT_CHANNELS], s[OUT_CHANNELS], LOWEST[s[W_CODE]],
                     HIGHEST[s[W_CODE]]))
        return "a weight zero point is not an integer of w's storage range";
    return NULL;
}

const char* mgr_quantized_conv2d_i8_check(const mgr_check_args* x) {
    return conv_check(x, DT_I8, 0);
}
const char* mgr_quantized_conv2d_u8_check(const mgr_check_args* x) {
    return conv_check(x, DT_U8, 0);
}
const char* mgr_quantized_conv_transpose2d_i8_check(const mgr_check_args* x) {
    return conv_check(x, DT_I8, 1);
}
const char* mgr_quantized_conv_transpose2d_u8_check(const mgr_check_args* x) {
    return conv_check(x, DT_U8, 1);
}

static const char* transposed_packed_check(const mgr_check_args* x, int64_t x_dtype) {
    const int64_t* s = x->ints;
    if (x->n_ints != FIELDS || s[HAS_BIAS] < 0 || s[HAS_BIAS] > 1) return "wants 24 ints";
    size_t y_buf = 2 + (size_t)s[HAS_BIAS];
    if (x->n_bufs != y_buf + 1) return "wants buffers x, packed, [bias,] y";
    if (s[OUT_CHANNELS] < 1 || x->n_floats != (size_t)s[OUT_CHANNELS])
        return "wants one multiplier per output channel";
    const char* why = geometry_check(x, x_dtype, y_buf, 1);
    if (why) return why;
    int64_t rows;
    if (!mgr_muladd(0, s[OUT_CHANNELS], s[KERNEL_H] * s[KERNEL_W], &rows) ||
        rows > MGR_EMPTY_DIM * 64 ||
        packed_size(rows, s[CHANNELS] / s[GROUPS], s[GROUPS]) > x->buf_bytes[1])
        return "the packed weights are smaller than their layout";
    if (s[HAS_BIAS] && (x->buf_dtypes[2] != DT_I32 || s[OUT_CHANNELS] > x->buf_bytes[2] / 4))
        return "the bias is not int32 of a value per output channel";
    return flags_check(x, rows, s[CHANNELS] / s[GROUPS], s[GROUPS]);
}

const char* mgr_quantized_deconv2d_packed_i8_check(const mgr_check_args* x) {
    return transposed_packed_check(x, DT_I8);
}
const char* mgr_quantized_deconv2d_packed_u8_check(const mgr_check_args* x) {
    return transposed_packed_check(x, DT_U8);
}

/* the batched matmul's block: sizes positive and at most 2^24 (the batch may be 0), the flags
 * and codes in range, depth at most the ops' window, a, b, bias and y inside their buffers */
static const char* bmm_check(const mgr_check_args* x, int64_t b_dtype) {
    const int64_t* s = x->ints;
    if (x->n_ints != BMM_FIELDS || s[B_HAS_BIAS] < 0 || s[B_HAS_BIAS] > 1) return "wants 14 ints";
    size_t y_buf = 2 + (size_t)s[B_HAS_BIAS];
    if (x->n_bufs != y_buf + 1) return "wants buffers a, b, [bias,] y";
    for (int f = B_BATCH; f <= B_COLS; f++)
        if (s[f] < (f == B_BATCH ? 0 : 1) || s[f] > ((int64_t)1 << 24))
            return "a size is not positive, or past 2^24";
    if (s[B_DEPTH] > MAX_WINDOW) return "each output sums more products than an int32 holds";
    if (s[B_A_BATCHED] < 0 || s[B_A_BATCHED] > 1 || s[B_B_BATCHED] < 0 || s[B_B_BATCHED] > 1 ||
        s[B_THREADS] < 1 || (s[B_A_CODE] != CODE_INT8 && s[B_A_CODE] != CODE_UINT8) ||
        s[B_OUT_CODE] < 0 || s[B_OUT_CODE] >= CODES)
        return "a flag or code is out of its range";
    int64_t n = s[B_ROWS], k = s[B_DEPTH], m = s[B_COLS], code = s[B_OUT_CODE], ae, be, ye;
    if (x->n_floats != 2 * (size_t)n) return "wants a multiplier and a zero point of a per row";
    if (x->buf_dtypes[0] != CODE_DTYPE[s[B_A_CODE]] || x->buf_dtypes[1] != b_dtype ||
        x->buf_dtypes[y_buf] != CODE_DTYPE[code])
        return "a, b or y is not of the dtype its name and codes say";
    int64_t loops[4] = {s[B_BATCH], n, k, m};
    if (!mgr_counts_ok(loops, 4)) return "its sizes make no loop this runtime bounds";
    if (!mgr_muladd(0, s[B_A_BATCHED] ? s[B_BATCH] : 1, n * k, &ae) || ae > x->buf_bytes[0] ||
        !mgr_muladd(0, s[B_B_BATCHED] ? s[B_BATCH] : 1, k * m, &be) || be > x->buf_bytes[1])
        return "a or b reaches past its bytes";
    if (!mgr_muladd(0, s[B_BATCH], n * m, &ye) ||
        ye > x->buf_bytes[y_buf] / (code == CODE_INT32 ? 4 : 1))
        return "batch * rows * cols reaches past y's bytes";
    if (s[B_HAS_BIAS] && (x->buf_dtypes[2] != DT_I32 || n > x->buf_bytes[2] / 4))
        return "the bias is not int32 of a value per row";
    int64_t b_code = b_dtype == DT_I8 ? CODE_INT8 : CODE_UINT8;
    if (s[B_B_ZERO] < LOWEST[b_code] || s[B_B_ZERO] > HIGHEST[b_code])
        return "b's zero point is outside its storage range";
    if (code != CODE_INT32 &&
        (s[B_OUT_ZERO] < LOWEST[code] || s[B_OUT_ZERO] > HIGHEST[code] ||
         s[B_LOW] < LOWEST[code] || s[B_HIGH] > HIGHEST[code] || s[B_LOW] > s[B_HIGH]))
        return "the output's zero point or range is outside its storage range";
    for (int64_t o = 0; code != CODE_INT32 && o < n; o++)
        if (!isfinite(x->floats[o]) || fabs(x->floats[o]) > FLT_MAX)
            return "a multiplier is not a finite float32";
    if (!integers_in(x->floats + n, n, LOWEST[s[B_A_CODE]], HIGHEST[s[B_A_CODE]]))
        return "a zero point of a is not an integer of a's storage range";
    return NULL;
}

const char* mgr_quantized_batch_matmul_i8_check(const mgr_check_args* x) {
    return bmm_check(x, DT_I8);
}
const char* mgr_quantized_batch_matmul_u8_check(const mgr_check_args* x) {
    return bmm_check(x, DT_U8);
}

static const char* pack_check(const mgr_check_args* x, int64_t w_dtype) {
    const int64_t* s = x->ints;
    int64_t we;
    if (x->n_ints != PACK_FIELDS || s[P_HAS_BIAS] < 0 || s[P_HAS_BIAS] > 1)
        return "wants 6 ints";
    size_t out = 1 + (size_t)s[P_HAS_BIAS];
    if (x->n_bufs != out + 1) return "wants buffers w, [bias,] packed";
    if (s[P_OUT_CHANNELS] < 1 || s[P_K] < 1 || s[P_K] > MAX_WINDOW || s[P_GROUPS] < 1 ||
        s[P_OUT_CHANNELS] % s[P_GROUPS] || s[P_OUT_CHANNELS] > MGR_EMPTY_DIM * 64 ||
        s[P_X_ZERO_SHIFTED] < 0 || s[P_X_ZERO_SHIFTED] > 255 || s[P_THREADS] < 1)
        return "its channels, k, groups or zero point are out of their range";
    if (x->n_floats != (size_t)s[P_OUT_CHANNELS] ||
        !integers_in(x->floats, s[P_OUT_CHANNELS], w_dtype == DT_I8 ? -128 : 0,
                     w_dtype == DT_I8 ? 127 : 255))
        return "wants a weight zero point of w's storage range per output channel";
    if (x->buf_dtypes[0] != w_dtype || !mgr_muladd(0, s[P_OUT_CHANNELS], s[P_K], &we) ||
        we > x->buf_bytes[0])
        return "w is not of its dtype or smaller than out_channels * k";
    if (s[P_HAS_BIAS] && (x->buf_dtypes[1] != DT_I32 || s[P_OUT_CHANNELS] > x->buf_bytes[1] / 4))
        return "the bias is not int32 of a value per output channel";
    if (packed_size(s[P_OUT_CHANNELS], s[P_K], s[P_GROUPS]) > x->buf_bytes[out])
        return "the packed buffer is smaller than the layout";
    return NULL;
}

const char* mgr_quantized_pack_weight_i8_check(const mgr_check_args* x) {
    return pack_check(x, DT_I8);
}
const char* mgr_quantized_pack_weight_u8_check(const mgr_check_args* x) {
    return pack_check(x, DT_U8);
}

static const char* pack_transposed_check(const mgr_check_args* x, int64_t w_dtype) {
    const int64_t* s = x->ints;
    int64_t oc, rows, we;
    if (x->n_ints != PACKT_FIELDS) return "wants 6 ints";
    if (x->n_bufs != 2) return "wants buffers w, packed";
    for (int f = T_C_IN; f <= T_GROUPS; f++)
        if (s[f] < 1 || s[f] > ((int64_t)1 << 24)) return "a size is not positive, or past 2^24";
    if (s[T_C_IN] % s[T_GROUPS] || s[T_C_IN] / s[T_GROUPS] > MAX_WINDOW ||
        s[T_X_ZERO_SHIFTED] < 0 || s[T_X_ZERO_SHIFTED] > 255 || s[T_THREADS] < 1)
        return "its channels, groups or zero point are out of their range";
    if (!mgr_muladd(0, s[T_GROUPS], s[T_OUT_PER_GROUP], &oc) ||
        !mgr_muladd(0, oc, s[T_TAPS], &rows) || rows > MGR_EMPTY_DIM * 64)
        return "its rows are past what this runtime bounds";
    if (x->n_floats != (size_t)oc ||
        !integers_in(x->floats, oc, w_dtype == DT_I8 ? -128 : 0, w_dtype == DT_I8 ? 127 : 255))
        return "wants a weight zero point of w's storage range per output channel";
    if (x->buf_dtypes[0] != w_dtype || !mgr_muladd(0, s[T_C_IN], s[T_OUT_PER_GROUP] * s[T_TAPS],
                                                   &we) || we > x->buf_bytes[0])
        return "w is not of its dtype or smaller than c_in * out_per_group * taps";
    if (packed_size(rows, s[T_C_IN] / s[T_GROUPS], s[T_GROUPS]) > x->buf_bytes[1])
        return "the packed buffer is smaller than the layout";
    return NULL;
}

const char* mgr_quantized_pack_deconv_weight_i8_check(const mgr_check_args* x) {
    return pack_transposed_check(x, DT_I8);
}
const char* mgr_quantized_pack_deconv_weight_u8_check(const mgr_check_args* x) {
    return pack_transposed_check(x, DT_U8);
}
