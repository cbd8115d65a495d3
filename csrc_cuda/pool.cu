// 2-D pooling over NCHW (max, average, adaptive) and the passes its gradients use.
//
// Parameters: the CPU's Pool struct (mgegraph/_kernels/pool.pyx, packed by lowering/pool.py):
//   ints [mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, eh, ew]
//   (ph, pw: padding before the image, eh, ew: after it; dh, dw: dilation)
//   pool2d: x, y;  max_pool2d_backward: x, dy, dx;  avg_pool2d_backward: dy, dx;
//   max_pool2d_select: x, h, y (y = h at the argmax of each window of x)
//
// Semantics are the CPU kernel's: a NaN in a window is its maximum; the argmax is the first
// maximum in row-major order, or the first NaN; averages sum in double and divide once; the
// backward passes add dy (or dy / divisor, in the dtype) in the CPU's order, so every result is
// bitwise the CPU's.
//
// Quantized int8 and uint8 values (pool2d_i8, pool2d_u8; floats[0] the zero point) pool as the
// CPU's pool_int.pxi: a max of the integers inside the input, or the integer sum (the counted
// padding holding the zero point) divided by the divisor and rounded half to even, exactly.
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
    i64 mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, eh, ew;
    __device__ bool adaptive() const { return mode == P_ADAPTIVE_MAX || mode == P_ADAPTIVE_AVG; }
    __device__ bool dilated() const { return dh != 1 || dw != 1; }
};

struct Range {
    i64 lo, hi;  // [lo, hi)
};

// One axis of one window (pool.pyx's Span): cells lo, lo + step, ... (n of them, padding cut
// off), and how many of its cells lie in the input or its padding (the "average" divisor).
struct Span {
    i64 lo, n, padded, step;
    __device__ i64 hi() const { return lo + (n - 1) * step + 1; }  // past the last cell
    __device__ bool holds(i64 i) const { return i >= lo && i < hi() && (i - lo) % step == 0; }
};

struct Axis {
    i64 size, osize, k, stride, pad, pad_end, dil;
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

__device__ Axis rows_of(const Pool& s) { return Axis{s.h, s.oh, s.kh, s.sh, s.ph, s.eh, s.dh}; }
__device__ Axis cols_of(const Pool& s) { return Axis{s.w, s.ow, s.kw, s.sw, s.pw, s.ew, s.dw}; }

// Window o along one axis; adaptive windows are PyTorch's:
// [floor(o size / osize), ceil((o + 1) size / osize)).
__device__ Span window(i64 o, const Axis& a, bool adaptive) {
    if (adaptive) {
        const i64 lo = o * a.size / a.osize, hi = ((o + 1) * a.size + a.osize - 1) / a.osize;
        return Span{lo, hi - lo, hi - lo, 1};
    }
    const i64 start = o * a.stride - a.pad;
    const i64 first = start < 0 ? ceil_div(-start, a.dil) : 0;
    const i64 stop = clamp(ceil_div(a.size - start, a.dil), 0, a.k);
    return Span{start + first * a.dil, stop > first ? stop - first : 0,
                clamp(ceil_div(a.size + a.pad_end - start, a.dil), 0, a.k), a.dil};
}

// The outputs [lo, hi) along one axis whose windows may hold input index i (a dilated
// window skips some: Span::holds says).
__device__ Range covering(i64 i, const Axis& a, bool adaptive) {
    if (!adaptive)
        return Range{clamp(ceil_div(i + a.pad - (a.k - 1) * a.dil, a.stride), 0, a.osize),
                     clamp(floor_div(i + a.pad, a.stride) + 1, 0, a.osize)};
    i64 lo = clamp(i * a.osize / a.size, 0, a.osize - 1);
    while (lo > 0 && window(lo - 1, a, true).hi() > i) --lo;
    while (lo < a.osize && window(lo, a, true).hi() <= i) ++lo;
    i64 hi = lo;
    while (hi < a.osize && window(hi, a, true).lo <= i) ++hi;
    return Range{lo, hi};
}

// The output columns whose windows need no clamping (pool.pyx's interior()).
__device__ Range interior(const Pool& s) {
    if (s.adaptive() || s.dilated() || s.w + s.pw < s.kw) return Range{0, 0};
    const i64 lo = clamp(ceil_div(s.pw, s.sw), 0, s.ow);
    return Range{lo, clamp((s.w + s.pw - s.kw) / s.sw + 1, lo, s.ow)};
}

struct Window {
    Span r, c;
};

__device__ Window window_at(const Pool& s, i64 oh, i64 ow) {
    return Window{window(oh, rows_of(s), s.adaptive()), window(ow, cols_of(s), s.adaptive())};
}

template <class T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }

