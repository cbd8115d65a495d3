// conv2d (NCHW, groups, stride, padding, dilation, bias and activation epilogue) as an implicit
// GEMM,
// and its two gradients as implicit GEMMs too.
//
// Parameters: the first 19 fields of the CPU's Conv struct (mgegraph/_kernels/conv.pyx, packed
// by lowering/conv.py; kernels/conv.py checks their order at import):
//   ints [batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups, has_bias,
//         path, activation, ...]  (activation: scalar.cuh's MG_ACT_* code; path and what
//         follows choose among the CPU's ways: unused here)
//   conv2d: x, w, [bias,] y;  conv2d_backward_data: w, dy, [bias,] dx (the epilogue pass's
//   bias, added to each sum once complete);  conv2d_backward_filter: x, dy, dw
//
// Design: each convolution is one product per group through gemm_tile.cuh, whose operands are
// read straight from the tensors through the im2col index map (a column is a (channel, tap) of
// the window, a row an output pixel), so no im2col matrix is ever built and no workspace is
// needed. The gradients are products too, each writing every element of its result once (no
// atomics): backward data sums, for an input pixel, the taps of the output pixels that read it;
// backward filter sums over the batch's output pixels, split over blocks when the result has
// few tiles and the batch many pixels. grid.z is the group.
#include "mg_abi.cuh"
#include "gemm_tile.cuh"
#include "scalar.cuh"

struct Conv {
    i64 batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups, has_bias, path,
        activation;
    __device__ i64 cg() const { return mg_div(cin, groups); }
    __device__ i64 ocg() const { return mg_div(cout, groups); }
    __device__ i64 taps() const { return kh * kw; }
};

template <class T> __device__ __forceinline__ T load_x(const T* x, const Conv& c, i64 n, i64 ch,
                                                       i64 y, i64 xx) {
    return y >= 0 && y < c.h && xx >= 0 && xx < c.w ? x[((n * c.cin + ch) * c.h + y) * c.w + xx]
                                                    : T(0);
}

// y[n, g ocg + i, pixel j] = sum over p = (channel, tap) of w[g ocg + i, p] x[n, g cg + p...]
template <class T> struct Forward {
    Conv c;
    i64 g, m, n, k;
    bool a_down = false, b_across = true;
    const T *x, *wt, *bias;
    T* y;
    __device__ T a(i64 i, i64 p) const { return wt[(g * c.ocg() + i) * k + p]; }
    __device__ T b(i64 p, i64 j) const {
        const i64 taps = c.taps(), pix = c.oh * c.ow, ch = mg_div(p, taps);
        const i64 r = mg_div(mg_mod(p, taps), c.kw), s = mg_mod(p, c.kw);
        const i64 img = mg_div(j, pix), oy = mg_div(mg_mod(j, pix), c.ow), ox = mg_mod(j, c.ow);
        return load_x(x, c, img, g * c.cg() + ch, oy * c.sh - c.ph + r * c.dh,
                      ox * c.sw - c.pw + s * c.dw);
    }
    template <class V> __device__ void store(i64 i, i64 j, V acc) const {
        const i64 pix = c.oh * c.ow, oc = g * c.ocg() + i;
        T v = (T)acc;
        if (bias) v = v + bias[oc];
        v = m_activate(v, c.activation);
        y[(mg_div(j, pix) * c.cout + oc) * pix + mg_mod(j, pix)] = v;
    }
};

