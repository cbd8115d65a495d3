/* quantize_f32/f64 and dequantize_i8/u8/i32: between real numbers and the integers of a
 * quantized type, as quantize.pyx computes them (the same expressions, so the same bits).
 * quantize: x divided by the scale in x's own dtype, rounded half to even (rint), plus the zero
 * point, saturated to the storage range; a NaN has no integer: status 5 (NOT_A_NUMBER).
 * dequantize: float32(q - zp) * float32(scale) (one rounding) or, for float64, in double.
 * The parameter block of kernel_abi/quantize.py's FIELDS (outer, channels, inner, code,
 * threads): the value is (outer, channels, inner) with the per-channel axis in the middle; the
 * floats are the scales, then the zero points, one of each per channel. Bufs x, y. */
#include <float.h>
#include <math.h>

#include "../mgr_kernel.h"

enum { OUTER, CHANNELS, INNER, CODE, THREADS, FIELDS };
enum { CODE_INT8, CODE_UINT8, CODE_INT32, CODES };
enum { KERNEL_NOT_A_NUMBER = 5 };
/* the blob's dtype codes (deploy/blob.py) */
enum { DT_F32 = 0, DT_F64 = 1, DT_I32 = 2, DT_U8 = 4, DT_I8 = 5 };

static const double LOW[CODES] = {-128.0, 0.0, -2147483648.0};
static const double HIGH[CODES] = {127.0, 255.0, 2147483647.0};
static const int64_t CODE_DTYPE[CODES] = {DT_I8, DT_U8, DT_I32};
static const int64_t CODE_ITEM[CODES] = {1, 1, 4};

static double saturated(double r, double lo, double hi) { return r < lo ? lo : r > hi ? hi : r; }

static void store(char* q, int64_t code, int64_t j, double v) {
    if (code == CODE_INT8) ((int8_t*)q)[j] = (int8_t)v;
    else if (code == CODE_UINT8) ((uint8_t*)q)[j] = (uint8_t)v;
    else ((int32_t*)q)[j] = (int32_t)v;
}

static double stored(const char* q, int64_t code, int64_t j) {
    if (code == CODE_INT8) return ((const int8_t*)q)[j];
    if (code == CODE_UINT8) return ((const uint8_t*)q)[j];
    return ((const int32_t*)q)[j];
}

/* x of float type T divided by the scale rounded to T, as quantize_part */
#define QUANTIZE(T)                                                                         \
    static int quantize_##T(const mgr_call* c) {                                            \
        const int64_t* s = c->ints;                                                         \
        const T* x = (const T*)c->bufs[0];                                                  \
        double lo = LOW[s[CODE]], hi = HIGH[s[CODE]];                                       \
        for (int64_t o = 0, j = 0; o < s[OUTER]; o++)                                       \
            for (int64_t ch = 0; ch < s[CHANNELS]; ch++) {                                  \
                T scale = (T)c->floats[ch];                                                 \
                double zp = c->floats[s[CHANNELS] + ch];                                    \
                for (int64_t i = 0; i < s[INNER]; i++, j++) {                               \
                    double v = (double)(x[j] / scale);                                      \
                    if (v != v) return KERNEL_NOT_A_NUMBER;                                 \
                    store(c->bufs[1], s[CODE], j, saturated(rint(v) + zp, lo, hi));         \
                }                                                                           \
            }                                                                               \
        return MGR_KERNEL_OK;                                                               \
    }

QUANTIZE(float)
QUANTIZE(double)

int mgr_quantize_f32(const mgr_call* call) { return quantize_float(call); }
int mgr_quantize_f64(const mgr_call* call) { return quantize_double(call); }

static int dequantize(const mgr_call* c, int64_t code) {
    const int64_t* s = c->ints;
    for (int64_t o = 0, j = 0; o < s[OUTER]; o++)
        for (int64_t ch = 0; ch < s[CHANNELS]; ch++) {
            double scale = c->floats[ch], zp = c->floats[s[CHANNELS] + ch];
            for (int64_t i = 0; i < s[INNER]; i++, j++) {
                double q = stored(c->bufs[0], code, j) - zp;
                if (s[CODE] == 0) ((float*)c->bufs[1])[j] = (float)q * (float)scale;
                else ((double*)c->bufs[1])[j] = q * scale;
            }
        }
    return MGR_KERNEL_OK;
}

