// Detection and geometry kernels over NCHW: the point sampler (grid_sample, remap and their
// gradients), region pooling (roi_align, roi_pooling and their gradients) and non-maximum
// suppression, the twins of mgegraph/_kernels/vision.pyx.
//
// Parameters: the CPU's Sample, Roi and Nms structs (kernel_abi/vision.py packs them):
//   sample: x, grid, y;  sample_backward_data: grid, dy, dx;
//   sample_backward_points: x, grid, dy, dgrid       floats [the constant border's value]
//   roi: x, rois, y;  roi_backward: x, rois, dy, dx;  roi_backward_rois: x, rois, dy, drois
//       floats [scale, offset]
//   nms: boxes, scores, keep (int32), workspace (2 n indices)   floats [iou threshold]
//
// Semantics are the CPU kernels': the same operations in double in the same order, so results
// are the CPU's bitwise where the compiler contracts nothing (the host emulation checks it);
// NVRTC may fuse a multiply and an add on a device, within an ulp.
//
// Design: no shared memory, barriers or atomics. Forward passes take a thread per output point
// (sampler) or bin (regions). The scatters run as the CPU runs them: a thread per plane of dx
// (sampler) or per channel (regions) adding in the CPU's order, which is deterministic and
// exact but narrow: a gather form would spread them wider. nms is one thread: its greedy pass
// is sequential, and a detection head keeps few boxes.
#include "mg_abi.cuh"
#include "movement_index.cuh"

enum { C_ALIGNED, C_UNALIGNED, C_PIXEL };
enum { PAD_NONE, PAD_CLIP, PAD_REFLECT };
enum { I_NEAREST, I_LINEAR, I_CUBIC };
enum { B_CONSTANT, B_REPLICATE, B_REFLECT, B_REFLECT_101, B_WRAP };
enum { R_ALIGN, R_ALIGN_ONNX, R_POOLING };
enum { M_AVERAGE, M_MAX };

struct Sample {
    i64 coord, coord_pad, interp, border, n, c, h, w, oh, ow, threads;
};
struct Roi {
    i64 kind, mode, n, c, h, w, k, oh, ow, sh, sw, threads;
};
struct Nms {
    i64 boxes, max_output;
};

#define MG_FOR_ELEMENTS(count)                                                                \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (i64)gridDim.x * blockDim.x)

__device__ __forceinline__ bool is_finite(double x) { return fabs(x) <= 1.7976931348623157e308; }
__device__ __forceinline__ double far_clamp(double v) {
    const double far = 4503599627370496.0;  // 2**52: past it every double is an integer
    return v > far ? far : (v < -far ? -far : v);
}
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }

// -- the sampler: one axis of one point -------------------------------------------------------
struct Axis {
    i64 at[4];     // the taps' input indices; -1: outside (the constant border's value)
    double w[4];   // their weights
    double dw[4];  // the weights' derivatives in the input coordinate
    int taps;
    double dcoord;  // d(input coordinate) / d(grid value)
    bool finite;
};

__device__ double reflect(double x, double low2, double high2, double* d) {
    const double lo = low2 / 2, span = (high2 - low2) / 2;
    double sign = 1;
    if (low2 == high2) {
        *d = 0;
        return 0;
    }
    x -= lo;
    if (x < 0) {
        sign = -1;
        x = -x;
    }
    const double extra = fmod(x, span), flips = floor(x / span);
    if (fmod(flips, 2) == 0) {
        *d *= sign;
        return extra + lo;
    }
    *d *= -sign;
    return span - extra + lo;
}

__device__ double clip(double x, i64 size, double* d) {
    if (x < 0) {
        *d = 0;
        return 0;
    }
    if (x > size - 1) {
        *d = 0;
        return (double)(size - 1);
    }
    return x;
}

__device__ double source(double g, i64 size, const Sample& s, double* d) {
    double x;
    if (s.coord == C_ALIGNED) {
        *d = (size - 1) / 2.0;
        x = (g + 1) / 2 * (size - 1);
    } else if (s.coord == C_UNALIGNED) {
        *d = size / 2.0;
        x = ((g + 1) * size - 1) / 2;
    } else {
        *d = 1;
        x = g;
    }
    if (s.coord_pad == PAD_REFLECT)
        x = s.coord == C_ALIGNED ? reflect(x, 0, 2.0 * (size - 1), d)
                                 : reflect(x, -1, 2.0 * size - 1, d);
    if (s.coord_pad != PAD_NONE) x = clip(x, size, d);
    return x;
}

