// Region pooling of csrc_cuda/vision.cu (roi_align, roi_pooling and their gradients), the twin
// of _kernels/vision_roi.pxi; included by vision.cu after its parameter blocks and helpers.
#pragma once

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
    if (!(b > -1 && b < s.n)) return MG_STATUS_INDEX_OUT_OF_RANGE;  // truncated, as MegEngine
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
