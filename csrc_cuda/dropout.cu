// dropout: y = x * (coin keeps i ? 1 / (1 - p) : 0), with the CPU's counter-based coin.
//
// Parameters: the CPU's (mgegraph/_kernels/nn.pyx, packed by lowering/nn.py): ints [size, seed,
// has_step], floats [drop_prob]; buffers x, [step (int64),] y.
//
// Design: element i's coin depends only on (seed, step, i) (splitmix64's finaliser), never on the
// order of work, so a thread per element draws exactly the CPU's mask and the result is bitwise
// the CPU's; the backward pass, given the same step, draws it again. A thread per element, no
// shared memory: it runs in the host emulation too.
#include "mg_abi.cuh"

typedef long long i64;
typedef unsigned long long u64;

__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <class T> __device__ void dropout(const MgArgs& a) {
    const u64 golden = 0x9E3779B97F4A7C15ull;
    const i64 n = a.ints[0];
    const bool has_step = a.ints[2] != 0;
    const double p = a.floats[0];
    u64 key = mix64((u64)a.ints[1] + golden);
    if (has_step) key = mix64(key ^ mix64((u64)((const i64*)a.bufs[1])[0] + golden));
    // keep i when hash >> 11 >= ceil(p 2**53): u = (hash >> 11) / 2**53, uniform in [0, 1), >= p
    const u64 threshold = (u64)ceil(p * 9007199254740992.0);
    const T kept = p < 1 ? (T)(1 / (1 - p)) : T(0);
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[has_step ? 2 : 1];
    const bool valid = p >= 0 && p <= 1;  // the CPU refuses others: the output is NaN here
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        const bool keep = (mix64(key + (u64)i * golden) >> 11) >= threshold;
        y[i] = valid ? x[i] * (keep ? kept : T(0)) : (T)__longlong_as_double(0x7ff8000000000000ll);
    }
}

extern "C" __global__ void mg_dropout_f32(const MgArgs a) { dropout<float>(a); }
extern "C" __global__ void mg_dropout_f64(const MgArgs a) { dropout<double>(a); }
