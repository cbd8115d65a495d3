// The int8 compute ops (mgegraph/ops/quantized.py): int32 accumulation through __dp4a and the
// requantisation epilogue, shared by the rendered conv and linear kernels
// (mgegraph/cuda/kernels/quantized.py) and csrc_cuda/quantized.cu (quantized_add).
//
// Design: dp4a multiplies four signed bytes by four signed bytes. A uint8 value q becomes the
// int8 q - 128 (its byte XOR 0x80) with its zero point moved by 128 too, so every mix of int8
// and uint8 inputs runs the one signed instruction. The sums are of the shifted values x', w'
// as stored; the zero points come out afterwards, exactly in integers:
//   sum (x' - zx')(w' - zw') = S_xw - zw' S_x - zx' S_w + K zx' zw'
// (a padded position holds zx': it adds nothing to the centred sum). dp4a sums in int32;
// every MG_Q_CHUNK words the partial sums move to int64, so no length of K can wrap them, and
// the bias is added and the int32 range saturated in int64, as the NumPy reference does.
//
// The per-channel constants (the multipliers m[o] = float32(sx) * float32(sw[o]) / float32(sy)
// and the weight zero points zw'[o]) are tables the renderer bakes into each instruction's
// kernel text (MG_QTABLE): MgArgs holds 8 floats, a layer has up to thousands of channels.
#pragma once

#include "mg_abi.cuh"

typedef long long mg_q64;

#ifdef MG_HOST_EMU
#define MG_QTABLE static const
inline int mg_q_byte(int word, int i) { return (int)(signed char)((unsigned)word >> (8 * i)); }
inline int mg_dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += mg_q_byte(a, i) * mg_q_byte(b, i);
    return c;
}
inline float mg_q_to_float(int v) { return (float)v; }
inline float mg_q_mul(float a, float b) { return a * b; }  // built with -ffp-contract=off
inline float mg_q_add(float a, float b) { return a + b; }
#else
#define MG_QTABLE static __device__ const
__device__ __forceinline__ int mg_dp4a(int a, int b, int c) {
#if __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#else  // before sm_61: the same sum, byte by byte
    for (int i = 0; i < 4; ++i) c += (int)(signed char)((unsigned)a >> (8 * i)) *
                                     (int)(signed char)((unsigned)b >> (8 * i));
    return c;
#endif
}
__device__ __forceinline__ float mg_q_to_float(int v) { return __int2float_rn(v); }
__device__ __forceinline__ float mg_q_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float mg_q_add(float a, float b) { return __fadd_rn(a, b); }
#endif

// storage codes of the parameter blocks (mgegraph/cuda/kernels/quantized.py CODES)
#define MG_Q_INT8 0
#define MG_Q_UINT8 1
#define MG_Q_INT32 2
#define MG_Q_ONES 0x01010101
#define MG_Q_CHUNK 16384  // dp4a words per int32 partial sum: 16384 * 4 * 128 * 128 = 2^30

// a stored 8-bit value as the int8 dp4a reads (uint8: q - 128, as a byte q ^ 0x80)
__device__ __forceinline__ unsigned mg_q_load(const unsigned char* p, mg_q64 i, unsigned flip) {
    return p[i] ^ flip;
}

// The three sums of one output, fed four bytes at a time (the last word partly).
struct MgQSums {
    mg_q64 xw, x, w;  // S_xw, S_x, S_w
    int pxw, px, pw;  // the int32 partial sums of the current chunk
    int words;
    unsigned xword, wword;
    int filled;       // bytes of the words being packed
};

__device__ __forceinline__ void mg_q_start(MgQSums& s) {
    s.xw = s.x = s.w = 0;
    s.pxw = s.px = s.pw = 0;
    s.words = s.filled = 0;
    s.xword = s.wword = 0u;
}

__device__ __forceinline__ void mg_q_word(MgQSums& s, unsigned xw, unsigned ww) {
    s.pxw = mg_dp4a((int)xw, (int)ww, s.pxw);
    s.px = mg_dp4a((int)xw, MG_Q_ONES, s.px);
    s.pw = mg_dp4a((int)ww, MG_Q_ONES, s.pw);
    if (++s.words == MG_Q_CHUNK) {
        s.xw += s.pxw, s.x += s.px, s.w += s.pw;
        s.pxw = s.px = s.pw = 0;
        s.words = 0;
    }
}

