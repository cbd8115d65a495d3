// Matrix products: batched matmul with broadcast batch dims, and linear (x w^T + bias, then an
// activation).
//
// Parameters: the CPU's (mgegraph/_kernels/linalg.pyx, packed by lowering/matmul.py):
//   matmul: ints [m, n, k, transpose_a, transpose_b, ndim, batch shape, a strides, b strides]
//           (batch strides in elements, 0 where broadcast); buffers a, b, c (c contiguous)
//   linear: ints [m, n, k, has_bias, activation]; buffers x, w, [bias,] y (activation: an
//           MG_ACT_* code of scalar.cuh)
// A is (m, k), or (k, m) stored when transposed; B is (k, n), or (n, k) when transposed.
//
// Design: the block tile of gemm_tile.cuh over strided operands, loaded along whichever of an
// operand's strides is 1, so transposed operands are read coalesced too. A product of few tiles
// and a long k splits k over blocks (`_split`, then `_sum` in a fixed order). The bias and activation
// epilogue (the epilogue pass) is applied as the tile is written, with the op's own scalar
// function (scalar.cuh's m_activate), as the CPU's linear does.
#include "mg_abi.cuh"
#include "gemm_tile.cuh"
#include "scalar.cuh"

// A(i, p) at a[i ai + p ap], B(p, j) at b[p bp + j bj], C row-major (m, n) with the epilogue
template <class T> struct Strided {
    i64 m, n, k, ai, ap, bp, bj;
    bool a_down, b_across;
    const T *A, *B, *bias;
    T* C;
    i64 activation;  // MG_ACT_*, or 0
    __device__ T a(i64 i, i64 p) const { return A[i * ai + p * ap]; }
    __device__ T b(i64 p, i64 j) const { return B[p * bp + j * bj]; }
    template <class V> __device__ void store(i64 i, i64 j, V acc) const {
        T v = (T)acc;
        if (bias) v = v + bias[j];
        v = m_activate(v, activation);
        C[i * n + j] = v;
    }
};

template <class T>
__device__ Strided<T> strided(i64 m, i64 n, i64 k, i64 ai, i64 ap, i64 bp, i64 bj) {
    Strided<T> s;
    s.m = m, s.n = n, s.k = k, s.ai = ai, s.ap = ap, s.bp = bp, s.bj = bj;
    s.a_down = ai == 1;
    s.b_across = bj == 1;
    s.bias = nullptr;
    s.activation = 0;
    return s;
}

// matmul's product of batch element z, or linear's product: operands, output and epilogue
template <class T> __device__ Strided<T> matmul_op(const MgArgs& a, i64 z) {
    const i64* q = a.ints;
    const i64 m = q[0], n = q[1], k = q[2];
    const bool ta = q[3] != 0, tb = q[4] != 0;
    const int nd = (int)q[5];
    const i64 *shape = q + 6, *sa = shape + nd, *sb = sa + nd;
    Strided<T> op = strided<T>(m, n, k, ta ? 1 : k, ta ? m : 1, tb ? 1 : n, tb ? k : 1);
    op.A = (const T*)a.bufs[0] + mg_offset(z, nd, shape, sa);
    op.B = (const T*)a.bufs[1] + mg_offset(z, nd, shape, sb);
    op.C = (T*)a.bufs[2] + z * m * n;
    return op;
}

template <class T> __device__ Strided<T> linear_op(const MgArgs& a, i64) {
    const i64* q = a.ints;
    const i64 m = q[0], n = q[1], k = q[2];
    const bool has_bias = q[3] != 0;
    Strided<T> op = strided<T>(m, n, k, k, 1, 1, k);  // y = x w^T: B(p, j) = w[j, p]
    op.A = (const T*)a.bufs[0];
    op.B = (const T*)a.bufs[1];
    op.bias = has_bias ? (const T*)a.bufs[2] : nullptr;
    op.C = (T*)a.bufs[has_bias ? 3 : 2];
    op.activation = q[4];
    return op;
}

struct Matmul {
    template <class T> __device__ static Strided<T> op(const MgArgs& a, i64 z) {
        return matmul_op<T>(a, z);
    }
    __device__ static i64 batch(const MgArgs& a) {
        i64 b = 1;
        for (int d = 0; d < (int)a.ints[5]; ++d) b *= a.ints[6 + d];
        return b;
    }
    __device__ static char* workspace(const MgArgs& a) { return a.bufs[3]; }
};

