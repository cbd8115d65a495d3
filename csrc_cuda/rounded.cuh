// Products and sums rounded as written, never fused into an FMA (the CPU's kernels are built
// without FP contraction, NVRTC contracts by default), for hand-written kernels that give the
// CPU's bits. Free of shared memory and warp functions, so host emulation builds it.
// (sorting.cu's scans keep their own: a template over the integer types too.)
#pragma once

#ifdef __CUDACC__
__device__ __forceinline__ float mg_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mg_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float mg_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double mg_add(double a, double b) { return __dadd_rn(a, b); }
#else  // the host emulation, built with -ffp-contract=off
template <class T> inline T mg_mul(T a, T b) { return a * b; }
template <class T> inline T mg_add(T a, T b) { return a + b; }
#endif
