// layer_norm and batch_norm (training and inference) and their gradients.
//
// Parameters: the CPU's (mgegraph/_kernels/nn.pyx, packed by lowering/nn.py), floats [eps]:
//   layer_norm:          ints [rows, n]; buffers x, weight, bias, y
//   layer_norm_backward: ints [rows, n]; buffers x, weight, dy, dx, dweight, dbias, workspace
//   batch_norm:          ints [batch, channels, inner, training]; buffers x, weight, bias, then
//                        y, mean, var (training) or running_mean, running_var, y (inference)
//   batch_norm_backward: ints [batch, channels, inner]; buffers x, weight, mean, var, dy, then
//                        dx, dweight, dbias, workspace
//
// Semantics are the CPU kernel's: statistics in double and two-pass, elementwise results in
// double rounded once, batch norm's normalisation in the dtype from the statistics as stored
// (so a remade training batch norm is bitwise the same). Only the order of the sums differs;
// batch norm's elementwise step is bitwise the CPU's (exact roundings, never contracted).
//
// Design: a statistic is one group's reduction (reduce_block.cuh): a row for layer norm, a
// channel for batch norm; the elementwise parts stride over every element. Each instruction's
// steps read all of their inputs before any step writes an output that may alias one (all these
// ops work in place): statistics first (into the workspace or the stat outputs), then per-column
// or per-channel sums, then the elementwise pass, where each thread reads its elements before it
// writes them.
#include "norm_common.cuh"

#define MG_FOR_ELEMENTS(count)                                                                \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (i64)gridDim.x * blockDim.x)

template <class T> __device__ void layer_norm(const MgArgs& a) {
    __shared__ double smem[32];
    const i64 R = a.ints[0], N = a.ints[1];
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1], *b = (const T*)a.bufs[2];
    T* y = (T*)a.bufs[3];
    MG_FOR_GROUPS(R) {
        double mean, rstd;
        row_stats(x + grp * N, N, a.floats[0], smem, &mean, &rstd);
        for (i64 j = threadIdx.x; j < N; j += blockDim.x) {
            const i64 at = grp * N + j;
            y[at] = (T)(((double)x[at] - mean) * rstd * (double)w[j] + (double)b[j]);
        }
    }
}

// layer_norm_backward, step 1: each row's mean and rstd into the workspace
template <class T> __device__ void layer_norm_backward_stats(const MgArgs& a) {
    __shared__ double smem[32];
    const i64 R = a.ints[0], N = a.ints[1];
    const T* x = (const T*)a.bufs[0];
    double* stats = (double*)a.bufs[6];
    MG_FOR_GROUPS(R) {
        double mean, rstd;
        row_stats(x + grp * N, N, a.floats[0], smem, &mean, &rstd);
        if (threadIdx.x == 0) stats[2 * grp] = mean, stats[2 * grp + 1] = rstd;
    }
}

// step 2: dweight = sum over rows of dy xhat, dbias = sum of dy; a thread per column, rows in
// order, in double
template <class T> __device__ void layer_norm_backward_params(const MgArgs& a) {
    const i64 R = a.ints[0], N = a.ints[1];
    const T *x = (const T*)a.bufs[0], *g = (const T*)a.bufs[2];
    const double* stats = (const double*)a.bufs[6];
    MG_FOR_ELEMENTS(N) {
        double dw = 0, db = 0;
        for (i64 r = 0; r < R; ++r) {
            const double xhat = ((double)x[r * N + i] - stats[2 * r]) * stats[2 * r + 1];
            dw += (double)g[r * N + i] * xhat;
            db += (double)g[r * N + i];
        }
        ((T*)a.bufs[4])[i] = (T)dw;
        ((T*)a.bufs[5])[i] = (T)db;
    }
}

// step 3: dx = rstd (g w - mean(g w) - xhat mean(g w xhat)), a row per group
template <class T> __device__ void layer_norm_backward(const MgArgs& a) {
    __shared__ double smem[32];
    const i64 R = a.ints[0], N = a.ints[1];
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1], *g = (const T*)a.bufs[2];
    const double* stats = (const double*)a.bufs[6];
    MG_FOR_GROUPS(R) {
        const double mean = stats[2 * grp], rstd = stats[2 * grp + 1];
        double s = 0, sd = 0;
        for (i64 j = threadIdx.x; j < N; j += blockDim.x) {
            const double gw = (double)g[grp * N + j] * (double)w[j];
            s += gw;
            sd += gw * ((double)x[grp * N + j] - mean);
        }
        const double mgw = mg_group_reduce(s, MgSum(), smem) / (double)N;
        const double bsum = mg_group_reduce(sd, MgSum(), smem) * (rstd / (double)N);
        for (i64 j = threadIdx.x; j < N; j += blockDim.x) {
            const i64 at = grp * N + j;
            const double xhat = ((double)x[at] - mean) * rstd;
            ((T*)a.bufs[3])[at] = (T)(rstd * ((double)g[at] * (double)w[j] - mgw - xhat * bsum));
        }
    }
}

struct Channels {  // x read as (batch, channels, inner)
    i64 N, C, M;
    __device__ i64 at(i64 c, i64 e) const { return mg_div(e, M) * C * M + c * M + mg_mod(e, M); }
};

