// matinv (mgegraph/ops/linalg_inv.py): the inverse of each (n, n) matrix of a batch.
//
// Parameters: the CPU's (mgegraph/_kernels/matinv.pyx, packed by kernel_abi/matinv.py), ints
// [batch, n, threads] (threads is the CPU's); buffers a, y, then the workspace: batch * n
// pivot rows (i64).
//
// Semantics are the CPU kernel's: Gauss-Jordan with partial pivoting (the first row of the
// largest magnitude, a NaN only when no number beats 0) in y itself, every product and
// difference rounded as written (never an FMA), so results are bitwise the CPU's. A pivot
// column of exact zeros records MG_STATUS_BAD_VALUE: the run raises the CPU's KernelError (a
// singular matrix).
//
// Design: a thread per matrix, no shared memory. Small matrices are the use (MegEngine's
// tests, geometry); a block per matrix would pay for large ones.
#include "mg_abi.cuh"
#include "movement_index.cuh"
#include "rounded.cuh"

struct Matinv {
    i64 batch, n, threads;
};

template <class T> __device__ i64 pivot_row(const T* y, i64 n, i64 k) {
    i64 best = -1;
    double top = 0;
    for (i64 i = k; i < n; ++i) {
        const double v = fabs((double)y[i * n + k]);
        if (v > top || (best < 0 && v != v)) {  // a NaN only when no number beats 0
            if (v == v) top = v;
            best = i;
        }
    }
    return best;
}

template <class T> __device__ void swap_at(T* y, i64 r, i64 s) {
    const T t = y[r];
    y[r] = y[s];
    y[s] = t;
}

// row k scaled by 1 / pivot and subtracted from the others; column k becomes the inverse's
template <class T> __device__ void eliminate(T* y, i64 n, i64 k) {
    const T inv = (T)1 / y[k * n + k];
    y[k * n + k] = 1;
    for (i64 j = 0; j < n; ++j) y[k * n + j] = mg_mul(y[k * n + j], inv);
    for (i64 i = 0; i < n; ++i) {
        if (i == k) continue;
        const T f = y[i * n + k];
        y[i * n + k] = 0;
        for (i64 j = 0; j < n; ++j)
            y[i * n + j] = mg_add(y[i * n + j], -mg_mul(f, y[k * n + j]));
    }
}

template <class T> __device__ bool invert(T* y, i64 n, i64* pivots) {
    for (i64 k = 0; k < n; ++k) {
        const i64 p = pivot_row(y, n, k);
        if (p < 0) return false;
        pivots[k] = p;
        if (p != k)
            for (i64 j = 0; j < n; ++j) swap_at(y, k * n + j, p * n + j);
        eliminate(y, n, k);
    }
    for (i64 k = n - 1; k >= 0; --k) {
        const i64 p = pivots[k];
        if (p != k)
            for (i64 i = 0; i < n; ++i) swap_at(y, i * n + k, i * n + p);
    }
    return true;
}

template <class T> __device__ void matinv(const MgArgs& a) {
    const Matinv s = *(const Matinv*)a.ints;
    const T* in = (const T*)a.bufs[0];
    T* out = (T*)a.bufs[1];
    i64* pivots = (i64*)a.bufs[2];
    const i64 size = s.n * s.n;
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < s.batch;
         b += (i64)gridDim.x * blockDim.x) {
        for (i64 j = 0; j < size; ++j) out[b * size + j] = in[b * size + j];
        if (!invert(out + b * size, s.n, pivots + b * s.n)) mg_fail(a, MG_STATUS_BAD_VALUE);
    }
}

#define MATINV_ENTRY(T, DT) \
    extern "C" __global__ void mg_matinv_##DT(const MgArgs a) { matinv<T>(a); }

MATINV_ENTRY(float, f32)
MATINV_ENTRY(double, f64)
