// Products and sums rounded as written, never fused into an FMA (the CPU's kernels are built
// without FP contraction, NVRTC contracts by default), for hand-written kernels that give the
// CPU's bits. Free of shared memory and warp functions, so host emulation builds it.
// (norm_common.cuh and sorting.cu keep their own copies of the same roundings.)
#pragma once

#ifdef __CUDACC__
__device__ __forceinline__ float mg_rn_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mg_rn_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float mg_rn_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double mg_rn_add(double a, double b) { return __dadd_rn(a, b); }
#else  // the host emulation, built with -ffp-contract=off
template <class T> inline T mg_rn_mul(T a, T b) { return a * b; }
template <class T> inline T mg_rn_add(T a, T b) { return a + b; }
#endif
