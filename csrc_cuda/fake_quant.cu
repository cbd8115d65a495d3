// fake_quant (mgegraph/ops/fake_quant.py): quantize and dequantize at once, in floats, for
// quantization-aware training: (clip(rint(x / s) + z, qmin, qmax) - z) * s.
//
// Parameters: the CPU's (mgegraph/_kernels/fake_quant.pyx, packed by kernel_abi/fake_quant.py),
// ints [outer, channels, inner, qmin, qmax, threads] (threads is the CPU's); buffers: x, the
// scales, the zero points (one of each per channel), the output.
//
// Semantics are the CPU kernel's, bit for bit: x / scale in x's dtype, rint (halves to even),
// the zero point added and the result clamped in double, then (q - z) times the scale in x's
// dtype; a NaN stays NaN; a scale that is not positive and finite fails the run with BAD_VALUE.
// A grid-stride loop over the elements.
#include "mg_abi.cuh"

typedef long long i64;

template <class T> __device__ void fake_quant(const MgArgs& a) {
    const i64 channels = a.ints[1], inner = a.ints[2];
    const i64 n = a.ints[0] * channels * inner;
    const double lo = (double)a.ints[3], hi = (double)a.ints[4];
    const T* x = (const T*)a.bufs[0];
    const T* scales = (const T*)a.bufs[1];
    const T* zps = (const T*)a.bufs[2];
    T* y = (T*)a.bufs[3];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 ch = (i / inner) % channels;
        const T scale = scales[ch];
        if (!(scale > (T)0 && scale - scale == (T)0)) {  // positive and finite
            mg_fail(a, MG_STATUS_BAD_VALUE);
            return;
        }
        const double zp = (double)zps[ch];
        double v = rint((double)(x[i] / scale)) + zp;
        v = v < lo ? lo : (v > hi ? hi : v);
        y[i] = (T)(v - zp) * scale;
    }
}

extern "C" __global__ void mg_fake_quant_f32(const MgArgs a) { fake_quant<float>(a); }
extern "C" __global__ void mg_fake_quant_f64(const MgArgs a) { fake_quant<double>(a); }
