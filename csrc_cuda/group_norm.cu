// group_norm and its gradient (mgegraph/ops/norm.py).
//
// Parameters: the CPU's (mgegraph/_kernels/norm.pyx, packed by kernel_abi/norm.py), floats [eps],
// ints [batch, channels, inner, groups, threads] (threads is the CPU's):
//   group_norm:          buffers x, weight, bias, y
//   group_norm_backward: buffers x, weight, dy, dx, dweight, dbias, workspace (2 batch channels
//                        doubles; this kernel keeps each group's mean and rstd in the first
//                        2 batch groups)
//
// Semantics are the CPU kernel's: a group's statistics in double and two-pass; the elementwise
// pass in the dtype on x minus the mean rounded to it, with per-channel factors computed in
// double, never contracted into an FMA. Only the order of the sums differs.
//
// Design: a group (sample n, group g) is a contiguous run of (channels / groups) * inner values,
// reduced by one group of blockDim.x threads (reduce_block.cuh), like a row of layer norm. The
// backward's steps read all of x and dy before the last one writes dx, which may alias either:
// the statistics first, then dweight and dbias (a thread per channel, samples in order), then dx.
#include "norm_common.cuh"
#include "scalar.cuh"  // m_activate: the epilogue activation

struct GroupShape {  // x read as (batch, channels, inner), channels in groups of per
    i64 N, C, M, G, per, K;  // K = per * M values in a group
};

__device__ __forceinline__ GroupShape group_shape(const MgArgs& a) {
    const i64 C = a.ints[1], G = a.ints[3];
    return GroupShape{a.ints[0], C, a.ints[2], G, C / G, (C / G) * a.ints[2]};
}

template <class T> __device__ void group_norm(const MgArgs& a) {
    __shared__ double smem[32];
    const GroupShape s = group_shape(a);
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1], *b = (const T*)a.bufs[2];
    T* y = (T*)a.bufs[3];
    const i64 act = a.ints[4];  // the epilogue activation (scalar.cuh's m_activate)
    MG_FOR_GROUPS(s.N * s.G) {
        double mean, rstd;
        row_stats(x + grp * s.K, s.K, a.floats[0], smem, &mean, &rstd);
        const T centre = (T)mean;
        for (i64 j = threadIdx.x; j < s.K; j += blockDim.x) {
            const i64 ch = (grp % s.G) * s.per + j / s.M, at = grp * s.K + j;
            y[at] = m_activate(
                mg_add(mg_mul((T)(x[at] - centre), (T)(rstd * (double)w[ch])), b[ch]), act);
        }
    }
}

// group_norm_backward, step 1: each group's mean and rstd into the workspace
template <class T> __device__ void group_norm_backward_stats(const MgArgs& a) {
    __shared__ double smem[32];
    const GroupShape s = group_shape(a);
    const T* x = (const T*)a.bufs[0];
    double* stats = (double*)a.bufs[6];
    MG_FOR_GROUPS(s.N * s.G) {
        double mean, rstd;
        row_stats(x + grp * s.K, s.K, a.floats[0], smem, &mean, &rstd);
        if (threadIdx.x == 0) stats[2 * grp] = mean, stats[2 * grp + 1] = rstd;
    }
}

// step 2: dweight = the sum of dy xhat, dbias of dy, over samples and positions; a thread per
// channel, in double
template <class T> __device__ void group_norm_backward_params(const MgArgs& a) {
    const GroupShape s = group_shape(a);
    const T *x = (const T*)a.bufs[0], *g = (const T*)a.bufs[2];
    const double* stats = (const double*)a.bufs[6];
    for (i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x; c < s.C;
         c += (i64)gridDim.x * blockDim.x) {
        double dw = 0, db = 0;
        for (i64 n = 0; n < s.N; ++n) {
            const double* st = stats + 2 * (n * s.G + c / s.per);
            const i64 base = (n * s.C + c) * s.M;
            for (i64 m = 0; m < s.M; ++m) {
                dw += (double)g[base + m] * (((double)x[base + m] - st[0]) * st[1]);
                db += (double)g[base + m];
            }
        }
        ((T*)a.bufs[4])[c] = (T)dw;
        ((T*)a.bufs[5])[c] = (T)db;
    }
}

// step 3: dx = rstd (g w - mean(g w) - xhat mean(g w xhat)), written as the CPU kernel does:
// dy (rstd w) + (x - mean) q + r with q = -rstd^3 sum(g w (x - mean)) / K and
// r = -rstd sum(g w) / K; a group per thread group
template <class T> __device__ void group_norm_backward(const MgArgs& a) {
    __shared__ double smem[32];
    const GroupShape s = group_shape(a);
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1], *g = (const T*)a.bufs[2];
    const double* stats = (const double*)a.bufs[6];
    MG_FOR_GROUPS(s.N * s.G) {
        const double mean = stats[2 * grp], rstd = stats[2 * grp + 1];
        double sg = 0, sgd = 0;
        for (i64 j = threadIdx.x; j < s.K; j += blockDim.x) {
            const i64 ch = (grp % s.G) * s.per + j / s.M, at = grp * s.K + j;
            const double gw = (double)g[at] * (double)w[ch];
            sg += gw;
            sgd += gw * ((double)x[at] - mean);
        }
        const double sum_gw = mg_group_reduce(sg, MgSum(), smem);
        const double sum_gwd = mg_group_reduce(sgd, MgSum(), smem);
        const T centre = (T)mean, q = (T)(-rstd * rstd * (sum_gwd * (rstd / (double)s.K)));
        const T r = (T)(-rstd * (sum_gw / (double)s.K));
        for (i64 j = threadIdx.x; j < s.K; j += blockDim.x) {
            const i64 ch = (grp % s.G) * s.per + j / s.M, at = grp * s.K + j;
            const T p = (T)(rstd * (double)w[ch]);
            ((T*)a.bufs[3])[at] = mg_add(mg_add(mg_mul(g[at], p), mg_mul((T)(x[at] - centre), q)),
                                         r);
        }
    }
}

#define GN_ENTRY(NAME, FN, T) \
    extern "C" __global__ void mg_##NAME(const MgArgs a) { FN<T>(a); }
#define GN_ENTRIES(T, DT)                                                                     \
    GN_ENTRY(group_norm_##DT, group_norm, T)                                                  \
    GN_ENTRY(group_norm_backward_##DT##_stats, group_norm_backward_stats, T)                  \
    GN_ENTRY(group_norm_backward_##DT##_params, group_norm_backward_params, T)                \
    GN_ENTRY(group_norm_backward_##DT, group_norm_backward, T)

GN_ENTRIES(float, f32)
GN_ENTRIES(double, f64)