// dx[n, g cg + i, pixel j] = sum over p = (output channel, tap) of w[.., i, tap] dy[n, .., the
// output pixel whose window puts that tap on j], where one exists
template <class T> struct BackwardData {
    Conv c;
    i64 g, m, n, k;
    bool a_down = false, b_across = true;
    const T *wt, *dy, *bias;
    T* dx;
    __device__ T a(i64 i, i64 p) const {
        const i64 oc = g * c.ocg() + mg_div(p, c.taps());
        return wt[(oc * c.cg() + i) * c.taps() + mg_mod(p, c.taps())];
    }
    __device__ T b(i64 p, i64 j) const {
        const i64 taps = c.taps(), pix = c.h * c.w, oc = g * c.ocg() + mg_div(p, taps);
        const i64 r = mg_div(mg_mod(p, taps), c.kw), s = mg_mod(p, c.kw);
        const i64 img = mg_div(j, pix), y = mg_div(mg_mod(j, pix), c.w), xx = mg_mod(j, c.w);
        const i64 ty = y + c.ph - r * c.dh, tx = xx + c.pw - s * c.dw;
        if (ty < 0 || tx < 0 || mg_mod(ty, c.sh) || mg_mod(tx, c.sw)) return T(0);
        const i64 oy = mg_div(ty, c.sh), ox = mg_div(tx, c.sw);
        if (oy >= c.oh || ox >= c.ow) return T(0);
        return dy[((img * c.cout + oc) * c.oh + oy) * c.ow + ox];
    }
    template <class V> __device__ void store(i64 i, i64 j, V acc) const {
        const i64 pix = c.h * c.w, ch = g * c.cg() + i;
        T v = (T)acc;
        if (bias) v = v + bias[ch];
        dx[(mg_div(j, pix) * c.cin + ch) * pix + mg_mod(j, pix)] = v;
    }
};

// dw[g ocg + i, p = (channel, tap)] = sum over output pixels q of the batch of dy[.., i, q]
// x[.., channel, the cell the tap of q's window reads]; a split product sums the pixels
// [q0, q0 + k) into its own partial result instead
template <class T> struct BackwardFilter {
    Conv c;
    i64 g, m, n, k, q0 = 0;
    bool a_down = false, b_across = false;
    const T *x, *dy;
    T* dw;
    __device__ T a(i64 i, i64 q) const {
        const i64 pix = c.oh * c.ow;
        q += q0;
        return dy[(mg_div(q, pix) * c.cout + g * c.ocg() + i) * pix + mg_mod(q, pix)];
    }
    __device__ T b(i64 q, i64 p) const {
        const i64 taps = c.taps(), pix = c.oh * c.ow, ch = mg_div(p, taps);
        const i64 r = mg_div(mg_mod(p, taps), c.kw), s = mg_mod(p, c.kw);
        q += q0;
        const i64 img = mg_div(q, pix), oy = mg_div(mg_mod(q, pix), c.ow), ox = mg_mod(q, c.ow);
        return load_x(x, c, img, g * c.cg() + ch, oy * c.sh - c.ph + r * c.dh,
                      ox * c.sw - c.pw + s * c.dw);
    }
    template <class V> __device__ void store(i64 i, i64 p, V acc) const {
        dw[(g * c.ocg() + i) * n + p] = (T)acc;
    }
};

template <class T, class C, class Op> __device__ void tiles_of(Op& op) {
    for (i64 g = blockIdx.z; g < op.c.groups; g += gridDim.z) {
        op.g = g;
        for (i64 ty = blockIdx.y; ty * C::BM < op.m; ty += gridDim.y)
            mg_gemm_tile<T, C>(op, ty * C::BM, (i64)blockIdx.x * C::BN);
    }
}

template <class T, class C> __device__ void conv2d(const MgArgs& a) {
    Forward<T> op;
    op.c = *(const Conv*)a.ints;
    const bool nb = op.c.has_bias != 0;
    op.m = op.c.ocg(), op.n = op.c.batch * op.c.oh * op.c.ow, op.k = op.c.cg() * op.c.taps();
    op.x = (const T*)a.bufs[0], op.wt = (const T*)a.bufs[1];
    op.bias = nb ? (const T*)a.bufs[2] : nullptr;
    op.y = (T*)a.bufs[nb ? 3 : 2];
    tiles_of<T, C>(op);
}

template <class T, class C> __device__ void conv2d_backward_data(const MgArgs& a) {
    BackwardData<T> op;
    op.c = *(const Conv*)a.ints;
    op.m = op.c.cg(), op.n = op.c.batch * op.c.h * op.c.w, op.k = op.c.ocg() * op.c.taps();
    const bool nb = op.c.has_bias != 0;
    op.wt = (const T*)a.bufs[0], op.dy = (const T*)a.bufs[1];
    op.bias = nb ? (const T*)a.bufs[2] : nullptr;
    op.dx = (T*)a.bufs[nb ? 3 : 2];
    tiles_of<T, C>(op);
}