__device__ __forceinline__ i64 positive_mod(i64 i, i64 n) {
    i = i % n;
    return i < 0 ? i + n : i;
}

__device__ i64 tap_index(i64 i, i64 n, i64 border) {
    if (i >= 0 && i < n) return i;
    if (border == B_CONSTANT) return -1;
    if (border == B_REPLICATE || n == 1) return i < 0 ? 0 : n - 1;
    if (border == B_WRAP) return positive_mod(i, n);
    if (border == B_REFLECT) {
        i = positive_mod(i, 2 * n);
        return i >= n ? 2 * n - 1 - i : i;
    }
    i = positive_mod(i, 2 * n - 2);
    return i >= n ? 2 * n - 2 - i : i;
}

__device__ __forceinline__ double cubic_near(double t) { return ((1.25 * t - 2.25) * t) * t + 1; }
__device__ __forceinline__ double cubic_far(double t) {
    return ((-0.75 * t + 3.75) * t - 6.0) * t + 3.0;
}
__device__ __forceinline__ double cubic_near_d(double t) { return (3.75 * t - 4.5) * t; }
__device__ __forceinline__ double cubic_far_d(double t) { return (-2.25 * t + 7.5) * t - 6.0; }

__device__ void axis_taps(double g, i64 size, const Sample& s, Axis* a) {
    double x = source(g, size, s, &a->dcoord);
    i64 first;
    a->finite = is_finite(x);
    if (!a->finite) {
        a->taps = 0;
        return;
    }
    x = far_clamp(x);
    if (s.interp == I_NEAREST) {
        a->taps = 1;
        first = (i64)nearbyint(x);
        a->w[0] = 1;
        a->dw[0] = 0;
    } else if (s.interp == I_LINEAR) {
        a->taps = 2;
        first = (i64)floor(x);
        a->w[0] = (first + 1) - x;
        a->w[1] = x - first;
        a->dw[0] = -1;
        a->dw[1] = 1;
    } else {
        a->taps = 4;
        first = (i64)floor(x) - 1;
        const double t = x - floor(x);
        a->w[0] = cubic_far(t + 1);
        a->w[1] = cubic_near(t);
        a->w[2] = cubic_near(1 - t);
        a->w[3] = cubic_far(2 - t);
        a->dw[0] = cubic_far_d(t + 1);
        a->dw[1] = cubic_near_d(t);
        a->dw[2] = -cubic_near_d(1 - t);
        a->dw[3] = -cubic_far_d(2 - t);
    }
    for (int i = 0; i < a->taps; ++i) a->at[i] = tap_index(first + i, size, s.border);
}

template <class T> __device__ void point_taps(const T* p, const Sample& s, Axis* ax, Axis* ay) {
    axis_taps((double)p[0], s.w, s, ax);
    axis_taps((double)p[1], s.h, s, ay);
}

template <class T>
__device__ __forceinline__ double tap(const T* plane, const Sample& s, i64 r, i64 q, double v) {
    return r < 0 || q < 0 ? v : (double)plane[r * s.w + q];
}

template <class T>
__device__ double sample_at(const T* plane, const Sample& s, const Axis& ax, const Axis& ay,
                            double value) {
    if (!(ax.finite && ay.finite))  // nothing to read: the constant, else NaN
        return s.border == B_CONSTANT ? value : __longlong_as_double(0x7ff8000000000000ll);
    double acc = 0;
    for (int i = 0; i < ay.taps; ++i) {
        double row = 0;
        for (int j = 0; j < ax.taps; ++j) row += ax.w[j] * tap(plane, s, ay.at[i], ax.at[j], value);
        acc += ay.w[i] * row;
    }
    return acc;
}

// sample: a thread per point, every channel
template <class T> __device__ void sample_forward(const MgArgs& a) {
    const Sample s = *(const Sample*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* grid = (const T*)a.bufs[1];
    T* y = (T*)a.bufs[2];
    const i64 cells = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.n * cells) {
        const i64 b = mg_div(i, cells), q = mg_mod(i, cells);
        Axis ax, ay;
        point_taps(grid + 2 * i, s, &ax, &ay);
        for (i64 c = 0; c < s.c; ++c)
            y[(b * s.c + c) * cells + q] =
                (T)sample_at(x + (b * s.c + c) * full, s, ax, ay, a.floats[0]);
    }
}

