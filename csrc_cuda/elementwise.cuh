// The loops of the elementwise kernels the CUDA backend renders from the elementwise table
// (mgegraph/cuda/render.py): unary, binary with broadcasting, comparisons, where and casts.
//
// Parameters: the CPU's (mgegraph/_kernels/elementwise.pyx, packed by
// mgegraph/_kernels/lowering/elementwise.py), read here as they are:
//   ints = [opcode, ndim, shape[ndim], strides of input 0 [ndim], strides of input 1 ...]
// strides in elements, 0 on broadcast dimensions, dimensions already merged where every
// operand steps evenly; the output is contiguous. floats: a unary op's parameters.
//
// Design: a kernel per (op, dtype), each a grid-stride loop over the flat output. When the
// layout collapsed to one dimension with unit strides (every contiguous, same-shape operand),
// the loop reads and writes 16 bytes per access (ld.global.v4.f32 for float32) where the
// pointers are aligned, a scalar tail after; a stride-0 operand (a broadcast scalar) is read
// once. Other layouts map each flat index to every input's offset through the strides.
#pragma once
#include "half.h"
#include "mg_abi.cuh"
#include "scalar.cuh"

typedef unsigned char mg_bool;  // NumPy's bool: one byte, 0 or 1
// the small integers; uint8 is mg_bool's type, so the two share comparisons and where (a byte
// compares alike) and differ in casts only (MgCastSmall)
typedef unsigned char mg_u8;
typedef signed char mg_i8;
typedef short mg_i16;
// the half types: storage only (half.h has the CPU's exact conversions); a struct each, so a
// cast's overloads tell float16 from bfloat16, and where and assign move them as 2-byte values
struct mg_f16 { unsigned short bits; };
struct mg_bf16 { unsigned short bits; };
MG_HD float mg_widen(mg_f16 h) { return mg_f16_to_float(h.bits); }
MG_HD float mg_widen(mg_bf16 h) { return mg_bf16_to_float(h.bits); }

template <class T> struct alignas(16) MgPack { T v[16 / sizeof(T)]; };

MG_HD bool mg_aligned16(const void* p) { return ((mg_u64)p & 15) == 0; }

MG_HD mg_i64 mg_ew_size(const MgArgs& a) {
    mg_i64 n = 1;
    for (int d = 0; d < (int)a.ints[1]; ++d) n *= a.ints[2 + d];
    return n;
}

// The offset in input k of the output's flat index i (the CPU's odometer, as a division chain),
// in the index type I: unsigned for outputs below 2^31 elements (every offset is below its
// input's size, at most the output's), since a 64-bit division is a long sequence on a GPU
template <class I>
__device__ __noinline__ I mg_ew_offset(const MgArgs& a, int k, I i) {
    const int ndim = (int)a.ints[1];
    const long long* shape = a.ints + 2;
    const long long* strides = a.ints + 2 + ndim * (k + 1);
    I off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        const I size = (I)shape[d];
        off += (i % size) * (I)strides[d];
        i /= size;
    }
    return off;
}

MG_HD mg_i64 mg_ew_at(const MgArgs& a, int k, mg_i64 i, mg_i64 n) {
    return n < (1LL << 31) ? (mg_i64)mg_ew_offset<unsigned>(a, k, (unsigned)i)
                           : mg_ew_offset<mg_i64>(a, k, i);
}

// 1: contiguous, 0: one value broadcast, -1: neither (ndim > 1 or another stride)
MG_HD int mg_ew_kind(const MgArgs& a, int k) {
    if ((int)a.ints[1] != 1) return -1;
    const long long s = a.ints[2 + 1 + k];
    return s == 1 ? 1 : (s == 0 ? 0 : -1);
}

MG_HD mg_i64 mg_tid() { return (mg_i64)blockIdx.x * blockDim.x + threadIdx.x; }
MG_HD mg_i64 mg_nthreads() { return (mg_i64)gridDim.x * blockDim.x; }

template <class In, class Out, class F>
MG_HD void mg_map1(const MgArgs& a, F f) {
    const In* __restrict__ x = (const In*)a.bufs[0];
    Out* __restrict__ y = (Out*)a.bufs[1];
    const mg_i64 n = mg_ew_size(a), t0 = mg_tid(), step = mg_nthreads();
    const int kx = mg_ew_kind(a, 0);
    mg_i64 start = t0;
    if (kx == 1 && sizeof(In) == sizeof(Out) && mg_aligned16(x) && mg_aligned16(y)) {
        const int V = 16 / sizeof(In);
        const mg_i64 packs = n / V;
        for (mg_i64 i = t0; i < packs; i += step) {
            const MgPack<In> p = ((const MgPack<In>*)x)[i];
            MgPack<Out> q;
#pragma unroll
            for (int j = 0; j < V; ++j) q.v[j] = f(p.v[j]);
            ((MgPack<Out>*)y)[i] = q;
        }
        start = packs * V + t0;
    }
    for (mg_i64 i = start; i < n; i += step)
        y[i] = f(x[kx == 1 ? i : (kx == 0 ? 0 : mg_ew_at(a, 0, i, n))]);
}

