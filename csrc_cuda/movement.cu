// Movement kernels: strided copy (transpose, broadcast_to, slice), slice_backward, concat, split,
// take, index_add, gather, scatter_add, pad, pad_backward, fill, one_hot, range.
//
// Parameters: the CPU's (mgegraph/_kernels/movement.pyx, packed by lowering/movement.py), read
// in the same order: a fixed head, the variable arrays its comment there names, a fixed tail.
// Moving data is copying bits, so the moving kernels are written per element size (1, 2, 4,
// 8 bytes) and entered per dtype; the accumulating adjoints and range compute, per dtype.
//
// Semantics are the CPU kernel's and bitwise, but for two things a kernel that cannot stop must
// do otherwise: an index out of range (take, gather, one_hot, index_add, scatter_add) reads as
// zero and adds nothing, and records the CPU's status (mg_fail), so the run raises the CPU's
// KernelError and returns nothing; and the float adjoints that add many values into one place
// (index_add, scatter_add, pad_backward with edge/reflect) add with atomics, in an order that
// varies, so they equal the CPU's within rounding only (integers: exactly).
//
// Design: a thread per output element, grid-striding; adjoints first zero their output in a
// step of their own. No shared memory and no barriers: everything here but the atomic adds runs
// in the host emulation (host_emu.h), which gives atomics their one-thread meaning.
#include "mg_abi.cuh"
#include "movement_index.cuh"

typedef unsigned char u8;

#define MG_FOR_ELEMENTS(count)                                                                \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (i64)gridDim.x * blockDim.x)

// element offset of flat index i (< the shape's product) of a (shape, strides) walk of nd
// dims, C order
__device__ __forceinline__ i64 walk(i64 i, int nd, const i64* shape, const i64* strides) {
    if (nd == 1) return i * strides[0];  // i < shape[0]: no 64-bit division, which is slow
    i64 off = 0;
    for (int d = nd - 1; d >= 0; --d) {
        off += mg_mod(i, shape[d]) * strides[d];
        i = mg_div(i, shape[d]);
    }
    return off;
}

__device__ __forceinline__ i64 product(int nd, const i64* shape) {
    i64 p = 1;
    for (int d = 0; d < nd; ++d) p *= shape[d];
    return p;
}

// NumPy's rule: -n..n-1 are valid, negatives count from the end; -1 when out of range
__device__ __forceinline__ i64 wrap(i64 k, i64 n) {
    if (k < 0) k += n;
    return k >= 0 && k < n ? k : -1;
}

__device__ __forceinline__ i64 index_at(const char* idx, i64 at, bool wide) {
    return wide ? ((const i64*)idx)[at] : (i64)((const int*)idx)[at];
}