int mgr_dequantize_i8(const mgr_call* call) { return dequantize(call, CODE_INT8); }
int mgr_dequantize_u8(const mgr_call* call) { return dequantize(call, CODE_UINT8); }
int mgr_dequantize_i32(const mgr_call* call) { return dequantize(call, CODE_INT32); }

/* The block, the elements against x's and y's bytes (of items x_item and y_item), the scales
 * finite and of float32's range where x or y is float32 (a cast of a larger double is undefined
 * in C), the zero points integers of the storage range `code` (saturated, then cast: in range). */
static const char* check(const mgr_check_args* x, int64_t code, int64_t x_dtype,
                         int64_t y_dtype, int64_t x_item, int64_t y_item) {
    const int64_t* s = x->ints;
    int64_t elements;
    if (x->n_bufs != 2 || x->n_ints != FIELDS) return "wants buffers x, y and 5 ints";
    if (x->buf_dtypes[0] != x_dtype || x->buf_dtypes[1] != y_dtype)
        return "its buffers are not of the dtypes its name and code say";
    if (!mgr_counts_ok(s, 3) || s[CHANNELS] < 1 || s[THREADS] < 1)
        return "outer, channels and inner make no loop this runtime bounds";
    if ((size_t)s[CHANNELS] > x->n_floats / 2 || x->n_floats != 2 * (size_t)s[CHANNELS])
        return "wants a scale and a zero point per channel";
    if (!mgr_muladd(0, s[OUTER], s[CHANNELS], &elements) ||
        !mgr_muladd(0, elements, s[INNER], &elements) ||
        elements > x->buf_bytes[0] / x_item || elements > x->buf_bytes[1] / y_item)
        return "outer * channels * inner reaches past its buffers' bytes";
    int f32 = x_dtype == DT_F32 || y_dtype == DT_F32;
    for (int64_t ch = 0; ch < s[CHANNELS]; ch++) {
        double scale = x->floats[ch], zp = x->floats[s[CHANNELS] + ch];
        if (!isfinite(scale) || (f32 && fabs(scale) > FLT_MAX))
            return "a scale is not a finite number of its float type";
        if (!(zp >= LOW[code] && zp <= HIGH[code]) || zp != (double)(int64_t)zp)
            return "a zero point is not an integer of the storage range";
    }
    return NULL;
}

static const char* quantize_check(const mgr_check_args* x, int64_t x_dtype, int64_t x_item) {
    if (x->n_ints != FIELDS) return "wants buffers x, y and 5 ints";
    if (x->ints[CODE] < 0 || x->ints[CODE] >= CODES)
        return "its storage code is not int8, uint8 or int32";
    int64_t code = x->ints[CODE];
    return check(x, code, x_dtype, CODE_DTYPE[code], x_item, CODE_ITEM[code]);
}

const char* mgr_quantize_f32_check(const mgr_check_args* x) { return quantize_check(x, DT_F32, 4); }
const char* mgr_quantize_f64_check(const mgr_check_args* x) { return quantize_check(x, DT_F64, 8); }

static const char* dequantize_check(const mgr_check_args* x, int64_t code) {
    if (x->n_ints != FIELDS) return "wants buffers x, y and 5 ints";
    if (x->ints[CODE] != 0 && x->ints[CODE] != 1) return "its float code is not float32 or float64";
    int64_t f64 = x->ints[CODE];
    return check(x, code, CODE_DTYPE[code], f64 ? DT_F64 : DT_F32, CODE_ITEM[code], f64 ? 8 : 4);
}

const char* mgr_dequantize_i8_check(const mgr_check_args* x) {
    return dequantize_check(x, CODE_INT8);
}
const char* mgr_dequantize_u8_check(const mgr_check_args* x) {
    return dequantize_check(x, CODE_UINT8);
}
const char* mgr_dequantize_i32_check(const mgr_check_args* x) {
    return dequantize_check(x, CODE_INT32);
}