// sample_backward_data: a thread per plane of dx, its image's points in order
template <class T> __device__ void sample_backward_data(const MgArgs& a) {
    const Sample s = *(const Sample*)a.ints;
    const T* grid = (const T*)a.bufs[0];
    const T* dy = (const T*)a.bufs[1];
    const i64 cells = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.n * s.c) {
        const i64 b = mg_div(i, s.c);
        T* dx = (T*)a.bufs[2] + i * full;
        for (i64 k = 0; k < full; ++k) dx[k] = T(0);
        for (i64 q = 0; q < cells; ++q) {
            Axis ax, ay;
            point_taps(grid + 2 * (b * cells + q), s, &ax, &ay);
            if (!(ax.finite && ay.finite)) continue;
            const double g = (double)dy[i * cells + q];
            for (int r = 0; r < ay.taps; ++r) {
                if (ay.at[r] < 0) continue;
                for (int j = 0; j < ax.taps; ++j)
                    if (ax.at[j] >= 0)
                        dx[ay.at[r] * s.w + ax.at[j]] += (T)(g * (ay.w[r] * ax.w[j]));
            }
        }
    }
}

// sample_backward_points: a thread per point, summed over channels
template <class T> __device__ void sample_backward_points(const MgArgs& a) {
    const Sample s = *(const Sample*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* grid = (const T*)a.bufs[1];
    const T* dy = (const T*)a.bufs[2];
    T* dgrid = (T*)a.bufs[3];
    const i64 cells = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.n * cells) {
        const i64 b = mg_div(i, cells), q = mg_mod(i, cells);
        Axis ax, ay;
        point_taps(grid + 2 * i, s, &ax, &ay);
        double gx = 0, gy = 0;
        for (i64 c = 0; c < s.c; ++c) {
            const double g = (double)dy[(b * s.c + c) * cells + q];
            const T* plane = x + (b * s.c + c) * full;
            double sx = 0, sy = 0;
            if (ax.finite && ay.finite)
                for (int r = 0; r < ay.taps; ++r)
                    for (int j = 0; j < ax.taps; ++j) {
                        const double v = tap(plane, s, ay.at[r], ax.at[j], a.floats[0]);
                        sx += v * ax.dw[j] * ay.w[r];
                        sy += v * ax.w[j] * ay.dw[r];
                    }
            gx += g * sx;
            gy += g * sy;
        }
        dgrid[2 * i] = (T)(gx * ax.dcoord);
        dgrid[2 * i + 1] = (T)(gy * ay.dcoord);
    }
}

// -- region pooling --------------------------------------------------------------------------
// roi_align's two conventions, MegEngine's (R_ALIGN) and ONNX's RoiAlign (R_ALIGN_ONNX): as in
// vision.pyx; sh = sw = 0 takes ceil(bin size) samples per bin and axis per box.
struct Box {
    i64 image;
    double x0, y0, bin_h, bin_w;  // roi_align: its corner and bin sizes, in input pixels
    i64 sh, sw;                   // roi_align: its samples per bin
    bool grow_h, grow_w;          // roi_align: its bins grow with its far corner (unclamped)
    i64 px0, py0;                 // roi_pooling: its rounded corner
};

#define MG_MAX_SAMPLES 65536  // per bin and axis: an adaptive count past it is no real box

__device__ bool unclamped(double lo, double hi, const Roi& s, double offset) {
    return s.kind == R_ALIGN ? hi > lo : offset != 0 || hi - lo > 1;
}

__device__ double extent(double lo, double hi, const Roi& s, double offset) {
    return unclamped(lo, hi, s, offset) ? hi - lo : (s.kind == R_ALIGN ? 0 : 1);
}

__device__ bool samples(i64 fixed, double bin, i64* count) {
    *count = fixed > 0 ? fixed : (bin > 0 ? (i64)ceil(bin) : 0);
    return *count <= MG_MAX_SAMPLES;
}

