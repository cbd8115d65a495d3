// The block tile of a matrix product, shared by the GEMM (gemm.cu) and the implicit-GEMM
// convolutions (conv.cu): C[i, j] = sum over p of A(i, p) B(p, j), for i < m, j < n, p < k.
//
// Design: each block computes a BM x BN tile of C from BK-deep slices of A and B staged in shared
// memory (A stored transposed there, so a thread reads its TM rows as one contiguous run); each
// thread keeps a TM x TN block of C in registers and does TM * TN multiply-adds per TM + TN
// shared loads. How A and B are read and C written is the caller's `Op`: a strided matrix, or
// the im2col view of an image that is never materialised. Op provides
//   i64 m, n, k;
//   bool a_down;    // consecutive threads load along i (else along p): A's unit stride
//   bool b_across;  // consecutive threads load along j (else along p)
//   T a(i64 i, i64 p) const; T b(i64 p, i64 j) const;  // called in range only
//   void store(i64 i, i64 j, Acc v) const;             // called in range only
// Integer products accumulate in unsigned arithmetic: they wrap, as the CPU's.
#pragma once
#include "reduce_block.cuh"

template <class T> struct Accum { typedef T type; };
template <> struct Accum<int> { typedef unsigned type; };
template <> struct Accum<i64> { typedef u64 type; };

// BM x BN tile per block of (BM / TM) * (BN / TN) threads, BK deep
template <int BM_, int BN_, int BK_, int TM_, int TN_> struct Tile {
    static const int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
    static const int THREADS = (BM / TM) * (BN / TN);
};
typedef Tile<128, 128, 8, 8, 8> Large;
typedef Tile<64, 64, 8, 4, 4> Small;

// A thread's share of the slices at p0: A_PER elements of A's (BM x BK) slice and B_PER of
// B's (BK x BN), zero outside the matrices; consecutive threads walk an operand's unit stride.
template <class T, class C> struct Staged {
    static const int A_PER = C::BM * C::BK / C::THREADS, B_PER = C::BK * C::BN / C::THREADS;
    T a[A_PER], b[B_PER];

    template <class Op> __device__ __forceinline__ void load(const Op& op, i64 m0, i64 n0, i64 p0) {
#pragma unroll
        for (int t = 0; t < A_PER; ++t) {
            const int l = threadIdx.x + t * C::THREADS;
            const int i = op.a_down ? l % C::BM : l / C::BK, p = op.a_down ? l / C::BM : l % C::BK;
            const i64 gi = m0 + i, gp = p0 + p;
            a[t] = gi < op.m && gp < op.k ? op.a(gi, gp) : T(0);
        }
#pragma unroll
        for (int t = 0; t < B_PER; ++t) {
            const int l = threadIdx.x + t * C::THREADS;
            const int j = op.b_across ? l % C::BN : l / C::BK;
            const int p = op.b_across ? l / C::BN : l % C::BK;
            const i64 gj = n0 + j, gp = p0 + p;
            b[t] = gj < op.n && gp < op.k ? op.b(gp, gj) : T(0);
        }
    }

    template <class Op>
    __device__ __forceinline__ void store(const Op& op, T (*As)[C::BM + 4],
                                          T (*Bs)[C::BN + 4]) const {
#pragma unroll
        for (int t = 0; t < A_PER; ++t) {
            const int l = threadIdx.x + t * C::THREADS;
            if (op.a_down) As[l / C::BM][l % C::BM] = a[t];
            else As[l % C::BK][l / C::BK] = a[t];
        }
#pragma unroll
        for (int t = 0; t < B_PER; ++t) {
            const int l = threadIdx.x + t * C::THREADS;
            if (op.b_across) Bs[l / C::BN][l % C::BN] = b[t];
            else Bs[l % C::BK][l / C::BK] = b[t];
        }
    }
};

// 16-byte vectors: a thread reads its TM (TN) neighbouring values of a shared row in
// TM * sizeof(T) / 16 loads instead of TM
template <class T> struct Vec16;
template <> struct Vec16<float> { typedef float4 type; };
template <> struct Vec16<double> { typedef double2 type; };
template <> struct Vec16<int> { typedef int4 type; };
template <> struct Vec16<i64> { typedef longlong2 type; };

