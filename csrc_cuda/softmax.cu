// softmax / log_softmax, cross entropy and its gradient, over the middle axis of (outer, n, inner).
//
// Parameters: the CPU's (mgegraph/_kernels/nn.pyx, packed by lowering/nn.py):
//   softmax:        ints [outer, n, inner, take_log]; buffers x, y
//   cross_entropy:  ints [outer, classes, inner, with_logits, reduction, label_is_int64],
//                   floats [label_smooth]; buffers pred, label, loss (then a workspace of one
//                   double per sample when reduced), and for the backward pred, label, dloss, dpred
//
// Semantics are the CPU kernel's, operation for operation (max in the dtype with NaN never
// winning, exp in the dtype, sums in double, results rounded once); only the order of the sums
// differs. A label out of range cannot stop a kernel: its loss (and gradient) is NaN, and it
// records the CPU's status (mg_fail), so the run raises the CPU's KernelError instead.
//
// Design: one "column" (o, m) per group of blockDim.x threads. With inner == 1 a row is
// contiguous and a warp (or block) strides along it; with inner > 1 neighbouring columns are
// neighbours in memory, so each thread takes a column alone (blockDim.x == 1) and a warp's loads
// coalesce.
#include "mg_abi.cuh"
#include "reduce_block.cuh"

enum { RED_NONE, RED_MEAN, RED_SUM };

__device__ __forceinline__ float mg_exp(float v) { return expf(v); }
__device__ __forceinline__ double mg_exp(double v) { return exp(v); }

struct Column {  // one (o, m) of (outer, n, inner): element i at base[i * stride]
    i64 col, base, stride;
};

__device__ __forceinline__ Column column_at(i64 col, i64 n, i64 inner) {
    const i64 o = col / inner, m = col % inner;
    return Column{col, o * n * inner + m, inner};
}

#define MG_FOR_COLUMNS(cols)                                                                  \
    for (i64 col = (i64)blockIdx.x * blockDim.y + threadIdx.y; col < (cols);                 \
         col += (i64)gridDim.x * blockDim.y)

template <class T> __device__ T column_max(const T* x, Column c, i64 n, double* smem) {
    double mx = -MG_INF;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = (double)x[c.base + i * c.stride];
        if (v > mx) mx = v;
    }
    return (T)mg_group_reduce(mx, MgMaxF(), smem);
}

// sum over the column of exp(x - mx), in double; the CPU's column_logsumexp's inner sum
template <class T>
__device__ double column_expsum(const T* x, Column c, i64 n, T mx, double* smem) {
    double s = 0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x)
        s += mg_exp((T)(x[c.base + i * c.stride] - mx));
    return mg_group_reduce(s, MgSum(), smem);
}

template <class T> __device__ void softmax(const MgArgs& a) {
    __shared__ double smem[32];
    const i64 O = a.ints[0], n = a.ints[1], M = a.ints[2];
    const bool take_log = a.ints[3] != 0;
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[1];
    MG_FOR_COLUMNS(O * M) {
        const Column c = column_at(col, n, M);
        const T mx = column_max(x, c, n, smem);
        const double s = column_expsum(x, c, n, mx, smem);
        const double lse = (double)mx + log(s), inv = 1 / s;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {  // in place: read, then written
            const i64 at = c.base + i * c.stride;
            const T v = x[at];
            y[at] = take_log ? (T)((double)v - lse) : (T)((double)mg_exp((T)(v - mx)) * inv);
        }
    }
}

__device__ __forceinline__ i64 label_at(const char* label, i64 k, bool wide) {
    return wide ? ((const i64*)label)[k] : (i64)((const int*)label)[k];
}

// The column's loss: logZ - (1 - ls) picked - ls mean(x or log x); NaN for a bad label.
template <class T>
__device__ double column_loss(const T* x, Column c, i64 C, i64 k, bool logits, double ls,
                              double* smem) {
    double logz = 0;
    if (logits) {
        const T mx = column_max(x, c, C, smem);
        logz = (double)mx + log(column_expsum(x, c, C, mx, smem));
    }
    double smooth = 0;
    if (ls != 0) {
        for (i64 i = threadIdx.x; i < C; i += blockDim.x) {
            const T v = x[c.base + i * c.stride];
            smooth += logits ? (double)v : log((double)v);
        }
        smooth = mg_group_reduce(smooth, MgSum(), smem) / (double)C;
    }
    if (k < 0 || k >= C) return MG_NAN;
    const T v = x[c.base + k * c.stride];
    const double picked = logits ? (double)v : log((double)v);
    double loss = logz - (1 - ls) * picked;
    if (ls != 0) loss -= ls * smooth;
    return loss;
}