// The one-thread meaning on the host; device atomics otherwise (i64 wraps through u64).
#ifdef __CUDACC__
__device__ __forceinline__ void add_to(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void add_to(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void add_to(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void add_to(i64* p, i64 v) { atomicAdd((u64*)p, (u64)v); }
#else
template <class T> inline void add_to(T* p, T v) { *p = (T)(*p + v); }
inline void add_to(int* p, int v) { *p = (int)((unsigned)*p + (unsigned)v); }
inline void add_to(i64* p, i64 v) { *p = (i64)((u64)*p + (u64)v); }
#endif

// -- strided copy and its adjoint -------------------------------------------------------------
// ints: [ndim, shape, input strides, offset]; the output is contiguous
template <class E> __device__ void strided(const MgArgs& a) {
    const int nd = (int)a.ints[0];
    const i64 *shape = a.ints + 1, *strides = shape + nd, offset = strides[nd];
    const E* x = (const E*)a.bufs[0] + offset;
    MG_FOR_ELEMENTS(product(nd, shape))((E*)a.bufs[1])[i] = x[walk(i, nd, shape, strides)];
}

// ints: [ndim, shape, output strides, offset, size]; step 1 zeroes, step 2 places x
template <class E> __device__ void slice_backward_zero(const MgArgs& a) {
    const int nd = (int)a.ints[0];
    MG_FOR_ELEMENTS(a.ints[2 * nd + 2])((E*)a.bufs[1])[i] = E(0);
}

template <class E> __device__ void slice_backward(const MgArgs& a) {
    const int nd = (int)a.ints[0];
    const i64 *shape = a.ints + 1, *strides = shape + nd, offset = strides[nd];
    E* y = (E*)a.bufs[1] + offset;
    MG_FOR_ELEMENTS(product(nd, shape)) y[walk(i, nd, shape, strides)] = ((const E*)a.bufs[0])[i];
}

// -- concat and split: rows of whole elements ---------------------------------------------------
// concat ints: [count, outer, row bytes of each input]; bufs: the inputs, the output
template <class E> __device__ void concat(const MgArgs& a) {
    const i64 n = a.ints[0], outer = a.ints[1];
    const i64* rows = a.ints + 2;
    i64 width = 0;  // of an output row, in elements
    for (i64 k = 0; k < n; ++k) width += rows[k] / (i64)sizeof(E);
    MG_FOR_ELEMENTS(outer * width) {
        const i64 o = mg_div(i, width);
        i64 at = mg_mod(i, width), k = 0;
        while (at >= rows[k] / (i64)sizeof(E)) at -= rows[k++] / (i64)sizeof(E);
        ((E*)a.bufs[n])[i] = ((const E*)a.bufs[k])[o * (rows[k] / (i64)sizeof(E)) + at];
    }
}

// split ints: [count, outer, in_row bytes, then (start, row) bytes per output]; grid.y: output
template <class E> __device__ void split(const MgArgs& a) {
    const i64 n = a.ints[0], outer = a.ints[1], in_row = a.ints[2] / (i64)sizeof(E);
    for (i64 k = blockIdx.y; k < n; k += gridDim.y) {
        const i64 start = a.ints[3 + 2 * k] / (i64)sizeof(E);
        const i64 row = a.ints[4 + 2 * k] / (i64)sizeof(E);
        MG_FOR_ELEMENTS(outer * row)
        ((E*)a.bufs[1 + k])[i] = ((const E*)a.bufs[0])[mg_div(i, row) * in_row + start +
                                                         mg_mod(i, row)];
    }
}

// -- take and its adjoint -----------------------------------------------------------------------
// ints: [index64, outer, axis_length, row, count] (take: row in bytes; index_add: in elements)
template <class E> __device__ void take(const MgArgs& a) {
    const bool wide = a.ints[0] != 0;
    const i64 outer = a.ints[1], n = a.ints[2], row = a.ints[3] / (i64)sizeof(E), m = a.ints[4];
    MG_FOR_ELEMENTS(outer * m * row) {
        const i64 o = mg_div(i, m * row), j = mg_mod(mg_div(i, row), m), b = mg_mod(i, row);
        const i64 k = wrap(index_at(a.bufs[1], j, wide), n);
        if (k < 0) mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);  // the run raises; 0 written
        ((E*)a.bufs[2])[i] = k < 0 ? E(0) : ((const E*)a.bufs[0])[(o * n + k) * row + b];
    }
}

template <class T> __device__ void zero_output(const MgArgs& a, int buf, i64 count) {
    MG_FOR_ELEMENTS(count)((T*)a.bufs[buf])[i] = T(0);
}

template <class T> __device__ void index_add_zero(const MgArgs& a) {
    zero_output<T>(a, 2, a.ints[1] * a.ints[2] * a.ints[3]);
}

// y (outer, n, inner)[:, idx[j]] += x (outer, m, inner)[:, j]
template <class T> __device__ void index_add(const MgArgs& a) {
    const bool wide = a.ints[0] != 0;
    const i64 outer = a.ints[1], n = a.ints[2], inner = a.ints[3], m = a.ints[4];
    MG_FOR_ELEMENTS(outer * m * inner) {
        const i64 o = mg_div(i, m * inner), j = mg_mod(mg_div(i, inner), m);
        const i64 b = mg_mod(i, inner);
        const i64 k = wrap(index_at(a.bufs[1], j, wide), n);
        if (k < 0) mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);
        else add_to((T*)a.bufs[2] + (o * n + k) * inner + b, ((const T*)a.bufs[0])[i]);
    }
}

// -- gather and its adjoint ---------------------------------------------------------------------
// ints: [index64, ndim, shape, x strides, index strides, axis_length, axis_stride(, size)]
struct GatherLayout {
    bool wide;
    int nd;
    const i64 *shape, *xs, *is;
    i64 n, axis_stride, size;
};

__device__ GatherLayout gather_layout(const MgArgs& a) {
    const int nd = (int)a.ints[1];
    const i64* shape = a.ints + 2;
    const i64* tail = shape + 3 * nd;
    return GatherLayout{a.ints[0] != 0, nd, shape, shape + nd, shape + 2 * nd, tail[0], tail[1],
                        tail[2]};
}

template <class E> __device__ void gather(const MgArgs& a) {
    const GatherLayout L = gather_layout(a);
    MG_FOR_ELEMENTS(product(L.nd, L.shape)) {
        const i64 k = wrap(index_at(a.bufs[1], walk(i, L.nd, L.shape, L.is), L.wide), L.n);
        if (k < 0) mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);
        ((E*)a.bufs[2])[i] = k < 0 ? E(0) : ((const E*)a.bufs[0])[walk(i, L.nd, L.shape, L.xs) +
                                                                  k * L.axis_stride];
    }
}