template <class T> __device__ BackwardFilter<T> filter_op(const MgArgs& a) {
    BackwardFilter<T> op;
    op.c = *(const Conv*)a.ints;
    op.m = op.c.ocg(), op.n = op.c.cg() * op.c.taps(), op.k = op.c.batch * op.c.oh * op.c.ow;
    op.x = (const T*)a.bufs[0], op.dy = (const T*)a.bufs[1], op.dw = (T*)a.bufs[2];
    return op;
}

template <class T, class C> __device__ void conv2d_backward_filter(const MgArgs& a) {
    BackwardFilter<T> op = filter_op<T>(a);
    tiles_of<T, C>(op);
}

// Split over the batch's pixels (few output tiles, many pixels): grid.z = (split, group); each
// split's partial dw goes to the workspace (after a header holding the number of splits), and
// `_sum` adds the partials in split order, so the result does not depend on timing.
#define MG_FILTER_HEADER 64

template <class T, class C> __device__ void conv2d_backward_filter_split(const MgArgs& a) {
    BackwardFilter<T> op = filter_op<T>(a);
    const i64 groups = op.c.groups, splits = gridDim.z / groups, total = op.k;
    const i64 len = (total + splits - 1) / splits;
    char* ws = a.bufs[3];
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0)
        *(i64*)ws = splits;
    const i64 split = blockIdx.z / groups;
    op.g = blockIdx.z % groups;
    op.q0 = split * len < total ? split * len : total;
    op.k = (op.q0 + len < total ? op.q0 + len : total) - op.q0;
    op.dw = (T*)(ws + MG_FILTER_HEADER) + split * op.c.cout * op.n;
    for (i64 ty = blockIdx.y; ty * C::BM < op.m; ty += gridDim.y)
        mg_gemm_tile<T, C>(op, ty * C::BM, (i64)blockIdx.x * C::BN);
}

template <class T> __device__ void conv2d_backward_filter_sum(const MgArgs& a) {
    const Conv c = *(const Conv*)a.ints;
    const char* ws = a.bufs[3];
    const i64 splits = *(const i64*)ws, size = c.cout * c.cg() * c.taps();
    const T* parts = (const T*)(ws + MG_FILTER_HEADER);
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < size;
         i += (i64)gridDim.x * blockDim.x) {
        T total = parts[i];
        for (i64 s = 1; s < splits; ++s) total = total + parts[s * size + i];
        ((T*)a.bufs[2])[i] = total;
    }
}

#define MG_CONV_ENTRY(KIND, T, NAME)                                                          \
    extern "C" __global__ void __launch_bounds__(TileFor<T>::type::THREADS, 1)                \
        mg_##KIND##_##NAME(const MgArgs a) { KIND<T, TileFor<T>::type>(a); }
#define MG_CONV_SMALL_ENTRY(KIND)                                                             \
    extern "C" __global__ void __launch_bounds__(Small::THREADS, 1)                          \
        mg_##KIND##_f32_small(const MgArgs a) { KIND<float, Small>(a); }

MG_CONV_ENTRY(conv2d, float, f32)
MG_CONV_ENTRY(conv2d, double, f64)
MG_CONV_ENTRY(conv2d_backward_data, float, f32)
MG_CONV_ENTRY(conv2d_backward_data, double, f64)
MG_CONV_ENTRY(conv2d_backward_filter, float, f32)
MG_CONV_ENTRY(conv2d_backward_filter, double, f64)
MG_CONV_SMALL_ENTRY(conv2d)
MG_CONV_SMALL_ENTRY(conv2d_backward_data)
MG_CONV_SMALL_ENTRY(conv2d_backward_filter)

#define MG_FILTER_SPLIT_ENTRIES(T, NAME)                                                      \
    extern "C" __global__ void __launch_bounds__(Small::THREADS, 1)                          \
        mg_conv2d_backward_filter_##NAME##_split(const MgArgs a) {                            \
        conv2d_backward_filter_split<T, Small>(a);                                             \
    }                                                                                          \
    extern "C" __global__ void mg_conv2d_backward_filter_##NAME##_sum(const MgArgs a) {       \
        conv2d_backward_filter_sum<T>(a);                                                      \
    }

MG_FILTER_SPLIT_ENTRIES(float, f32)
MG_FILTER_SPLIT_ENTRIES(double, f64)
