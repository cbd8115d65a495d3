// The arithmetic around NCCL in a device="cuda" plan's collectives (mgegraph/cuda/kernels/
// collective.py): the scale after the sum (1 / ranks for a mean) and the deterministic
// all-reduce's sum in rank order over the all-gathered values.
//
// Parameters: ints [count, ranks, ...] (collective.py's FIELDS), floats [scale]. Buffers, each
// step's own (Step.buffers): scale: x (in place); rank_sum: gathered (ranks * count), y.
//
// Design: both are the CPU's arithmetic (mgegraph/_kernels/collective.pyx), element by element:
// float32 x * (float)scale rounded once, float64 x * scale; ((x0 + x1) + x2) + ... in the
// dtype, so the deterministic all-reduce gives the CPU's bits. A thread per element, no shared
// memory: they run in the host emulation too.
#include "mg_abi.cuh"

typedef long long i64;

template <class T> __device__ void scale(const MgArgs& a) {
    const i64 n = a.ints[0];
    const T k = (T)a.floats[0];
    T* x = (T*)a.bufs[0];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x)
        x[i] = x[i] * k;
}

template <class T> __device__ void rank_sum(const MgArgs& a) {
    const i64 n = a.ints[0], ranks = a.ints[1];
    const T* gathered = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[1];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        T sum = gathered[i];
        for (i64 r = 1; r < ranks; ++r) sum = sum + gathered[r * n + i];
        y[i] = sum;
    }
}

extern "C" __global__ void mg_collective_scale_f32(const MgArgs a) { scale<float>(a); }
extern "C" __global__ void mg_collective_scale_f64(const MgArgs a) { scale<double>(a); }
extern "C" __global__ void mg_collective_rank_sum_f32(const MgArgs a) { rank_sum<float>(a); }
extern "C" __global__ void mg_collective_rank_sum_f64(const MgArgs a) { rank_sum<double>(a); }
extern "C" __global__ void mg_collective_rank_sum_i32(const MgArgs a) { rank_sum<int>(a); }
extern "C" __global__ void mg_collective_rank_sum_i64(const MgArgs a) { rank_sum<i64>(a); }