/* ---- fake_quant_f32/f64: quantize and dequantize at once, in floats (fake_quant.pyx): every
 * step the kernels' above, so the results equal dequantize(quantize(x)) bit for bit; a NaN stays
 * NaN; a scale that is not positive and finite stops with BAD_VALUE. The parameter block of
 * kernel_abi/fake_quant.py (outer, channels, inner, qmin, qmax, threads); bufs x, the scales,
 * the zero points (one of each per channel, tensors: a learned step), y. */
enum { FQ_OUTER, FQ_CHANNELS, FQ_INNER, FQ_QMIN, FQ_QMAX, FQ_THREADS, FQ_FIELDS };

#define FAKE_QUANT(T)                                                                       \
    static int fake_quant_##T(const mgr_call* c) {                                          \
        const int64_t* s = c->ints;                                                         \
        const T *x = (const T*)c->bufs[0], *scales = (const T*)c->bufs[1];                  \
        const T* zps = (const T*)c->bufs[2];                                                \
        T* y = (T*)c->bufs[3];                                                              \
        double low = (double)s[FQ_QMIN], high = (double)s[FQ_QMAX];                         \
        for (int64_t o = 0, j = 0; o < s[FQ_OUTER]; o++)                                    \
            for (int64_t ch = 0; ch < s[FQ_CHANNELS]; ch++) {                               \
                T scale = scales[ch];                                                       \
                double zp = (double)zps[ch];                                                \
                if (!(isfinite(scale) && scale > 0)) return MGR_KERNEL_BAD_VALUE;           \
                for (int64_t i = 0; i < s[FQ_INNER]; i++, j++) {                            \
                    double v = rint((double)(x[j] / scale)) + zp;                           \
                    v = v < low ? low : v > high ? high : v;                                \
                    y[j] = (T)(v - zp) * scale;                                             \
                }                                                                           \
            }                                                                               \
        return MGR_KERNEL_OK;                                                               \
    }

FAKE_QUANT(float)
FAKE_QUANT(double)

int mgr_fake_quant_f32(const mgr_call* call) { return fake_quant_float(call); }
int mgr_fake_quant_f64(const mgr_call* call) { return fake_quant_double(call); }

static const char* fake_quant_check(const mgr_check_args* x, int64_t dtype, int64_t item) {
    const int64_t* s = x->ints;
    int64_t elements;
    if (x->n_bufs != 4 || x->n_ints != FQ_FIELDS || x->n_floats != 0)
        return "wants buffers x, scales, zero points, y, 6 ints and no floats";
    for (size_t b = 0; b < 4; b++)
        if (x->buf_dtypes[b] != dtype) return "its buffers are not of its dtype";
    if (!mgr_counts_ok(s, 3) || s[FQ_CHANNELS] < 1 || s[FQ_THREADS] < 1)
        return "outer, channels and inner make no loop this runtime bounds";
    /* the range: integers a double holds exactly, in order */
    if (s[FQ_QMIN] > s[FQ_QMAX] || s[FQ_QMIN] < -((int64_t)1 << 52) ||
        s[FQ_QMAX] > ((int64_t)1 << 52))
        return "qmin and qmax are not an integer range";
    if (s[FQ_CHANNELS] > x->buf_bytes[1] / item || s[FQ_CHANNELS] > x->buf_bytes[2] / item)
        return "wants a scale and a zero point per channel";
    if (!mgr_muladd(0, s[FQ_OUTER], s[FQ_CHANNELS], &elements) ||
        !mgr_muladd(0, elements, s[FQ_INNER], &elements) ||
        elements > x->buf_bytes[0] / item || elements > x->buf_bytes[3] / item)
        return "outer * channels * inner reaches past its buffers' bytes";
    return NULL;
}

const char* mgr_fake_quant_f32_check(const mgr_check_args* x) {
    return fake_quant_check(x, DT_F32, 4);
}
const char* mgr_fake_quant_f64_check(const mgr_check_args* x) {
    return fake_quant_check(x, DT_F64, 8);
}