template <class T>
__device__ int read_box(const T* roi, const Roi& s, double scale, double offset, Box* box) {
    const double b = (double)roi[0];
    for (int i = 1; i < 5; ++i)
        if (!is_finite((double)roi[i])) return MG_STATUS_BAD_VALUE;
    if (!(b >= 0 && b < s.n && b == floor(b))) return MG_STATUS_INDEX_OUT_OF_RANGE;
    box->image = (i64)b;
    if (s.kind != R_POOLING) {
        box->x0 = far_clamp(roi[1] * scale - offset);
        box->y0 = far_clamp(roi[2] * scale - offset);
        const double x1 = far_clamp(roi[3] * scale - offset);
        const double y1 = far_clamp(roi[4] * scale - offset);
        box->bin_w = extent(box->x0, x1, s, offset) / s.ow;
        box->bin_h = extent(box->y0, y1, s, offset) / s.oh;
        box->grow_w = unclamped(box->x0, x1, s, offset);
        box->grow_h = unclamped(box->y0, y1, s, offset);
        if (!samples(s.sh, box->bin_h, &box->sh) || !samples(s.sw, box->bin_w, &box->sw))
            return MG_STATUS_BAD_VALUE;
        return 0;
    }
    box->px0 = (i64)round(far_clamp(roi[1] * scale));
    box->py0 = (i64)round(far_clamp(roi[2] * scale));
    const double x1 = round(far_clamp(roi[3] * scale));
    const double y1 = round(far_clamp(roi[4] * scale));
    box->bin_w = (x1 - box->px0 + 1 > 1 ? x1 - box->px0 + 1 : 1) / (double)s.ow;
    box->bin_h = (y1 - box->py0 + 1 > 1 ? y1 - box->py0 + 1 : 1) / (double)s.oh;
    return 0;
}

