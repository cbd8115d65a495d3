// Scaled dot-product attention and its backward: what the ops mean is mgegraph/ops/attention.py's
// docstring (grouped-query heads, a bool or additive mask read through strides, top-left causal
// mask, a fully masked row giving 0 and lse -inf).
//
// Parameters: the CPU's Attention struct (mgegraph/_kernels/attention.pyx, packed by
// mgegraph/kernel_abi/attention.py; bq, bk and threads are the CPU's), floats [scale]; no
// workspace. attention: q, k, v[, mask], out, lse;  attention_backward: q, k, v[, mask], out,
// lse, dout, dq, dk, dv.
//
// Design: a thread per query row with an online softmax (running max and sum, the output row
// rescaled when the max grows), so no (Lq, Lk) matrix and no shared memory, and the host
// emulation runs it. The scores, probabilities, max and sum are doubles; the output row is
// accumulated in place in its dtype. The backward is two steps without atomics: "_dq" a thread
// per query row (dq, with D = rowsum(dout * out)), "_dkv" a thread per key row (dk and dv, every
// query head of its group in order, D recomputed per query row). The CPU kernel tiles the same
// sums through BLAS, so results agree to rounding, not bitwise.
#include "mg_abi.cuh"

typedef long long i64;

struct Attention {
    i64 batch, hq, hkv, lq, lk, e, ev, causal, mask, mask_b, mask_h, mask_i, mask_j, bq, bk;
    i64 threads;
};

#define MASK_BOOL 1
#define MASK_ADD 2
#define NEG_INF (-__longlong_as_double(0x7ff0000000000000ll))

#define MG_GRID_STRIDE(i, total)                                                              \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (total);                      \
         i += (i64)gridDim.x * blockDim.x)

template <class T> __device__ double dot(const T* a, const T* b, i64 n) {
    double total = 0;
    for (i64 c = 0; c < n; ++c) total += (double)a[c] * (double)b[c];
    return total;
}

// the masked, scaled score of query row i of head h against key j (-inf: not attended)
template <class T>
__device__ double score(const Attention& s, const MgArgs& a, i64 b, i64 h, i64 i, i64 j,
                        const T* qi, const T* kj) {
    if (s.causal && j > i) return NEG_INF;
    const i64 at = b * s.mask_b + h * s.mask_h + i * s.mask_i + j * s.mask_j;
    if (s.mask == MASK_BOOL && !((const unsigned char*)a.bufs[3])[at]) return NEG_INF;
    double x = a.floats[0] * dot(qi, kj, s.e);
    if (s.mask == MASK_ADD) x += (double)((const T*)a.bufs[3])[at];
    return x;
}

__device__ i64 inputs(const Attention& s) { return s.mask ? 4 : 3; }

// attention: a thread per query row (b, h, i)
template <class T> __device__ void forward(const MgArgs& a) {
    const Attention s = *(const Attention*)a.ints;
    const i64 nb = inputs(s), group = s.hq / s.hkv;
    const T *q = (const T*)a.bufs[0], *k = (const T*)a.bufs[1], *v = (const T*)a.bufs[2];
    T* out = (T*)a.bufs[nb];
    T* lse = (T*)a.bufs[nb + 1];
    MG_GRID_STRIDE(row, s.batch * s.hq * s.lq) {
        const i64 i = row % s.lq, h = row / s.lq % s.hq, b = row / (s.lq * s.hq);
        const i64 kv = (b * s.hkv + h / group) * s.lk;
        const T* qi = q + row * s.e;
        T* o = out + row * s.ev;
        for (i64 c = 0; c < s.ev; ++c) o[c] = 0;
        double m = NEG_INF, l = 0;
        for (i64 j = 0; j < s.lk; ++j) {
            const double x = score(s, a, b, h, i, j, qi, k + (kv + j) * s.e);
            if (x == NEG_INF) continue;
            if (x > m) {  // a new maximum: what the row summed so far shrinks
                const double alpha = exp(m - x);
                l *= alpha;
                for (i64 c = 0; c < s.ev; ++c) o[c] = (T)((double)o[c] * alpha);
                m = x;
            }
            const double p = exp(x - m);
            l += p;
            const T* vj = v + (kv + j) * s.ev;
            for (i64 c = 0; c < s.ev; ++c) o[c] = (T)((double)o[c] + p * (double)vj[c]);
        }
        if (l == 0) {
            lse[row] = (T)NEG_INF;
            continue;
        }
        lse[row] = (T)(m + log(l));
        for (i64 c = 0; c < s.ev; ++c) o[c] = (T)((double)o[c] / l);
    }
}