struct Linear {
    template <class T> __device__ static Strided<T> op(const MgArgs& a, i64 z) {
        return linear_op<T>(a, z);
    }
    __device__ static i64 batch(const MgArgs&) { return 1; }
    __device__ static char* workspace(const MgArgs& a) { return a.bufs[a.ints[3] ? 4 : 3]; }
};

// Every (tile row, tile column, batch element) of the grid, striding past the grid's limits.
template <class T, class C, class K> __device__ void product(const MgArgs& a) {
    const i64 batch = K::batch(a);
    for (i64 z = blockIdx.z; z < batch; z += gridDim.z) {
        const Strided<T> op = K::template op<T>(a, z);
        for (i64 ty = blockIdx.y; ty * C::BM < op.m; ty += gridDim.y)
            mg_gemm_tile<T, C>(op, ty * C::BM, (i64)blockIdx.x * C::BN);
    }
}

// Split-K for products of few tiles and a long k (one batch element): grid.z = split; each
// split's partial product goes to the workspace after a header holding the number of splits,
// and `_sum` adds them in split order (deterministic) and applies the epilogue.
#define MG_SPLIT_HEADER 64

template <class T, class C, class K> __device__ void product_split(const MgArgs& a) {
    Strided<T> op = K::template op<T>(a, 0);
    char* ws = K::workspace(a);
    const i64 splits = gridDim.z, len = (op.k + splits - 1) / splits, s = blockIdx.z;
    const i64 k0 = s * len < op.k ? s * len : op.k;
    const i64 k1 = k0 + len < op.k ? k0 + len : op.k;
    if (blockIdx.x == 0 && blockIdx.y == 0 && s == 0 && threadIdx.x == 0) *(i64*)ws = splits;
    op.A += k0 * op.ap;
    op.B += k0 * op.bp;
    op.k = k1 - k0;
    op.C = (T*)(ws + MG_SPLIT_HEADER) + s * op.m * op.n;
    op.bias = nullptr;
    op.activation = 0;
    for (i64 ty = blockIdx.y; ty * C::BM < op.m; ty += gridDim.y)
        mg_gemm_tile<T, C>(op, ty * C::BM, (i64)blockIdx.x * C::BN);
}

template <class T, class K> __device__ void product_sum(const MgArgs& a) {
    const Strided<T> op = K::template op<T>(a, 0);
    const char* ws = K::workspace(a);
    const i64 splits = *(const i64*)ws, size = op.m * op.n;
    const T* parts = (const T*)(ws + MG_SPLIT_HEADER);
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < size;
         i += (i64)gridDim.x * blockDim.x) {
        typename Accum<T>::type total = parts[i];
        for (i64 p = 1; p < splits; ++p) total += (typename Accum<T>::type)parts[p * size + i];
        op.store(i / op.n, i % op.n, total);
    }
}

#define MG_GEMM_ENTRIES(KIND, K, T, NAME)                                                     \
    extern "C" __global__ void __launch_bounds__(TileFor<T>::type::THREADS, 1)                \
        mg_##KIND##_##NAME(const MgArgs a) { product<T, TileFor<T>::type, K>(a); }            \
    extern "C" __global__ void __launch_bounds__(Small::THREADS, 1)                          \
        mg_##KIND##_##NAME##_split(const MgArgs a) { product_split<T, Small, K>(a); }         \
    extern "C" __global__ void mg_##KIND##_##NAME##_sum(const MgArgs a) {                     \
        product_sum<T, K>(a);                                                                  \
    }
#define MG_GEMM_SMALL_ENTRY(KIND, K)                                                          \
    extern "C" __global__ void __launch_bounds__(Small::THREADS, 1)                          \
        mg_##KIND##_f32_small(const MgArgs a) { product<float, Small, K>(a); }

MG_GEMM_ENTRIES(matmul, Matmul, float, f32)
MG_GEMM_ENTRIES(matmul, Matmul, double, f64)
MG_GEMM_ENTRIES(matmul, Matmul, int, i32)
MG_GEMM_ENTRIES(matmul, Matmul, i64, i64)
MG_GEMM_ENTRIES(linear, Linear, float, f32)
MG_GEMM_ENTRIES(linear, Linear, double, f64)
MG_GEMM_SMALL_ENTRY(matmul, Matmul)
MG_GEMM_SMALL_ENTRY(linear, Linear)