template <class T, int N, class A> __device__ __forceinline__ void load_run(const T* src, A* dst) {
    typedef typename Vec16<T>::type V;
    const int per = (int)(sizeof(V) / sizeof(T));
#pragma unroll
    for (int v = 0; v < N / per; ++v) {
        const V q = reinterpret_cast<const V*>(src)[v];
        const T* e = reinterpret_cast<const T*>(&q);
#pragma unroll
        for (int t = 0; t < per; ++t) dst[v * per + t] = (A)e[t];
    }
}

// The columns of C a thread owns: TN neighbours, or, when half of them fill whole 16-byte
// vectors, two runs of TN / 2 half a tile apart. Two runs make a warp's loads of a B row hit
// every shared-memory bank once (neighbouring threads read neighbouring 16 bytes) and its
// stores of C contiguous; one run of 32 bytes per thread would load at two-way bank conflict.
template <class T, class C> struct Columns {
    static const int PER = (int)(16 / sizeof(T)), HALF = C::TN / 2;
    static const bool SPLIT = HALF % PER == 0;
    __device__ static int at(int tx, int s) {
        return SPLIT ? (s / HALF) * (C::BN / 2) + tx * HALF + s % HALF : tx * C::TN + s;
    }
    template <class A> __device__ static void load(const T* row, int tx, A* rb) {
        if (SPLIT) {
            load_run<T, HALF>(row + tx * HALF, rb);
            load_run<T, HALF>(row + C::BN / 2 + tx * HALF, rb + HALF);
        } else {
            load_run<T, C::TN>(row + tx * C::TN, rb);
        }
    }
};

// The tile of C at (m0, n0); every thread of the block calls it. The next slices are loaded
// into registers while the current ones are multiplied, so global latency overlaps the math.
template <class T, class C, class Op> __device__ void mg_gemm_tile(const Op& op, i64 m0, i64 n0) {
    typedef typename Accum<T>::type A;
    // padded rows (stores down a column spread over the banks), 16-byte aligned for load_run
    __shared__ __align__(16) T As[C::BK][C::BM + 4];
    __shared__ __align__(16) T Bs[C::BK][C::BN + 4];
    const int tx = threadIdx.x % (C::BN / C::TN), ty = threadIdx.x / (C::BN / C::TN);
    A acc[C::TM][C::TN];
#pragma unroll
    for (int r = 0; r < C::TM; ++r)
#pragma unroll
        for (int s = 0; s < C::TN; ++s) acc[r][s] = A(0);
    Staged<T, C> next;
    if (op.k > 0) next.load(op, m0, n0, 0);
    for (i64 p0 = 0; p0 < op.k; p0 += C::BK) {
        next.store(op, As, Bs);
        __syncthreads();
        if (p0 + C::BK < op.k) next.load(op, m0, n0, p0 + C::BK);
#pragma unroll
        for (int p = 0; p < C::BK; ++p) {
            A ra[C::TM], rb[C::TN];
            load_run<T, C::TM>(&As[p][ty * C::TM], ra);
            Columns<T, C>::load(Bs[p], tx, rb);
#pragma unroll
            for (int r = 0; r < C::TM; ++r)
#pragma unroll
                for (int s = 0; s < C::TN; ++s) acc[r][s] += ra[r] * rb[s];
        }
        __syncthreads();  // the next slices overwrite the tiles
    }
#pragma unroll
    for (int r = 0; r < C::TM; ++r) {
        const i64 i = m0 + ty * C::TM + r;
#pragma unroll
        for (int s = 0; s < C::TN; ++s) {
            const i64 j = n0 + Columns<T, C>::at(tx, s);
            if (i < op.m && j < op.n) op.store(i, j, acc[r][s]);
        }
    }
}

// float32 takes the large tile (the small one for products of few tiles: a `_small` entry);
// 8 x 8 accumulators of 8 bytes would spill, so the 8-byte types take the small tile.
template <class T> struct TileFor { typedef Small type; };
template <> struct TileFor<float> { typedef Large type; };
