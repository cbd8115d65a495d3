// Deformable sampling (deform_im2col, the columns of a modulated deformable convolution) and
// FlowNet's correlation, with their gradients: what the ops mean is mgegraph/ops/deform.py's
// docstring.
//
// Parameters: the CPU's Im2col and Correlation structs (mgegraph/_kernels/deform.pyx, packed by
// mgegraph/kernel_abi/deform.py); no floats, no workspace.
//   deform_im2col: x, offset, mask, cols;  deform_im2col_backward: x, offset, mask, dcols, dx,
//   doffset, dmask;  correlation: data1, data2, out;  correlation_backward: data1, data2, dy,
//   d1, d2
//
// Semantics and arithmetic are the CPU kernel's: the same point (torchvision's bilinear read),
// the same products in double, added in the CPU's order, so results are bitwise the CPU's.
//
// Design: no shared memory and no atomics. The forwards take a thread per output.
// deform_im2col_backward is two steps: "_data" a thread per (image, channel) plane, which
// scatters that plane's gradient in the CPU's order (k, then cell), and "_points" a thread per
// (image, deformable group, tap, cell), which sums its offset's and mask's gradients over the
// group's channels. correlation_backward takes a thread per (image, channel) plane, as the CPU's
// parts. A gather (a thread per input cell finding the points that read it) would parallelise
// the scatters further, at the cost of inverting data-dependent offsets.
#include "mg_abi.cuh"
#include "movement_index.cuh"

struct Im2col {
    i64 batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w;
    i64 pad_h, pad_w, dilation_h, dilation_w, out_h, out_w, groups, threads;
};

struct Correlation {
    i64 batch, channels, height, width, out_c, out_h, out_w, kernel_radius;
    i64 max_displacement, grid_radius, stride1, stride2, pad_size, is_multiply, threads;
};

// -- one sampled point ----------------------------------------------------------------------------
struct Point {
    i64 index[4];  // corners (y0, x0), (y0, x0+1), (y0+1, x0), (y0+1, x0+1); -1: outside
    double ly, lx;
    bool inside;   // -1 < y < H and -1 < x < W: otherwise value and derivatives are 0
};

__device__ Point locate(double y, double x, i64 h, i64 w) {
    Point p;
    p.inside = y > -1 && y < h && x > -1 && x < w;
    p.ly = p.lx = 0;
    for (int k = 0; k < 4; ++k) p.index[k] = -1;
    if (!p.inside) return p;
    const double fy = floor(y), fx = floor(x);
    const i64 y0 = (i64)fy, x0 = (i64)fx;
    p.ly = y - fy;
    p.lx = x - fx;
    for (int k = 0; k < 4; ++k) {
        const i64 cy = y0 + k / 2, cx = x0 + k % 2;
        if (0 <= cy && cy < h && 0 <= cx && cx < w) p.index[k] = cy * w + cx;
    }
    return p;
}

template <class T> __device__ double corner(const T* plane, const Point& p, int k) {
    return p.index[k] >= 0 ? (double)plane[p.index[k]] : 0.0;
}

__device__ void weights(const Point& p, double* w) {
    w[0] = (1 - p.ly) * (1 - p.lx);
    w[1] = (1 - p.ly) * p.lx;
    w[2] = p.ly * (1 - p.lx);
    w[3] = p.ly * p.lx;
}

template <class T> __device__ double bilinear(const T* plane, const Point& p) {
    if (!p.inside) return 0.0;
    double w[4];
    weights(p, w);
    return w[0] * corner(plane, p, 0) + w[1] * corner(plane, p, 1) + w[2] * corner(plane, p, 2)
           + w[3] * corner(plane, p, 3);
}

// tap k of output cell `cell`, moved by deformable group g's offset pair
template <class T>
__device__ Point point_of(const Im2col& s, const T* offset, i64 n, i64 g, i64 k, i64 cell) {
    const i64 cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
    const T* pair = offset + ((n * s.groups + g) * taps + k) * 2 * cells + cell;
    const double y = (cell / s.out_w * s.stride_h - s.pad_h + k / s.kernel_w * s.dilation_h)
                     + pair[0];
    const double x = (cell % s.out_w * s.stride_w - s.pad_w + k % s.kernel_w * s.dilation_w)
                     + pair[cells];
    return locate(y, x, s.height, s.width);
}

#define MG_GRID_STRIDE(i, total)                                                              \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (total);                      \
         i += (i64)gridDim.x * blockDim.x)

