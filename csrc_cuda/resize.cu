// Resize by interpolation (nearest, linear, cubic) over the last one to three axes, and its
// gradient: what the op means is mgegraph/ops/resize.py's docstring.
//
// Parameters: the CPU's Resize struct (mgegraph/_kernels/resize.pyx, packed by
// mgegraph/kernel_abi/resize.py):
//   ints [mode, coord, nearest_mode, exclude_outside, planes, in0, in1, in2, out0, out1, out2,
//         aa_taps0, aa_taps1, aa_taps2, threads],
//   floats [num0, num1, num2, den0, den1, den2, cubic_a] (each axis's step)
//   resize: x, y, workspace;  resize_backward: dy, dx, workspace (the CPU's tap tables; unread)
//
// Semantics and arithmetic are the CPU kernel's: the same tap formulas (axis_taps), weights and
// sums in double, in the CPU's order, so results are bitwise the CPU's; a uint8 image's sums
// are rounded by pixels_u8.cuh, the CPU's rule; a float32 bilinear resize over two axes is the
// CPU's float path (_kernels/resize_bilinear.h; bilinear_f32 below).
//
// Design: no shared memory and no atomics. The forward takes a thread per output and computes
// its taps in place (a few divisions: cheaper than a second launch filling tables). The
// backward scatters, as the CPU does, a thread per plane in the CPU's order (a plane's cells
// are written by one thread only); a gather (a thread per input cell finding the outputs whose
// taps read it) would parallelise further, at the cost of inverting every coordinate mode.
#include "mg_abi.cuh"
#include "movement_index.cuh"
#include "pixels_u8.cuh"

enum { NEAREST, LINEAR, CUBIC };
enum { HALF_PIXEL, HALF_PIXEL_SYMMETRIC, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC,
       TF_HALF_PIXEL };
enum { ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR, CEIL };

struct Resize {
    i64 mode, coord, nearest_mode, exclude_outside, planes, in[3], out[3];
    i64 aa_taps[3];  // the antialias filter's taps per axis (resize_antialias.cuh); 0: none
    i64 threads;
};

struct Taps {
    int n;
    i64 index[4];
    double weight[4];
};

// The input coordinate output index o reads (ONNX Resize's coordinate_transformation_mode),
// the step num / den applied as a product then one division, as the CPU's
__device__ double source_coord(i64 coord, i64 o, i64 n_in, i64 n_out, double num, double den) {
    const double length = n_in * den / num;
    if (coord == ALIGN_CORNERS) return length == 1 ? 0.0 : o * (n_in - 1) / (length - 1);
    if (coord == ASYMMETRIC) return o * num / den;
    if (coord == TF_HALF_PIXEL) return (o + 0.5) * num / den;
    if (coord == PYTORCH_HALF_PIXEL && length == 1) return 0.0;
    if (coord == HALF_PIXEL_SYMMETRIC)
        return n_in / 2.0 * (1 - n_out / length) + (o + 0.5) * num / den - 0.5;
    return (o + 0.5) * num / den - 0.5;
}

// Keys' cubic convolution kernel at distance s (0 <= s < 2) with coefficient a
__device__ double keys(double s, double a) {
    if (s <= 1) return ((a + 2) * s - (a + 3)) * s * s + 1;
    return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
}

__device__ i64 nearest(i64 mode, double x) {
    const double i = floor(x), r = x - i;
    if (r == 0 || mode == FLOOR) return (i64)i;
    if (mode == CEIL) return (i64)i + 1;
    if (mode == ROUND_PREFER_CEIL) return (i64)i + (r >= 0.5);
    return (i64)i + (r > 0.5);
}

