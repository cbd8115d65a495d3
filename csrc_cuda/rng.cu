// The random draws (mgegraph/ops/random.py): rng_uniform, rng_gamma, rng_poisson, with the CPU's
// samplers (rng_sample.h, a link to mgegraph/_kernels/rng_sample.h), so a GPU draws the CPU's
// numbers: element i depends on (seed, step, i) only.
//
// Parameters: the CPU's (mgegraph/_kernels/rng.pyx, packed by kernel_abi/random.py): ints
// [size, seed]; buffers: rng_uniform step, out; rng_gamma alpha, step, out; rng_poisson lam,
// step, out. A thread per element (grid-stride), no shared memory: it runs in the host
// emulation too. A gamma alpha <= 0 or a Poisson lam < 0 (or NaN) fails the run with the CPU's
// code (MG_STATUS_BAD_VALUE). On a device, log, exp and lgamma may differ from the host's libm
// in the last place, so a rejection sampler may rarely take another try than the CPU's.
#include "mg_abi.cuh"
#include "rng_sample.h"

typedef long long i64;

__device__ __forceinline__ uint64_t draw_key(const MgArgs& a, int step_buf) {
    return mg_rng_key((uint64_t)a.ints[1], ((const i64*)a.bufs[step_buf])[0]);
}

__device__ void rng_uniform_f32(const MgArgs& a) {
    const uint64_t key = draw_key(a, 0);
    float* out = (float*)a.bufs[1];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.ints[0];
         i += (i64)gridDim.x * blockDim.x)
        out[i] = mg_rng_u24(key, (uint64_t)i);
}

__device__ void rng_uniform_f64(const MgArgs& a) {
    const uint64_t key = draw_key(a, 0);
    double* out = (double*)a.bufs[1];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.ints[0];
         i += (i64)gridDim.x * blockDim.x)
        out[i] = mg_rng_u53(key, (uint64_t)i, 0);
}

template <class T, bool GAMMA> __device__ void parametrised(const MgArgs& a) {
    const uint64_t key = draw_key(a, 1);
    const T* param = (const T*)a.bufs[0];
    T* out = (T*)a.bufs[2];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.ints[0];
         i += (i64)gridDim.x * blockDim.x) {
        const double p = param[i];
        if (GAMMA ? !(p > 0) : !(p >= 0)) {
            mg_fail(a, MG_STATUS_BAD_VALUE);
            return;
        }
        out[i] = (T)(GAMMA ? mg_rng_gamma(key, (uint64_t)i, p) : mg_rng_poisson(key, (uint64_t)i, p));
    }
}

extern "C" __global__ void mg_rng_uniform_f32(const MgArgs a) { rng_uniform_f32(a); }
extern "C" __global__ void mg_rng_uniform_f64(const MgArgs a) { rng_uniform_f64(a); }
extern "C" __global__ void mg_rng_gamma_f32(const MgArgs a) { parametrised<float, true>(a); }
extern "C" __global__ void mg_rng_gamma_f64(const MgArgs a) { parametrised<double, true>(a); }
extern "C" __global__ void mg_rng_poisson_f32(const MgArgs a) { parametrised<float, false>(a); }
extern "C" __global__ void mg_rng_poisson_f64(const MgArgs a) { parametrised<double, false>(a); }
