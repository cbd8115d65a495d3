// Convolutions with unshared weights (local_conv2d) or region-restricted taps
// (region_restricted_conv), with their gradients: what the ops mean is
// mgegraph/ops/local_conv.py's docstring.
//
// Parameters: the CPU's Window struct (mgegraph/_kernels/local_conv.pyx, packed by
// mgegraph/kernel_abi/local_conv.py); no floats, no workspace. Buffers: x, w, then rin, rout
// when `region`, then y (forward) or dy, dx, dw (backward).
//
// Semantics and arithmetic are the CPU kernel's: every output element a gather of products
// in double, in the CPU's order (y over (i, kh, kw), dx over (kh, kw, o), dw over (n, cells)),
// so the host emulation gives the CPU's bits.
//
// Design: no shared memory and no atomics. "_forward" takes a thread per element of y; the
// backward is two steps, "_data" a thread per element of dx and "_weight" a thread per element
// of dw (a shared weight's entry sums every cell of the batch: a long loop per thread, fine
// for the small depthwise filters this op is used with).
#include "mg_abi.cuh"
#include "movement_index.cuh"

struct Window {
    i64 batch, channels, height, width, groups, in_per_group, out_per_group, out_h, out_w;
    i64 kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
    i64 w_group, w_cell, w_in, w_tap, w_out, region, threads;
};

__device__ __forceinline__ i64 source(i64 out, i64 k, i64 stride, i64 pad, i64 dilation) {
    return out * stride - pad + k * dilation;
}

// the output row whose window's tap k reads input row `inp`, or -1
__device__ __forceinline__ i64 target(i64 inp, i64 k, i64 stride, i64 pad, i64 dilation,
                                      i64 size) {
    i64 t = inp + pad - k * dilation;
    if (t < 0 || t % stride) return -1;
    t /= stride;
    return t < size ? t : -1;
}

#define MG_GRID_STRIDE(i, total)                                                              \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (total);                      \
         i += (i64)gridDim.x * blockDim.x)

// the buffer after x, w and (when the op has them) the region ids
__device__ __forceinline__ int rest(const Window& s) { return s.region ? 4 : 2; }