__device__ __forceinline__ i64 clamp_index(i64 i, i64 n) {
    return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

// Output index o's taps along one axis; an out-of-range tap reads the edge, or is dropped with
// the others rescaled (exclude_outside)
__device__ Taps axis_taps(const Resize& s, const double* f, int axis, i64 o) {
    Taps t;
    const i64 n_in = s.in[axis];
    if (n_in == 1) {
        t.n = 1, t.index[0] = 0, t.weight[0] = 1.0;
        return t;
    }
    const double x = source_coord(s.coord, o, n_in, s.out[axis], f[axis], f[3 + axis]);
    if (s.mode == NEAREST) {
        t.n = 1, t.index[0] = clamp_index(nearest(s.nearest_mode, x), n_in), t.weight[0] = 1.0;
        return t;
    }
    i64 i0 = (i64)floor(x);
    const double r = x - i0;
    if (s.mode == LINEAR) {
        t.n = 2, t.weight[0] = 1 - r, t.weight[1] = r;
    } else {
        t.n = 4, i0 -= 1;
        for (int k = 0; k < 4; ++k) t.weight[k] = keys(k < 2 ? r + 1 - k : k - 1 - r, f[6]);
    }
    double total = 0;
    for (int k = 0; k < t.n; ++k) {
        t.index[k] = i0 + k;
        if (s.exclude_outside && !(t.index[k] >= 0 && t.index[k] < n_in)) t.weight[k] = 0;
        total += t.weight[k];
        t.index[k] = clamp_index(t.index[k], n_in);
    }
    if (s.exclude_outside && total != 0)  // no tap inside: all weigh 0 (ONNX's reference)
        for (int k = 0; k < t.n; ++k) t.weight[k] /= total;
    return t;
}

#include "resize_antialias.cuh"

// A float32 bilinear output over the last two axes, as the CPU's resize_bilinear.h computes
// it: float weights, products rounded to float, sums fused, the rows blended first where the
// output has fewer rows than the input (bilinear_vertical_first), the columns first otherwise
__device__ float bilinear_f32(const Resize& s, const Taps& rows, const Taps& cols,
                              const float* x) {
    const float* a = x + rows.index[0] * s.in[2];
    const float* b = x + rows.index[1] * s.in[2];
    const float r0 = (float)rows.weight[0], r1 = (float)rows.weight[1];
    const float c0 = (float)cols.weight[0], c1 = (float)cols.weight[1];
    const i64 j0 = cols.index[0], j1 = cols.index[1];
    if (s.out[1] < s.in[1])
        return fmaf(c1, fmaf(r1, b[j1], r0 * a[j1]), c0 * fmaf(r1, b[j0], r0 * a[j0]));
    return fmaf(r1, fmaf(c1, b[j1], c0 * b[j0]), r0 * fmaf(c1, a[j1], c0 * a[j0]));
}

// resize: a thread per output
template <class T> __device__ void resize_forward(const MgArgs& a) {
    const Resize s = *(const Resize*)a.ints;
    if (s.aa_taps[0]) return antialias_forward<T>(a, s);
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[1];
    const i64 plane = s.in[0] * s.in[1] * s.in[2];
    const i64 total = s.planes * s.out[0] * s.out[1] * s.out[2];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 o2 = mg_mod(i, s.out[2]), row = mg_div(i, s.out[2]);
        const i64 o1 = mg_mod(row, s.out[1]), o0 = mg_mod(mg_div(row, s.out[1]), s.out[0]);
        const i64 p = mg_div(row, s.out[1] * s.out[0]);
        const Taps t0 = axis_taps(s, a.floats, 0, o0), t1 = axis_taps(s, a.floats, 1, o1),
                   t2 = axis_taps(s, a.floats, 2, o2);
        if (sizeof(T) == 4 && s.out[0] == 1 && t0.n == 1 && t1.n == 2 && t2.n == 2) {
            y[i] = (T)bilinear_f32(s, t1, t2, (const float*)x + p * plane);
            continue;
        }
        double acc = 0;
        for (int u = 0; u < t0.n; ++u)
            for (int v = 0; v < t1.n; ++v) {
                const double w01 = t0.weight[u] * t1.weight[v];
                const i64 base = p * plane + (t0.index[u] * s.in[1] + t1.index[v]) * s.in[2];
                for (int c = 0; c < t2.n; ++c) acc += w01 * t2.weight[c] * x[base + t2.index[c]];
            }
        y[i] = mg_pixel<T>(acc);
    }
}

// resize_backward: a thread per plane scatters its outputs' gradients in the CPU's order
template <class T> __device__ void resize_backward(const MgArgs& a) {
    const Resize s = *(const Resize*)a.ints;
    if (s.aa_taps[0]) return antialias_backward<T>(a, s);
    const T* dy = (const T*)a.bufs[0];
    T* dx = (T*)a.bufs[1];
    const i64 plane = s.in[0] * s.in[1] * s.in[2], outs = s.out[0] * s.out[1] * s.out[2];
    for (i64 p = (i64)blockIdx.x * blockDim.x + threadIdx.x; p < s.planes;
         p += (i64)gridDim.x * blockDim.x) {
        T* dxp = dx + p * plane;
        for (i64 j = 0; j < plane; ++j) dxp[j] = 0;
        i64 out = p * outs;
        for (i64 o0 = 0; o0 < s.out[0]; ++o0) {
            const Taps t0 = axis_taps(s, a.floats, 0, o0);
            for (i64 o1 = 0; o1 < s.out[1]; ++o1) {
                const Taps t1 = axis_taps(s, a.floats, 1, o1);
                for (i64 o2 = 0; o2 < s.out[2]; ++o2, ++out) {
                    const Taps t2 = axis_taps(s, a.floats, 2, o2);
                    const double g = dy[out];
                    for (int u = 0; u < t0.n; ++u)
                        for (int v = 0; v < t1.n; ++v) {
                            const double w01 = t0.weight[u] * t1.weight[v];
                            const i64 base = (t0.index[u] * s.in[1] + t1.index[v]) * s.in[2];
                            for (int c = 0; c < t2.n; ++c)
                                dxp[base + t2.index[c]] += (T)(w01 * t2.weight[c] * g);
                        }
                }
            }
        }
    }
}

#define MG_RESIZE_ENTRIES(T, DT)                                                              \
    extern "C" __global__ void mg_resize_##DT(const MgArgs a) { resize_forward<T>(a); }      \
    extern "C" __global__ void mg_resize_backward_##DT(const MgArgs a) { resize_backward<T>(a); }

MG_RESIZE_ENTRIES(float, f32)
MG_RESIZE_ENTRIES(double, f64)
// uint8 images: the forward only (resize_u8), rounded by mg_round_u8
extern "C" __global__ void mg_resize_u8(const MgArgs a) { resize_forward<u8>(a); }