template <class In, class Out, class F>
MG_HD void mg_map2(const MgArgs& a, F f) {
    const In* __restrict__ x = (const In*)a.bufs[0];
    const In* __restrict__ z = (const In*)a.bufs[1];
    Out* __restrict__ y = (Out*)a.bufs[2];
    const mg_i64 n = mg_ew_size(a), t0 = mg_tid(), step = mg_nthreads();
    const int kx = mg_ew_kind(a, 0), kz = mg_ew_kind(a, 1);
    mg_i64 start = t0;
    if (kx >= 0 && kz >= 0 && kx + kz > 0 && sizeof(In) == sizeof(Out)
        && mg_aligned16(x) && mg_aligned16(z) && mg_aligned16(y)) {
        const int V = 16 / sizeof(In);
        const mg_i64 packs = n / V;
        const In xs = kx == 0 ? x[0] : In(0), zs = kz == 0 ? z[0] : In(0);
        for (mg_i64 i = t0; i < packs; i += step) {
            MgPack<In> p, r;
            if (kx) p = ((const MgPack<In>*)x)[i];
            if (kz) r = ((const MgPack<In>*)z)[i];
            MgPack<Out> q;
#pragma unroll
            for (int j = 0; j < V; ++j) q.v[j] = f(kx ? p.v[j] : xs, kz ? r.v[j] : zs);
            ((MgPack<Out>*)y)[i] = q;
        }
        start = packs * V + t0;
    }
    for (mg_i64 i = start; i < n; i += step) {
        const mg_i64 ox = kx == 1 ? i : (kx == 0 ? 0 : mg_ew_at(a, 0, i, n));
        const mg_i64 oz = kz == 1 ? i : (kz == 0 ? 0 : mg_ew_at(a, 1, i, n));
        y[i] = f(x[ox], z[oz]);
    }
}

template <class T>
MG_HD void mg_where(const MgArgs& a) {
    const mg_bool* __restrict__ c = (const mg_bool*)a.bufs[0];
    const T* __restrict__ x = (const T*)a.bufs[1];
    const T* __restrict__ z = (const T*)a.bufs[2];
    T* __restrict__ y = (T*)a.bufs[3];
    const mg_i64 n = mg_ew_size(a), step = mg_nthreads();
    if (mg_ew_kind(a, 0) == 1 && mg_ew_kind(a, 1) == 1 && mg_ew_kind(a, 2) == 1) {
        for (mg_i64 i = mg_tid(); i < n; i += step) {
            const T u = x[i], v = z[i];
            y[i] = c[i] ? u : v;
        }
        return;
    }
    for (mg_i64 i = mg_tid(); i < n; i += step) {
        const T u = x[mg_ew_at(a, 1, i, n)], v = z[mg_ew_at(a, 2, i, n)];
        y[i] = c[mg_ew_at(a, 0, i, n)] ? u : v;  // both loaded: a select, no branch
    }
}

// A value converted as the CPU's cast kernel converts it
template <class Out> struct MgCast {
    template <class In> MG_HD static Out from(In v) { return (Out)v; }
};
template <> struct MgCast<mg_bool> {
    template <class In> MG_HD static mg_bool from(In v) { return v != 0; }
};
template <> struct MgCast<int> {
    MG_HD static int from(float v) { return float_to_i32(v); }
    MG_HD static int from(double v) { return float_to_i32(v); }
    template <class In> MG_HD static int from(In v) { return (int)v; }
};
template <> struct MgCast<mg_i64> {
    MG_HD static mg_i64 from(float v) { return float_to_i64(v); }
    MG_HD static mg_i64 from(double v) { return float_to_i64(v); }
    template <class In> MG_HD static mg_i64 from(In v) { return (mg_i64)v; }
};
// To a small integer (uint8, int8, int16) as the CPU's cast and NumPy on x86: a float truncated
// to int32 (INT_MIN for NaN, inf and outside its range), then the low bits; an integer's low bits
template <class Out> struct MgCastSmall {
    MG_HD static Out from(float v) { return (Out)float_to_i32(v); }
    MG_HD static Out from(double v) { return (Out)float_to_i32(v); }
    template <class In> MG_HD static Out from(In v) { return (Out)v; }
};
// To a half type as the CPU's cast: the source (a half one widened to float first: the cast
// kernels' caller, render.cast_kernel, does that) rounded once from its double
template <> struct MgCast<mg_f16> {
    template <class In> MG_HD static mg_f16 from(In v) { return {mg_double_to_f16((double)v)}; }
};
template <> struct MgCast<mg_bf16> {
    template <class In> MG_HD static mg_bf16 from(In v) { return {mg_double_to_bf16((double)v)}; }
};
