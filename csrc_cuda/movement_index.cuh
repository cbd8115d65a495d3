// Index arithmetic the hand-written kernels share: 32-bit division where it fits, and the
// decoding of a flat index through the CPU lowerings' (shape, strides) groups. No shuffles, no
// shared memory: kernels that include only this run in the host emulation (host_emu.h).
#pragma once

typedef long long i64;
typedef unsigned long long u64;

// Quotient and remainder in 32-bit arithmetic when both operands fit (a 64-bit division is a
// long instruction sequence on the GPU; index decoding does several per element), else 64-bit.
__device__ __forceinline__ i64 mg_div(i64 a, i64 b) {
    return ((a | b) >> 31) == 0 ? (i64)((unsigned)a / (unsigned)b) : a / b;
}
__device__ __forceinline__ i64 mg_mod(i64 a, i64 b) {
    return ((a | b) >> 31) == 0 ? (i64)((unsigned)a % (unsigned)b) : a % b;
}

// The element offset of flat index `j` (< the shape's product) of a (shape, strides) group of
// `nd` dims, C order.
__device__ __forceinline__ i64 mg_offset(i64 j, int nd, const i64* shape, const i64* strides) {
    if (nd == 1) return j * strides[0];  // j < shape[0]: no 64-bit division, which is slow
    i64 off = 0;
    for (int d = nd - 1; d >= 0; --d) {
        const i64 n = shape[d];
        off += mg_mod(j, n) * strides[d];
        j = mg_div(j, n);
    }
    return off;
}