// The plane offset of the first cell holding the window's maximum, or of its first NaN.
template <class T> __device__ i64 argmax(const T* x, const Pool& s, const Window& win) {
    T m = -(T)__longlong_as_double(0x7ff0000000000000ll);
    bool nan = false;
    for (i64 i = 0; i < win.r.n; ++i)
        for (i64 j = 0; j < win.c.n; ++j) {
            const T v = x[(win.r.lo + i * win.r.step) * s.w + win.c.lo + j * win.c.step];
            m = v > m ? v : m;
            nan = nan || is_nan(v);
        }
    for (i64 i = 0; i < win.r.n; ++i)
        for (i64 j = 0; j < win.c.n; ++j) {
            const i64 at = (win.r.lo + i * win.r.step) * s.w + win.c.lo + j * win.c.step;
            if (nan ? is_nan(x[at]) : x[at] == m) return at;
        }
    return win.r.lo * s.w + win.c.lo;  // an empty window: never, the shape rules keep them out
}

__device__ i64 divisor(const Pool& s, const Window& win) {
    return s.mode == P_AVG_INCLUDE ? win.r.padded * win.c.padded : win.r.n * win.c.n;
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
            for (i64 r = 0; r < win.r.n; ++r)
                for (i64 c = 0; c < win.c.n; ++c)
                    acc += (double)xp[(win.r.lo + r * win.r.step) * s.w + win.c.lo
                                      + c * win.c.step];
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
            if (win.r.holds(r) && win.c.holds(c)) acc = acc + g / (T)divisor(s, win);
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
        const Range rows = covering(r, rows_of(s), s.adaptive());
        const Range cols = covering(c, cols_of(s), s.adaptive());
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

// total / div (div > 0) rounded to nearest, ties to even, in exact integers: the floor quotient
// and its remainder 0 <= r < div, then 2r against div
__device__ __forceinline__ i64 rounded_quotient(i64 total, i64 div) {
    i64 q = floor_div(total, div);
    const i64 r = total - q * div;
    if (2 * r > div || (2 * r == div && (q & 1))) ++q;
    return q;
}

// pool2d of quantized integers: a thread per output
template <class T> __device__ void pool_forward_int(const MgArgs& a) {
    const Pool s = *(const Pool*)a.ints;
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[1];
    const i64 zero_point = (i64)a.floats[0];
    const i64 pooled = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.planes * pooled) {
        const i64 p = mg_div(i, pooled), oh = mg_div(mg_mod(i, pooled), s.ow), ow = mg_mod(i, s.ow);
        const Window win = window_at(s, oh, ow);
        const T* xp = x + p * full + win.r.lo * s.w + win.c.lo;
        const bool is_max = s.mode == P_MAX || s.mode == P_ADAPTIVE_MAX;
        T m = xp[0];
        i64 total = 0;
        for (i64 r = 0; r < win.r.n; ++r)
            for (i64 c = 0; c < win.c.n; ++c) {
                const T v = xp[r * win.r.step * s.w + c * win.c.step];
                m = v > m ? v : m;
                total += v;
            }
        if (is_max) {
            y[i] = m;
        } else {
            const i64 div = divisor(s, win);
            y[i] = (T)rounded_quotient(total + zero_point * (div - win.r.n * win.c.n), div);
        }
    }
}

extern "C" __global__ void mg_pool2d_i8(const MgArgs a) { pool_forward_int<signed char>(a); }
extern "C" __global__ void mg_pool2d_u8(const MgArgs a) { pool_forward_int<unsigned char>(a); }
