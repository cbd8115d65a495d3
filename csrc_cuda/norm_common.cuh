// What the norm kernels share (norm.cu: layer and batch norm; group_norm.cu): roundings
// that match the CPU bit for bit, the loop over groups of threads, and a run's statistics.
#pragma once
#include "mg_abi.cuh"
#include "reduce_block.cuh"

// Roundings as written, never fused into an FMA (the CPU's kernels are built without FP
// contraction), so the elementwise steps agree with them bit for bit.
#ifdef __CUDACC__
__device__ __forceinline__ float mg_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mg_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float mg_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double mg_add(double a, double b) { return __dadd_rn(a, b); }
#else  // the host emulation, built with -ffp-contract=off
template <class T> inline T mg_mul(T a, T b) { return a * b; }
template <class T> inline T mg_add(T a, T b) { return a + b; }
#endif

#define MG_FOR_GROUPS(count)                                                                  \
    for (i64 grp = (i64)blockIdx.x * blockDim.y + threadIdx.y; grp < (count);                \
         grp += (i64)gridDim.x * blockDim.y)

// mean and 1 / sqrt(var + eps) of a run of n (a row, a group), two-pass, in double
template <class T>
__device__ void row_stats(const T* x, i64 n, double eps, double* smem, double* mean,
                          double* rstd) {
    double s = 0;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) s += (double)x[j];
    const double mu = mg_group_reduce(s, MgSum(), smem) / (double)n;
    double q = 0;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
        const double d = (double)x[j] - mu;
        q += d * d;
    }
    *mean = mu;
    *rstd = 1 / sqrt(mg_group_reduce(q, MgSum(), smem) / (double)n + eps);
}
