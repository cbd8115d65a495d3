// The int8 compute ops (mgegraph/ops/quantized.py): int32 accumulation through __dp4a and the
// requantisation epilogue, shared by the rendered conv, linear, transposed conv and batched
// matmul kernels (mgegraph/cuda/kernels/quantized.py) and csrc_cuda/quantized.cu
// (quantized_add).
//
// Design: dp4a multiplies four signed bytes by four signed bytes. A uint8 value q becomes the
// int8 q - 128 (its byte XOR 0x80) with its zero point moved by 128 too, so every mix of int8
// and uint8 inputs runs the one signed instruction. The sums are of the shifted values x', w'
// as stored; the zero points come out afterwards, exactly in integers:
//   sum (x' - zx')(w' - zw') = S_xw - zw' S_x - zx' S_w + K zx' zw'
// (a padded position holds zx': it adds nothing to the centred sum). dp4a sums in int32;
// every MG_Q_CHUNK words the partial sums move to int64, so no length of K can wrap them (the
// op's rule keeps the centred sum inside int32), and the bias is added modulo 2^32, as the
// NumPy reference and the CPU's int32 accumulators add it.
//
// The per-channel constants (the multipliers m[o] = float32(sx) * float32(sw[o]) / float32(sy)
// and the weight zero points zw'[o], already shifted) are tables the renderer bakes into each
// instruction's kernel text (MG_QTABLE): MgArgs holds 8 floats, a layer has thousands of
// channels. Free of shared memory and warp functions, so host emulation builds it.
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

// storage codes of the parameter blocks (mgegraph/kernel_abi/quantized.py CODES)
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

// The epilogue's numbers: the output's code and zero point, its (relu-narrowed) range less zy.
struct MgQOut {
    int out_code, zy;
    float lo, hi;
};