// one (x', w') byte pair, already shifted to int8
__device__ __forceinline__ void mg_q_pair(MgQSums& s, unsigned xb, unsigned wb) {
    s.xword |= (xb & 0xFFu) << (8 * s.filled);
    s.wword |= (wb & 0xFFu) << (8 * s.filled);
    if (++s.filled == 4) {
        mg_q_word(s, s.xword, s.wword);
        s.xword = s.wword = 0u;
        s.filled = 0;
    }
}

// the centred sum of K pairs (the unfilled bytes of the last word are zeros: they add nothing)
__device__ __forceinline__ mg_q64 mg_q_finish(MgQSums& s, mg_q64 k, int zx, int zw) {
    if (s.filled) mg_q_word(s, s.xword, s.wword);
    s.xw += s.pxw, s.x += s.px, s.w += s.pw;
    return s.xw - (mg_q64)zw * s.x - (mg_q64)zx * s.w + k * (mg_q64)zx * (mg_q64)zw;
}

// The fields the epilogue reads (after each op's geometry in its ints).
struct MgQOut {
    int out_code, zy;
    float lo, hi;  // the (relu-narrowed) storage range, less zy
};

__device__ __forceinline__ MgQOut mg_q_out(const MgArgs& a, int at) {
    MgQOut o;
    o.out_code = (int)a.ints[at];
    o.zy = (int)a.ints[at + 1];
    o.lo = (float)(a.ints[at + 2] - a.ints[at + 1]);
    o.hi = (float)(a.ints[at + 3] - a.ints[at + 1]);
    return o;
}

// clamp(rint(v) + zy, lo, hi) as clamp(rint(v), lo - zy, hi - zy) + zy: the bounds are
// integers, so clamping before or after rint is the same, and +-inf saturates
__device__ __forceinline__ int mg_q_round(float v, const MgQOut& o) {
    v = rintf(v);  // halves to even
    v = v < o.lo ? o.lo : (v > o.hi ? o.hi : v);
    return (int)v + o.zy;
}

__device__ __forceinline__ void mg_q_store(char* y, mg_q64 i, int q, int code) {
    if (code == MG_Q_INT8) ((signed char*)y)[i] = (signed char)q;
    else ((unsigned char*)y)[i] = (unsigned char)q;
}

// acc (+ bias[o]) saturated to int32, then stored as the accumulator or requantised by m[o]
__device__ __forceinline__ void mg_q_epilogue(char* y, mg_q64 i, mg_q64 acc, const int* bias,
                                              int o, const float* m, const MgQOut& out) {
    if (bias != nullptr) acc += bias[o];
    acc = acc < -2147483648LL ? -2147483648LL : (acc > 2147483647LL ? 2147483647LL : acc);
    if (out.out_code == MG_Q_INT32) {
        ((int*)y)[i] = (int)acc;
        return;
    }
    mg_q_store(y, i, mg_q_round(mg_q_mul(mg_q_to_float((int)acc), m[o]), out), out.out_code);
}

