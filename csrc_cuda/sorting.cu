// sort, topk and the scans cumsum, cumprod, cumprod_backward (mgegraph/ops/sorting.py).
//
// Parameters: the CPU's (mgegraph/_kernels/sorting.pyx, packed by kernel_abi/sorting.py):
//   sort/topk: ints [rows, length, k, descending, threads]; buffers x, values, indices (int32),
//              workspace (two int32 arrays of length per sorting thread; threads is here the
//              number of sorting threads, cuda/kernels/sorting.py's sorters)
//   cumsum/cumprod: ints [outer, length, inner, exclusive, reverse, threads]; buffers x, y
//   cumprod_backward: the same ints; buffers x, dy, dx
// (the scans' threads is the CPU's.)
//
// Semantics are the CPU kernel's, bit for bit: the same stable bottom-up merge sort over the
// same insertion-sorted runs (NaN the largest value), and each scan line accumulated in the
// dtype in order, its roundings as written (no FMA contraction), so the results are the CPU's.
//
// Design: a thread per row (sort, up to a workspace budget, then rows in turn) or per line
// (scans, grid-striding); no shared memory, so the host emulation runs these as they are. A
// row's merge sort ping-pongs between its thread's two index arrays in global memory. Simple
// rather than fast: a block-wide sort would be the next step for long rows.
#include "mg_abi.cuh"

typedef long long i64;
typedef int i32;

#define SORT_RUN 16  // sorting.pyx's RUN

// Roundings as written, never fused into an FMA (the CPU's kernels are built without FP
// contraction); integers wrap as the CPU's.
template <class T> __device__ __forceinline__ T scan_add(T a, T b) { return a + b; }
template <class T> __device__ __forceinline__ T scan_mul(T a, T b) { return a * b; }
#ifdef __CUDACC__
template <> __device__ __forceinline__ float scan_add(float a, float b) { return __fadd_rn(a, b); }
template <> __device__ __forceinline__ double scan_add(double a, double b) {
    return __dadd_rn(a, b);
}
template <> __device__ __forceinline__ float scan_mul(float a, float b) { return __fmul_rn(a, b); }
template <> __device__ __forceinline__ double scan_mul(double a, double b) {
    return __dmul_rn(a, b);
}
#endif

template <class T> __device__ __forceinline__ bool is_nan(T) { return false; }
template <> __device__ __forceinline__ bool is_nan(float a) { return a != a; }
template <> __device__ __forceinline__ bool is_nan(double a) { return a != a; }

// a goes strictly before b; NaN counts as the largest value
template <class T> __device__ __forceinline__ bool before(T a, T b, bool descending) {
    if (descending) return a > b || (is_nan(a) && !is_nan(b));
    return a < b || (is_nan(b) && !is_nan(a));
}

template <class T>
__device__ const i32* sort_row(const T* v, i64 n, i32* a, i32* b, bool descending) {
    for (i64 i = 0; i < n; ++i) a[i] = (i32)i;
    for (i64 lo = 0; lo < n; lo += SORT_RUN) {
        const i64 hi = lo + SORT_RUN < n ? lo + SORT_RUN : n;
        for (i64 i = lo + 1; i < hi; ++i) {
            const i32 cur = a[i];
            i64 j = i;
            for (; j > lo && before(v[cur], v[a[j - 1]], descending); --j) a[j] = a[j - 1];
            a[j] = cur;
        }
    }
    for (i64 width = SORT_RUN; width < n; width *= 2) {
        for (i64 lo = 0; lo < n; lo += 2 * width) {
            const i64 mid = lo + width < n ? lo + width : n;
            const i64 hi = lo + 2 * width < n ? lo + 2 * width : n;
            i64 i = lo, j = mid;
            for (i64 out = lo; out < hi; ++out) {  // the right run goes first only when before
                if (i < mid && (j >= hi || !before(v[a[j]], v[a[i]], descending))) b[out] = a[i++];
                else b[out] = a[j++];
            }
        }
        i32* swap = a;
        a = b;
        b = swap;
    }
    return a;
}