struct CeArgs {
    i64 O, C, M;
    bool logits, wide;
    int reduction;
    double ls;
};

__device__ CeArgs ce_args(const MgArgs& a) {
    return CeArgs{a.ints[0], a.ints[1], a.ints[2], a.ints[3] != 0, a.ints[5] != 0,
                  (int)a.ints[4], a.floats[0]};
}

// Per-sample losses: into y for "none", else into the workspace for `_total` to reduce.
template <class T> __device__ void cross_entropy(const MgArgs& a) {
    __shared__ double smem[32];
    const CeArgs p = ce_args(a);
    const T* x = (const T*)a.bufs[0];
    MG_FOR_COLUMNS(p.O * p.M) {
        const Column c = column_at(col, p.C, p.M);
        const i64 k = label_at(a.bufs[1], col, p.wide);
        const double loss = column_loss(x, c, p.C, k, p.logits, p.ls, smem);
        if (threadIdx.x != 0) continue;
        if (k < 0 || k >= p.C) mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);  // the run raises
        if (p.reduction == RED_NONE) ((T*)a.bufs[2])[col] = (T)loss;
        else ((double*)a.bufs[3])[col] = loss;
    }
}

// One block: the mean or sum of the workspace's per-sample losses (0 / 0: NaN when empty).
template <class T> __device__ void cross_entropy_total(const MgArgs& a) {
    __shared__ double smem[32];
    const CeArgs p = ce_args(a);
    const double* losses = (const double*)a.bufs[3];
    const i64 count = p.O * p.M;
    double s = 0;
    for (i64 i = threadIdx.x; i < count; i += blockDim.x) s += losses[i];
    s = mg_group_reduce(s, MgSum(), smem);
    if (threadIdx.x == 0) ((T*)a.bufs[2])[0] = (T)(p.reduction == RED_MEAN ? s / (double)count : s);
}

// d loss / d x_i = (softmax_i - t_i) scale for logits, -t_i / p_i scale for probabilities, with
// t_i = (1 - ls) [i == label] + ls / C. In place safe.
template <class T> __device__ void cross_entropy_backward(const MgArgs& a) {
    __shared__ double smem[32];
    const CeArgs p = ce_args(a);
    const T* x = (const T*)a.bufs[0];
    const T* g = (const T*)a.bufs[2];
    T* dx = (T*)a.bufs[3];
    const i64 count = p.O * p.M;
    MG_FOR_COLUMNS(count) {
        const Column c = column_at(col, p.C, p.M);
        const i64 k = label_at(a.bufs[1], col, p.wide);
        const double scale = p.reduction == RED_NONE ? (double)g[col]
                             : p.reduction == RED_MEAN ? (double)g[0] / (double)count
                                                       : (double)g[0];
        double lse = 0;
        if (p.logits) {
            const T mx = column_max(x, c, p.C, smem);
            lse = (double)mx + log(column_expsum(x, c, p.C, mx, smem));
        }
        const bool bad = k < 0 || k >= p.C;
        if (bad && threadIdx.x == 0) mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);
        for (i64 i = threadIdx.x; i < p.C; i += blockDim.x) {
            const i64 at = c.base + i * c.stride;
            const double t = p.ls / (double)p.C + (k == i ? 1 - p.ls : 0.0);
            const T v = x[at];
            double d;
            if (p.logits) d = ((double)mg_exp((T)((double)v - lse)) - t) * scale;
            else d = t != 0 ? -t / (double)v * scale : 0.0;  // 0 even where p is 0
            dx[at] = bad ? (T)MG_NAN : (T)d;
        }
    }
}

#define MG_SOFTMAX_ENTRIES(T, NAME)                                                            \
    extern "C" __global__ void mg_softmax_##NAME(const MgArgs a) { softmax<T>(a); }           \
    extern "C" __global__ void mg_cross_entropy_##NAME(const MgArgs a) { cross_entropy<T>(a); } \
    extern "C" __global__ void mg_cross_entropy_##NAME##_total(const MgArgs a) {              \
        cross_entropy_total<T>(a);                                                             \
    }                                                                                          \
    extern "C" __global__ void mg_cross_entropy_backward_##NAME(const MgArgs a) {             \
        cross_entropy_backward<T>(a);                                                          \
    }

MG_SOFTMAX_ENTRIES(float, f32)
MG_SOFTMAX_ENTRIES(double, f64)
