// What the norm kernels share (norm.cu: layer and batch norm; group_norm.cu): roundings
// that match the CPU bit for bit, the loop over groups of threads, and a run's statistics.
#pragma once
#include "mg_abi.cuh"
#include "reduce_block.cuh"
#include "rounded.cuh"  // mg_mul, mg_add: roundings as written, never fused into an FMA

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
