// Reductions over any set of axes: sum, prod, mean, var, max, min, argmax, argmin.
//
// Parameters: the CPU's (mgegraph/_kernels/reduce.pyx, packed by lowering/reduce.py):
//   ints = [op, kept_ndim, kept shape, kept strides, ndr, reduced shape, reduced strides]
// the input read as (kept dims..., reduced dims...) through element strides; the output is
// contiguous over the kept dims. Buffers: x, y, then (split launches only) the workspace.
//
// Semantics are the CPU kernel's: float sums and products accumulate in double, integer ones
// wrap in uint64 (results int64); mean and var divide by the count (0 / 0 is NaN when empty);
// var is two-pass (mean, then squared deviations); max/min propagate NaN; argmax/argmin give
// the first index (flat within the reduced axes) of the extreme, or of the first NaN.
//
// Design: `mg_reduce_<dt>` gives each output a group of blockDim.x threads (a warp when there
// are many outputs, a 256-thread block when few) that stride over the reduced elements, then
// combine through shuffles and shared memory. When few outputs have very many elements each,
// `_part` splits every output's elements over gridDim.x blocks, each writing one Partial to the
// workspace (var as Chan's (count, mean, M2), so no pass needs the global mean), and `_final`
// combines them in a fixed order. Only the order of additions differs from the CPU's.
#include "mg_abi.cuh"
#include "reduce_block.cuh"

enum { R_SUM, R_PROD, R_MEAN, R_VAR, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN };

template <class T> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<float> { static const bool value = true; };
template <> struct IsFloat<double> { static const bool value = true; };

template <class T> __device__ __forceinline__ bool is_nan(T v) { return false; }
template <> __device__ __forceinline__ bool is_nan<float>(float v) { return isnan(v); }
template <> __device__ __forceinline__ bool is_nan<double>(double v) { return isnan(v); }

template <class T> struct Moment { typedef double type; };  // mean/var: float32 stays float32
template <> struct Moment<float> { typedef float type; };

template <class T> struct Acc {
    double d;  // float sums, products, moments
    u64 u;     // integer sums and products, wrapping
    i64 i;     // max/min/arg*: the flat index of v; -1 while no element was seen
    T v;
};

template <class T> __device__ Acc<T> identity(int op) {
    Acc<T> a;
    a.d = op == R_PROD ? 1.0 : 0.0;
    a.u = op == R_PROD ? 1ull : 0ull;
    a.i = -1;
    a.v = T(0);
    return a;
}

// Whether (v, j) replaces (best, bj) as the extreme: NaN beats every number, an earlier index
// wins ties (so combining in any order gives the first extreme, as NumPy's).
template <class T>
__device__ __forceinline__ bool beats(T v, i64 j, T best, i64 bj, bool want_max) {
    if (j < 0) return false;
    if (bj < 0) return true;
    const bool vn = is_nan(v), bn = is_nan(best);
    if (vn || bn) return vn && (!bn || j < bj);
    if (v == best) return j < bj;
    return want_max ? v > best : v < best;
}

template <class T> struct Combine {
    int op;
    __device__ Acc<T> operator()(Acc<T> a, const Acc<T>& b) const {
        if (op >= R_MAX) {
            if (beats(b.v, b.i, a.v, a.i, op == R_MAX || op == R_ARGMAX)) { a.v = b.v; a.i = b.i; }
        } else if (op == R_PROD) {
            a.d *= b.d;
            a.u *= b.u;
        } else {
            a.d += b.d;
            a.u += b.u;
        }
        return a;
    }
    __device__ static Acc<T> shfl(Acc<T> a, int m) {
        a.d = mg_shfl(a.d, m);
        a.u = mg_shfl(a.u, m);
        a.i = mg_shfl(a.i, m);
        a.v = mg_shfl(a.v, m);
        return a;
    }
};

