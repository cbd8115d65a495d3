// 2-D pooling over NCHW (max, average, adaptive) and the passes its gradients use.
//
// Parameters: the CPU's Pool struct (mgegraph/_kernels/pool.pyx, packed by lowering/pool.py):
//   ints [mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw]
//   pool2d: x, y;  max_pool2d_backward: x, dy, dx;  avg_pool2d_backward: dy, dx;
//   max_pool2d_select: x, h, y (y = h at the argmax of each window of x)
//
// Semantics are the CPU kernel's: a NaN in a window is its maximum; the argmax is the first
// maximum in row-major order, or the first NaN; averages sum in double and divide once; the
// backward passes add dy (or dy / divisor, in the dtype) in the CPU's order, so every result is
// bitwise the CPU's.
//
// Design: no atomics and no shared memory. Forward passes and select take a thread per output;
// the backward passes gather instead of scattering: a thread per input cell adds the gradients
// of the windows that cover it (that chose it, for max), in the order the CPU's scatter adds
// them: window rows ascending, and in a row the unclamped ("interior") windows first, then the
// clamped ones on the left, then on the right.
#include "mg_abi.cuh"
#include "movement_index.cuh"

enum { P_MAX, P_AVG_INCLUDE, P_AVG_EXCLUDE, P_ADAPTIVE_MAX, P_ADAPTIVE_AVG };

struct Pool {
    i64 mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    __device__ bool adaptive() const { return mode == P_ADAPTIVE_MAX || mode == P_ADAPTIVE_AVG; }
};

struct Range {
    i64 lo, hi;  // [lo, hi)
};

