// Cooperative reductions the hand-written kernels share: a warp's through shuffles, then a
// block's through one word of shared memory per warp.
//
// Design: a "group" is blockDim.x threads reducing one value together (a warp, or the whole
// block when blockDim.x > 32, in which case blockDim.y is 1); a block holds blockDim.y groups.
// Every thread of a group must call the group functions (they hold barriers when the group is a
// block), and blockDim.x is 1 (a thread per value: nothing to combine) or a multiple of 32.
#pragma once

#define MG_FULL_MASK 0xffffffffu

#include "movement_index.cuh"  // i64, u64, mg_div, mg_mod, mg_offset

// NVRTC has no <math.h> macros: the quiet NaN and infinity of double (exact in float too)
#define MG_NAN __longlong_as_double(0x7ff8000000000000ll)
#define MG_INF __longlong_as_double(0x7ff0000000000000ll)

__device__ __forceinline__ double mg_shfl(double v, int lane_mask) {
    return __shfl_xor_sync(MG_FULL_MASK, v, lane_mask);
}
__device__ __forceinline__ float mg_shfl(float v, int lane_mask) {
    return __shfl_xor_sync(MG_FULL_MASK, v, lane_mask);
}
__device__ __forceinline__ int mg_shfl(int v, int lane_mask) {
    return __shfl_xor_sync(MG_FULL_MASK, v, lane_mask);
}
__device__ __forceinline__ i64 mg_shfl(i64 v, int lane_mask) {
    return __shfl_xor_sync(MG_FULL_MASK, v, lane_mask);
}
__device__ __forceinline__ u64 mg_shfl(u64 v, int lane_mask) {
    return __shfl_xor_sync(MG_FULL_MASK, v, lane_mask);
}
__device__ __forceinline__ unsigned char mg_shfl(unsigned char v, int lane_mask) {
    return (unsigned char)__shfl_xor_sync(MG_FULL_MASK, (int)v, lane_mask);
}

// Op: a functor with `V operator()(V, V)` (associative; commutative up to rounding) and a
// `static V shfl(V, int)` moving one V across lanes.
template <class V, class Op>
__device__ __forceinline__ V mg_warp_reduce(V v, Op op) {
    for (int m = 16; m > 0; m >>= 1) v = op(v, Op::shfl(v, m));
    return v;
}

// The group's value on every thread of the group. `smem` holds 32 V (one per warp).
template <class V, class Op>
__device__ V mg_group_reduce(V v, Op op, V* smem) {
    if (blockDim.x == 1) return v;
    v = mg_warp_reduce(v, op);
    if (blockDim.x <= 32) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (int)(blockDim.x >> 5);
    __syncthreads();  // smem may still be read by a previous call
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    // Every thread combines the warps in order 0..warps-1: a fixed order, so every thread of
    // the group holds the same bits.
    V r = smem[0];
    for (int w = 1; w < warps; ++w) r = op(r, smem[w]);
    return r;
}

struct MgSum {
    __device__ double operator()(double a, double b) const { return a + b; }
    __device__ static double shfl(double v, int m) { return mg_shfl(v, m); }
};

struct MgMaxF {  // NaN never wins: NaNs reach the result through the caller's arithmetic
    __device__ double operator()(double a, double b) const { return b > a ? b : a; }
    __device__ static double shfl(double v, int m) { return mg_shfl(v, m); }
};
