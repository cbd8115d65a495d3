// The volume sampler of csrc_cuda/vision.cu (grid_sample3d and its gradients), the twin of
// _kernels/vision_sample3d.pxi: the 2-D sampler's axis rules (vision_sample.cuh, included
// before it) on three axes, the same operations in the same order. No shared memory.
#pragma once

struct Sample3 {
    i64 coord, coord_pad, interp, border, n, c, d, h, w, od, oh, ow, threads;
};

// The fields axis_taps reads, as a 2-D block
__device__ __forceinline__ Sample axis_rules(const Sample3& s) {
    Sample m = {};
    m.coord = s.coord;
    m.coord_pad = s.coord_pad;
    m.interp = s.interp;
    m.border = s.border;
    return m;
}

template <class T>
__device__ void volume_taps(const T* p, const Sample3& s, const Sample& rules, Axis* ax, Axis* ay,
                            Axis* az) {
    axis_taps((double)p[0], s.w, rules, ax);
    axis_taps((double)p[1], s.h, rules, ay);
    axis_taps((double)p[2], s.d, rules, az);
}

template <class T>
__device__ __forceinline__ double voxel(const T* volume, const Sample3& s, i64 z, i64 y, i64 x,
                                        double v) {
    return z < 0 || y < 0 || x < 0 ? v : (double)volume[(z * s.h + y) * s.w + x];
}

__device__ __forceinline__ bool all_finite(const Axis& ax, const Axis& ay, const Axis& az) {
    return ax.finite && ay.finite && az.finite;
}

template <class T>
__device__ double sample_volume_at(const T* volume, const Sample3& s, const Axis& ax,
                                   const Axis& ay, const Axis& az, double value) {
    if (!all_finite(ax, ay, az))  // nothing to read: the constant, else NaN
        return s.border == B_CONSTANT ? value : __longlong_as_double(0x7ff8000000000000ll);
    double acc = 0;
    for (int i = 0; i < az.taps; ++i) {
        double plane = 0;
        for (int j = 0; j < ay.taps; ++j) {
            double row = 0;
            for (int k = 0; k < ax.taps; ++k)
                row += ax.w[k] * voxel(volume, s, az.at[i], ay.at[j], ax.at[k], value);
            plane += ay.w[j] * row;
        }
        acc += az.w[i] * plane;
    }
    return acc;
}

// sample3d: a thread per point, every channel
template <class T> __device__ void sample3d_forward(const MgArgs& a) {
    const Sample3 s = *(const Sample3*)a.ints;
    const Sample rules = axis_rules(s);
    const T* x = (const T*)a.bufs[0];
    const T* grid = (const T*)a.bufs[1];
    T* y = (T*)a.bufs[2];
    const i64 cells = s.od * s.oh * s.ow, full = s.d * s.h * s.w;
    MG_FOR_ELEMENTS(s.n * cells) {
        const i64 b = mg_div(i, cells), q = mg_mod(i, cells);
        Axis ax, ay, az;
        volume_taps(grid + 3 * i, s, rules, &ax, &ay, &az);
        for (i64 c = 0; c < s.c; ++c)
            y[(b * s.c + c) * cells + q] =
                (T)sample_volume_at(x + (b * s.c + c) * full, s, ax, ay, az, a.floats[0]);
    }
}

// sample3d_backward_data: a thread per volume of dx, its batch's points in order
template <class T> __device__ void sample3d_backward_data(const MgArgs& a) {
    const Sample3 s = *(const Sample3*)a.ints;
    const Sample rules = axis_rules(s);
    const T* grid = (const T*)a.bufs[0];
    const T* dy = (const T*)a.bufs[1];
    const i64 cells = s.od * s.oh * s.ow, full = s.d * s.h * s.w;
    MG_FOR_ELEMENTS(s.n * s.c) {
        const i64 b = mg_div(i, s.c);
        T* dx = (T*)a.bufs[2] + i * full;
        for (i64 k = 0; k < full; ++k) dx[k] = T(0);
        for (i64 q = 0; q < cells; ++q) {
            Axis ax, ay, az;
            volume_taps(grid + 3 * (b * cells + q), s, rules, &ax, &ay, &az);
            if (!all_finite(ax, ay, az)) continue;
            const double g = (double)dy[i * cells + q];
            for (int r = 0; r < az.taps; ++r) {
                if (az.at[r] < 0) continue;
                for (int j = 0; j < ay.taps; ++j) {
                    if (ay.at[j] < 0) continue;
                    for (int k = 0; k < ax.taps; ++k)
                        if (ax.at[k] >= 0)
                            dx[(az.at[r] * s.h + ay.at[j]) * s.w + ax.at[k]] +=
                                (T)(g * (az.w[r] * (ay.w[j] * ax.w[k])));
                }
            }
        }
    }
}

// sample3d_backward_points: a thread per point, summed over channels
template <class T> __device__ void sample3d_backward_points(const MgArgs& a) {
    const Sample3 s = *(const Sample3*)a.ints;
    const Sample rules = axis_rules(s);
    const T* x = (const T*)a.bufs[0];
    const T* grid = (const T*)a.bufs[1];
    const T* dy = (const T*)a.bufs[2];
    T* dgrid = (T*)a.bufs[3];
    const i64 cells = s.od * s.oh * s.ow, full = s.d * s.h * s.w;
    MG_FOR_ELEMENTS(s.n * cells) {
        const i64 b = mg_div(i, cells), q = mg_mod(i, cells);
        Axis ax, ay, az;
        volume_taps(grid + 3 * i, s, rules, &ax, &ay, &az);
        double gx = 0, gy = 0, gz = 0;
        for (i64 c = 0; c < s.c; ++c) {
            const double g = (double)dy[(b * s.c + c) * cells + q];
            const T* volume = x + (b * s.c + c) * full;
            double sx = 0, sy = 0, sz = 0;
            if (all_finite(ax, ay, az))
                for (int r = 0; r < az.taps; ++r)
                    for (int j = 0; j < ay.taps; ++j)
                        for (int k = 0; k < ax.taps; ++k) {
                            const double v =
                                voxel(volume, s, az.at[r], ay.at[j], ax.at[k], a.floats[0]);
                            sx += v * ax.dw[k] * ay.w[j] * az.w[r];
                            sy += v * ax.w[k] * ay.dw[j] * az.w[r];
                            sz += v * ax.w[k] * ay.w[j] * az.dw[r];
                        }
            gx += g * sx;
            gy += g * sy;
            gz += g * sz;
        }
        dgrid[3 * i] = (T)(gx * ax.dcoord);
        dgrid[3 * i + 1] = (T)(gy * ay.dcoord);
        dgrid[3 * i + 2] = (T)(gz * az.dcoord);
    }
}