__device__ __forceinline__ i64 floor_div(i64 a, i64 b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}
__device__ __forceinline__ i64 ceil_div(i64 a, i64 b) { return -floor_div(-a, b); }
__device__ __forceinline__ i64 mg_max(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 mg_min(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 clamp(i64 v, i64 lo, i64 hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// The input range output index o reads along one axis, padding cut off; adaptive windows are
// PyTorch's: [floor(o size / osize), ceil((o + 1) size / osize)).
__device__ Range window(i64 o, i64 size, i64 osize, i64 k, i64 stride, i64 pad, bool adaptive) {
    if (adaptive) return Range{o * size / osize, ((o + 1) * size + osize - 1) / osize};
    const i64 start = o * stride - pad;
    return Range{start > 0 ? start : 0, start + k < size ? start + k : size};
}

// The outputs [lo, hi) along one axis whose windows hold input index i.
__device__ Range covering(i64 i, i64 size, i64 osize, i64 k, i64 stride, i64 pad, bool adaptive) {
    if (!adaptive)
        return Range{clamp(ceil_div(i + pad - k + 1, stride), 0, osize),
                     clamp(floor_div(i + pad, stride) + 1, 0, osize)};
    i64 lo = clamp(i * osize / size, 0, osize - 1);
    while (lo > 0 && window(lo - 1, size, osize, 0, 0, 0, true).hi > i) --lo;
    while (lo < osize && window(lo, size, osize, 0, 0, 0, true).hi <= i) ++lo;
    i64 hi = lo;
    while (hi < osize && window(hi, size, osize, 0, 0, 0, true).lo <= i) ++hi;
    return Range{lo, hi};
}

// The output columns whose windows need no clamping (pool.pyx's interior()).
__device__ Range interior(const Pool& s) {
    if (s.adaptive() || s.w + s.pw < s.kw) return Range{0, 0};
    const i64 lo = clamp(ceil_div(s.pw, s.sw), 0, s.ow);
    return Range{lo, clamp((s.w + s.pw - s.kw) / s.sw + 1, lo, s.ow)};
}

struct Window {
    Range r, c;
};

__device__ Window window_at(const Pool& s, i64 oh, i64 ow) {
    return Window{window(oh, s.h, s.oh, s.kh, s.sh, s.ph, s.adaptive()),
                  window(ow, s.w, s.ow, s.kw, s.sw, s.pw, s.adaptive())};
}

template <class T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }

// The plane offset of the first cell holding the window's maximum, or of its first NaN.
template <class T> __device__ i64 argmax(const T* x, const Pool& s, const Window& win) {
    T m = -(T)__longlong_as_double(0x7ff0000000000000ll);
    bool nan = false;
    for (i64 r = win.r.lo; r < win.r.hi; ++r)
        for (i64 c = win.c.lo; c < win.c.hi; ++c) {
            const T v = x[r * s.w + c];
            m = v > m ? v : m;
            nan = nan || is_nan(v);
        }
    for (i64 r = win.r.lo; r < win.r.hi; ++r)
        for (i64 c = win.c.lo; c < win.c.hi; ++c) {
            const T v = x[r * s.w + c];
            if (nan ? is_nan(v) : v == m) return r * s.w + c;
        }
    return win.r.lo * s.w + win.c.lo;  // an empty window: never, the shape rules keep them out
}

__device__ i64 divisor(const Pool& s, const Window& win) {
    return s.mode == P_AVG_INCLUDE ? s.kh * s.kw
                                   : (win.r.hi - win.r.lo) * (win.c.hi - win.c.lo);
}

#define MG_FOR_ELEMENTS(count)                                                                \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (i64)gridDim.x * blockDim.x)

// pool2d and max_pool2d_select: a thread per output
template <class T, bool SELECT> __device__ void pool_forward(const MgArgs& a) {
    const Pool s = *(const Pool*)a.ints;
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[SELECT ? 2 : 1];
    const i64 pooled = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.planes * pooled) {
        const i64 p = mg_div(i, pooled), oh = mg_div(mg_mod(i, pooled), s.ow), ow = mg_mod(i, s.ow);
        const Window win = window_at(s, oh, ow);
        const T* xp = x + p * full;
        if (SELECT) {
            y[i] = ((const T*)a.bufs[1])[p * full + argmax(xp, s, win)];
        } else if (s.mode == P_MAX || s.mode == P_ADAPTIVE_MAX) {
            const i64 at = argmax(xp, s, win);
            y[i] = xp[at];  // the maximum, or the first NaN (a NaN is one)
        } else {
            double acc = 0;
            for (i64 r = win.r.lo; r < win.r.hi; ++r)
                for (i64 c = win.c.lo; c < win.c.hi; ++c) acc += (double)xp[r * s.w + c];
            y[i] = (T)(acc / (double)divisor(s, win));
        }
    }
}

// The gradient reaching input cell (r, c) of plane p from windows in output row oh, columns
// [c0, c1), in order.
template <class T, bool MAX>
__device__ T gather_run(const T* xp, const T* dyp, const Pool& s, i64 oh, i64 c0, i64 c1,
                        i64 cell, T acc) {
    for (i64 ow = c0; ow < c1; ++ow) {
        const Window win = window_at(s, oh, ow);
        const T g = dyp[oh * s.ow + ow];
        if (MAX) {
            if (argmax(xp, s, win) == cell) acc = acc + g;
        } else {
            const i64 r = mg_div(cell, s.w), c = mg_mod(cell, s.w);
            if (r >= win.r.lo && r < win.r.hi && c >= win.c.lo && c < win.c.hi)
                acc = acc + g / (T)divisor(s, win);
        }
    }
    return acc;
}

// max_pool2d_backward (x, dy -> dx) and avg_pool2d_backward (dy -> dx): a thread per cell
template <class T, bool MAX> __device__ void pool_backward(const MgArgs& a) {
    const Pool s = *(const Pool*)a.ints;
    const T* x = MAX ? (const T*)a.bufs[0] : nullptr;
    const T* dy = (const T*)a.bufs[MAX ? 1 : 0];
    T* dx = (T*)a.bufs[MAX ? 2 : 1];
    const i64 pooled = s.oh * s.ow, full = s.h * s.w;
    const Range in = interior(s);
    MG_FOR_ELEMENTS(s.planes * full) {
        const i64 p = mg_div(i, full), cell = mg_mod(i, full);
        const i64 r = mg_div(cell, s.w), c = mg_mod(cell, s.w);
        const Range rows = covering(r, s.h, s.oh, s.kh, s.sh, s.ph, s.adaptive());
        const Range cols = covering(c, s.w, s.ow, s.kw, s.sw, s.pw, s.adaptive());
        const T* xp = MAX ? x + p * full : nullptr;
        const T* dyp = dy + p * pooled;
        T acc = T(0);
        for (i64 oh = rows.lo; oh < rows.hi; ++oh) {
            acc = gather_run<T, MAX>(xp, dyp, s, oh, mg_max(cols.lo, in.lo), mg_min(cols.hi, in.hi),
                                     cell, acc);
            acc = gather_run<T, MAX>(xp, dyp, s, oh, cols.lo, mg_min(cols.hi, in.lo), cell, acc);
            acc = gather_run<T, MAX>(xp, dyp, s, oh, mg_max(cols.lo, in.hi), cols.hi, cell, acc);
        }
        dx[i] = acc;
    }
}

#define MG_POOL_ENTRIES(T, DT)                                                                \
    extern "C" __global__ void mg_pool2d_##DT(const MgArgs a) { pool_forward<T, false>(a); }  \
    extern "C" __global__ void mg_max_pool2d_select_##DT(const MgArgs a) {                   \
        pool_forward<T, true>(a);                                                              \
    }                                                                                          \
    extern "C" __global__ void mg_max_pool2d_backward_##DT(const MgArgs a) {                 \
        pool_backward<T, true>(a);                                                             \
    }                                                                                          \
    extern "C" __global__ void mg_avg_pool2d_backward_##DT(const MgArgs a) {                 \
        pool_backward<T, false>(a);                                                            \
    }

MG_POOL_ENTRIES(float, f32)
MG_POOL_ENTRIES(double, f64)