template <class T> __device__ void order(const MgArgs& a) {
    const i64 rows = a.ints[0], n = a.ints[1], k = a.ints[2];
    const bool descending = a.ints[3] != 0;
    const T* x = (const T*)a.bufs[0];
    T* values = (T*)a.bufs[1];
    i32* indices = (i32*)a.bufs[2];
    if (n == 0) return;  // nothing to write, and no workspace buffer to read
    // sorter t sorts rows t, t + sorters, ... in its own slot of the workspace
    const i64 sorters = a.ints[4], t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= sorters) return;
    i32* slot = (i32*)a.bufs[3] + 2 * n * t;
    for (i64 row = t; row < rows; row += sorters) {
        const i32* at = sort_row(x + row * n, n, slot, slot + n, descending);
        for (i64 j = 0; j < k; ++j) {
            values[row * k + j] = x[row * n + at[j]];
            indices[row * k + j] = at[j];
        }
    }
}

struct Line {  // one scan line: its first element in scan order and the step to the next
    i64 first, step;
};

__device__ __forceinline__ Line scan_line(const MgArgs& a, i64 line) {
    const i64 L = a.ints[1], M = a.ints[2];
    const i64 first = (line / M) * L * M + line % M;
    return a.ints[4] ? Line{first + (L - 1) * M, -M} : Line{first, M};
}

#define MG_FOR_LINES(a)                                                                       \
    for (i64 line = (i64)blockIdx.x * blockDim.x + threadIdx.x; line < (a).ints[0] * (a).ints[2]; \
         line += (i64)gridDim.x * blockDim.x)

template <class T, bool product> __device__ void scan(const MgArgs& a) {
    const i64 L = a.ints[1];
    const bool exclusive = a.ints[3] != 0;
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[1];
    MG_FOR_LINES(a) {
        const Line s = scan_line(a, line);
        T acc = product ? T(1) : T(0);
        for (i64 p = 0, at = s.first; p < L; ++p, at += s.step) {
            const T cur = x[at];
            if (exclusive) y[at] = acc;
            acc = product ? scan_mul(acc, cur) : scan_add(acc, cur);
            if (!exclusive) y[at] = acc;
        }
    }
}

// dx_p = (product of x before p) * r_p, r_p = dy_p + x_(p+1) r_(p+1) (inclusive) or
// dy_(p+1) + x_(p+1) r_(p+1) (exclusive), p in scan order: no division, right with zeros
template <class T> __device__ void cumprod_backward(const MgArgs& a) {
    const i64 L = a.ints[1];
    const bool exclusive = a.ints[3] != 0;
    const T *x = (const T*)a.bufs[0], *g = (const T*)a.bufs[1];
    T* dx = (T*)a.bufs[2];
    MG_FOR_LINES(a) {
        const Line s = scan_line(a, line);
        T r = T(0);
        for (i64 p = L - 1; p >= 0; --p) {
            const i64 at = s.first + p * s.step;
            if (exclusive) {
                dx[at] = r;
                r = p == L - 1 ? g[at] : scan_add(g[at], scan_mul(x[at], r));
            } else {
                r = p == L - 1 ? g[at] : scan_add(g[at], scan_mul(x[at + s.step], r));
                dx[at] = r;
            }
        }
        T before_p = T(1);
        for (i64 p = 0, at = s.first; p < L; ++p, at += s.step) {
            dx[at] = scan_mul(before_p, dx[at]);
            before_p = scan_mul(before_p, x[at]);
        }
    }
}

#define SORTING_ENTRY(NAME, FN) \
    extern "C" __global__ void mg_##NAME(const MgArgs a) { FN(a); }
#define SORTING_ENTRIES(T, DT)                                                                \
    SORTING_ENTRY(sort_##DT, order<T>)                                                        \
    SORTING_ENTRY(topk_##DT, order<T>)                                                        \
    SORTING_ENTRY(cumsum_##DT, (scan<T, false>))                                              \
    SORTING_ENTRY(cumprod_##DT, (scan<T, true>))                                              \
    SORTING_ENTRY(cumprod_backward_##DT, cumprod_backward<T>)

SORTING_ENTRIES(float, f32)
SORTING_ENTRIES(double, f64)
SORTING_ENTRIES(int, i32)
SORTING_ENTRIES(long long, i64)