__device__ __forceinline__ MgQOut mg_q_out(long long code, long long zy, long long lo,
                                           long long hi) {
    return MgQOut{(int)code, (int)zy, (float)(lo - zy), (float)(hi - zy)};
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

// acc (+ bias[o]) modulo 2^32, then stored as the accumulator or requantised by m[o]
__device__ __forceinline__ void mg_q_epilogue(char* y, mg_q64 i, mg_q64 acc, const int* bias,
                                              int o, const float* m, const MgQOut& out) {
    if (bias != nullptr) acc += bias[o];
    acc = (long long)(int)(unsigned int)(unsigned long long)acc;
    if (out.out_code == MG_Q_INT32) {
        ((int*)y)[i] = (int)acc;
        return;
    }
    mg_q_store(y, i, mg_q_round(mg_q_mul(mg_q_to_float((int)acc), m[o]), out), out.out_code);
}

// The operands of a rendered kernel as its loop reads them: the activation x and the weight w
// (their bytes XOR the flips are the int8 dp4a reads), zx' (x's zero point, shifted too), the
// bias or null, the output and its epilogue's numbers. bufs: x and w in the order x_buf says
// (0: x first), then [bias], y.
struct MgQOperands {
    const unsigned char *x, *w;
    unsigned xflip, wflip;
    int zx;
    const int* bias;
    char* y;
    MgQOut out;
};

__device__ __forceinline__ MgQOperands mg_q_operands(const MgArgs& a, int x_buf, int x_code,
                                                     long long w_code, long long x_zero,
                                                     long long has_bias, const MgQOut& out) {
    MgQOperands p;
    p.x = (const unsigned char*)a.bufs[x_buf];
    p.w = (const unsigned char*)a.bufs[1 - x_buf];
    p.xflip = x_code == MG_Q_UINT8 ? 0x80u : 0u;
    p.wflip = w_code == MG_Q_UINT8 ? 0x80u : 0u;
    p.zx = (int)x_zero - (p.xflip ? 128 : 0);
    p.bias = has_bias ? (const int*)a.bufs[2] : nullptr;
    p.y = a.bufs[has_bias ? 3 : 2];
    p.out = out;
    return p;
}

// a convolution's operands (conv2d's block, which the transposed convolution reads too)
__device__ __forceinline__ MgQOperands mg_q_conv_operands(const MgArgs& a, int x_code) {
    const long long* g = a.ints;
    return mg_q_operands(a, 0, x_code, g[16], g[18], g[22], mg_q_out(g[17], g[19], g[20], g[21]));
}

// the window sums of output (b, o, oy, ox) of a convolution, its taps gathered a byte at a time
__device__ __forceinline__ void mg_q_window(MgQSums& s, const unsigned char* xg,
                                            const unsigned char* wo, const long long* g,
                                            mg_q64 oy, mg_q64 ox, unsigned xflip,
                                            unsigned wflip, unsigned pad) {
    const mg_q64 cg = g[1] / g[15], h = g[2], wd = g[3], kh = g[5], kw = g[6];
    mg_q64 t = 0;
    for (mg_q64 c = 0; c < cg; ++c) {
        for (mg_q64 r = 0; r < kh; ++r) {
            const mg_q64 iy = oy * g[9] - g[11] + r * g[13];
            for (mg_q64 q = 0; q < kw; ++q, ++t) {
                const mg_q64 ix = ox * g[10] - g[12] + q * g[14];
                const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < wd;
                mg_q_pair(s, inside ? mg_q_load(xg, (c * h + iy) * wd + ix, xflip) : pad,
                          mg_q_load(wo, t, wflip));
            }
        }
    }
}

// the sums of k contiguous pairs (a 1x1 window over a 1x1 image: a linear layer's row), a
// word at a time where both rows are 4-byte aligned
__device__ __forceinline__ void mg_q_rows(MgQSums& s, const unsigned char* xr,
                                          const unsigned char* wr, mg_q64 k, unsigned xflip,
                                          unsigned wflip) {
    if (k % 4 == 0 && (((unsigned long long)xr | (unsigned long long)wr) & 3) == 0) {
        const unsigned xflips = xflip * MG_Q_ONES, wflips = wflip * MG_Q_ONES;
        for (mg_q64 t = 0; t < k / 4; ++t)
            mg_q_word(s, ((const unsigned*)xr)[t] ^ xflips, ((const unsigned*)wr)[t] ^ wflips);
    } else {
        for (mg_q64 t = 0; t < k; ++t)
            mg_q_pair(s, mg_q_load(xr, t, xflip), mg_q_load(wr, t, wflip));
    }
}

// -- quantized_conv2d and quantized_linear (a 1x1 convolution of x as (rows, in, 1, 1)) -------
// ints: the CPU's block (mgegraph/kernel_abi/quantized.py; a test compares the names):
// [batch, channels, height, width, out_channels, kernel_h, kernel_w, out_h, out_w, stride_h,
//  stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, w_code, out_code, x_zero, out_zero,
//  low, high, has_bias, threads]
// (threads is the CPU's). bufs: x, w, [bias], y. x_code comes from the rendered entry (the
// kernel is dispatched by x's dtype), m and zw' (the weight zero points as the shifted values'
// zero points) are its tables. One thread per output element, grid-stride.
__device__ void mg_qconv2d(const MgArgs& a, const float* m, const int* zw_of, int x_code) {
    const long long* g = a.ints;
    const mg_q64 n = g[0], cin = g[1], h = g[2], wd = g[3], cout = g[4];
    const mg_q64 kh = g[5], kw = g[6], oh = g[7], ow = g[8], groups = g[15];
    const MgQOperands p = mg_q_conv_operands(a, x_code);
    const mg_q64 cg = cin / groups, og = cout / groups, k = cg * kh * kw;
    const bool rows = h * wd * kh * kw == 1;  // every window is its channels' bytes in a row
    const mg_q64 total = n * cout * oh * ow;
    for (mg_q64 i = (mg_q64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (mg_q64)gridDim.x * blockDim.x) {
        const mg_q64 ox = i % ow, oy = (i / ow) % oh, o = (i / (ow * oh)) % cout;
        const mg_q64 b = i / (ow * oh * cout);
        const unsigned char* xg = p.x + (b * cin + (o / og) * cg) * h * wd;
        MgQSums s;
        mg_q_start(s);
        if (rows) mg_q_rows(s, xg, p.w + o * k, k, p.xflip, p.wflip);
        else mg_q_window(s, xg, p.w + o * k, g, oy, ox, p.xflip, p.wflip,
                         (unsigned)p.zx & 0xFFu);
        mg_q_epilogue(p.y, i, mg_q_finish(s, k, p.zx, zw_of[o]), p.bias, (int)o, m, p.out);
    }
}

// -- quantized_conv_transpose2d: the convolution's block (height and width the input's, out_h
// and out_w the output's, output_padding in them). bufs: x (batch, channels, height, width),
// w (channels, out_channels / groups, kernel_h, kernel_w), [bias], y. One thread per output.
//
// Design: a gather per output cell rather than the CPU's GEMM and col2im: each output reads the
// input cells its taps reach (oy = iy * stride_h - pad_h + r * dilation_h, likewise across), so
// one thread owns each sum: no atomics, no order to fix, and no workspace of int32 planes
// (out_channels * kernel_h * kernel_w * height * width per image), on mg_qconv2d's sums and
// epilogue. A tap that reaches no input cell is skipped, not fed the zero point, so an output
// of a stride-2 up-sampling sums a quarter of the kernel; K counts the pairs summed. The sums
// are exact and the bias and the rounding the epilogue's: the CPU's integers.

// the input row (or column) that tap r of output cell o reads along one axis, or -1: none
__device__ __forceinline__ mg_q64 mg_q_source(mg_q64 o, mg_q64 r, mg_q64 pad, mg_q64 stride,
                                              mg_q64 dilation, mg_q64 size) {
    const mg_q64 t = o + pad - r * dilation;
    if (t < 0 || t % stride != 0) return -1;
    return t / stride < size ? t / stride : -1;
}

__device__ void mg_qconv_transpose2d(const MgArgs& a, const float* m, const int* zw_of,
                                     int x_code) {
    const long long* g = a.ints;
    const mg_q64 n = g[0], cin = g[1], h = g[2], wd = g[3], cout = g[4];
    const mg_q64 kh = g[5], kw = g[6], oh = g[7], ow = g[8], groups = g[15];
    const MgQOperands p = mg_q_conv_operands(a, x_code);
    const mg_q64 cg = cin / groups, og = cout / groups, taps = kh * kw;
    const mg_q64 total = n * cout * oh * ow;
    for (mg_q64 i = (mg_q64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (mg_q64)gridDim.x * blockDim.x) {
        const mg_q64 ox = i % ow, oy = (i / ow) % oh, o = (i / (ow * oh)) % cout;
        const mg_q64 b = i / (ow * oh * cout), group = o / og;
        const unsigned char* xg = p.x + (b * cin + group * cg) * h * wd;
        // w[c, o % og] of the group's channels c: og * taps bytes apart
        const unsigned char* wo = p.w + (group * cg * og + o % og) * taps;
        MgQSums s;
        mg_q_start(s);
        mg_q64 reached = 0;
        for (mg_q64 r = 0; r < kh; ++r) {
            const mg_q64 iy = mg_q_source(oy, r, g[11], g[9], g[13], h);
            if (iy < 0) continue;
            for (mg_q64 q = 0; q < kw; ++q) {
                const mg_q64 ix = mg_q_source(ox, q, g[12], g[10], g[14], wd);
                if (ix < 0) continue;
                ++reached;
                for (mg_q64 c = 0; c < cg; ++c)
                    mg_q_pair(s, mg_q_load(xg, (c * h + iy) * wd + ix, p.xflip),
                              mg_q_load(wo, c * og * taps + r * kw + q, p.wflip));
            }
        }
        mg_q_epilogue(p.y, i, mg_q_finish(s, reached * cg, p.zx, zw_of[o]), p.bias, (int)o, m,
                      p.out);
    }
}

// -- quantized_batch_matmul: a (batch or 1, rows, depth) @ b (batch or 1, depth, cols) --------
// ints: the CPU's block (mgegraph/kernel_abi/quantized.py QBMM_FIELDS; a test compares):
// [batch, rows, depth, cols, a_batched, b_batched, a_code, out_code, b_zero, out_zero, low,
//  high, has_bias, threads]
// bufs: a, b, [bias], y (batch, rows, cols). a plays the weight: its rows' multipliers and
// shifted zero points are the rendered tables, as a convolution's output channels', and the
// bias is per row; b is the activation, b_code from the entry (the kernel is dispatched by b's
// dtype). One thread per output, grid-stride: neighbouring threads read neighbouring bytes of
// b's row and share a's row. A one-column b is read a word at a time, as a linear layer's x.
__device__ void mg_qbatch_matmul(const MgArgs& a, const float* m, const int* za_of,
                                 int b_code) {
    const long long* g = a.ints;
    const mg_q64 batch = g[0], rows = g[1], depth = g[2], cols = g[3];
    const mg_q64 a_batched = g[4] != 0, b_batched = g[5] != 0;
    // b is the activation: x of the operands
    const MgQOperands p = mg_q_operands(a, 1, b_code, g[6], g[8], g[12],
                                        mg_q_out(g[7], g[9], g[10], g[11]));
    const mg_q64 total = batch * rows * cols;
    for (mg_q64 i = (mg_q64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (mg_q64)gridDim.x * blockDim.x) {
        const mg_q64 col = i % cols, row = (i / cols) % rows, bi = i / (cols * rows);
        const unsigned char* ar = p.w + (bi * a_batched * rows + row) * depth;
        const unsigned char* bc = p.x + bi * b_batched * depth * cols + col;
        MgQSums s;
        mg_q_start(s);
        if (cols == 1) mg_q_rows(s, bc, ar, depth, p.xflip, p.wflip);
        else
            for (mg_q64 t = 0; t < depth; ++t)
                mg_q_pair(s, mg_q_load(bc, t * cols, p.xflip), mg_q_load(ar, t, p.wflip));
        mg_q_epilogue(p.y, i, mg_q_finish(s, depth, p.zx, za_of[row]), p.bias, (int)row, m,
                      p.out);
    }
}