// One element into the accumulator; `centre` is the mean in var's second pass.
template <class T>
__device__ __forceinline__ void fold(Acc<T>& a, T v, i64 j, int op, double centre, bool squares) {
    if (op >= R_MAX) {
        if (beats(v, j, a.v, a.i, op == R_MAX || op == R_ARGMAX)) { a.v = v; a.i = j; }
    } else if (op == R_PROD) {
        a.d *= (double)v;
        a.u *= (u64)(i64)v;
    } else if (squares) {
        const double d = (double)v - centre;
        a.d += d * d;
    } else {
        a.d += (double)v;
        a.u += (u64)(i64)v;  // negative integers wrap modulo 2**64, as the CPU's
    }
}

struct Layout {  // the parameter block, parsed
    int op, ndo, ndr;
    const i64 *oshape, *ostride, *rshape, *rstride;
    i64 nout, nred;
};

__device__ Layout parse(const MgArgs& a) {
    Layout L;
    L.op = (int)a.ints[0];
    L.ndo = (int)a.ints[1];
    L.oshape = a.ints + 2;
    L.ostride = L.oshape + L.ndo;
    L.ndr = (int)L.ostride[L.ndo];
    L.rshape = L.ostride + L.ndo + 1;
    L.rstride = L.rshape + L.ndr;
    L.nout = 1;
    L.nred = 1;
    for (int d = 0; d < L.ndo; ++d) L.nout *= L.oshape[d];
    for (int d = 0; d < L.ndr; ++d) L.nred *= L.rshape[d];
    return L;
}

// Elements [j0, j1) of one output's reduced block, strided over the group's threads.
template <class T>
__device__ Acc<T> fold_range(const T* base, const Layout& L, i64 j0, i64 j1, double centre,
                             bool squares) {
    Acc<T> acc = identity<T>(squares ? R_SUM : L.op);
    for (i64 j = j0 + threadIdx.x; j < j1; j += blockDim.x)
        fold(acc, base[mg_offset(j, L.ndr, L.rshape, L.rstride)], j, L.op, centre, squares);
    return acc;
}

// The output value of `acc`: moments get divided by the count; the dtype is
// mgegraph.ops.reduce.result_dtype's.
template <class T> __device__ void store(char* y, i64 o, const Acc<T>& acc, int op, double n) {
    typedef typename Moment<T>::type M;
    if (op >= R_ARGMAX) {
        ((i64*)y)[o] = acc.i < 0 ? 0 : acc.i;
    } else if (op >= R_MAX) {
        ((T*)y)[o] = acc.v;
    } else if (op == R_MEAN || op == R_VAR) {
        ((M*)y)[o] = (M)(acc.d / n);
    } else if (IsFloat<T>::value) {
        ((T*)y)[o] = (T)acc.d;
    } else {
        ((i64*)y)[o] = (i64)acc.u;
    }
}

template <class T> __device__ void reduce_groups(const MgArgs& a) {
    __shared__ Acc<T> smem[32];
    const Layout L = parse(a);
    const T* x = (const T*)a.bufs[0];
    const Combine<T> comb{L.op};
    const Combine<T> add{R_SUM};
    for (i64 o = (i64)blockIdx.x * blockDim.y + threadIdx.y; o < L.nout;
         o += (i64)gridDim.x * blockDim.y) {  // uniform over a block-wide group
        const T* base = x + mg_offset(o, L.ndo, L.oshape, L.ostride);
        Acc<T> acc = mg_group_reduce(fold_range(base, L, 0, L.nred, 0.0, false), comb, smem);
        if (L.op == R_VAR) {
            const double mean = acc.d / (double)L.nred;
            acc = mg_group_reduce(fold_range(base, L, 0, L.nred, mean, true), add, smem);
        }
        if (threadIdx.x == 0) store(a.bufs[1], o, acc, L.op, (double)L.nred);
    }
}