// deform_im2col: a thread per column entry (n, c, k, cell)
template <class T> __device__ void im2col(const MgArgs& a) {
    const Im2col s = *(const Im2col*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* offset = (const T*)a.bufs[1];
    const T* mask = (const T*)a.bufs[2];
    T* cols = (T*)a.bufs[3];
    const i64 cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
    MG_GRID_STRIDE(i, s.batch * s.channels * taps * cells) {
        const i64 cell = mg_mod(i, cells), k = mg_mod(mg_div(i, cells), taps);
        const i64 unit = mg_div(i, cells * taps), n = unit / s.channels;
        const i64 g = unit % s.channels / (s.channels / s.groups);
        const Point p = point_of(s, offset, n, g, k, cell);
        const T m = mask[((n * s.groups + g) * taps + k) * cells + cell];
        cols[i] = (T)(m * bilinear(x + unit * s.height * s.width, p));
    }
}

// deform_im2col_backward "_data": a thread per plane (n, c) of dx, the CPU's scatter order
template <class T> __device__ void im2col_backward_data(const MgArgs& a) {
    const Im2col s = *(const Im2col*)a.ints;
    const T* offset = (const T*)a.bufs[1];
    const T* mask = (const T*)a.bufs[2];
    const T* dcols = (const T*)a.bufs[3];
    T* dx = (T*)a.bufs[4];
    const i64 cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
    const i64 plane = s.height * s.width;
    MG_GRID_STRIDE(unit, s.batch * s.channels) {
        const i64 n = unit / s.channels, g = unit % s.channels / (s.channels / s.groups);
        T* dplane = dx + unit * plane;
        for (i64 j = 0; j < plane; ++j) dplane[j] = 0;
        for (i64 k = 0; k < taps; ++k)
            for (i64 cell = 0; cell < cells; ++cell) {
                const Point p = point_of(s, offset, n, g, k, cell);
                if (!p.inside) continue;
                const double m = mask[((n * s.groups + g) * taps + k) * cells + cell];
                const double gv = (double)dcols[(unit * taps + k) * cells + cell] * m;
                double w[4];
                weights(p, w);
                for (int c = 0; c < 4; ++c)
                    if (p.index[c] >= 0) dplane[p.index[c]] += (T)(gv * w[c]);
            }
    }
}

// deform_im2col_backward "_points": a thread per (n, g, k, cell), summed over g's channels
template <class T> __device__ void im2col_backward_points(const MgArgs& a) {
    const Im2col s = *(const Im2col*)a.ints;
    const T* x = (const T*)a.bufs[0];
    const T* offset = (const T*)a.bufs[1];
    const T* mask = (const T*)a.bufs[2];
    const T* dcols = (const T*)a.bufs[3];
    T* doffset = (T*)a.bufs[5];
    T* dmask = (T*)a.bufs[6];
    const i64 cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
    const i64 per_group = s.channels / s.groups, plane = s.height * s.width;
    MG_GRID_STRIDE(i, s.batch * s.groups * taps * cells) {
        const i64 cell = mg_mod(i, cells), k = mg_mod(mg_div(i, cells), taps);
        const i64 unit = mg_div(i, cells * taps), n = unit / s.groups, g = unit % s.groups;
        const Point p = point_of(s, offset, n, g, k, cell);
        const double m = mask[i];
        double gm = 0, gy = 0, gx = 0;
        for (i64 c = g * per_group; c < (g + 1) * per_group; ++c) {
            const T* xp = x + (n * s.channels + c) * plane;
            const double gv = dcols[((n * s.channels + c) * taps + k) * cells + cell];
            gm += gv * bilinear(xp, p);
            if (!p.inside) continue;
            double v[4];
            for (int q = 0; q < 4; ++q) v[q] = corner(xp, p, q);
            gy += gv * m * ((1 - p.lx) * (v[2] - v[0]) + p.lx * (v[3] - v[1]));
            gx += gv * m * ((1 - p.ly) * (v[1] - v[0]) + p.ly * (v[3] - v[2]));
        }
        dmask[i] = (T)gm;
        const i64 slot = unit * taps + k;
        doffset[2 * slot * cells + cell] = (T)gy;
        doffset[2 * slot * cells + cells + cell] = (T)gx;
    }
}

// -- correlation ----------------------------------------------------------------------------------
template <class T> __device__ double read(const T* plane, const Correlation& s, i64 y, i64 x) {
    return 0 <= y && y < s.height && 0 <= x && x < s.width ? (double)plane[y * s.width + x] : 0.0;
}

// correlation: a thread per output (n, o, oy, ox)
template <class T> __device__ void correlation(const MgArgs& a) {
    const Correlation s = *(const Correlation*)a.ints;
    const T* d1 = (const T*)a.bufs[0];
    const T* d2 = (const T*)a.bufs[1];
    T* out = (T*)a.bufs[2];
    const i64 width = 2 * s.grid_radius + 1, r = s.kernel_radius, plane = s.height * s.width;
    const double count = (double)((2 * r + 1) * (2 * r + 1) * s.channels);
    MG_GRID_STRIDE(i, s.batch * s.out_c * s.out_h * s.out_w) {
        const i64 ox = mg_mod(i, s.out_w), row = mg_div(i, s.out_w);
        const i64 oy = row % s.out_h, o = row / s.out_h % s.out_c, n = row / (s.out_h * s.out_c);
        const i64 dy = (o / width - s.grid_radius) * s.stride2;
        const i64 dx = (o % width - s.grid_radius) * s.stride2;
        const i64 y1 = oy * s.stride1 + r + s.max_displacement - s.pad_size;
        const i64 x1 = ox * s.stride1 + r + s.max_displacement - s.pad_size;
        double acc = 0;
        for (i64 u = -r; u <= r; ++u)
            for (i64 v = -r; v <= r; ++v)
                for (i64 c = 0; c < s.channels; ++c) {
                    const double t1 = read(d1 + (n * s.channels + c) * plane, s, y1 + u, x1 + v);
                    const double t2 = read(d2 + (n * s.channels + c) * plane, s, y1 + dy + u,
                                           x1 + dx + v);
                    acc += s.is_multiply ? t1 * t2 : (t1 > t2 ? t1 - t2 : t2 - t1);
                }
        out[i] = (T)(acc / count);
    }
}

// correlation_backward: a thread per (n, c) plane of both gradients, the CPU's order
template <class T> __device__ void correlation_backward(const MgArgs& a) {
    const Correlation s = *(const Correlation*)a.ints;
    const T* dout = (const T*)a.bufs[2];
    const i64 width = 2 * s.grid_radius + 1, r = s.kernel_radius, plane = s.height * s.width;
    const double count = (double)((2 * r + 1) * (2 * r + 1) * s.channels);
    MG_GRID_STRIDE(unit, s.batch * s.channels) {
        const i64 n = unit / s.channels;
        const T* p1 = (const T*)a.bufs[0] + unit * plane;
        const T* p2 = (const T*)a.bufs[1] + unit * plane;
        T* g1 = (T*)a.bufs[3] + unit * plane;
        T* g2 = (T*)a.bufs[4] + unit * plane;
        for (i64 j = 0; j < plane; ++j) g1[j] = g2[j] = 0;
        for (i64 o = 0; o < s.out_c; ++o) {
            const i64 dy = (o / width - s.grid_radius) * s.stride2;
            const i64 dx = (o % width - s.grid_radius) * s.stride2;
            for (i64 oy = 0; oy < s.out_h; ++oy)
                for (i64 ox = 0; ox < s.out_w; ++ox) {
                    const i64 at = ((n * s.out_c + o) * s.out_h + oy) * s.out_w + ox;
                    const double g = dout[at] / count;
                    const i64 y1 = oy * s.stride1 + r + s.max_displacement - s.pad_size;
                    const i64 x1 = ox * s.stride1 + r + s.max_displacement - s.pad_size;
                    for (i64 u = -r; u <= r; ++u)
                        for (i64 v = -r; v <= r; ++v) {
                            const i64 ya = y1 + u, xa = x1 + v, yb = y1 + dy + u, xb = x1 + dx + v;
                            const double t1 = read(p1, s, ya, xa), t2 = read(p2, s, yb, xb);
                            if (0 <= ya && ya < s.height && 0 <= xa && xa < s.width)
                                g1[ya * s.width + xa] +=
                                    (T)(g * (s.is_multiply ? t2 : (t1 > t2 ? 1.0 : -1.0)));
                            if (0 <= yb && yb < s.height && 0 <= xb && xb < s.width)
                                g2[yb * s.width + xb] +=
                                    (T)(g * (s.is_multiply ? t1 : (t1 >= t2 ? -1.0 : 1.0)));
                        }
                }
        }
    }
}

#define MG_DEFORM_ENTRIES(T, DT)                                                              \
    extern "C" __global__ void mg_deform_im2col_##DT(const MgArgs a) { im2col<T>(a); }        \
    extern "C" __global__ void mg_deform_im2col_backward_##DT##_data(const MgArgs a) {        \
        im2col_backward_data<T>(a);                                                           \
    }                                                                                         \
    extern "C" __global__ void mg_deform_im2col_backward_##DT##_points(const MgArgs a) {      \
        im2col_backward_points<T>(a);                                                         \
    }                                                                                         \
    extern "C" __global__ void mg_correlation_##DT(const MgArgs a) { correlation<T>(a); }     \
    extern "C" __global__ void mg_correlation_backward_##DT(const MgArgs a) {                 \
        correlation_backward<T>(a);                                                           \
    }

MG_DEFORM_ENTRIES(float, f32)
MG_DEFORM_ENTRIES(double, f64)