template <class T> __device__ void forward(const MgArgs& a) {
    const Window s = *(const Window*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* w = (const T*)a.bufs[1];
    const int* rin = (const int*)a.bufs[2];
    const int* rout = (const int*)a.bufs[3];
    T* y = (T*)a.bufs[rest(s)];
    const i64 cells = s.out_h * s.out_w, plane = s.height * s.width;
    const i64 channels = s.groups * s.out_per_group;
    MG_GRID_STRIDE(e, s.batch * channels * cells) {
        const i64 cell = mg_mod(e, cells), unit = mg_div(e, cells);
        const i64 n = unit / channels, c = unit % channels;
        const i64 g = c / s.out_per_group, o = c % s.out_per_group;
        const i64 oh = cell / s.out_w, ow = cell % s.out_w;
        const int region_id = s.region ? rout[n * cells + cell] : 0;
        double acc = 0;
        for (i64 i = 0; i < s.in_per_group; ++i) {
            const T* xp = x + (n * s.channels + g * s.in_per_group + i) * plane;
            const T* wp = w + g * s.w_group + cell * s.w_cell + i * s.w_in + o * s.w_out;
            for (i64 kh = 0; kh < s.kernel_h; ++kh) {
                const i64 ih = source(oh, kh, s.stride_h, s.pad_h, s.dilation_h);
                if (ih < 0 || ih >= s.height) continue;
                for (i64 kw = 0; kw < s.kernel_w; ++kw) {
                    const i64 iw = source(ow, kw, s.stride_w, s.pad_w, s.dilation_w);
                    if (iw < 0 || iw >= s.width) continue;
                    if (s.region && rin[n * plane + ih * s.width + iw] != region_id) continue;
                    acc += (double)xp[ih * s.width + iw] * wp[(kh * s.kernel_w + kw) * s.w_tap];
                }
            }
        }
        y[e] = (T)acc;
    }
}

template <class T> __device__ void backward_data(const MgArgs& a) {
    const Window s = *(const Window*)a.ints;
    const T* w = (const T*)a.bufs[1];
    const int* rin = (const int*)a.bufs[2];
    const int* rout = (const int*)a.bufs[3];
    const T* dy = (const T*)a.bufs[rest(s)];
    T* dx = (T*)a.bufs[rest(s) + 1];
    const i64 cells = s.out_h * s.out_w, plane = s.height * s.width;
    MG_GRID_STRIDE(e, s.batch * s.channels * plane) {
        const i64 at = mg_mod(e, plane), unit = mg_div(e, plane);
        const i64 n = unit / s.channels, c = unit % s.channels;
        const i64 g = c / s.in_per_group, i = c % s.in_per_group;
        const i64 ih = at / s.width, iw = at % s.width;
        const int region_id = s.region ? rin[n * plane + at] : 0;
        const T* gp = dy + (n * s.groups + g) * s.out_per_group * cells;
        double acc = 0;
        for (i64 kh = 0; kh < s.kernel_h; ++kh) {
            const i64 oh = target(ih, kh, s.stride_h, s.pad_h, s.dilation_h, s.out_h);
            if (oh < 0) continue;
            for (i64 kw = 0; kw < s.kernel_w; ++kw) {
                const i64 ow = target(iw, kw, s.stride_w, s.pad_w, s.dilation_w, s.out_w);
                if (ow < 0) continue;
                const i64 cell = oh * s.out_w + ow;
                if (s.region && rout[n * cells + cell] != region_id) continue;
                const T* wp = w + g * s.w_group + cell * s.w_cell + i * s.w_in
                              + (kh * s.kernel_w + kw) * s.w_tap;
                for (i64 o = 0; o < s.out_per_group; ++o)
                    acc += (double)gp[o * cells + cell] * wp[o * s.w_out];
            }
        }
        dx[e] = (T)acc;
    }
}

// dw: a thread per entry (g, weight cell, i, tap, o), the CPU's unit order
template <class T> __device__ void backward_weight(const MgArgs& a) {
    const Window s = *(const Window*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const int* rin = (const int*)a.bufs[2];
    const int* rout = (const int*)a.bufs[3];
    const T* dy = (const T*)a.bufs[rest(s)];
    T* dw = (T*)a.bufs[rest(s) + 2];
    const i64 cells = s.out_h * s.out_w, plane = s.height * s.width;
    const i64 wcells = s.w_cell ? cells : 1, taps = s.kernel_h * s.kernel_w;
    MG_GRID_STRIDE(e, s.groups * wcells * s.in_per_group * taps * s.out_per_group) {
        const i64 o = mg_mod(e, s.out_per_group), tap = mg_mod(mg_div(e, s.out_per_group), taps);
        const i64 unit = mg_div(e, s.out_per_group * taps);
        const i64 g = unit / (wcells * s.in_per_group), wcell = unit / s.in_per_group % wcells;
        const i64 i = unit % s.in_per_group;
        const i64 first = s.w_cell ? wcell : 0, last = s.w_cell ? wcell + 1 : cells;
        double acc = 0;
        for (i64 n = 0; n < s.batch; ++n)
            for (i64 cell = first; cell < last; ++cell) {
                const i64 ih = source(cell / s.out_w, tap / s.kernel_w, s.stride_h, s.pad_h,
                                      s.dilation_h);
                const i64 iw = source(cell % s.out_w, tap % s.kernel_w, s.stride_w, s.pad_w,
                                      s.dilation_w);
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                if (s.region && rin[n * plane + ih * s.width + iw] != rout[n * cells + cell])
                    continue;
                acc += (double)x[(n * s.channels + g * s.in_per_group + i) * plane
                                 + ih * s.width + iw]
                       * dy[(n * s.groups * s.out_per_group + g * s.out_per_group + o) * cells
                            + cell];
            }
        dw[g * s.w_group + wcell * s.w_cell + i * s.w_in + tap * s.w_tap + o * s.w_out] =
            (T)acc;
    }
}

#define MG_LOCAL_CONV_ENTRIES(T, DT)                                                          \
    extern "C" __global__ void mg_local_conv_forward_##DT(const MgArgs a) { forward<T>(a); }  \
    extern "C" __global__ void mg_local_conv_data_##DT(const MgArgs a) {                      \
        backward_data<T>(a);                                                                  \
    }                                                                                         \
    extern "C" __global__ void mg_local_conv_weight_##DT(const MgArgs a) {                    \
        backward_weight<T>(a);                                                                \
    }

MG_LOCAL_CONV_ENTRIES(float, f32)
MG_LOCAL_CONV_ENTRIES(double, f64)