template <class T> __device__ void scatter_add_zero(const MgArgs& a) {
    zero_output<T>(a, 2, gather_layout(a).size);
}

template <class T> __device__ void scatter_add(const MgArgs& a) {
    const GatherLayout L = gather_layout(a);
    MG_FOR_ELEMENTS(product(L.nd, L.shape)) {
        const i64 k = wrap(index_at(a.bufs[1], walk(i, L.nd, L.shape, L.is), L.wide), L.n);
        if (k < 0)
            mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);
        else
            add_to((T*)a.bufs[2] + walk(i, L.nd, L.shape, L.xs) + k * L.axis_stride,
                   ((const T*)a.bufs[0])[i]);
    }
}

// -- pad and its adjoint ------------------------------------------------------------------------
enum { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, PAD_WRAP };

// ints: [mode, ndim, fill_bits, out shape, in shape, before, in strides]
struct PadLayout {
    int mode, nd;
    i64 fill;
    const i64 *out, *in, *before, *strides;
};

__device__ PadLayout pad_layout(const MgArgs& a) {
    const int nd = (int)a.ints[1];
    const i64* out = a.ints + 3;
    return PadLayout{(int)a.ints[0], nd, a.ints[2], out, out + nd, out + 2 * nd, out + 3 * nd};
}

// The input index output index j (less the padding before) reads, or -1 for the constant;
// reflect is periodic with period 2 (n - 1), as NumPy's repeated reflection; wrap with period n.
__device__ __forceinline__ i64 pad_source(int mode, i64 j, i64 n) {
    if (j >= 0 && j < n) return j;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_WRAP) {
        j %= n;
        return j < 0 ? j + n : j;
    }
    if (mode == PAD_EDGE || n == 1) return j < 0 ? 0 : n - 1;
    const i64 p = 2 * (n - 1);
    j %= p;
    if (j < 0) j += p;
    return j >= n ? p - j : j;
}

// the input offset output element i reads, or -1
__device__ i64 pad_offset(const PadLayout& L, i64 i) {
    i64 off = 0;
    for (int d = L.nd - 1; d >= 0; --d) {
        const i64 j = pad_source(L.mode, mg_mod(i, L.out[d]) - L.before[d], L.in[d]);
        if (j < 0) return -1;
        off += j * L.strides[d];
        i = mg_div(i, L.out[d]);
    }
    return off;
}

template <class E> __device__ void pad(const MgArgs& a) {
    const PadLayout L = pad_layout(a);
    MG_FOR_ELEMENTS(product(L.nd, L.out)) {
        const i64 off = pad_offset(L, i);
        ((E*)a.bufs[1])[i] = off < 0 ? (E)L.fill : ((const E*)a.bufs[0])[off];
    }
}

template <class T> __device__ void pad_backward_zero(const MgArgs& a) {
    const PadLayout L = pad_layout(a);
    zero_output<T>(a, 1, product(L.nd, L.in));
}

