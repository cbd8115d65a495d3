// Matrix products: batched matmul with broadcast batch dims, and linear (x w^T + bias, relu).
//
// Parameters: the CPU's (mgegraph/_kernels/linalg.pyx, packed by lowering/matmul.py):
//   matmul: ints [m, n, k, transpose_a, transpose_b, ndim, batch shape, a strides, b strides]
//           (batch strides in elements, 0 where broadcast); buffers a, b, c (c contiguous)
//   linear: ints [m, n, k, has_bias, relu]; buffers x, w, [bias,] y
// A is (m, k), or (k, m) stored when transposed; B is (k, n), or (n, k) when transposed.
//
// Design: the block tile of gemm_tile.cuh over strided operands, loaded along whichever of an
// operand's strides is 1, so transposed operands are read coalesced too. The bias and relu
// epilogue (the epilogue pass) is applied as the tile is written, with the relu op's own scalar
// function (scalar.cuh), as the CPU's linear does.
#include "mg_abi.cuh"
#include "gemm_tile.cuh"
#include "scalar.cuh"

// A(i, p) at a[i ai + p ap], B(p, j) at b[p bp + j bj], C row-major (m, n) with the epilogue
template <class T> struct Strided {
    i64 m, n, k, ai, ap, bp, bj;
    bool a_down, b_across;
    const T *A, *B, *bias;
    T* C;
    bool relu;
    __device__ T a(i64 i, i64 p) const { return A[i * ai + p * ap]; }
    __device__ T b(i64 p, i64 j) const { return B[p * bp + j * bj]; }
    template <class V> __device__ void store(i64 i, i64 j, V acc) const {
        T v = (T)acc;
        if (bias) v = v + bias[j];
        if (relu) v = m_relu(v);
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
    s.relu = false;
    return s;
}

// Every (tile row, tile column, batch element) of the grid, striding past the grid's limits.
template <class T, class C> __device__ void matmul(const MgArgs& a) {
    const i64* q = a.ints;
    const i64 m = q[0], n = q[1], k = q[2];
    const bool ta = q[3] != 0, tb = q[4] != 0;
    const int nd = (int)q[5];
    const i64 *shape = q + 6, *sa = shape + nd, *sb = sa + nd;
    i64 batch = 1;
    for (int d = 0; d < nd; ++d) batch *= shape[d];
    Strided<T> op = strided<T>(m, n, k, ta ? 1 : k, ta ? m : 1, tb ? 1 : n, tb ? k : 1);
    for (i64 z = blockIdx.z; z < batch; z += gridDim.z) {
        op.A = (const T*)a.bufs[0] + mg_offset(z, nd, shape, sa);
        op.B = (const T*)a.bufs[1] + mg_offset(z, nd, shape, sb);
        op.C = (T*)a.bufs[2] + z * m * n;
        for (i64 ty = blockIdx.y; ty * C::BM < m; ty += gridDim.y)
            mg_gemm_tile<T, C>(op, ty * C::BM, (i64)blockIdx.x * C::BN);
    }
}

template <class T, class C> __device__ void linear(const MgArgs& a) {
    const i64* q = a.ints;
    const i64 m = q[0], n = q[1], k = q[2];
    const bool has_bias = q[3] != 0;
    Strided<T> op = strided<T>(m, n, k, k, 1, 1, k);  // y = x w^T: B(p, j) = w[j, p]
    op.A = (const T*)a.bufs[0];
    op.B = (const T*)a.bufs[1];
    op.bias = has_bias ? (const T*)a.bufs[2] : nullptr;
    op.C = (T*)a.bufs[has_bias ? 3 : 2];
    op.relu = q[4] != 0;
    for (i64 ty = blockIdx.y; ty * C::BM < m; ty += gridDim.y)
        mg_gemm_tile<T, C>(op, ty * C::BM, (i64)blockIdx.x * C::BN);
}

#define MG_GEMM_ENTRY(KIND, T, NAME)                                                          \
    extern "C" __global__ void __launch_bounds__(TileFor<T>::type::THREADS)                  \
        mg_##KIND##_##NAME(const MgArgs a) { KIND<T, TileFor<T>::type>(a); }
#define MG_GEMM_SMALL_ENTRY(KIND)                                                             \
    extern "C" __global__ void __launch_bounds__(Small::THREADS)                             \
        mg_##KIND##_f32_small(const MgArgs a) { KIND<float, Small>(a); }

MG_GEMM_ENTRY(matmul, float, f32)
MG_GEMM_ENTRY(matmul, double, f64)
MG_GEMM_ENTRY(matmul, int, i32)
MG_GEMM_ENTRY(matmul, i64, i64)
MG_GEMM_ENTRY(linear, float, f32)
MG_GEMM_ENTRY(linear, double, f64)
MG_GEMM_SMALL_ENTRY(matmul)
MG_GEMM_SMALL_ENTRY(linear)
