// quantize and dequantize (mgegraph/ops/quantize.py): between real numbers and the integers of
// a quantized type, q standing for scale * (q - zero_point).
//
// Parameters: the CPU's (mgegraph/_kernels/quantize.pyx, packed by kernel_abi/quantize.py),
// ints [outer, channels, inner, code, threads] (threads is the CPU's), floats [the scales, then
// the zero points]; buffers: the input, then the output. code names quantize's integer dtype
// (0 int8, 1 uint8, 2 int32) or dequantize's float one (0 float32, 1 float64).
//
// Semantics are the CPU kernel's, bit for bit: x / scale in x's dtype, rint (halves to even),
// the zero point added and the result saturated in double; a NaN fails the run with
// NOT_A_NUMBER. dequantize multiplies in its result's dtype. A grid-stride loop over elements.
// MgArgs holds 8 floats, so the CUDA lowering takes per-channel parameters of 4 channels at
// most (mgegraph/cuda/kernels/quantize.py says so at compile time).
#include "mg_abi.cuh"

typedef long long i64;

template <class T> __device__ void quantize(const MgArgs& a) {
    const i64 channels = a.ints[1], inner = a.ints[2], code = a.ints[3];
    const i64 n = a.ints[0] * channels * inner;
    const T* x = (const T*)a.bufs[0];
    const double lo = code == 0 ? -128.0 : (code == 1 ? 0.0 : -2147483648.0);
    const double hi = code == 0 ? 127.0 : (code == 1 ? 255.0 : 2147483647.0);
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 ch = (i / inner) % channels;
        double v = (double)(x[i] / (T)a.floats[ch]);
        if (v != v) {
            mg_fail(a, MG_STATUS_NOT_A_NUMBER);
            return;
        }
        v = rint(v) + a.floats[channels + ch];
        v = v < lo ? lo : (v > hi ? hi : v);
        if (code == 0) ((signed char*)a.bufs[1])[i] = (signed char)v;
        else if (code == 1) ((unsigned char*)a.bufs[1])[i] = (unsigned char)v;
        else ((int*)a.bufs[1])[i] = (int)v;
    }
}

template <class Q> __device__ void dequantize(const MgArgs& a) {
    const i64 channels = a.ints[1], inner = a.ints[2], code = a.ints[3];
    const i64 n = a.ints[0] * channels * inner;
    const Q* q = (const Q*)a.bufs[0];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 ch = (i / inner) % channels;
        const double centred = (double)q[i] - a.floats[channels + ch];
        if (code == 0) ((float*)a.bufs[1])[i] = (float)centred * (float)a.floats[ch];
        else ((double*)a.bufs[1])[i] = centred * a.floats[ch];
    }
}

extern "C" __global__ void mg_quantize_f32(const MgArgs a) { quantize<float>(a); }
extern "C" __global__ void mg_quantize_f64(const MgArgs a) { quantize<double>(a); }
extern "C" __global__ void mg_dequantize_i8(const MgArgs a) { dequantize<signed char>(a); }
extern "C" __global__ void mg_dequantize_u8(const MgArgs a) { dequantize<unsigned char>(a); }
extern "C" __global__ void mg_dequantize_i32(const MgArgs a) { dequantize<int>(a); }
