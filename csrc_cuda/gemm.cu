// Matrix products: batched matmul with broadcast batch dims, and linear (x w^T + bias, relu).
//
// Parameters: the CPU's (mgegraph/_kernels/linalg.pyx, packed by lowering/matmul.py):
//   matmul: ints [m, n, k, transpose_a, transpose_b, ndim, batch shape, a strides, b strides]
//           (batch strides in elements, 0 where broadcast); buffers a, b, c (c contiguous)
//   linear: ints [m, n, k, has_bias, relu]; buffers x, w, [bias,] y
// A is (m, k), or (k, m) stored when transposed; B is (k, n), or (n, k) when transposed.
//
// Design: each block computes a BM x BN tile of C from BK-deep slices of A and B staged in shared
// memory (A stored transposed there, so a thread reads its TM rows as one contiguous run); each
// thread keeps a TM x TN block of C in registers and does TM * TN multiply-adds per TM + TN
// shared loads. Tiles are loaded along whichever of an operand's strides is 1, so transposed
// operands are read coalesced too. Integer products accumulate in unsigned arithmetic: they
// wrap, as the CPU's. The bias and relu epilogue (the epilogue pass) is applied as the tile is
// written, with the relu op's own scalar function (scalar.cuh), as the CPU's linear does.
#include "mg_abi.cuh"
#include "reduce_block.cuh"
#include "scalar.cuh"

template <class T> struct Accum { typedef T type; };
template <> struct Accum<int> { typedef unsigned type; };
template <> struct Accum<i64> { typedef u64 type; };

struct Product {  // one (batch element's) product: A(i, p) at a[i ai + p ap], B(p, j) at b[p bp + j bj]
    i64 m, n, k, ai, ap, bp, bj;
};

// BM x BN tile per block of (BM / TM) * (BN / TN) threads, BK deep
template <int BM_, int BN_, int BK_, int TM_, int TN_> struct Tile {
    static const int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
    static const int THREADS = (BM / TM) * (BN / TN);
};
typedef Tile<128, 128, 8, 8, 8> Large;
typedef Tile<64, 64, 8, 4, 4> Small;

struct Epilogue {
    const void* bias;  // n values, or null
    bool relu;
};

// Stage A's (BM x BK) and B's (BK x BN) slices at (m0, p0) and (p0, n0), zero outside.
template <class T, class C>
__device__ __forceinline__ void load_tiles(const T* a, const T* b, const Product& g, i64 m0,
                                           i64 n0, i64 p0, T (*As)[C::BM + 4],
                                           T (*Bs)[C::BN + 4]) {
    const int tid = threadIdx.x;
    for (int l = tid; l < C::BM * C::BK; l += C::THREADS) {
        const bool down = g.ai == 1;  // consecutive threads walk A's unit stride
        const int i = down ? l % C::BM : l / C::BK, p = down ? l / C::BM : l % C::BK;
        const i64 gi = m0 + i, gp = p0 + p;
        As[p][i] = gi < g.m && gp < g.k ? a[gi * g.ai + gp * g.ap] : T(0);
    }
    for (int l = tid; l < C::BK * C::BN; l += C::THREADS) {
        const bool across = g.bj == 1;
        const int j = across ? l % C::BN : l / C::BK, p = across ? l / C::BN : l % C::BK;
        const i64 gj = n0 + j, gp = p0 + p;
        Bs[p][j] = gj < g.n && gp < g.k ? b[gp * g.bp + gj * g.bj] : T(0);
    }
}

template <class T, class C>
__device__ void gemm_tile(const T* a, const T* b, T* c, const Product g, Epilogue e, i64 m0,
                          i64 n0) {
    typedef typename Accum<T>::type A;
    __shared__ T As[C::BK][C::BM + 4];  // padded: stores down a column hit every bank
    __shared__ T Bs[C::BK][C::BN + 4];
    const int tx = threadIdx.x % (C::BN / C::TN), ty = threadIdx.x / (C::BN / C::TN);
    A acc[C::TM][C::TN];
#pragma unroll
    for (int r = 0; r < C::TM; ++r)
#pragma unroll
        for (int s = 0; s < C::TN; ++s) acc[r][s] = A(0);
    for (i64 p0 = 0; p0 < g.k; p0 += C::BK) {
        load_tiles<T, C>(a, b, g, m0, n0, p0, As, Bs);
        __syncthreads();
#pragma unroll
        for (int p = 0; p < C::BK; ++p) {
            A ra[C::TM], rb[C::TN];
#pragma unroll
            for (int r = 0; r < C::TM; ++r) ra[r] = (A)As[p][ty * C::TM + r];
#pragma unroll
            for (int s = 0; s < C::TN; ++s) rb[s] = (A)Bs[p][tx * C::TN + s];
#pragma unroll
            for (int r = 0; r < C::TM; ++r)
#pragma unroll
                for (int s = 0; s < C::TN; ++s) acc[r][s] += ra[r] * rb[s];
        }
        __syncthreads();  // the next slice overwrites the tiles
    }
    const T* bias = (const T*)e.bias;
#pragma unroll
    for (int r = 0; r < C::TM; ++r) {
        const i64 i = m0 + ty * C::TM + r;
#pragma unroll
        for (int s = 0; s < C::TN; ++s) {
            const i64 j = n0 + tx * C::TN + s;
            if (i >= g.m || j >= g.n) continue;
            T v = (T)acc[r][s];
            if (bias) v = v + bias[j];
            if (e.relu) v = m_relu(v);
            c[i * g.n + j] = v;
        }
    }
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
    const Product g{m, n, k, ta ? 1 : k, ta ? m : 1, tb ? 1 : n, tb ? k : 1};
    const T* A = (const T*)a.bufs[0];
    const T* B = (const T*)a.bufs[1];
    T* Cm = (T*)a.bufs[2];
    for (i64 z = blockIdx.z; z < batch; z += gridDim.z)
        for (i64 ty = blockIdx.y; ty * C::BM < m; ty += gridDim.y)
            gemm_tile<T, C>(A + mg_offset(z, nd, shape, sa), B + mg_offset(z, nd, shape, sb),
                            Cm + z * m * n, g, Epilogue{nullptr, false}, ty * C::BM,
                            (i64)blockIdx.x * C::BN);
}

template <class T, class C> __device__ void linear(const MgArgs& a) {
    const i64* q = a.ints;
    const i64 m = q[0], n = q[1], k = q[2];
    const bool has_bias = q[3] != 0;
    const Product g{m, n, k, k, 1, 1, k};  // y = x w^T: B(p, j) = w[j, p]
    const Epilogue e{has_bias ? a.bufs[2] : nullptr, q[4] != 0};
    for (i64 ty = blockIdx.y; ty * C::BM < m; ty += gridDim.y)
        gemm_tile<T, C>((const T*)a.bufs[0], (const T*)a.bufs[1], (T*)a.bufs[has_bias ? 3 : 2],
                        g, e, ty * C::BM, (i64)blockIdx.x * C::BN);
}

// float32 takes the large tile (the small one for products of few tiles: the `_small` entry);
// 8 x 8 accumulators of 8 bytes would spill, so the 8-byte types take the small tile.
template <class T> struct TileFor { typedef Small type; };
template <> struct TileFor<float> { typedef Large type; };

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
