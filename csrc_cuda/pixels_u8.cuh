// uint8 pixels of the resampling kernels (resize.cu, vision_sample.cuh): the twin of
// mgegraph/_kernels/pixels.pxd. A uint8 result is computed in double like a float one, then
// stored by mg_round_u8: nearest, ties to even (rint in the default rounding mode), saturated
// to [0, 255]; NaN (a remap point that is not finite) gives 0.
#pragma once

typedef unsigned char u8;

__device__ __forceinline__ u8 mg_round_u8(double v) {
    if (!(v > 0)) return 0;
    if (v >= 255) return 255;
    return (u8)rint(v);
}

// A resampled value stored as pixel type T
template <class T> __device__ __forceinline__ T mg_pixel(double v) { return (T)v; }
template <> __device__ __forceinline__ u8 mg_pixel<u8>(double v) { return mg_round_u8(v); }