// The value at (y, x) in the box's convention; tapmax: the largest weighted tap. With dplane,
// adds g times each tap's weight there instead.
template <class T>
__device__ double bilinear(const T* plane, const Roi& s, double y, double x, T* dplane,
                           double g, double* tapmax) {
    const bool onnx = s.kind == R_ALIGN_ONNX;
    *tapmax = 0;
    if (onnx) {
        if (y < -1 || y > s.h || x < -1 || x > s.w) return 0;
        y = y < s.h - 1 ? (y > 0 ? y : 0) : (double)(s.h - 1);
        x = x < s.w - 1 ? (x > 0 ? x : 0) : (double)(s.w - 1);
    }
    const i64 h0 = (i64)floor(y), w0 = (i64)floor(x);
    const double fy = y - h0, fx = x - w0;
    const double wts[4] = {(1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx};
    double v[4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            const i64 r = h0 + i, q = w0 + j;
            v[2 * i + j] = 0;
            if (r >= 0 && r < s.h && q >= 0 && q < s.w) {
                if (dplane != nullptr)
                    dplane[r * s.w + q] += (T)(g * wts[2 * i + j]);
                else
                    v[2 * i + j] = (double)plane[r * s.w + q];
            }
        }
    if (onnx) {
        double m = wts[0] * v[0];
        for (int k = 1; k < 4; ++k) m = wts[k] * v[k] > m ? wts[k] * v[k] : m;  // the CPU's max
        *tapmax = m;
        return wts[0] * v[0] + wts[1] * v[1] + wts[2] * v[2] + wts[3] * v[3];
    }
    const double top = v[0] + (v[1] - v[0]) * fx, bottom = v[2] + (v[3] - v[2]) * fx;
    return top + (bottom - top) * fy;
}

__device__ void align_point(const Box& box, i64 ph, i64 pw, i64 i, double* y, double* x) {
    *y = box.y0 + box.bin_h * (ph + (mg_div(i, box.sw) + 0.5) / box.sh);
    *x = box.x0 + box.bin_w * (pw + (mg_mod(i, box.sw) + 0.5) / box.sw);
}

__device__ __forceinline__ bool better(double v, double m) { return v > m || (v != v && m == m); }

template <class T>
__device__ double align_bin(const T* plane, const Roi& s, const Box& box, i64 ph, i64 pw,
                            i64* arg) {
    double acc = 0, m = -__longlong_as_double(0x7ff0000000000000ll), y, x, tapmax;
    const i64 count = box.sh * box.sw;
    *arg = 0;
    if (count == 0) return 0;
    for (i64 i = 0; i < count; ++i) {
        align_point(box, ph, pw, i, &y, &x);
        double v = bilinear(plane, s, y, x, (T*)nullptr, 0, &tapmax);
        acc += v;
        v = s.kind == R_ALIGN_ONNX ? tapmax : v;
        if (better(v, m)) {
            m = v;
            *arg = i;
        }
    }
    return s.mode == M_MAX ? m : acc / count;
}

__device__ void pool_window(const Roi& s, const Box& box, i64 ph, i64 pw, i64* h0, i64* h1,
                            i64* w0, i64* w1) {
    *h0 = imin(imax((i64)floor(ph * box.bin_h) + box.py0, 0), s.h);
    *h1 = imin(imax((i64)ceil((ph + 1) * box.bin_h) + box.py0, 0), s.h);
    *w0 = imin(imax((i64)floor(pw * box.bin_w) + box.px0, 0), s.w);
    *w1 = imin(imax((i64)ceil((pw + 1) * box.bin_w) + box.px0, 0), s.w);
}

template <class T>
__device__ double pool_bin(const T* plane, const Roi& s, const Box& box, i64 ph, i64 pw,
                           i64* arg) {
    i64 h0, h1, w0, w1;
    double acc = 0, m = -__longlong_as_double(0x7ff0000000000000ll);
    pool_window(s, box, ph, pw, &h0, &h1, &w0, &w1);
    *arg = -1;
    if (h1 <= h0 || w1 <= w0) return 0;
    for (i64 r = h0; r < h1; ++r)
        for (i64 q = w0; q < w1; ++q) {
            const double v = (double)plane[r * s.w + q];
            acc += v;
            if (better(v, m)) {
                m = v;
                *arg = r * s.w + q;
            }
        }
    return s.mode == M_MAX ? m : acc / ((h1 - h0) * (w1 - w0));
}

// roi: a thread per output bin
template <class T> __device__ void roi_forward(const MgArgs& a) {
    const Roi s = *(const Roi*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* rois = (const T*)a.bufs[1];
    T* y = (T*)a.bufs[2];
    const i64 cells = s.oh * s.ow;
    MG_FOR_ELEMENTS(s.k * s.c * cells) {
        const i64 plane = mg_div(i, cells), cell = mg_mod(i, cells);
        Box box;
        const int status = read_box(rois + 5 * mg_div(plane, s.c), s, a.floats[0], a.floats[1],
                                    &box);
        if (status != 0) {
            mg_fail(a, status);
            continue;
        }
        const T* img = x + (box.image * s.c + mg_mod(plane, s.c)) * s.h * s.w;
        i64 arg;
        y[i] = (T)(s.kind != R_POOLING
                       ? align_bin(img, s, box, mg_div(cell, s.ow), mg_mod(cell, s.ow), &arg)
                       : pool_bin(img, s, box, mg_div(cell, s.ow), mg_mod(cell, s.ow), &arg));
    }
}

template <class T>
__device__ void roi_spread(const T* img, T* dimg, const Roi& s, const Box& box, i64 ph, i64 pw,
                           double g) {
    i64 arg;
    double y, x, unused;
    const i64 count = box.sh * box.sw;
    if (s.kind != R_POOLING) {
        if (s.mode == M_MAX) {
            if (count == 0) return;
            align_bin(img, s, box, ph, pw, &arg);
            align_point(box, ph, pw, arg, &y, &x);
            bilinear(img, s, y, x, dimg, g, &unused);
            return;
        }
        const double share = count > 0 ? g / count : 0;
        for (i64 i = 0; i < count; ++i) {
            align_point(box, ph, pw, i, &y, &x);
            bilinear(img, s, y, x, dimg, share, &unused);
        }
    } else if (s.mode == M_MAX) {
        pool_bin(img, s, box, ph, pw, &arg);
        if (arg >= 0) dimg[arg] += (T)g;
    } else {
        i64 h0, h1, w0, w1;
        pool_window(s, box, ph, pw, &h0, &h1, &w0, &w1);
        if (h1 <= h0 || w1 <= w0) return;
        const double share = g / ((h1 - h0) * (w1 - w0));
        for (i64 r = h0; r < h1; ++r)
            for (i64 q = w0; q < w1; ++q) dimg[r * s.w + q] += (T)share;
    }
}

// roi_backward: a thread per channel of dx, every box and bin in order
template <class T> __device__ void roi_backward(const MgArgs& a) {
    const Roi s = *(const Roi*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* rois = (const T*)a.bufs[1];
    const T* dy = (const T*)a.bufs[2];
    T* dx = (T*)a.bufs[3];
    const i64 full = s.h * s.w, cells = s.oh * s.ow;
    MG_FOR_ELEMENTS(s.c) {
        for (i64 b = 0; b < s.n; ++b)
            for (i64 k = 0; k < full; ++k) dx[(b * s.c + i) * full + k] = T(0);
        for (i64 k = 0; k < s.k; ++k) {
            Box box;
            const int status = read_box(rois + 5 * k, s, a.floats[0], a.floats[1], &box);
            if (status != 0) {
                mg_fail(a, status);
                break;
            }
            const i64 at = (box.image * s.c + i) * full;
            for (i64 cell = 0; cell < cells; ++cell)
                roi_spread(x + at, dx + at, s, box, mg_div(cell, s.ow), mg_mod(cell, s.ow),
                           (double)dy[(k * s.c + i) * cells + cell]);
        }
    }
}

// -- roi_align's gradient in its boxes (vision.pyx says how a sample moves with its corners) -----
template <class T>
__device__ void slopes_at(const T* plane, const Roi& s, double y, double x, double* gy,
                          double* gx) {
    double ky = 1, kx = 1;
    *gy = *gx = 0;
    if (s.kind == R_ALIGN_ONNX) {
        if (y < -1 || y > s.h || x < -1 || x > s.w) return;
        if (y <= 0 || y >= s.h - 1) {
            ky = 0;
            y = y <= 0 ? 0 : (double)(s.h - 1);
        }
        if (x <= 0 || x >= s.w - 1) {
            kx = 0;
            x = x <= 0 ? 0 : (double)(s.w - 1);
        }
    }
    const i64 h0 = (i64)floor(y), w0 = (i64)floor(x);
    const double fy = y - h0, fx = x - w0;
    double v[4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            const i64 r = h0 + i, q = w0 + j;
            v[2 * i + j] = r >= 0 && r < s.h && q >= 0 && q < s.w ? (double)plane[r * s.w + q] : 0;
        }
    *gy = ky * ((v[2] - v[0]) * (1 - fx) + (v[3] - v[1]) * fx);
    *gx = kx * ((v[1] - v[0]) * (1 - fy) + (v[3] - v[2]) * fy);
}

template <class T>
__device__ void box_slopes(const T* img, const Roi& s, const Box& box, i64 ph, i64 pw, double g,
                           double scale, double* d) {
    i64 first = 0, count = box.sh * box.sw, arg;
    if (count == 0) return;
    double w = g / count;
    if (s.mode == M_MAX) {
        align_bin(img, s, box, ph, pw, &arg);
        first = arg;
        count = arg + 1;
        w = g;
    }
    for (i64 i = first; i < count; ++i) {
        double y, x, gy, gx;
        align_point(box, ph, pw, i, &y, &x);
        slopes_at(img, s, y, x, &gy, &gx);
        const double ty = (ph + (mg_div(i, box.sw) + 0.5) / box.sh) / s.oh;
        const double tx = (pw + (mg_mod(i, box.sw) + 0.5) / box.sw) / s.ow;
        d[0] += w * gx * scale * (box.grow_w ? 1 - tx : 1);
        d[1] += w * gy * scale * (box.grow_h ? 1 - ty : 1);
        d[2] += w * gx * scale * (box.grow_w ? tx : 0);
        d[3] += w * gy * scale * (box.grow_h ? ty : 0);
    }
}

// roi_backward_rois: a thread per box, its channels and bins in order
template <class T> __device__ void roi_backward_rois(const MgArgs& a) {
    const Roi s = *(const Roi*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* rois = (const T*)a.bufs[1];
    const T* dy = (const T*)a.bufs[2];
    const i64 cells = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.k) {
        Box box;
        const int status = read_box(rois + 5 * i, s, a.floats[0], a.floats[1], &box);
        if (status != 0) {
            mg_fail(a, status);
            continue;
        }
        double d[4] = {0, 0, 0, 0};
        for (i64 c = 0; c < s.c; ++c)
            for (i64 cell = 0; cell < cells; ++cell)
                box_slopes(x + (box.image * s.c + c) * full, s, box, mg_div(cell, s.ow),
                           mg_mod(cell, s.ow), (double)dy[(i * s.c + c) * cells + cell],
                           a.floats[0], d);
        T* out = (T*)a.bufs[3] + 5 * i;
        out[0] = T(0);
        for (int c = 0; c < 4; ++c) out[1 + c] = (T)d[c];
    }
}

// -- nms ---------------------------------------------------------------------------------------
template <class T> __device__ double iou(const T* a, const T* b) {
    const double w = (a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]);
    const double h = (a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]);
    const double inter = (w > 0 ? w : 0) * (h > 0 ? h : 0);
    const double uni = ((double)a[2] - a[0]) * ((double)a[3] - a[1]) +
                       ((double)b[2] - b[0]) * ((double)b[3] - b[1]) - inter;
    return inter / uni;
}

// 0..n-1 by descending score, ties in index order (the CPU's bottom-up merge sort)
template <class T> __device__ const i64* sorted_order(const T* scores, i64* scratch, i64 n) {
    i64* src = scratch;
    i64* dst = scratch + n;
    for (i64 i = 0; i < n; ++i) src[i] = i;
    for (i64 width = 1; width < n; width *= 2) {
        for (i64 lo = 0; lo < n; lo += 2 * width) {
            const i64 mid = imin(lo + width, n), hi = imin(lo + 2 * width, n);
            i64 i = lo, j = mid;
            for (i64 k = lo; k < hi; ++k) {
                if (j >= hi || (i < mid && !(scores[src[j]] > scores[src[i]])))
                    dst[k] = src[i++];
                else
                    dst[k] = src[j++];
            }
        }
        i64* swap = src;
        src = dst;
        dst = swap;
    }
    return src;
}

template <class T> __device__ void nms(const MgArgs& a) {
    const Nms s = *(const Nms*)a.ints;
    const T* boxes = (const T*)a.bufs[0];
    const T* scores = (const T*)a.bufs[1];
    int* keep = (int*)a.bufs[2];
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (i64 i = 0; i < s.boxes; ++i) {
        bool bad = scores[i] != scores[i];
        for (int j = 0; j < 4; ++j) bad = bad || boxes[4 * i + j] != boxes[4 * i + j];
        if (bad) {
            mg_fail(a, MG_STATUS_BAD_VALUE);
            return;
        }
    }
    const i64* order = sorted_order(scores, (i64*)a.bufs[3], s.boxes);
    i64 kept = 0;
    for (i64 i = 0; i < s.boxes && kept < s.max_output; ++i) {
        bool alive = true;
        for (i64 j = 0; j < kept && alive; ++j)
            alive = !(iou(boxes + 4 * order[i], boxes + 4 * (i64)keep[j]) > a.floats[0]);
        if (alive) keep[kept++] = (int)order[i];
    }
    for (i64 i = kept; i < s.max_output; ++i) keep[i] = -1;
}

#define MG_VISION_ENTRIES(T, DT)                                                              \
    extern "C" __global__ void mg_sample_##DT(const MgArgs a) { sample_forward<T>(a); }       \
    extern "C" __global__ void mg_sample_backward_data_##DT(const MgArgs a) {                \
        sample_backward_data<T>(a);                                                            \
    }                                                                                          \
    extern "C" __global__ void mg_sample_backward_points_##DT(const MgArgs a) {              \
        sample_backward_points<T>(a);                                                          \
    }                                                                                          \
    extern "C" __global__ void mg_roi_##DT(const MgArgs a) { roi_forward<T>(a); }             \
    extern "C" __global__ void mg_roi_backward_##DT(const MgArgs a) { roi_backward<T>(a); }   \
    extern "C" __global__ void mg_roi_backward_rois_##DT(const MgArgs a) {                   \
        roi_backward_rois<T>(a);                                                               \
    }                                                                                          \
    extern "C" __global__ void mg_nms_##DT(const MgArgs a) { nms<T>(a); }

MG_VISION_ENTRIES(float, f32)
MG_VISION_ENTRIES(double, f64)
