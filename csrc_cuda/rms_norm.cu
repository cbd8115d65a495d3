// rms_norm (mgegraph/ops/sequence.py): y = x / sqrt(mean(x^2) + eps) * weight over each row.
//
// Parameters: the CPU's (mgegraph/_kernels/rms_norm.pyx, packed by kernel_abi/rms_norm.py),
// ints [rows, cols, threads] (threads is the CPU's), floats [eps]; buffers x, weight, then y.
// The gradient is a composition of other ops, so there is no backward kernel.
//
// Semantics are the CPU kernel's: the sum of squares in double, rstd rounded once to the dtype,
// each output x * rstd * weight in the dtype, never contracted into an FMA. Only the order of
// the sum differs.
//
// Design: a row is reduced by one group of blockDim.x threads (reduce_block.cuh), as layer
// norm's; each thread writes only the elements it read, after the group's reduction, so the
// kernel is safe in place.
#include "norm_common.cuh"

template <class T> __device__ void rms_norm(const MgArgs& a) {
    __shared__ double smem[32];
    const i64 R = a.ints[0], N = a.ints[1];
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1];
    T* y = (T*)a.bufs[2];
    MG_FOR_GROUPS(R) {
        double q = 0;
        for (i64 j = threadIdx.x; j < N; j += blockDim.x) {
            const double v = (double)x[grp * N + j];
            q += v * v;
        }
        const T rstd = (T)(1 / sqrt(mg_group_reduce(q, MgSum(), smem) / (double)N
                                    + a.floats[0]));
        for (i64 j = threadIdx.x; j < N; j += blockDim.x) {
            const i64 at = grp * N + j;
            y[at] = mg_mul(mg_mul(x[at], rstd), w[j]);
        }
    }
}

#define RMS_ENTRY(T, DT) \
    extern "C" __global__ void mg_rms_norm_##DT(const MgArgs a) { rms_norm<T>(a); }

RMS_ENTRY(float, f32)
RMS_ENTRY(double, f64)