// batch_norm (training), step 1: each channel's mean and variance into the stat outputs
template <class T> __device__ void batch_norm_stats(const MgArgs& a) {
    __shared__ double smem[32];
    const Channels ch{a.ints[0], a.ints[1], a.ints[2]};
    const T* x = (const T*)a.bufs[0];
    const i64 count = ch.N * ch.M;
    MG_FOR_GROUPS(ch.C) {
        double s = 0, q = 0;
        for (i64 e = threadIdx.x; e < count; e += blockDim.x) s += (double)x[ch.at(grp, e)];
        const double mean = mg_group_reduce(s, MgSum(), smem) / (double)count;
        for (i64 e = threadIdx.x; e < count; e += blockDim.x) {
            const double d = (double)x[ch.at(grp, e)] - mean;
            q += d * d;
        }
        const double var = mg_group_reduce(q, MgSum(), smem) / (double)count;
        if (threadIdx.x == 0) ((T*)a.bufs[4])[grp] = (T)mean, ((T*)a.bufs[5])[grp] = (T)var;
    }
}

// batch_norm, both modes: y = (x - mean) * (w / sqrt(var + eps)) + bias, in the dtype
template <class T> __device__ void batch_norm(const MgArgs& a) {
    const Channels ch{a.ints[0], a.ints[1], a.ints[2]};
    const bool training = a.ints[3] != 0;
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1], *b = (const T*)a.bufs[2];
    const T* mean = (const T*)a.bufs[training ? 4 : 3];
    const T* var = (const T*)a.bufs[training ? 5 : 4];
    T* y = (T*)a.bufs[training ? 3 : 5];
    MG_FOR_ELEMENTS(ch.N * ch.C * ch.M) {
        const i64 c = mg_mod(mg_div(i, ch.M), ch.C);
        const T scale = (T)((double)w[c] / sqrt((double)var[c] + a.floats[0]));
        y[i] = mg_add(mg_mul((T)(x[i] - mean[c]), scale), b[c]);
    }
}

// batch_norm_backward, step 1: per channel, dweight = sum g xhat, dbias = sum g, and the
// factors of dx = scale (g - sg - (x - centre) sgd) into the workspace (4 doubles a channel).
// The stored mean is rounded to the dtype: the sum of x - mean corrects it in double.
template <class T> __device__ void batch_norm_backward_stats(const MgArgs& a) {
    __shared__ double smem[32];
    const Channels ch{a.ints[0], a.ints[1], a.ints[2]};
    const T *x = (const T*)a.bufs[0], *w = (const T*)a.bufs[1];
    const T *mean = (const T*)a.bufs[2], *var = (const T*)a.bufs[3], *g = (const T*)a.bufs[4];
    double* f = (double*)a.bufs[8];
    const i64 count = ch.N * ch.M;
    MG_FOR_GROUPS(ch.C) {
        const double mu = (double)mean[grp];
        double sg = 0, sgd = 0, sd = 0;
        for (i64 e = threadIdx.x; e < count; e += blockDim.x) {
            const i64 at = ch.at(grp, e);
            const double d = (double)x[at] - mu;
            sg += (double)g[at];
            sgd += (double)g[at] * d;
            sd += d;
        }
        sg = mg_group_reduce(sg, MgSum(), smem);
        sgd = mg_group_reduce(sgd, MgSum(), smem);
        sd = mg_group_reduce(sd, MgSum(), smem);
        if (threadIdx.x != 0) continue;
        const double n = (double)count, rstd = 1 / sqrt((double)var[grp] + a.floats[0]);
        const double centre = mu + sd / n;
        const double sgxhat = (sgd - (centre - mu) * sg) * rstd;
        ((T*)a.bufs[6])[grp] = (T)sgxhat;
        ((T*)a.bufs[7])[grp] = (T)sg;
        f[4 * grp] = (double)w[grp] * rstd;
        f[4 * grp + 1] = sg / n;
        f[4 * grp + 2] = sgxhat * (rstd / n);
        f[4 * grp + 3] = centre;
    }
}

// step 2: dx, elementwise
template <class T> __device__ void batch_norm_backward(const MgArgs& a) {
    const Channels ch{a.ints[0], a.ints[1], a.ints[2]};
    const T *x = (const T*)a.bufs[0], *g = (const T*)a.bufs[4];
    const double* f = (const double*)a.bufs[8];
    MG_FOR_ELEMENTS(ch.N * ch.C * ch.M) {
        const double* fc = f + 4 * mg_mod(mg_div(i, ch.M), ch.C);
        ((T*)a.bufs[5])[i] = (T)(fc[0] * ((double)g[i] - fc[1] - ((double)x[i] - fc[3]) * fc[2]));
    }
}

#define MG_ENTRY(NAME, FN, T) \
    extern "C" __global__ void mg_##NAME(const MgArgs a) { FN<T>(a); }
#define MG_NORM_ENTRIES(T, DT)                                                                \
    MG_ENTRY(layer_norm_##DT, layer_norm, T)                                                  \
    MG_ENTRY(layer_norm_backward_##DT##_stats, layer_norm_backward_stats, T)                  \
    MG_ENTRY(layer_norm_backward_##DT##_params, layer_norm_backward_params, T)                \
    MG_ENTRY(layer_norm_backward_##DT, layer_norm_backward, T)                                \
    MG_ENTRY(batch_norm_##DT##_stats, batch_norm_stats, T)                                    \
    MG_ENTRY(batch_norm_##DT, batch_norm, T)                                                  \
    MG_ENTRY(batch_norm_backward_##DT##_stats, batch_norm_backward_stats, T)                  \
    MG_ENTRY(batch_norm_backward_##DT, batch_norm_backward, T)

MG_NORM_ENTRIES(float, f32)
MG_NORM_ENTRIES(double, f64)