// -- split launches: few outputs of many elements -----------------------------------------------
template <class T> struct Partial {
    Acc<T> acc;
    double mean, m2;  // var: Chan's statistics of this block's elements
    i64 n;
};
static_assert(sizeof(Partial<double>) <= 64, "lowering/cuda reduce.py: PARTIAL_BYTES is 64");
#define MG_PARTIAL_BYTES 64
#define MG_SPLIT_HEADER 64  // the workspace starts with the number of parts, as an i64

template <class T> __device__ Partial<T>* partial_at(char* ws, i64 o, i64 parts, i64 b) {
    return (Partial<T>*)(ws + MG_SPLIT_HEADER + (o * parts + b) * MG_PARTIAL_BYTES);
}

// grid (parts, outputs), one block-wide group per (part, output).
template <class T> __device__ void reduce_part(const MgArgs& a) {
    __shared__ Acc<T> smem[32];
    const Layout L = parse(a);
    char* ws = a.bufs[2];
    const i64 parts = gridDim.x, o = blockIdx.y, b = blockIdx.x;
    const i64 len = (L.nred + parts - 1) / parts;
    const i64 j0 = b * len < L.nred ? b * len : L.nred;
    const i64 j1 = j0 + len < L.nred ? j0 + len : L.nred;
    const T* base = (const T*)a.bufs[0] + mg_offset(o, L.ndo, L.oshape, L.ostride);
    Partial<T> p;
    p.acc = mg_group_reduce(fold_range(base, L, j0, j1, 0.0, false), Combine<T>{L.op}, smem);
    p.n = j1 - j0;
    p.mean = p.n ? p.acc.d / (double)p.n : 0.0;
    p.m2 = 0.0;
    if (L.op == R_VAR)
        p.m2 = mg_group_reduce(fold_range(base, L, j0, j1, p.mean, true), Combine<T>{R_SUM},
                               smem).d;
    if (threadIdx.x == 0) {
        *partial_at<T>(ws, o, parts, b) = p;
        if (o == 0 && b == 0) *(i64*)ws = parts;
    }
}

// grid (outputs); thread 0 combines the parts in order.
template <class T> __device__ void reduce_final(const MgArgs& a) {
    const Layout L = parse(a);
    char* ws = a.bufs[2];
    const i64 parts = *(const i64*)ws, o = blockIdx.x;
    if (threadIdx.x != 0 || o >= L.nout) return;
    const Combine<T> comb{L.op};
    Partial<T> t = *partial_at<T>(ws, o, parts, 0);
    for (i64 b = 1; b < parts; ++b) {
        const Partial<T> p = *partial_at<T>(ws, o, parts, b);
        if (p.n == 0) continue;
        const double n = (double)(t.n + p.n), delta = p.mean - t.mean;
        t.m2 += p.m2 + delta * delta * (double)t.n * (double)p.n / n;  // Chan et al.
        t.mean += delta * (double)p.n / n;
        t.n += p.n;
        t.acc = comb(t.acc, p.acc);
    }
    if (L.op == R_VAR) t.acc.d = t.m2;
    store(a.bufs[1], o, t.acc, L.op, (double)L.nred);
}

#define MG_REDUCE_ENTRIES(T, NAME)                                                              \
    extern "C" __global__ void mg_reduce_##NAME(const MgArgs a) { reduce_groups<T>(a); }       \
    extern "C" __global__ void mg_reduce_##NAME##_part(const MgArgs a) { reduce_part<T>(a); }  \
    extern "C" __global__ void mg_reduce_##NAME##_final(const MgArgs a) { reduce_final<T>(a); }

MG_REDUCE_ENTRIES(float, f32)
MG_REDUCE_ENTRIES(double, f64)
MG_REDUCE_ENTRIES(int, i32)
MG_REDUCE_ENTRIES(i64, i64)
MG_REDUCE_ENTRIES(unsigned char, bool)
MG_REDUCE_ENTRIES(unsigned char, u8)  // uint8: read as bool is, reduced by value
