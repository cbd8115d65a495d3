/* quantized_add_i8 / quantized_add_u8 (named by a's dtype): y = saturate(rint(float32(a - za) *
 * ma + float32(b - zb) * mb) + zy), each product and the sum rounded to float32 (the Makefile's
 * -ffp-contract=off), as quantized.pyx's loop (whose vectorised rows give the same integers).
 * The parameter block of kernel_abi/quantized.py's QADD_FIELDS, then the collapsed output shape,
 * a's and b's element strides (0 where broadcast) and b's dtype code; floats ma, mb. Bufs a, b,
 * y (contiguous). */
#include <float.h>
#include <math.h>

#include "../mgr_kernel.h"

enum { A_ZERO, B_ZERO, OUT_ZERO, LOW, HIGH, OUT_CODE, THREADS, NDIM, FIELDS };
enum { CODE_INT8, CODE_UINT8 };
enum { DT_U8 = 4, DT_I8 = 5 };
#define MAX_DIMS 8

static int32_t stored(const char* p, int64_t i, int64_t code) {
    return code == CODE_INT8 ? ((const int8_t*)p)[i] : ((const uint8_t*)p)[i];
}

static int add(const mgr_call* c, int64_t a_code) {
    const int64_t* s = c->ints;
    int64_t ndim = s[NDIM];
    const int64_t *shape = s + FIELDS, *sa = shape + ndim, *sb = sa + ndim;
    int64_t b_code = sb[ndim], inner = shape[ndim - 1], rows = 1, idx[MAX_DIMS] = {0};
    for (int64_t d = 0; d < ndim - 1; d++) rows *= shape[d];
    float ma = (float)c->floats[0], mb = (float)c->floats[1];
    int32_t za = (int32_t)s[A_ZERO], zb = (int32_t)s[B_ZERO];
    for (int64_t r = 0; r < rows; r++) {
        int64_t at_a = 0, at_b = 0;
        for (int64_t d = 0; d < ndim - 1; d++) at_a += idx[d] * sa[d], at_b += idx[d] * sb[d];
        for (int64_t i = 0; i < inner; i++) {
            float fa = (float)(stored(c->bufs[0], at_a + i * sa[ndim - 1], a_code) - za) * ma;
            float fb = (float)(stored(c->bufs[1], at_b + i * sb[ndim - 1], b_code) - zb) * mb;
            double q = (double)rintf(fa + fb) + (double)s[OUT_ZERO];
            q = q < s[LOW] ? (double)s[LOW] : q > s[HIGH] ? (double)s[HIGH] : q;
            if (s[OUT_CODE] == CODE_INT8) ((int8_t*)c->bufs[2])[r * inner + i] = (int8_t)q;
            else ((uint8_t*)c->bufs[2])[r * inner + i] = (uint8_t)q;
        }
        for (int64_t d = ndim - 2; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
    return MGR_KERNEL_OK;
}

int mgr_quantized_add_i8(const mgr_call* call) { return add(call, CODE_INT8); }
int mgr_quantized_add_u8(const mgr_call* call) { return add(call, CODE_UINT8); }

static int in_range(int64_t v, int64_t code) {
    return code == CODE_INT8 ? v >= -128 && v <= 127 : v >= 0 && v <= 255;
}

/* the furthest element a walk of `shape` over `strides` reads reaches inside `elements` */
static int reach_ok(const int64_t* shape, const int64_t* strides, int64_t ndim, int64_t elements) {
    int64_t last = 0;
    for (int64_t d = 0; d < ndim; d++) {
        if (strides[d] < 0) return 0;
        if (shape[d] > 0 && !mgr_muladd(last, shape[d] - 1, strides[d], &last)) return 0;
    }
    return last < elements;
}

static const char* check(const mgr_check_args* x, int64_t a_code) {
    const int64_t* s = x->ints;
    if (x->n_bufs != 3 || x->n_ints < FIELDS || x->n_floats != 2)
        return "wants buffers a, b, y, 8 ints and the dims, and 2 floats";
    int64_t ndim = s[NDIM], elements;
    if (ndim < 1 || ndim > MAX_DIMS || x->n_ints != (size_t)(FIELDS + 3 * ndim + 1))
        return "wants 1 to 8 dims, then the shape, both strides and b's code";
    const int64_t *shape = s + FIELDS, *sa = shape + ndim, *sb = sa + ndim;
    int64_t b_code = sb[ndim], out = s[OUT_CODE];
    if ((b_code != CODE_INT8 && b_code != CODE_UINT8) || (out != CODE_INT8 && out != CODE_UINT8))
        return "b's or y's code is not int8 or uint8";
    const int64_t dtypes[2] = {DT_I8, DT_U8};
    if (x->buf_dtypes[0] != dtypes[a_code] || x->buf_dtypes[1] != dtypes[b_code] ||
        x->buf_dtypes[2] != dtypes[out])
        return "a, b or y is not of the dtype its name and codes say";
    if (!in_range(s[A_ZERO], a_code) || !in_range(s[B_ZERO], b_code) ||
        !in_range(s[OUT_ZERO], out) || !in_range(s[LOW], out) || !in_range(s[HIGH], out) ||
        s[LOW] > s[HIGH] || s[THREADS] < 1)
        return "a zero point or the output range is outside its storage range";
    for (int k = 0; k < 2; k++)
        if (!isfinite(x->floats[k]) || fabs(x->floats[k]) > FLT_MAX)
            return "a multiplier is not a finite float32";
    if (!mgr_counts_ok(shape, (int)ndim)) return "its shape makes no loop this runtime bounds";
    elements = 1; /* no overflow: mgr_counts_ok bounded the product */
    for (int64_t d = 0; d < ndim; d++) elements *= shape[d];
    if (elements > x->buf_bytes[2]) return "the shape reaches past y's bytes";
    if (elements > 0 && (!reach_ok(shape, sa, ndim, x->buf_bytes[0]) ||
                         !reach_ok(shape, sb, ndim, x->buf_bytes[1])))
        return "a's or b's strides reach past its bytes";
    return NULL;
}

const char* mgr_quantized_add_i8_check(const mgr_check_args* x) { return check(x, CODE_INT8); }
const char* mgr_quantized_add_u8_check(const mgr_check_args* x) { return check(x, CODE_UINT8); }
