// The point sampler of csrc_cuda/vision.cu (grid_sample, remap and their gradients), the twin of
// _kernels/vision_sample.pxi; included by vision.cu after its parameter blocks and helpers.
#pragma once

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

// sample: a thread per point, every channel; pixels P (a uint8 image's sum rounded by
// mg_pixel, pixels_u8.cuh), points G
template <class P, class G = P> __device__ void sample_forward(const MgArgs& a) {
    const Sample s = *(const Sample*)a.ints;
    const P* x = (const P*)a.bufs[0];
    const G* grid = (const G*)a.bufs[1];
    P* y = (P*)a.bufs[2];
    const i64 cells = s.oh * s.ow, full = s.h * s.w;
    MG_FOR_ELEMENTS(s.n * cells) {
        const i64 b = mg_div(i, cells), q = mg_mod(i, cells);
        Axis ax, ay;
        point_taps(grid + 2 * i, s, &ax, &ay);
        for (i64 c = 0; c < s.c; ++c)
            y[(b * s.c + c) * cells + q] =
                mg_pixel<P>(sample_at(x + (b * s.c + c) * full, s, ax, ay, a.floats[0]));
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