// -- quantized_conv2d ------------------------------------------------------------------------
// ints: [batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups, has_bias,
//        x_code, w_code, zx', out_code, zy, lo, hi] (kernels/quantized.py CONV_FIELDS);
// zx' and the table's zw'[o] are the zero points of the shifted values (uint8: less 128)
// bufs: x, w, [bias], y. One thread per output element, grid-stride.
__device__ void mg_qconv2d(const MgArgs& a, const float* m, const int* zw_of) {
    const mg_q64 n = a.ints[0], cin = a.ints[1], h = a.ints[2], wd = a.ints[3];
    const mg_q64 cout = a.ints[4], oh = a.ints[5], ow = a.ints[6], kh = a.ints[7];
    const mg_q64 kw = a.ints[8], sh = a.ints[9], sw = a.ints[10], ph = a.ints[11];
    const mg_q64 pw = a.ints[12], dh = a.ints[13], dw = a.ints[14], groups = a.ints[15];
    const bool has_bias = a.ints[16] != 0;
    const unsigned xflip = a.ints[17] == MG_Q_UINT8 ? 0x80u : 0u;
    const unsigned wflip = a.ints[18] == MG_Q_UINT8 ? 0x80u : 0u;
    const int zx = (int)a.ints[19];  // zx', the zero point of the shifted values
    const MgQOut out = mg_q_out(a, 20);
    const unsigned char* x = (const unsigned char*)a.bufs[0];
    const unsigned char* w = (const unsigned char*)a.bufs[1];
    const int* bias = has_bias ? (const int*)a.bufs[2] : nullptr;
    char* y = a.bufs[has_bias ? 3 : 2];
    const mg_q64 cg = cin / groups, og = cout / groups, k = cg * kh * kw;
    const unsigned pad = ((unsigned)zx & 0xFFu);
    const mg_q64 total = n * cout * oh * ow;
    for (mg_q64 i = (mg_q64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (mg_q64)gridDim.x * blockDim.x) {
        const mg_q64 ox = i % ow, oy = (i / ow) % oh, o = (i / (ow * oh)) % cout;
        const mg_q64 b = i / (ow * oh * cout);
        const unsigned char* xg = x + (b * cin + (o / og) * cg) * h * wd;
        const unsigned char* wo = w + o * k;
        MgQSums s;
        mg_q_start(s);
        mg_q64 t = 0;
        for (mg_q64 c = 0; c < cg; ++c) {
            for (mg_q64 r = 0; r < kh; ++r) {
                const mg_q64 iy = oy * sh - ph + r * dh;
                for (mg_q64 q = 0; q < kw; ++q, ++t) {
                    const mg_q64 ix = ox * sw - pw + q * dw;
                    const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < wd;
                    mg_q_pair(s, inside ? mg_q_load(xg, (c * h + iy) * wd + ix, xflip) : pad,
                              mg_q_load(wo, t, wflip));
                }
            }
        }
        const int zw = zw_of[o];
        mg_q_epilogue(y, i, mg_q_finish(s, k, zx, zw), bias, (int)o, m, out);
    }
}

// -- quantized_linear ------------------------------------------------------------------------
// ints: [rows, k, n, has_bias, x_code, w_code, zx', out_code, zy, lo, hi] (LINEAR_FIELDS)
// bufs: x (rows, k), w (n, k), [bias], y (rows, n). One thread per output element; rows of x
// and w are read a word at a time where k is a multiple of 4 and both buffers are aligned.
__device__ void mg_qlinear(const MgArgs& a, const float* m, const int* zw_of) {
    const mg_q64 rows = a.ints[0], k = a.ints[1], n = a.ints[2];
    const bool has_bias = a.ints[3] != 0;
    const unsigned xflip = a.ints[4] == MG_Q_UINT8 ? 0x80u : 0u;
    const unsigned wflip = a.ints[5] == MG_Q_UINT8 ? 0x80u : 0u;
    const int zx = (int)a.ints[6];
    const MgQOut out = mg_q_out(a, 7);
    const unsigned char* x = (const unsigned char*)a.bufs[0];
    const unsigned char* w = (const unsigned char*)a.bufs[1];
    const int* bias = has_bias ? (const int*)a.bufs[2] : nullptr;
    char* y = a.bufs[has_bias ? 3 : 2];
    const bool words = k % 4 == 0 && ((unsigned long long)x & 3) == 0 &&
                       ((unsigned long long)w & 3) == 0;
    const unsigned xflips = xflip * MG_Q_ONES, wflips = wflip * MG_Q_ONES;
    for (mg_q64 i = (mg_q64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * n;
         i += (mg_q64)gridDim.x * blockDim.x) {
        const mg_q64 o = i % n;
        const unsigned char* xr = x + (i / n) * k;
        const unsigned char* wr = w + o * k;
        MgQSums s;
        mg_q_start(s);
        if (words) {
            for (mg_q64 t = 0; t < k / 4; ++t)
                mg_q_word(s, ((const unsigned*)xr)[t] ^ xflips, ((const unsigned*)wr)[t] ^ wflips);
        } else {
            for (mg_q64 t = 0; t < k; ++t)
                mg_q_pair(s, mg_q_load(xr, t, xflip), mg_q_load(wr, t, wflip));
        }
        mg_q_epilogue(y, i, mg_q_finish(s, k, zx, zw_of[o]), bias, (int)o, m, out);
    }
}