template <class T> __device__ void pad_backward(const MgArgs& a) {
    const PadLayout L = pad_layout(a);
    MG_FOR_ELEMENTS(product(L.nd, L.out)) {
        const i64 off = pad_offset(L, i);
        if (off >= 0) add_to((T*)a.bufs[1] + off, ((const T*)a.bufs[0])[i]);
    }
}

// -- fills ----------------------------------------------------------------------------------------
template <class E> __device__ void fill(const MgArgs& a) {  // ints: [count, value_bits]
    MG_FOR_ELEMENTS(a.ints[0])((E*)a.bufs[0])[i] = (E)a.ints[1];
}

// ints: [count, classes]; y (count, classes); a class out of range gives a row of zeros and
// fails the run (its first column's thread reports it)
template <class T> __device__ void one_hot(const MgArgs& a) {
    const i64 classes = a.ints[1];
    MG_FOR_ELEMENTS(a.ints[0] * classes) {
        const i64 k = (i64)((const T*)a.bufs[0])[mg_div(i, classes)], j = mg_mod(i, classes);
        if (j == 0 && (k < 0 || k >= classes)) mg_fail(a, MG_STATUS_INDEX_OUT_OF_RANGE);
        ((T*)a.bufs[1])[i] = (T)(k == j);
    }
}

// ints: [count, end_exact]; floats: [start, step, end]. start + i step in double, rounded as
// written (never an FMA), as the CPU's; linspace pins its last value to end.
template <class T> __device__ void range(const MgArgs& a) {
    const i64 n = a.ints[0];
    MG_FOR_ELEMENTS(n) {
#ifdef __CUDACC__
        double v = __dadd_rn(a.floats[0], __dmul_rn((double)i, a.floats[1]));
#else
        double v = a.floats[0] + (double)i * a.floats[1];
#endif
        if (a.ints[1] && i == n - 1) v = a.floats[2];
        ((T*)a.bufs[0])[i] = (T)v;
    }
}

#define MG_ENTRY(NAME, FN, T) \
    extern "C" __global__ void mg_##NAME(const MgArgs a) { FN<T>(a); }
// the moving kernels: one per element size, entered for every dtype of that size
#define MG_MOVING(DT, E)                                                                      \
    MG_ENTRY(strided_##DT, strided, E)                                                        \
    MG_ENTRY(slice_backward_##DT##_zero, slice_backward_zero, E)                              \
    MG_ENTRY(slice_backward_##DT, slice_backward, E)                                          \
    MG_ENTRY(concat_##DT, concat, E)                                                          \
    MG_ENTRY(split_##DT, split, E)                                                            \
    MG_ENTRY(take_##DT, take, E)                                                              \
    MG_ENTRY(gather_##DT, gather, E)                                                          \
    MG_ENTRY(pad_##DT, pad, E)                                                                \
    MG_ENTRY(fill_##DT, fill, E)
// the computing kernels, per numeric dtype
#define MG_NUMERIC(DT, T)                                                                     \
    MG_ENTRY(index_add_##DT##_zero, index_add_zero, T)                                        \
    MG_ENTRY(index_add_##DT, index_add, T)                                                    \
    MG_ENTRY(scatter_add_##DT##_zero, scatter_add_zero, T)                                    \
    MG_ENTRY(scatter_add_##DT, scatter_add, T)                                                \
    MG_ENTRY(pad_backward_##DT##_zero, pad_backward_zero, T)                                  \
    MG_ENTRY(pad_backward_##DT, pad_backward, T)                                              \
    MG_ENTRY(range_##DT, range, T)

MG_MOVING(bool, u8)
MG_MOVING(u8, u8)
MG_MOVING(i8, u8)
MG_MOVING(i16, unsigned short)
MG_MOVING(f16, unsigned short)
MG_MOVING(bf16, unsigned short)
MG_MOVING(f32, unsigned)
MG_MOVING(i32, unsigned)
MG_MOVING(f64, u64)
MG_MOVING(i64, u64)
MG_NUMERIC(f32, float)
MG_NUMERIC(f64, double)
MG_NUMERIC(i32, int)
MG_NUMERIC(i64, i64)
MG_ENTRY(one_hot_i32, one_hot, int)
MG_ENTRY(one_hot_i64, one_hot, i64)