// the probability of (query row, key) from lse; 0 for a row with no key attended
__device__ double probability(double x, double lse) {
    return lse == NEG_INF || x == NEG_INF ? 0.0 : exp(x - lse);
}

// attention_backward "_dq": a thread per query row
template <class T> __device__ void backward_dq(const MgArgs& a) {
    const Attention s = *(const Attention*)a.ints;
    const i64 nb = inputs(s), group = s.hq / s.hkv;
    const T *q = (const T*)a.bufs[0], *k = (const T*)a.bufs[1], *v = (const T*)a.bufs[2];
    const T *out = (const T*)a.bufs[nb], *lse = (const T*)a.bufs[nb + 1];
    const T* dout = (const T*)a.bufs[nb + 2];
    T* dq = (T*)a.bufs[nb + 3];
    MG_GRID_STRIDE(row, s.batch * s.hq * s.lq) {
        const i64 i = row % s.lq, h = row / s.lq % s.hq, b = row / (s.lq * s.hq);
        const i64 kv = (b * s.hkv + h / group) * s.lk;
        const T *qi = q + row * s.e, *gi = dout + row * s.ev;
        const double d = dot(gi, out + row * s.ev, s.ev);
        T* g = dq + row * s.e;
        for (i64 c = 0; c < s.e; ++c) g[c] = 0;
        for (i64 j = 0; j < s.lk; ++j) {
            const T* kj = k + (kv + j) * s.e;
            const double p = probability(score(s, a, b, h, i, j, qi, kj), (double)lse[row]);
            if (p == 0) continue;
            const double ds = p * (dot(gi, v + (kv + j) * s.ev, s.ev) - d) * a.floats[0];
            for (i64 c = 0; c < s.e; ++c) g[c] = (T)((double)g[c] + ds * (double)kj[c]);
        }
    }
}

// attention_backward "_dkv": a thread per key row (b, kv head, j)
template <class T> __device__ void backward_dkv(const MgArgs& a) {
    const Attention s = *(const Attention*)a.ints;
    const i64 nb = inputs(s), group = s.hq / s.hkv;
    const T *q = (const T*)a.bufs[0], *k = (const T*)a.bufs[1], *v = (const T*)a.bufs[2];
    const T *out = (const T*)a.bufs[nb], *lse = (const T*)a.bufs[nb + 1];
    const T* dout = (const T*)a.bufs[nb + 2];
    T *dk = (T*)a.bufs[nb + 4], *dv = (T*)a.bufs[nb + 5];
    MG_GRID_STRIDE(key, s.batch * s.hkv * s.lk) {
        const i64 j = key % s.lk, hk = key / s.lk % s.hkv, b = key / (s.lk * s.hkv);
        const T *kj = k + key * s.e, *vj = v + key * s.ev;
        T *gk = dk + key * s.e, *gv = dv + key * s.ev;
        for (i64 c = 0; c < s.e; ++c) gk[c] = 0;
        for (i64 c = 0; c < s.ev; ++c) gv[c] = 0;
        for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
            for (i64 i = s.causal ? j : 0; i < s.lq; ++i) {
                const i64 row = (b * s.hq + h) * s.lq + i;
                const T *qi = q + row * s.e, *gi = dout + row * s.ev;
                const double p = probability(score(s, a, b, h, i, j, qi, kj), (double)lse[row]);
                if (p == 0) continue;
                for (i64 c = 0; c < s.ev; ++c) gv[c] = (T)((double)gv[c] + p * (double)gi[c]);
                const double d = dot(gi, out + row * s.ev, s.ev);
                const double ds = p * (dot(gi, vj, s.ev) - d) * a.floats[0];
                for (i64 c = 0; c < s.e; ++c) gk[c] = (T)((double)gk[c] + ds * (double)qi[c]);
            }
        }
    }
}

#define ATTENTION_ENTRY(T, DT)                                                                 \
    extern "C" __global__ void mg_attention_##DT(const MgArgs a) { forward<T>(a); }          \
    extern "C" __global__ void mg_attention_backward_##DT##_dq(const MgArgs a) {             \
        backward_dq<T>(a);                                                                     \
    }                                                                                          \
    extern "C" __global__ void mg_attention_backward_##DT##_dkv(const MgArgs a) {            \
        backward_dkv<T>(a);                                                                    \
    }

ATTENTION_ENTRY(float, f32)
ATTENTION_ENTRY(double, f64)
